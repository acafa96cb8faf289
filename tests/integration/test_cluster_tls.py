"""tls-cluster: keys move between nodes over TLS, and nodes announce their
TLS port (docs/security.md).

The contract: with tls-cluster yes, CLUSTER SLOTS and redirections name
each node's tls-port, a cluster client over TLS reaches every slot, and a
drain moves every key, values of any size intact, over the nodes' TLS
links (their TLS ports speak nothing else, so a move that did not use TLS
could not land)."""
import os

import pytest
from redis.cluster import ClusterNode, RedisCluster

from cluster_moves import drain, managed, settled  # noqa: F401
from cluster_util import SLOTS, wait_until
from conftest import free_port
from tls_util import Certs


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return Certs(tmp_path_factory.mktemp("cluster-certs"))


def tls_cluster_client(nodes, certs):
    return RedisCluster(startup_nodes=[ClusterNode("127.0.0.1", n.tls_port) for n in nodes],
                        ssl=True, ssl_ca_certs=certs.path("ca.crt"),
                        ssl_certfile=certs.path("client.crt"),
                        ssl_keyfile=certs.path("client.key"), cluster_error_retry_attempts=10)


def test_a_drain_moves_every_key_over_tls(managed, certs):  # noqa: F811
    etcd, start = managed
    nodes = []
    for _ in range(2):
        tls_port = free_port()
        node = start("--tls-port", str(tls_port), "--tls-cluster", "yes", *certs.server_args())
        node.tls_port = tls_port
        nodes.append(node)
    wait_until(lambda: settled(nodes, lambda i, c: c > 8000), timeout=60, what="an even split")
    announced = {primary[1] for *_, primary in
                 ((s[0], s[1], s[2]) for s in nodes[0].client().execute_command("CLUSTER",
                                                                                "SLOTS"))}
    assert announced == {n.tls_port for n in nodes}
    rc = tls_cluster_client(nodes, certs)
    model = {}
    for i in range(400):
        value = os.urandom(200_000 if i % 50 == 0 else 100)
        assert rc.set(f"k{i}", value)
        model[f"k{i}"] = value
    held = nodes[1].client().dbsize()
    assert held > 100
    drain(etcd, nodes[1])
    wait_until(lambda: settled(nodes, lambda i, c: c == (SLOTS if i == 0 else 0)), timeout=120,
               what="the drain over TLS")
    assert nodes[1].client().dbsize() == 0
    assert info_moved(nodes[1]) >= held
    wrong = [k for k, v in model.items() if rc.get(k) != v]
    assert not wrong, f"{len(wrong)} keys differ, e.g. {wrong[:5]}"
    rc.close()


def info_moved(node):
    return node.client().info("cluster")["cluster_keys_migrated_out"]


def test_tls_cluster_needs_a_tls_port(tmp_path):
    import subprocess
    from conftest import TIERKV_SERVER
    r = subprocess.run([TIERKV_SERVER, "--tls-cluster", "yes", "--flash-size", "0"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode != 0 and "tls-port" in r.stderr, r
