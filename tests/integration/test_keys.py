"""Key-space commands, side by side with redis-server."""
import time

import pytest

BINARY_KEY = b"k\x00\xff\r\nkey"


def load(pair, keys):
    for k in keys:
        pair.same("SET", k, b"v:" + (k if isinstance(k, bytes) else k.encode()))


def test_del_unlink_exists_touch(pair):
    load(pair, ["a", "b", "c", BINARY_KEY])
    pair.same("EXISTS", "a", "a", "missing", "b", BINARY_KEY)  # duplicates count
    pair.same("TOUCH", "a", "a", "missing", "c")
    pair.same("DEL", "a", "a", "missing")
    pair.same("UNLINK", "b", BINARY_KEY, "b")
    pair.same("EXISTS", "a", "b", "c", BINARY_KEY)
    pair.same("DEL", "missing")


def test_type(pair):
    load(pair, ["k"])
    pair.same("TYPE", "k")
    pair.same("TYPE", "missing")
    pair.same("SET", "e", "")
    pair.same("TYPE", "e")


def test_ttl_pttl_persist(pair):
    pair.same("TTL", "missing")
    pair.same("PTTL", "missing")
    pair.same("PERSIST", "missing")
    load(pair, ["k"])
    pair.same("TTL", "k")
    pair.same("PTTL", "k")
    pair.same("PERSIST", "k")
    pair.same("EXPIRE", "k", "100")
    pair.same("TTL", "k")
    ours, theirs = pair.both("PTTL", "k")
    assert 99000 < ours <= 100000 and 99000 < theirs <= 100000
    pair.same("PERSIST", "k")
    pair.same("TTL", "k")
    pair.same("PERSIST", "k")


def test_expire_variants(pair):
    load(pair, ["k"])
    pair.same("EXPIRE", "missing", "100")
    pair.same("PEXPIRE", "k", "100000")
    pair.same("TTL", "k")
    now = int(time.time())
    pair.same("EXPIREAT", "k", str(now + 200))
    pair.same("TTL", "k")
    pair.same("PEXPIREAT", "k", str((now + 300) * 1000))
    pair.same("TTL", "k")


@pytest.mark.parametrize("cmd,arg", [
    ("EXPIRE", "0"), ("EXPIRE", "-10"), ("PEXPIRE", "-1"), ("EXPIREAT", "1"),
    ("PEXPIREAT", "0"), ("EXPIREAT", "-9223372036854775808"),
])
def test_past_expiry_deletes(pair, cmd, arg):
    load(pair, ["k"])
    pair.same(cmd, "k", arg)
    pair.same("EXISTS", "k")
    pair.same(cmd, "k", arg)


@pytest.mark.parametrize("args", [
    ("abc",), ("1.5",), ("99999999999999999",), ("9223372036854775807",),
    ("-9223372036854775808",), ("10", "FOO"), ("10", "NX", "XX"), ("10", "GT", "LT"),
    ("10", "nx", "gt"), ("10", "LT", "NX"), ("abc", "FOO"), ("abc", "NX", "XX"),
])
def test_expire_errors(pair, args):
    load(pair, ["k"])
    for cmd in ("EXPIRE", "PEXPIRE", "EXPIREAT", "PEXPIREAT"):
        pair.same(cmd, "k", *args)
    pair.same("TTL", "k")


def test_expire_conditions(pair):
    load(pair, ["k"])
    pair.same("EXPIRE", "k", "100", "XX")  # no TTL yet
    pair.same("EXPIRE", "k", "100", "GT")  # no TTL counts as infinite
    pair.same("EXPIRE", "k", "100", "NX")
    pair.same("EXPIRE", "k", "200", "NX")
    pair.same("TTL", "k")
    pair.same("EXPIRE", "k", "50", "GT")
    pair.same("EXPIRE", "k", "150", "GT")
    pair.same("TTL", "k")
    pair.same("EXPIRE", "k", "300", "LT")
    pair.same("EXPIRE", "k", "120", "LT")
    pair.same("TTL", "k")
    pair.same("EXPIRE", "k", "130", "XX", "GT")
    pair.same("EXPIRE", "k", "110", "xx", "lt")
    pair.same("TTL", "k")
    pair.same("PERSIST", "k")
    pair.same("EXPIRE", "k", "100", "LT")  # any TTL is less than infinite
    pair.same("TTL", "k")
    pair.same("EXPIRE", "k", "-1", "GT")  # condition fails: key survives
    pair.same("EXISTS", "k")
    pair.same("EXPIRE", "k", "-1", "LT")  # condition holds: key deleted
    pair.same("EXISTS", "k")


def test_expired_keys_are_gone(pair):
    pair.same("SET", "k", "v", "PX", "50")
    load(pair, ["stay"])
    pair.same("PEXPIRE", "stay", "50")
    time.sleep(0.1)
    pair.same("TTL", "k")
    pair.same("PTTL", "stay")
    pair.same("EXISTS", "k", "stay")
    pair.same("TYPE", "k")
    pair.same("KEYS", "*")
    pair.same("PERSIST", "k")
    pair.same("EXPIRE", "k", "10")


KEYS = ["hello", "hallo", "hxllo", "hllo", "heeeello", "h*llo", "h?llo", "h[a]llo",
        "user:1", "user:2", "user:10", "x", "", BINARY_KEY, b"\xff\xfe", "a-b", "a]b"]


@pytest.mark.parametrize("pattern", [
    "*", "h?llo", "h*llo", "h[ae]llo", "h[^e]llo", "h[a-b]llo", "h[b-a]llo", "user:*",
    "user:?", "user:[0-9]*", "h\\*llo", "h\\?llo", "h\\[a\\]llo", "*llo", "nomatch*", "",
    "x", "?", "*\\*", "a[\\]]b", "a[-]b", "h[", "[", "k\x00*", "**",
])
def test_keys_patterns(pair, pattern):
    load(pair, KEYS)
    ours, theirs = pair.both("KEYS", pattern)
    assert sorted(ours) == sorted(theirs), pattern


def full_scan(client, *options):
    seen = []
    cursor = "0"
    for _ in range(10000):
        reply = client.execute_command("SCAN", cursor, *options)
        cursor = reply[0].decode() if isinstance(reply[0], bytes) else str(reply[0])
        seen.extend(reply[1])
        if cursor == "0":
            return seen
    raise AssertionError("SCAN did not finish")


@pytest.mark.parametrize("options", [
    (), ("COUNT", "1"), ("COUNT", "7"), ("COUNT", "1000"), ("MATCH", "user:*"),
    ("MATCH", "k:1*", "COUNT", "3"), ("TYPE", "string"), ("TYPE", "STRING", "MATCH", "k:2?"),
    ("TYPE", "list"), ("MATCH", "*"), ("match", "nothing", "count", "50"),
])
def test_scan_full_iteration(pair, options):
    keys = [f"k:{i}" for i in range(300)] + [f"user:{i}" for i in range(20)] + [BINARY_KEY]
    for c in (pair.ours, pair.theirs):
        pipe = c.pipeline(transaction=False)
        for k in keys:
            pipe.set(k, "v")
        pipe.execute()
    ours = full_scan(pair.ours, *options)
    theirs = full_scan(pair.theirs, *options)
    assert len(ours) == len(set(ours)), "SCAN returned a key twice without concurrent changes"
    assert set(ours) == set(theirs)


@pytest.mark.parametrize("args", [
    ("abc",), ("1.5",), (" 1",), ("0", "COUNT"), ("0", "COUNT", "0"), ("0", "COUNT", "-1"),
    ("0", "COUNT", "abc"), ("0", "MATCH"), ("0", "FOO", "bar"), ("0", "TYPE"),
    ("99999999999999999999",),
])
def test_scan_errors(pair, args):
    pair.same("SCAN", *args)


def test_scan_cursor_forms(pair):
    # Redis parses the cursor with strtoul: these are all accepted.
    for cursor in ("0", "+0", "", "-0"):
        pair.same("SCAN", cursor)


def test_randomkey(pair):
    pair.same("RANDOMKEY")
    load(pair, ["only"])
    pair.same("RANDOMKEY")
    load(pair, ["a", "b", "c"])
    seen = {pair.ours.randomkey() for _ in range(100)}
    assert seen <= {b"only", b"a", b"b", b"c"} and len(seen) >= 2


@pytest.mark.parametrize("args", [
    ("DEL",), ("UNLINK",), ("EXISTS",), ("TOUCH",), ("TYPE",), ("TYPE", "a", "b"),
    ("EXPIRE", "k"), ("PEXPIRE",), ("EXPIREAT", "k"), ("PEXPIREAT", "k"), ("TTL",),
    ("PTTL", "a", "b"), ("PERSIST",), ("KEYS",), ("KEYS", "a", "b"), ("SCAN",),
    ("RANDOMKEY", "x"),
])
def test_wrong_arity(pair, args):
    pair.same(*args)
