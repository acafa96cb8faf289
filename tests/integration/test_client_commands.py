"""CLIENT KILL, PAUSE/UNPAUSE, NO-EVICT and NO-TOUCH side by side with
redis-server 7.0 (NO-TOUCH is Redis 7.2's and is checked on its own), RESP2
and RESP3."""
import re
import time

import pytest

from conftest import RawClient
from test_transactions import RawPair, raw  # noqa: F401 - the fixture


def client_id(c):
    return int(c.call("CLIENT", "ID")[1:-2])


def client_addr(c):
    info = c.call("CLIENT", "INFO").decode()
    return re.search(r" addr=(\S+)", info).group(1), re.search(r" laddr=(\S+)", info).group(1)


def flags_of(c):
    return re.search(r" flags=(\S+)", c.call("CLIENT", "INFO").decode()).group(1)


@pytest.mark.parametrize("proto", ["2", "3"])
def test_errors_match_redis(raw, proto):  # noqa: F811
    a, _ = raw
    a.ours.call("HELLO", proto)
    a.theirs.call("HELLO", proto)
    for args in (("CLIENT", "KILL"), ("CLIENT", "KILL", "1.2.3.4:5"), ("CLIENT", "KILL", "addr"),
                 ("CLIENT", "KILL", "ID", "0"), ("CLIENT", "KILL", "ID", "x"),
                 ("CLIENT", "KILL", "ID", "-3"), ("CLIENT", "KILL", "ID", "99999999"),
                 ("CLIENT", "KILL", "TYPE", "foo"), ("CLIENT", "KILL", "TYPE", "master"),
                 ("CLIENT", "KILL", "TYPE", "pubsub"), ("CLIENT", "KILL", "USER", "nobody"),
                 ("CLIENT", "KILL", "SKIPME", "maybe"), ("CLIENT", "KILL", "ADDR", "1.2.3.4:5"),
                 ("CLIENT", "KILL", "ADDR", "1.2.3.4:5", "LADDR"),
                 ("CLIENT", "KILL", "foo", "bar"), ("CLIENT", "KILL", "LADDR", "9.9.9.9:1"),
                 ("CLIENT", "PAUSE"), ("CLIENT", "PAUSE", "x"), ("CLIENT", "PAUSE", "-1"),
                 ("CLIENT", "PAUSE", "10", "foo"), ("CLIENT", "PAUSE", "10", "ALL", "x"),
                 ("CLIENT", "PAUSE", "99999999999999999999"), ("CLIENT", "UNPAUSE", "x"),
                 ("CLIENT", "UNPAUSE"), ("CLIENT", "NO-EVICT"), ("CLIENT", "NO-EVICT", "maybe"),
                 ("CLIENT", "NO-EVICT", "on", "x"), ("CLIENT", "NO-EVICT", "ON"),
                 ("CLIENT", "NO-EVICT", "off")):
        a.same(*args)


def test_kill_old_form(raw):  # noqa: F811
    a, b = raw
    for ours_or_theirs in ("ours", "theirs"):
        killer, victim = getattr(a, ours_or_theirs), getattr(b, ours_or_theirs)
        addr, _ = client_addr(victim)
        assert killer.call("CLIENT", "KILL", addr) == b"+OK\r\n"
        assert victim.closed_by_server()
        assert killer.call("CLIENT", "KILL", addr) == b"-ERR No such client\r\n"
        # The old form may kill the caller: the reply comes first.
        own, _ = client_addr(killer)
        killer.send(b"CLIENT KILL " + own.encode() + b"\r\n")
        assert killer.read_reply() == b"+OK\r\n"
        assert killer.closed_by_server()


@pytest.mark.parametrize("filt", ["ID", "ADDR", "LADDR", "USER", "TYPE"])
def test_kill_filters(redis_server, tierkv_server, filt):
    for port in (tierkv_server.port, redis_server.port):
        killer, victim = RawClient(port), RawClient(port)
        addr, laddr = client_addr(victim)
        value = {"ID": str(client_id(victim)), "ADDR": addr, "LADDR": laddr, "USER": "default",
                 "TYPE": "normal"}[filt]
        n = killer.call("CLIENT", "KILL", filt, value, "ID", str(client_id(victim)))
        assert n == b":1\r\n", (port, n)  # the killer itself is skipped (SKIPME yes)
        assert victim.closed_by_server()
        assert killer.call("PING") == b"+PONG\r\n"
        killer.close()


def test_kill_skipme_no_kills_the_caller(redis_server, tierkv_server):
    for port in (tierkv_server.port, redis_server.port):
        c = RawClient(port)
        own = str(client_id(c))
        assert c.call("CLIENT", "KILL", "ID", own) == b":0\r\n"
        assert c.call("CLIENT", "KILL", "ID", own, "SKIPME", "yes") == b":0\r\n"
        c.send(b"CLIENT KILL ID " + own.encode() + b" SKIPME no\r\n")
        assert c.read_reply() == b":1\r\n"
        assert c.closed_by_server()


def test_kill_across_io_threads(make_tierkv):
    """Clients on every I/O thread, killed from one of them."""
    s = make_tierkv("--flash-size", "0", "--io-threads", "4")
    clients = [RawClient(s.port) for _ in range(8)]
    for c in clients:
        assert c.call("PING") == b"+PONG\r\n"  # registered by now
    killer = RawClient(s.port)
    assert killer.call("CLIENT", "KILL", "USER", "default") == b":8\r\n"
    for c in clients:
        assert c.closed_by_server()
    assert killer.call("CLIENT", "KILL", "USER", "default") == b":0\r\n"


def timed(c, *args, timeout=5.0):
    c.sock.settimeout(timeout)
    t = time.monotonic()
    reply = c.call(*args)
    return reply, time.monotonic() - t


def replies_within(c, seconds):
    """The raw reply if one arrives within `seconds`, else None."""
    c.sock.settimeout(seconds)
    try:
        return c.read_reply()
    except TimeoutError:
        return None
    finally:
        c.sock.settimeout(10)


@pytest.fixture
def two_each(redis_server, tierkv_server):
    """Two raw clients (a, b) on tierkv, then two on redis-server."""
    pairs = [(RawClient(p), RawClient(p)) for p in (tierkv_server.port, redis_server.port)]
    yield pairs
    for a, b in pairs:
        a.close()
        b.close()


@pytest.mark.timing
def test_pause_all_holds_every_command(two_each):
    for a, b in two_each:
        assert a.call("CLIENT", "PAUSE", "600", "ALL") == b"+OK\r\n"
        t = time.monotonic()
        b.send(b"PING\r\n")
        a.send(b"CLIENT UNPAUSE\r\n")  # ALL holds UNPAUSE too, and the pausing client
        assert replies_within(b, 0.2) is None
        assert b.read_reply() == b"+PONG\r\n"
        assert a.read_reply() == b"+OK\r\n"
        assert time.monotonic() - t >= 0.5


@pytest.mark.timing
def test_pause_write_holds_only_writes(two_each):
    for a, b in two_each:
        a.call("DEL", "pk")
        assert a.call("CLIENT", "PAUSE", "500", "WRITE") == b"+OK\r\n"
        reply, took = timed(b, "GET", "pk")
        assert reply == b"$-1\r\n" and took < 0.3, took
        reply, took = timed(b, "SET", "pk", "1")
        assert reply == b"+OK\r\n" and took >= 0.3, took
        # In MULTI a write waits when queued, as in Redis.
        assert a.call("CLIENT", "PAUSE", "500", "WRITE") == b"+OK\r\n"
        assert b.call("MULTI") == b"+OK\r\n"
        reply, took = timed(b, "INCR", "pk")
        assert reply == b"+QUEUED\r\n" and took >= 0.3, took
        assert b.call("EXEC") == b"*1\r\n:2\r\n"


@pytest.mark.timing
def test_unpause_releases_held_writes_at_once(two_each):
    for a, b in two_each:
        assert a.call("CLIENT", "PAUSE", "5000", "WRITE") == b"+OK\r\n"
        t = time.monotonic()
        b.send(b"SET pk 1\r\nGET pk\r\n")
        assert replies_within(b, 0.2) is None
        assert a.call("CLIENT", "UNPAUSE") == b"+OK\r\n"
        assert b.read_reply() == b"+OK\r\n"
        assert b.read_reply() == b"$1\r\n1\r\n"
        assert time.monotonic() - t < 2


@pytest.mark.timing
def test_pause_end_is_the_later_one(two_each):
    for a, b in two_each:
        assert a.call("CLIENT", "PAUSE", "700", "WRITE") == b"+OK\r\n"
        assert a.call("CLIENT", "PAUSE", "10", "WRITE") == b"+OK\r\n"  # does not shorten it
        reply, took = timed(b, "SET", "pk", "1")
        assert reply == b"+OK\r\n" and took >= 0.5, took


@pytest.mark.timing
def test_paused_clients_do_not_block_the_io_thread(make_tierkv):
    """One I/O thread: a client held by PAUSE WRITE waits, others' reads run."""
    s = make_tierkv("--flash-size", "0", "--io-threads", "1")
    a, held, reader = RawClient(s.port), RawClient(s.port), RawClient(s.port)
    assert a.call("CLIENT", "PAUSE", "800", "WRITE") == b"+OK\r\n"
    held.send(b"SET k 1\r\n")
    for _ in range(20):
        reply, took = timed(reader, "PING")
        assert reply == b"+PONG\r\n" and took < 0.2
    assert held.read_reply() == b"+OK\r\n"
    # A held client that goes away is no trouble. tierkv does not read a
    # held client, so it runs the command it had sent when the pause ends
    # (Redis sees the close and drops it): either value is right.
    assert a.call("CLIENT", "PAUSE", "300", "ALL") == b"+OK\r\n"
    held.send(b"SET k 2\r\n")
    held.close()
    time.sleep(0.4)
    assert reader.call("GET", "k") in (b"$1\r\n1\r\n", b"$1\r\n2\r\n")
    assert reader.call("CLIENT", "LIST").count(b"id=") == 2


def test_no_evict_flag(raw):  # noqa: F811
    a, _ = raw
    for side in (a.ours, a.theirs):
        assert flags_of(side) == "N"
        assert side.call("CLIENT", "NO-EVICT", "on") == b"+OK\r\n"
        assert flags_of(side) == "e"
        assert side.call("RESET") == b"+RESET\r\n"  # Redis 7.0 keeps it
        assert flags_of(side) == "e"
        assert side.call("CLIENT", "NO-EVICT", "off") == b"+OK\r\n"
        assert flags_of(side) == "N"


def test_no_touch_replies(tierkv_server):
    """Redis 7.2's CLIENT NO-TOUCH (redis-server 7.0 has none): its replies
    and errors as 7.2 gives them."""
    c = RawClient(tierkv_server.port)
    assert c.call("CLIENT", "NO-TOUCH", "on") == b"+OK\r\n"
    assert flags_of(c) == "T"
    assert c.call("CLIENT", "NO-EVICT", "on") == b"+OK\r\n"
    assert flags_of(c) == "eT"
    assert c.call("CLIENT", "NO-TOUCH", "maybe") == b"-ERR syntax error\r\n"
    assert c.call("CLIENT", "NO-TOUCH") == \
        b"-ERR wrong number of arguments for 'client|no-touch' command\r\n"
    assert c.call("CLIENT", "NO-TOUCH", "OFF") == b"+OK\r\n"
    assert flags_of(c) == "e"


def survivors_after_eviction(s, no_touch):
    """a and b written in that order, a read (with or without NO-TOUCH), then
    more writes until one of them is evicted: the one that is left."""
    c = RawClient(s.port)
    value = "v" * 3000
    c.call("SET", "a", value)
    c.call("SET", "b", value)
    if no_touch:
        assert c.call("CLIENT", "NO-TOUCH", "on") == b"+OK\r\n"
    for _ in range(3):
        assert c.call("GET", "a").startswith(b"$3000")
        assert c.call("MGET", "a").startswith(b"*1\r\n$3000")
        assert c.call("GETRANGE", "a", "0", "1") == b"$2\r\nvv\r\n"
    c.call("CLIENT", "NO-TOUCH", "off")
    for i in range(2000):
        c.call("SET", f"fill{i}", value)
        left = [k for k in ("a", "b") if c.call("EXISTS", k) == b":1\r\n"]
        if len(left) < 2:
            c.close()
            return left
    raise AssertionError("nothing was evicted")


def test_no_touch_reads_do_not_count_for_lru(make_tierkv):
    args = ("--flash-size", "0", "--eviction-policy", "lru", "--memory-shards", "1",
            "--memory", "1mb", "--chunk-size", "4kb")
    assert survivors_after_eviction(make_tierkv(*args), no_touch=False) == ["a"]
    assert survivors_after_eviction(make_tierkv(*args), no_touch=True) == ["b"]
