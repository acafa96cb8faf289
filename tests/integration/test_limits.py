"""Limits over the wire: request sizes, key and object sizes, memory,
maxclients, the client output buffer, idle timeout and requirepass."""
import socket
import time

import pytest

from conftest import RawClient, encode_command, rss_kib


def client_ids(server):
    c = server.client()
    try:
        listing = c.execute_command("CLIENT", "LIST")
    finally:
        c.close()
    if isinstance(listing, bytes):
        listing = listing.decode()
    if isinstance(listing, list):  # redis-py parses CLIENT LIST
        return {int(e["id"]) for e in listing}
    return {int(line.split()[0][3:]) for line in listing.strip().split("\n")}


def wait_until(predicate, timeout=10.0):
    """Polls predicate (every 50 ms) until true or the deadline passes."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def accepted(port):
    """True if a new client gets PONG (not the maxclients error)."""
    c = RawClient(port, timeout=5)
    try:
        return c.call("PING") == b"+PONG\r\n"
    except (ConnectionError, OSError):
        return False
    finally:
        c.close()


def error_then_close(port, data):
    c = RawClient(port)
    try:
        c.send(data)
        reply = c.read_reply()
        closed = c.closed_by_server()
    finally:
        c.close()
    return reply, closed


def test_proto_max_bulk_len(make_tierkv, make_redis):
    ours = make_tierkv("--proto-max-bulk-len", "1mb", "--max-object-size", "1mb")
    theirs = make_redis("--proto-max-bulk-len", "1mb")
    data = b"*2\r\n$4\r\nECHO\r\n$%d\r\n" % ((1 << 20) + 1)
    a = error_then_close(ours.port, data)
    b = error_then_close(theirs.port, data)
    assert a == b == (b"-ERR Protocol error: invalid bulk length\r\n", True)
    # Exactly at the limit is fine.
    c = RawClient(ours.port)
    assert c.call("ECHO", b"x" * (1 << 20)) == b"$%d\r\n" % (1 << 20) + b"x" * (1 << 20) + b"\r\n"
    c.close()


def test_max_multibulk_args(make_tierkv):
    s = make_tierkv("--max-multibulk-args", "100")
    assert error_then_close(s.port, b"*101\r\n") == (
        b"-ERR Protocol error: invalid multibulk length\r\n", True)
    c = RawClient(s.port)
    assert c.call("EXISTS", *[f"k{i}" for i in range(99)]) == b":0\r\n"
    c.close()


def test_max_inline_len(make_tierkv):
    s = make_tierkv("--max-inline-len", "2kb")
    assert error_then_close(s.port, b"ECHO " + b"a" * 3000) == (
        b"-ERR Protocol error: too big inline request\r\n", True)
    c = RawClient(s.port)
    c.send(b"ECHO " + b"b" * 1500 + b"\r\n")
    assert c.read_reply() == b"$1500\r\n" + b"b" * 1500 + b"\r\n"
    c.close()


def test_max_key_size(make_tierkv):
    s = make_tierkv("--max-key-size", "1kb")
    c = RawClient(s.port)
    try:
        assert c.call("SET", "k" * 1024, "v") == b"+OK\r\n"
        reply = c.call("SET", "k" * 1025, "v")
        assert reply.startswith(b"-ERR ") and b"max-key-size" in reply
        # Also when the value is large enough to be streamed.
        reply = c.call("SET", "q" * 2000, b"v" * (100 * 1024))
        assert reply.startswith(b"-ERR ") and b"max-key-size" in reply
        assert c.call("PING") == b"+PONG\r\n"
        assert c.call("DBSIZE") == b":1\r\n"
    finally:
        c.close()


def test_max_object_size(make_tierkv):
    s = make_tierkv("--max-object-size", "1mb")
    c = RawClient(s.port)
    try:
        assert c.call("SET", "ok", b"x" * (1 << 20)) == b"+OK\r\n"
        reply = c.call("SET", "big", b"x" * ((1 << 20) + 1), "EX", "10")
        assert reply.startswith(b"-ERR ") and b"max-object-size" in reply, reply
        assert c.call("EXISTS", "big") == b":0\r\n"
        # The connection is still in sync after the skipped value.
        assert c.call("STRLEN", "ok") == b":%d\r\n" % (1 << 20)
    finally:
        c.close()


def test_value_larger_than_memory_is_refused_with_oom_without_flash(make_tierkv):
    s = make_tierkv("--flash-size", "0")
    c = RawClient(s.port)
    try:
        assert c.call("CONFIG", "SET", "memory", "8mb") == b"+OK\r\n"
        reply = c.call("SET", "huge", b"y" * (16 << 20))
        assert reply.startswith(b"-OOM "), reply[:100]
        assert c.call("EXISTS", "huge") == b":0\r\n"
        assert c.call("SET", "small", "v") == b"+OK\r\n"
    finally:
        c.close()


def test_value_larger_than_memory_goes_to_flash(make_tierkv):
    s = make_tierkv()
    c = RawClient(s.port)
    try:
        assert c.call("CONFIG", "SET", "memory", "8mb") == b"+OK\r\n"
        assert c.call("SET", "huge", b"y" * (16 << 20)) == b"+OK\r\n"
        assert c.call("STRLEN", "huge") == b":%d\r\n" % (16 << 20)
        assert c.call("GETRANGE", "huge", 8 << 20, (8 << 20) + 2) == b"$3\r\nyyy\r\n"
    finally:
        c.close()


def test_maxclients(make_tierkv, make_redis):
    for srv in (make_tierkv("--maxclients", "3"), make_redis("--maxclients", "3")):
        # The fixture's readiness probe may still hold a slot on a loaded
        # machine: the first client waits (bounded) until it is alone.
        first = RawClient(srv.port)
        assert wait_until(lambda: b"connected_clients:1\r\n" in first.call("INFO", "clients")), \
            "the readiness probe's connection never went"
        held = [first] + [RawClient(srv.port) for _ in range(2)]
        for h in held:
            assert h.call("PING") == b"+PONG\r\n"
        extra = RawClient(srv.port)
        assert extra.read_reply() == b"-ERR max number of clients reached\r\n"
        assert extra.closed_by_server()
        extra.close()
        held.pop().close()
        # The server frees the slot once it sees the close: poll (bounded)
        # until a new client is accepted rather than sleeping.
        assert wait_until(lambda: accepted(srv.port)), "slot not freed after a client left"
        for h in held:
            assert h.call("PING") == b"+PONG\r\n"
        for h in held:
            h.close()


def test_output_buffer_limit_disconnects_a_client_that_never_reads(make_tierkv):
    s = make_tierkv("--client-output-buffer-limit", "1mb")
    setup = RawClient(s.port)
    value = b"v" * (256 * 1024)
    assert setup.call("SET", "k", value) == b"+OK\r\n"
    rss_before = rss_kib(s.proc.pid)

    lazy = RawClient(s.port)
    lazy.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    lazy_id = int(lazy.call("CLIENT", "ID")[1:-2])
    assert lazy_id in client_ids(s)
    # 400 GETs of 256 KiB = 100 MiB of replies that are never read.
    lazy.sock.settimeout(5)
    try:
        lazy.send(encode_command("GET", "k") * 400)
    except (socket.timeout, ConnectionError):
        pass
    assert wait_until(lambda: lazy_id not in client_ids(s)), "client was not disconnected"
    assert setup.call("PING") == b"+PONG\r\n"
    assert rss_kib(s.proc.pid) - rss_before < 64 * 1024, "server memory grew"
    lazy.close()
    setup.close()


def test_pipelining_client_that_never_reads_keeps_memory_bounded(make_tierkv):
    s = make_tierkv()
    rss_before = rss_kib(s.proc.pid)
    lazy = RawClient(s.port)
    lazy.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    lazy.sock.settimeout(0.5)
    batch = encode_command("ECHO", "e" * 100) * 1000  # ~ 120 KB of replies per batch
    sent = 0
    deadline = time.time() + 5
    try:
        while time.time() < deadline and sent < 2000:
            lazy.send(batch)
            sent += 1
    except (socket.timeout, ConnectionError):
        pass
    # The server stopped reading: the client could not push everything.
    assert sent < 2000
    other = RawClient(s.port)
    assert other.call("PING") == b"+PONG\r\n"
    assert rss_kib(s.proc.pid) - rss_before < 64 * 1024
    other.close()
    lazy.close()


@pytest.mark.timing
def test_idle_timeout(make_tierkv):
    s = make_tierkv("--timeout", "1")
    idle = RawClient(s.port)
    assert idle.call("PING") == b"+PONG\r\n"
    start = time.time()
    assert idle.closed_by_server(timeout=5)
    assert 0.9 <= time.time() - start <= 4
    idle.close()


@pytest.mark.timing
def test_idle_timeout_set_at_run_time(make_tierkv):
    s = make_tierkv()
    admin = s.client()
    assert admin.config_set("timeout", "1")
    idle = RawClient(s.port)
    assert idle.call("PING") == b"+PONG\r\n"
    assert idle.closed_by_server(timeout=5)
    idle.close()
    admin.close()


def test_requirepass_set_at_run_time(make_tierkv):
    s = make_tierkv()
    admin = RawClient(s.port)
    assert admin.call("CONFIG", "SET", "requirepass", "pw") == b"+OK\r\n"
    fresh = RawClient(s.port)
    try:
        assert fresh.call("GET", "k") == b"-NOAUTH Authentication required.\r\n"
        assert fresh.call("AUTH", "pw") == b"+OK\r\n"
        assert fresh.call("GET", "k") == b"$-1\r\n"
    finally:
        fresh.close()
        admin.close()
