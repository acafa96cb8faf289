"""Server hardening in Redis's manner: protected mode (side by side with
redis-server), maxclients fitted to the open-files limit, accept() backing
off when out of fds, and the /metrics endpoint's timeout and connection cap.

Every server binds 127.0.0.1 only. A non-loopback peer is a client socket
bound to one of this host's own non-loopback addresses before it connects to
127.0.0.1 (Linux routes that over lo)."""
import os
import resource
import socket
import subprocess
import time
import urllib.request

import pytest

from conftest import (TIERKV_SERVER, RawClient, ServerProcess, encode_command, free_ports, metric,
                      reply_of)


def wait_until(predicate, timeout=10.0, interval=0.05):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()


def non_loopback_address():
    """One of this host's IPv4 addresses outside 127/8."""
    candidates = []
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))  # no packet is sent: this only picks a route
            candidates.append(s.getsockname()[0])
        except OSError:
            pass
    try:
        candidates += [ai[4][0] for ai in socket.getaddrinfo(socket.gethostname(), None,
                                                             socket.AF_INET)]
    except OSError:
        pass
    for a in candidates:
        if not a.startswith("127."):
            return a
    raise AssertionError("this host has no non-loopback IPv4 address to test protected mode")


def connect_from(source, port, timeout=5.0):
    s = socket.socket()
    s.settimeout(timeout)
    s.bind((source, 0))
    s.connect(("127.0.0.1", port))
    return s


def read_until_closed(s, limit=1 << 16):
    data = b""
    try:
        while len(data) < limit:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
    except (ConnectionResetError, socket.timeout):
        pass
    return data


def ping_from(source, port):
    s = connect_from(source, port)
    try:
        s.sendall(encode_command("PING"))
        return s.recv(4096)
    finally:
        s.close()


# --- protected mode ---------------------------------------------------------

def test_protected_mode_denies_non_loopback_peers_like_redis(make_tierkv, make_redis):
    ours, theirs = make_tierkv("--flash-size", "0"), make_redis()
    remote = non_loopback_address()
    replies = []
    for server in (ours, theirs):
        s = connect_from(remote, server.port)
        replies.append(read_until_closed(s))  # sent at accept; then the server closes
        s.close()
    assert replies[0] == replies[1], replies
    assert replies[0].startswith(b"-DENIED Redis is running in protected mode"), replies[0]
    assert replies[0].endswith(b"\r\n") and replies[0].count(b"\r\n") == 1
    c = ours.client()
    assert int(c.info("stats")["rejected_connections"]) >= 1
    # Loopback peers, any of 127/8, are served.
    assert ping_from("127.0.0.2", ours.port) == b"+PONG\r\n"
    assert ping_from("127.0.0.1", ours.port) == b"+PONG\r\n"

    # A password lifts protected mode: the peer is served (and must AUTH).
    for server in (ours, theirs):
        server.client().config_set("requirepass", "s3cret")
    got = [ping_from(remote, s.port) for s in (ours, theirs)]
    assert got[0] == got[1] and got[0].startswith(b"-NOAUTH"), got
    for server in (ours, theirs):
        server.client(password="s3cret").config_set("requirepass", "")

    # protected-mode no at run time: served too.
    for server in (ours, theirs):
        server.client().config_set("protected-mode", "no")
    assert [ping_from(remote, s.port) for s in (ours, theirs)] == [b"+PONG\r\n"] * 2
    c.config_set("protected-mode", "yes")
    assert ping_from(remote, ours.port).startswith(b"-DENIED")


def test_protected_mode_serves_unix_socket_clients(make_tierkv, tmp_path):
    path = str(tmp_path / "tierkv.sock")
    make_tierkv("--flash-size", "0", "--unixsocket", path)
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(5)
    s.connect(path)
    s.sendall(encode_command("PING"))
    assert s.recv(64) == b"+PONG\r\n"
    s.close()


# --- maxclients and the open-files limit ------------------------------------

def start_with_ulimit(workdir, nofile, *extra):
    port, metrics_port = free_ports(2)
    argv = ["bash", "-c", f'ulimit -n {nofile} && exec "$0" "$@"', TIERKV_SERVER,
            "--port", str(port), "--bind", "127.0.0.1", "--metrics-port", str(metrics_port),
            "--flash-size", "0", "--io-threads", "2", *extra]
    return ServerProcess(argv, port, workdir)


def log_text(server):
    server.log.flush()
    with open(server.log_path, "rb") as f:
        return f.read().decode(errors="replace")


def test_maxclients_is_lowered_to_fit_the_fd_limit(tmp_path):
    s = start_with_ulimit(str(tmp_path), 128)
    try:
        c = s.client()
        # Reserve: 32 + metrics-max-clients (16) + 4 per I/O thread (2).
        assert c.config_get("maxclients") == {"maxclients": "72"}
        assert wait_until(lambda: "maxclients has been reduced to 72" in log_text(s), 5), \
            log_text(s)
        # CONFIG SET cannot pass the limit either: Redis's error, nothing changed.
        got = reply_of(c, "CONFIG", "SET", "maxclients", "100000")
        assert got == ("error", "CONFIG SET failed (possibly related to argument 'maxclients') - "
                                "The operating system is not able to handle the specified number "
                                "of clients, try with 72"), got
        assert c.config_get("maxclients") == {"maxclients": "72"}
        # All or nothing: the key set with it is rolled back too.
        got = reply_of(c, "CONFIG", "SET", "active-expire-hz", "50", "timeout", "77",
                       "maxclients", "100000")
        assert got[0] == "error" and "argument 'maxclients'" in got[1], got
        assert c.config_get("timeout") == {"timeout": "0"}
        assert c.config_get("active-expire-hz") == {"active-expire-hz": "10"}
        assert c.config_set("maxclients", "50")
        assert c.config_get("maxclients") == {"maxclients": "50"}
        c.close()
    finally:
        s.stop()


def test_fd_limit_below_the_reserve_stops_the_server(tmp_path):
    port = free_ports(1)[0]
    done = subprocess.run(
        ["bash", "-c", 'ulimit -n 40 && exec "$0" "$@"', TIERKV_SERVER, "--port", str(port),
         "--bind", "127.0.0.1", "--metrics-port", "0", "--flash-size", "0", "--io-threads", "2"],
        cwd=str(tmp_path), capture_output=True, timeout=30)
    text = (done.stdout + done.stderr).decode(errors="replace")
    assert done.returncode == 1, text
    assert "open files limit (ulimit -n) of 40 is not enough" in text, text


# --- accept() out of fds ----------------------------------------------------

def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def open_fds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


@pytest.mark.timing
def test_accept_backs_off_when_out_of_fds(make_tierkv):
    s = make_tierkv("--flash-size", "0", "--io-threads", "1")
    pid = s.proc.pid
    first = [RawClient(s.port, timeout=5) for _ in range(5)]
    for c in first:
        assert c.call("PING") == b"+PONG\r\n"
    soft, hard = resource.prlimit(pid, resource.RLIMIT_NOFILE)
    resource.prlimit(pid, resource.RLIMIT_NOFILE, (open_fds(pid) + 2, hard))
    # Two more fit; the rest wait in the listen backlog while accept() fails.
    late = [socket.create_connection(("127.0.0.1", s.port), timeout=10) for _ in range(6)]
    for sock in late:
        sock.sendall(encode_command("PING"))
    info_client = first[0]

    def accept_errors():
        info = info_client.call("INFO", "stats").decode()
        return int(info.split("accept_errors:")[1].split("\r\n")[0])

    assert wait_until(lambda: accept_errors() > 0, 5)
    # No spinning: well under a core while accept() keeps failing.
    cpu0, t0 = cpu_seconds(pid), time.time()
    time.sleep(1.0)
    used = (cpu_seconds(pid) - cpu0) / (time.time() - t0)
    assert used < 0.3, f"server used {used:.2f} of a core while out of fds"
    # Existing clients are still served, promptly.
    for c in first:
        t = time.time()
        assert c.call("PING") == b"+PONG\r\n"
        assert time.time() - t < 1.0
    errors = accept_errors()
    assert errors < 100, f"{errors} accept errors in about 1 s: not backing off"
    warnings = log_text(s).count("pausing accepts")
    assert warnings == 1, f"{warnings} pause warnings: the log is flooded"
    # Free fds: the waiting connections are accepted and answered.
    for c in first:
        c.close()
    for sock in late:
        sock.settimeout(10)
        assert sock.recv(64) == b"+PONG\r\n"
        sock.close()
    resource.prlimit(pid, resource.RLIMIT_NOFILE, (soft, hard))


# --- /metrics: read timeout and connection cap -------------------------------

def metrics_port(server):
    return int(server.client().config_get("metrics-port")["metrics-port"])


def scrape(port):
    return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()


def scrape_or_none(port):
    try:
        return scrape(port)
    except OSError:  # closed at once: over the cap
        return None


def seconds_until_closed(port, send=b""):
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    t = time.time()
    if send:
        s.sendall(send)
    data = read_until_closed(s)
    s.close()
    return time.time() - t, data


@pytest.mark.timing
def test_metrics_idle_connection_is_closed_after_the_timeout(make_tierkv):
    s = make_tierkv("--flash-size", "0", "--metrics-timeout-ms", "500")
    port = metrics_port(s)
    took, data = seconds_until_closed(port)
    assert data == b"" and 0.4 <= took < 3.0, (took, data)
    # A request head that never ends is cut off the same way.
    took, data = seconds_until_closed(port, b"GET /metr")
    assert data == b"" and 0.4 <= took < 3.0, (took, data)
    # At run time, a longer timeout.
    assert s.client().config_set("metrics-timeout-ms", "1500")
    took, _ = seconds_until_closed(port)
    assert 1.4 <= took < 5.0, took
    body = scrape(port)  # a prompt client is answered
    assert metric(body, "tierkv_metrics_timeouts_total") >= 3


@pytest.mark.timing
def test_metrics_connections_over_the_cap_are_closed_at_once(make_tierkv):
    s = make_tierkv("--flash-size", "0", "--metrics-max-clients", "2",
                    "--metrics-timeout-ms", "30000")
    port = metrics_port(s)
    held = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(2)]
    took, data = seconds_until_closed(port, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    assert data == b"" and took < 2.0, (took, data)
    for h in held:
        h.close()
    # Once the held ones are gone, scrapes are served again.
    assert wait_until(lambda: scrape_or_none(port) is not None, 5)
    assert metric(scrape(port), "tierkv_metrics_rejected_connections_total") >= 1
    # CONFIG SET raises the cap at run time.
    assert s.client().config_set("metrics-max-clients", "4")
    held = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(3)]
    assert "tierkv_connected_clients" in scrape(port)
    for h in held:
        h.close()
