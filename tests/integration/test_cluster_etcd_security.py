"""A secured etcd (docs/security.md, "etcd"): what anyone who can write to
etcd can do to a cluster (register a node, point a slot's move at their own
host) is kept from those without the client certificate or the login.

The contract: with cluster-etcd-cacert/-cert/-key a node reaches an etcd
that serves https and requires client certificates; without the
certificate it cannot join (it answers -CLUSTERDOWN and registers
nothing). With cluster-etcd-user/-password it logs in to an etcd with auth
on, and keeps working when its token expires or etcd restarts (it logs in
again); with a wrong password it cannot join. `tierkv cluster` takes the
same options."""
import os
import subprocess
import time

import pytest

from cluster_util import SLOTS, Etcd, wait_until
from tls_util import Certs

CLI = os.environ.get("TIERKV_CLI", os.path.join(
    os.path.dirname(os.environ.get("TIERKV_SERVER", "")), "..", "cli", "tierkv"))


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return Certs(tmp_path_factory.mktemp("etcd-certs"))


def info(node):
    return node.client().info("cluster")


def node_args(etcd, *extra, ttl=2):
    return ("--cluster-enabled", "yes", "--cluster-etcd", etcd.endpoint, "--cluster-name",
            "sec", "--cluster-lease-ttl", str(ttl), "--flash-size", "0", *extra)


def registered(etcd):
    return len(etcd._call("/v3/kv/range", {
        "key": "L3RpZXJrdi9zZWMvbm9kZXMv",  # /tierkv/sec/nodes/
        "range_end": "L3RpZXJrdi9zZWMvbm9kZXMw"}).get("kvs", []))


def owns_everything(node):
    i = info(node)
    return i.get("cluster_state") == "ok" and i.get("cluster_slots_owned") == SLOTS


def cli(etcd, *extra):
    return subprocess.run([CLI, "cluster", "status", "--etcd", etcd.endpoint, "--name", "sec",
                           *extra], capture_output=True, text=True, timeout=60)


def test_only_a_node_with_the_client_certificate_joins(make_tierkv, certs):
    etcd = Etcd(certs=certs, client_cert_auth=True)
    try:
        tls = ("--cluster-etcd-cacert", certs.path("ca.crt"))
        member = make_tierkv(*node_args(etcd, *tls, "--cluster-etcd-cert",
                                        certs.path("client.crt"), "--cluster-etcd-key",
                                        certs.path("client.key")))
        wait_until(lambda: owns_everything(member), timeout=30, what="the node up over TLS")
        outsider = make_tierkv(*node_args(etcd, *tls))  # the CA, but no certificate
        stranger = make_tierkv(*node_args(etcd, *tls, "--cluster-etcd-cert",
                                          certs.path("stranger.crt"), "--cluster-etcd-key",
                                          certs.path("stranger.key")))
        time.sleep(4)  # two lease TTLs: time enough to have registered
        assert registered(etcd) == 1
        for node in (outsider, stranger):
            assert info(node).get("cluster_state") != "ok"
            with pytest.raises(Exception, match="CLUSTERDOWN"):
                node.client().set("k", "v")
        assert owns_everything(member)
        good = cli(etcd, "--etcd-cacert", certs.path("ca.crt"), "--etcd-cert",
                   certs.path("client.crt"), "--etcd-key", certs.path("client.key"))
        assert good.returncode == 0, good
        bad = cli(etcd, "--etcd-cacert", certs.path("ca.crt"))
        assert bad.returncode == 2 and bad.stderr.strip(), bad
        assert len(bad.stderr.strip().splitlines()) == 1, bad.stderr
    finally:
        etcd.close()


def test_a_login_that_survives_token_expiry_and_an_etcd_restart(make_tierkv):
    etcd = Etcd(extra=["--auth-token", "simple", "--auth-token-ttl", "1"])
    try:
        etcd.enable_auth("tkv", "tkvpw")
        login = ("--cluster-etcd-user", "tkv", "--cluster-etcd-password", "tkvpw")
        # A lease long beside the 1 s tokens: a loaded machine that delays a
        # renewal must not take the node down, only a failed login may.
        member = make_tierkv(*node_args(etcd, *login, ttl=6))
        wait_until(lambda: owns_everything(member), timeout=30, what="the node up with a login")
        wrong = make_tierkv(*node_args(etcd, "--cluster-etcd-user", "tkv",
                                       "--cluster-etcd-password", "nope"))
        anonymous = make_tierkv(*node_args(etcd))
        # Tokens live 1 s: the node renews its lease every 2 s, so nearly
        # every renewal finds its token expired and logs in again.
        deadline = time.time() + 6
        while time.time() < deadline:
            assert owns_everything(member)
            time.sleep(0.5)
        assert registered(etcd) == 1
        for node in (wrong, anonymous):
            assert info(node).get("cluster_state") != "ok"
        # A restart forgets every token.
        etcd.stop()
        etcd.start()
        wait_until(lambda: owns_everything(member), timeout=30, what="the node back after etcd")
        assert member.client().set("k", "v")
        assert cli(etcd, "--etcd-user", "tkv", "--etcd-password", "tkvpw").returncode == 0
        assert cli(etcd, "--etcd-user", "tkv", "--etcd-password", "nope").returncode == 2
    finally:
        etcd.close()
