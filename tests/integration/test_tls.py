"""TLS, as Redis does it (docs/security.md), side by side with redis-server.

The contract: with tls-port, the server speaks TLS there and plain RESP on
its port, at once. tls-auth-clients yes (the default) refuses a client
without a certificate its CA signed; optional lets one without any in; no
asks for none. A plaintext client on the TLS port is closed, and counted.
CONFIG SET of the tls-* keys builds a new context for new connections, and
connections open meanwhile go on; a CONFIG SET that cannot build one (a
missing file) fails and changes nothing. Values of any size cross intact."""
import os
import socket
import ssl
import subprocess
import threading
import time

import pytest
import redis

from conftest import free_port, metric
from tls_util import Certs


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return Certs(tmp_path_factory.mktemp("certs"))


def tls_client(port, certs, cert="client", **kw):
    args = dict(host="127.0.0.1", port=port, ssl=True, ssl_ca_certs=certs.path("ca.crt"),
                ssl_cert_reqs="required", socket_timeout=10)
    if cert:
        args.update(ssl_certfile=certs.path(f"{cert}.crt"), ssl_keyfile=certs.path(f"{cert}.key"))
    args.update(kw)
    return redis.Redis(**args)


def start_ours(make_tierkv, certs, *extra):
    tls_port = free_port()
    server = make_tierkv("--flash-size", "0", "--tls-port", str(tls_port),
                         *certs.server_args(), *extra)
    server.tls_port = tls_port
    return server


def start_theirs(make_redis, certs, *extra):
    tls_port = free_port()
    server = make_redis("--tls-port", str(tls_port), *certs.server_args(), *extra)
    server.tls_port = tls_port
    return server


def refused(port, certs, cert):
    """True if a client with `cert` (None: none) cannot run a command."""
    try:
        tls_client(port, certs, cert).ping()
        return False
    except (redis.exceptions.ConnectionError, ssl.SSLError, OSError):
        return True


def test_redis_py_and_redis_cli_over_tls_with_the_plain_port_open(make_tierkv, make_redis,
                                                                  certs):
    ours, theirs = start_ours(make_tierkv, certs), start_theirs(make_redis, certs)
    for s in (ours, theirs):
        c = tls_client(s.tls_port, certs)
        assert c.set("k", "v") and c.get("k") == b"v"
        assert s.client().get("k") == b"v"  # the plain port, at once
        out = subprocess.run(["redis-cli", "-p", str(s.tls_port), "--tls", "--cacert",
                              certs.path("ca.crt"), "--cert", certs.path("client.crt"), "--key",
                              certs.path("client.key"), "GET", "k"],
                             capture_output=True, text=True, timeout=30)
        assert out.stdout.strip() == "v", out


def test_client_certificates_as_tls_auth_clients_says(make_tierkv, make_redis, certs):
    for mode, without, stranger in (("yes", True, True), ("optional", False, True),
                                    ("no", False, False)):
        for s in (start_ours(make_tierkv, certs, "--tls-auth-clients", mode),
                  start_theirs(make_redis, certs, "--tls-auth-clients", mode)):
            assert not refused(s.tls_port, certs, "client"), (mode, s.argv[0])
            assert refused(s.tls_port, certs, None) == without, (mode, s.argv[0])
            assert refused(s.tls_port, certs, "stranger") == stranger, (mode, s.argv[0])


def test_a_plaintext_client_on_the_tls_port_is_closed(make_tierkv, certs):
    server = start_ours(make_tierkv, certs)
    s = socket.create_connection(("127.0.0.1", server.tls_port), timeout=15)
    s.sendall(b"*1\r\n$4\r\nPING\r\n")
    data = b""
    try:
        while True:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
    except ConnectionResetError:
        pass
    s.close()
    assert b"PONG" not in data
    assert server.client().ping()  # the server goes on
    body = server.client().execute_command("INFO", "stats")
    assert body is not None
    assert tls_client(server.tls_port, certs).ping()
    assert failures(server) >= 1


def failures(server):
    import urllib.request
    port = int(server.argv[server.argv.index("--metrics-port") + 1])
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        return metric(r.read().decode(), "tierkv_tls_handshake_failures_total")


def test_large_values_cross_tls_intact(make_tierkv, certs):
    server = start_ours(make_tierkv, certs)
    c = tls_client(server.tls_port, certs)
    for size in (1, 100, 16383, 16384, 16385, 1 << 20, 32 << 20):
        value = os.urandom(size)
        assert c.set(f"v{size}", value)
        assert c.get(f"v{size}") == value, size
    # Many small replies in one batch (gathered into records).
    p = c.pipeline(transaction=False)
    for i in range(2000):
        p.get(f"v{1 if i % 2 else 100}")
    got = p.execute()
    assert all(len(g) == (1 if i % 2 else 100) for i, g in enumerate(got))


def peer_common_name(port, certs):
    ctx = ssl.create_default_context(cafile=certs.path("ca.crt"))
    ctx.load_cert_chain(certs.path("client.crt"), certs.path("client.key"))
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s:
            subject = dict(x[0] for x in s.getpeercert()["subject"])
            return subject["commonName"]


def test_config_set_reloads_the_certificate_under_load(make_tierkv, certs):
    server = start_ours(make_tierkv, certs, "--enable-protected-configs", "local")
    assert peer_common_name(server.tls_port, certs) == "server-one"
    stop, errors, done = threading.Event(), [], [0]

    def load(name):
        c = tls_client(server.tls_port, certs, single_connection_client=True)
        i = 0
        deadline = time.time() + 60
        while not stop.is_set() and time.time() < deadline:
            try:
                c.set(f"{name}{i % 50}", i)
                assert int(c.get(f"{name}{i % 50}")) == i
                done[0] += 1
            except Exception as e:  # noqa: BLE001 - any failure fails the test
                errors.append(e)
                return
            i += 1

    threads = [threading.Thread(target=load, args=(f"t{n}-",)) for n in range(2)]
    for t in threads:
        t.start()
    admin = server.client()
    # A file that is not there: refused, and nothing changes.
    with pytest.raises(redis.exceptions.ResponseError) as e:
        admin.config_set("tls-cert-file", certs.path("missing.crt"))
    assert "missing.crt" in str(e.value)
    assert peer_common_name(server.tls_port, certs) == "server-one"
    # Both files at once: new connections get the new certificate.
    admin.execute_command("CONFIG", "SET", "tls-cert-file", certs.path("server2.crt"),
                          "tls-key-file", certs.path("server2.key"))
    assert peer_common_name(server.tls_port, certs) == "server-two"
    # A key that does not match the certificate: refused.
    with pytest.raises(redis.exceptions.ResponseError):
        admin.config_set("tls-key-file", certs.path("server.key"))
    assert peer_common_name(server.tls_port, certs) == "server-two"
    time.sleep(0.5)
    stop.set()
    for t in threads:
        t.join(60)
    assert not errors, errors
    assert done[0] > 0


def test_tls_keys_are_protected_configs(make_tierkv, certs):
    server = start_ours(make_tierkv, certs, "--enable-protected-configs", "no")
    with pytest.raises(redis.exceptions.ResponseError) as e:
        server.client().config_set("tls-cert-file", certs.path("server2.crt"))
    assert "can't set protected config" in str(e.value)
    # Not a file: may be set.
    assert server.client().config_set("tls-auth-clients", "optional")
    assert not refused(server.tls_port, certs, None)


def test_a_bad_tls_setup_stops_the_start(tmp_path, certs):
    from conftest import TIERKV_SERVER
    for extra in (["--tls-cert-file", certs.path("server.crt")],  # no key
                  [*certs.server_args(), "--tls-key-file", certs.path("server2.key")],
                  [*certs.server_args(), "--tls-protocols", "TLSv9"]):
        r = subprocess.run([TIERKV_SERVER, "--port", "0", "--flash-size", "0", "--tls-port",
                            str(free_port()), *extra], capture_output=True, text=True, timeout=30)
        assert r.returncode != 0, extra
