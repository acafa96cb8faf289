"""client-query-buffer-limit (side by side with redis-server) and the memory
of a half-received large SET: released when the client disconnects or idles
past `timeout`."""
import socket
import time

import pytest

from conftest import RawClient, encode_command

MIB = 1 << 20


def set_header(key, size):
    return b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n" % (len(key), key, size)


def send_quietly(client, data):
    """Sends what the server takes; a server that closes mid-send is fine."""
    try:
        client.send(data)
    except (BrokenPipeError, ConnectionResetError):
        pass


def closed_without_reply(port, data):
    c = RawClient(port)
    try:
        send_quietly(c, data)
        closed = c.closed_by_server(timeout=10)
        return closed, c.buf
    finally:
        c.close()


def limited_pair(make_tierkv, make_redis, *extra):
    ours = make_tierkv("--client-query-buffer-limit", "1mb", *extra)
    theirs = make_redis("--client-query-buffer-limit", "1mb", *extra)
    return ours, theirs


def test_query_buffer_limit_like_redis(make_tierkv, make_redis):
    ours, theirs = limited_pair(make_tierkv, make_redis)
    for s in (ours, theirs):
        # A value over the limit: the client is closed, nothing answered.
        big = set_header(b"k", 2 * MIB) + b"x" * (2 * MIB) + b"\r\n"
        assert closed_without_reply(s.port, big) == (True, b""), s
        # Half of an even larger one: closed as soon as it passes the limit.
        half = set_header(b"k", 4 * MIB) + b"z" * (3 * MIB // 2)
        assert closed_without_reply(s.port, half) == (True, b""), s
        c = RawClient(s.port)
        # Under the limit, one command or a long pipeline of small ones.
        assert c.call("SET", "k", b"y" * (900 * 1024)) == b"+OK\r\n"
        one = encode_command("SET", "p", b"q" * 1000)
        c.send(one * 3000)
        for _ in range(3000):
            assert c.read_reply() == b"+OK\r\n"
        c.close()
    # The setting itself, as CONFIG shows it.
    a, b = RawClient(ours.port), RawClient(theirs.port)
    for c in (a, b):
        assert c.call("CONFIG", "SET", "client-query-buffer-limit", "2mb") == b"+OK\r\n"
    assert a.call("CONFIG", "GET", "client-query-buffer-limit") == \
        b.call("CONFIG", "GET", "client-query-buffer-limit")
    a.close()
    b.close()


def used_memory(port):
    c = RawClient(port)
    try:
        text = c.call("INFO", "memory").decode()
    finally:
        c.close()
    for line in text.split("\r\n"):
        if line.startswith("used_memory:"):
            return int(line.split(":")[1])
    raise AssertionError("no used_memory")


def wait_until(predicate, timeout=10.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def start_half_set(port, size):
    """A client that sent the header and half of a `size`-byte SET value."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.sendall(set_header(b"half", size) + b"h" * (size // 2))
    return sock


def test_half_sent_set_releases_memory_on_disconnect(make_tierkv):
    s = make_tierkv()
    base = used_memory(s.port)
    sock = start_half_set(s.port, 32 * MIB)
    # The value is reserved as it streams in...
    assert wait_until(lambda: used_memory(s.port) >= base + 16 * MIB), used_memory(s.port)
    sock.close()
    # ... and given back when the client goes.
    assert wait_until(lambda: used_memory(s.port) == base), (base, used_memory(s.port))


@pytest.mark.timing
@pytest.mark.slow
def test_half_sent_set_releases_memory_after_idle_timeout(make_tierkv, make_redis):
    s = make_tierkv("--timeout", "1")
    base = used_memory(s.port)
    sock = start_half_set(s.port, 32 * MIB)
    assert wait_until(lambda: used_memory(s.port) >= base + 16 * MIB), used_memory(s.port)
    # Idle past `timeout`: closed, reservation released, as Redis closes it.
    assert wait_until(lambda: used_memory(s.port) == base, 15), (base, used_memory(s.port))
    sock.settimeout(10)
    assert sock.recv(1) == b""
    sock.close()
    r = make_redis("--timeout", "1")
    rsock = start_half_set(r.port, 32 * MIB)
    rsock.settimeout(15)
    assert rsock.recv(1) == b""
    rsock.close()


def slow_get(port, key, size, seconds):
    """GETs `key` and reads the reply at a pace that spreads it over about
    `seconds`; returns the bytes received."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    sock.sendall(encode_command("GET", key))
    want = len(b"$%d\r\n" % size) + size + 2
    got = bytearray()
    step = max(want // 40, 1)
    while len(got) < want:
        chunk = sock.recv(min(step, want - len(got)))
        if not chunk:
            break
        got += chunk
        if len(got) % step < len(chunk):
            time.sleep(seconds / 40)  # pacing the reader, not waiting for the server
    sock.close()
    return bytes(got)


@pytest.mark.timing
@pytest.mark.slow
def test_slow_reader_is_not_idle(make_tierkv, make_redis):
    """A client reading a large reply slowly is active (Redis counts writes
    as interaction): `timeout` does not cut it off."""
    size = 64 * MIB  # more than the kernel's socket buffers hold
    value = b"s" * size
    for s in (make_tierkv("--timeout", "1"), make_redis("--timeout", "1")):
        c = RawClient(s.port)
        assert c.call("SET", "big", value) == b"+OK\r\n"
        c.close()
        assert slow_get(s.port, "big", size, 3.0) == b"$%d\r\n" % size + value + b"\r\n", s


def test_maxmemory_clients_closes_the_largest_client_like_redis(make_tierkv, make_redis):
    """maxmemory-clients 2mb: a client holding 3 MiB of a command still
    arriving is closed (evicted_clients counts it) while a small one stays;
    a client with CLIENT NO-EVICT on is never closed for it: its command
    completes."""
    ours = make_tierkv("--maxmemory-clients", "2mb")
    theirs = make_redis("--maxmemory-clients", "2mb")
    head = set_header(b"k", 8 * MIB)
    for s in (ours, theirs):
        small = RawClient(s.port)
        assert small.call("PING") == b"+PONG\r\n"
        big = RawClient(s.port)
        send_quietly(big, head + b"x" * (3 * MIB))
        assert big.closed_by_server(timeout=10), s
        big.close()
        assert small.call("PING") == b"+PONG\r\n"
        assert b"evicted_clients:1\r\n" in small.call("INFO", "stats"), s
        small.close()
        exempt = RawClient(s.port)
        assert exempt.call("CLIENT", "NO-EVICT", "on") == b"+OK\r\n"
        exempt.send(head + b"y" * (3 * MIB))
        time.sleep(0.5)  # five of our checks, and many of Redis's
        exempt.send(b"y" * (5 * MIB) + b"\r\n")
        assert exempt.read_reply() == b"+OK\r\n", s
        assert b"evicted_clients:1\r\n" in exempt.call("INFO", "stats"), s
        exempt.close()
