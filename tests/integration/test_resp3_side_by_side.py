"""RESP3 side by side with redis-server (issue 12): the commands whose RESP2
replies test_object.py, test_rename.py and test_transactions.py compare byte
for byte, sent after HELLO 3 on both servers, with byte-identical replies
(RESP3 nulls "_", maps, and errors inside EXEC arrays included)."""

import pytest

from test_rename import random_renames, ttl_close
from test_transactions import RawPair


def hello3(p):
    for side in (p.ours, p.theirs):  # the HELLO replies differ (version, id)
        reply = side.call("HELLO", "3")
        assert reply.startswith(b"%7\r\n"), reply


@pytest.fixture
def raw3(redis_server, tierkv_server):
    """Two RESP3 clients (a, b) on each server, after FLUSHALL."""
    a = RawPair(tierkv_server.port, redis_server.port)
    b = RawPair(tierkv_server.port, redis_server.port)
    hello3(a)
    hello3(b)
    assert a.same("FLUSHALL") == b"+OK\r\n"
    yield a, b
    a.close()
    b.close()


VALUES = ["0", "100", "9999", "10000", "-5", "0123", "+1", "12345678901234567890",
          "9223372036854775807", "-9223372036854775808", "abc", "", " 1", "x" * 44, "x" * 45,
          "1" * 21, "1.5"]


def test_resp3_object_encoding_and_refcount(raw3):
    a, _ = raw3
    for value in VALUES:
        a.same("SET", "k", value)
        a.same("OBJECT", "ENCODING", "k")
        a.same("OBJECT", "REFCOUNT", "k")
    a.same("INCR", "n")
    a.same("OBJECT", "ENCODING", "n")
    a.same("INCRBY", "n", "20000")
    a.same("OBJECT", "REFCOUNT", "n")
    a.same("OBJECT", "ENCODING", "n")


def test_resp3_object_errors_help_and_freq(raw3):
    a, _ = raw3
    a.same("SET", "k", "v")
    for sub in ("ENCODING", "REFCOUNT", "FREQ", "IDLETIME"):
        assert a.same("OBJECT", sub, "missing") == b"_\r\n"
        a.same("OBJECT", sub)
        a.same("OBJECT", sub, "k", "extra")
    assert a.same("OBJECT", "FREQ", "k").startswith(b"-ERR An LFU maxmemory policy is not selected")
    a.same("OBJECT", "IDLETIME", "k")
    assert a.same("OBJECT", "HELP").startswith(b"*15\r\n+OBJECT <subcommand>")
    a.same("OBJECT", "help", "extra")
    a.same("OBJECT", "nosuch", "k")
    a.same("OBJECT")
    a.same("object", "encoding", "k")


def test_resp3_memory_usage(raw3):
    a, _ = raw3
    assert a.same("MEMORY", "USAGE", "missing") == b"_\r\n"
    a.same("MEMORY", "USAGE")
    a.same("MEMORY", "USAGE", "k", "SAMPLES")
    a.same("MEMORY", "USAGE", "missing", "SAMPLES", "x")
    a.same("MEMORY", "USAGE", "missing", "BOGUS", "1")
    a.same("MEMORY", "NOSUCH")
    a.same("SET", "small", "v")
    a.same("SET", "large", "x" * 100_000)
    # The figures are estimates that differ; both are integers that grow with the value.
    for side in (a.ours, a.theirs):
        small = side.call("MEMORY", "USAGE", "small")
        large = side.call("MEMORY", "USAGE", "large", "SAMPLES", "0")
        assert small.startswith(b":") and large.startswith(b":"), (small, large)
        assert 0 < int(small[1:-2]) < 200 and 100_000 <= int(large[1:-2]) < 120_000


def test_resp3_wait_and_select(raw3):
    a, _ = raw3
    assert a.same("WAIT", "0", "0") == b":0\r\n"
    a.same("WAIT", "0", "10")
    a.same("WAIT", "x", "0")
    a.same("WAIT", "0", "-1")
    a.same("WAIT", "0", "x")
    a.same("WAIT", "0")
    a.same("MULTI")
    a.same("WAIT", "1", "0")
    a.same("EXEC")
    for db in ("0", "16", "-1", "abc", "99999999999", "1.5"):
        a.same("SELECT", db)
    a.same("SELECT")


def test_resp3_rename_and_copy(raw3):
    a, _ = raw3
    a.same("RENAME", "missing", "x")
    a.same("RENAME", "missing", "missing")
    a.same("RENAMENX", "missing", "x")
    a.same("SET", "src", "v", "EX", "100")
    a.same("SET", "dst", "old", "EX", "5000")
    a.same("RENAME", "src", "dst")
    a.same("GET", "dst")
    assert 99_000 < ttl_close(a, "dst") <= 100_000
    a.same("EXISTS", "src")
    a.same("SET", "plain", "p")
    a.same("RENAME", "plain", "dst")
    a.same("TTL", "dst")
    a.same("RENAME", "dst", "dst")
    a.same("RENAMENX", "dst", "dst")
    a.same("SET", "other", "o")
    a.same("RENAMENX", "dst", "other")
    a.same("RENAMENX", "dst", "fresh")
    a.same("GET", "fresh")
    a.same("RENAME", "fresh")
    # COPY
    a.same("SET", "s", "value", "PX", "100000")
    a.same("COPY", "s", "s")
    a.same("COPY", "missing", "d")
    for db in ("16", "-1", "notanumber", "99999999999"):
        a.same("COPY", "s", "d", "DB", db)
    a.same("COPY", "s", "d", "DB")
    a.same("COPY", "s", "d", "REPLACE", "EXTRA")
    a.same("COPY", "s", "d", "DB", "0")
    assert 99_000 < ttl_close(a, "d") <= 100_000
    a.same("COPY", "s", "d")
    a.same("SET", "s", "new")
    a.same("COPY", "s", "d", "replace")
    a.same("GET", "d")
    a.same("TTL", "d")
    a.same("COPY", "s")
    # Inside a transaction.
    a.same("SET", "tmp", "payload")
    a.same("MULTI")
    a.same("RENAME", "tmp", "published")
    a.same("RENAME", "tmp", "again")
    a.same("RENAMENX", "published", "d")
    a.same("COPY", "published", "backup")
    a.same("COPY", "missing", "backup2")
    a.same("EXEC")
    a.same("MGET", "tmp", "published", "backup", "backup2")


def test_resp3_random_renames(raw3):
    a, _ = raw3
    random_renames(a, 300)


def test_resp3_queuing_error_aborts_exec(raw3):
    a, _ = raw3
    a.same("SET", "k", "before")
    a.same("MULTI")
    a.same("SET", "k", "after")
    a.same("NOSUCHCOMMAND", "x")
    a.same("GET")  # wrong arity
    a.same("SET", "k2", "v")
    assert a.same("EXEC").startswith(b"-EXECABORT")
    a.same("GET", "k")
    a.same("EXISTS", "k2")
    a.same("EXEC")
    a.same("MULTI")
    a.same("SET", "k3", "v")
    assert a.same("EXEC", "extra").startswith(b"-EXECABORT Transaction discarded because of: ")
    a.same("EXEC")
    a.same("EXISTS", "k3")
    a.same("DISCARD")


def test_resp3_errors_inside_exec(raw3):
    a, _ = raw3
    a.same("SET", "s", "not a number")
    a.same("MULTI")
    a.same("INCR", "s")
    a.same("SET", "t", "1")
    a.same("INCRBYFLOAT", "s", "1")
    a.same("EXPIRE", "t", "notint")
    a.same("GET", "t")
    a.same("GET", "missing")  # a RESP3 null inside the array
    a.same("RENAME", "missing", "x")
    a.same("OBJECT", "ENCODING", "missing")
    a.same("MEMORY", "USAGE", "missing")
    a.same("COPY", "t", "t2", "DB", "16")
    a.same("SELECT", "16")
    got = a.same("EXEC")
    assert got.startswith(b"*11\r\n") and b"_\r\n" in got and got.count(b"\r\n-") == 6, got
    a.same("GET", "t")
    a.same("EXISTS", "t2")


def test_resp3_watch_and_control_errors(raw3):
    a, b = raw3
    a.same("SET", "w", "1")
    a.same("WATCH", "w")
    b.same("SET", "w", "2")
    a.same("MULTI")
    a.same("GET", "w")
    assert a.same("EXEC") == b"_\r\n"  # RESP3 null for an aborted EXEC
    a.same("EXEC")
    a.same("DISCARD")
    a.same("MULTI")
    a.same("MULTI")
    a.same("WATCH", "w")
    a.same("SET", "w", "3")
    a.same("EXEC")
    a.same("WATCH")
    a.same("MULTI", "x")
    a.same("UNWATCH")
