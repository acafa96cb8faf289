"""CONFIG SET says what is in effect: every key it accepts takes effect at run
time (observed over the wire here), and every other key is refused with
Redis's error, changing nothing."""
import random
import time

from conftest import RawClient, reply_of
from flash_util import MIB, flash_servers, residencies, tier_stat, wait_until  # noqa: F401

IMMUTABLE = ("bind", "port", "unixsocket", "io-threads", "metrics-bind", "metrics-port",
             "chunk-size", "eviction-policy", "memory-shards", "flash-path", "flash-size",
             "region-size", "flash-fsync", "flash-queue-depth", "flash-reinsertion", "flash-snapshot-area",
             "flash-preallocate", "flash-write-queue", "backing-latency-ns", "offload-policy")

# A new value for every runtime-settable key, as CONFIG GET prints it.
# Ordered so that every step passes the cross-key checks (max-object-size <=
# proto-max-bulk-len); requirepass last.
SETTABLE = {
    "max-key-size": "1024", "max-object-size": "1048576",
    "maxclients": "500", "timeout": "300", "protected-mode": "no",
    "proto-max-bulk-len": "2097152", "max-multibulk-args": "5000", "max-inline-len": "32768",
    "client-output-buffer-limit": "1048576", "metrics-timeout-ms": "2500",
    "metrics-max-clients": "8", "log-level": "warn", "memory": "268435456", "lease-max-fraction": "0.5",
    "lease-ttl-ms": "1234", "active-expire-hz": "20", "offload-wait-ms": "100", "dirty-max-fraction": "0.25",
    "promotion-threshold": "3", "promotion-max-inflight": "16",
    "slowlog-log-slower-than": "0", "slowlog-max-len": "7", "requirepass": "s3cret",
}


def config_get(c, key):
    reply = c.execute_command("CONFIG", "GET", key)
    if isinstance(reply, dict):
        return reply[key.encode()].decode()
    return reply[1].decode()


def test_immutable_keys_are_refused_with_redis_text(tierkv_server):
    c = tierkv_server.client()
    for key in IMMUTABLE:
        before = config_get(c, key)
        got = reply_of(c, "CONFIG", "SET", key, before)
        assert got == ("error", f"CONFIG SET failed (possibly related to argument '{key}') - "
                                "can't set immutable config"), (key, got)
        assert config_get(c, key) == before, key
    # All or nothing: a settable key next to an immutable one is not applied.
    timeout = config_get(c, "timeout")
    assert reply_of(c, "CONFIG", "SET", "timeout", "77", "port", "1")[0] == "error"
    assert config_get(c, "timeout") == timeout
    c.close()


def test_immutable_key_error_matches_redis(pair):
    pair.same("CONFIG", "SET", "io-threads", "2")
    pair.same("CONFIG", "SET", "unixsocket", "/tmp/x.sock")


def test_requirepass_set_later_keeps_connected_clients_authenticated(pair, tierkv_server,
                                                                     redis_server):
    try:
        pair.same("CONFIG", "SET", "requirepass", "s3cret")
        pair.same("PING")  # connected before the password: still the default user
        pair.same("SET", "k", "v")
    finally:
        for server in (tierkv_server, redis_server):  # the shared servers go back to no password
            c = server.client(password="s3cret")
            c.execute_command("CONFIG", "SET", "requirepass", "")
            c.close()


def test_protected_mode_get_and_set_match_redis(pair):
    pair.same("CONFIG", "GET", "protected-mode")
    try:
        pair.same("CONFIG", "SET", "protected-mode", "no")
        pair.same("CONFIG", "GET", "protected-mode")
    finally:
        pair.both("CONFIG", "SET", "protected-mode", "yes")
    pair.same("CONFIG", "GET", "protected-mode")


def test_every_settable_key_is_set(make_tierkv):
    s = make_tierkv("--flash-size", "0")
    c = s.client()
    for key, value in SETTABLE.items():
        assert config_get(c, key) != value, f"{key}: pick a value that is not the default"
        assert c.execute_command("CONFIG", "SET", key, value) in (b"OK", True), key
        assert config_get(c, key) == value, key
    # Refused values name the key and change nothing.
    for key, bad in (("active-expire-hz", "501"), ("lease-ttl-ms", "0"),
                     ("lease-max-fraction", "1.5"), ("dirty-max-fraction", "-0.1"),
                     ("protected-mode", "maybe"),
                     ("log-level", "loud"), ("metrics-max-clients", "0"),
                     ("slowlog-log-slower-than", "-2"), ("slowlog-max-len", "-1")):
        before = config_get(c, key)
        got = reply_of(c, "CONFIG", "SET", key, bad)
        assert got[0] == "error" and f"'{key}'" in got[1], (key, got)
        assert config_get(c, key) == before, key
    c.close()


def dbsize_stays(c, n, seconds):
    """True if DBSIZE (which does not expire anything) stays >= n that long."""
    deadline = time.time() + seconds
    while time.time() < deadline:
        if c.dbsize() < n:
            return False
        time.sleep(0.05)
    return True


def expire_batch(c, prefix, n=200, ttl_ms=100):
    """n keys with a short TTL, plus a sentinel with the same TTL that the
    test reads (lazy expiry) to know when the TTL has passed."""
    pipe = c.pipeline(transaction=False)
    for i in range(n):
        pipe.set(f"{prefix}{i}", "v", px=ttl_ms)
    pipe.set(f"{prefix}sentinel", "v", px=ttl_ms)
    pipe.execute()
    assert wait_until(lambda: c.exists(f"{prefix}sentinel") == 0, 5)


def test_active_expire_hz_applies_at_run_time(make_tierkv):
    s = make_tierkv("--flash-size", "0", "--active-expire-hz", "0")
    c = s.client()
    expire_batch(c, "a")
    # Lazy only: expired keys nobody reads stay counted.
    assert dbsize_stays(c, 200, 1.0), c.dbsize()
    c.execute_command("CONFIG", "SET", "active-expire-hz", "50")
    assert wait_until(lambda: c.dbsize() == 0, 5), c.dbsize()
    expired = int(c.info("stats")["expired_keys"])
    assert expired >= 201, expired
    # And back off again: the thread stops reaping.
    c.execute_command("CONFIG", "SET", "active-expire-hz", "0")
    expire_batch(c, "b")
    assert dbsize_stays(c, 200, 1.0), c.dbsize()
    c.close()


def spill(c, mib, prefix):
    """Writes `mib` MiB of 1 MiB values, pushing older data out to flash."""
    rng = random.Random(7)
    block = rng.randbytes(MIB)
    pipe = c.pipeline(transaction=False)
    for i in range(mib):
        pipe.set(f"{prefix}{i}", block)
    assert all(r is True for r in pipe.execute())


def fetch_without_reading(c, key):
    """GETRANGE with negative indexes reads the whole value, so a flash-only
    key is fetched into memory and leased for lease-ttl-ms first; its empty
    answer (start after end) then comes from the arguments, so the lease is
    not consumed. A fetch never waits for room in memory: if it found none,
    try again."""

    def fetched():
        assert c.execute_command("GETRANGE", key, -1, -2) == b""
        return residencies(c, key) == ["both"]

    assert wait_until(fetched, 10, 0.1), tier_stat(c, key)


def leased(c, key):
    stat = tier_stat(c, key)
    return [bool(ch["leased"]) for ch in stat["chunk_residency"]]


def test_lease_ttl_and_fraction_apply_at_run_time(flash_servers):
    s = flash_servers(memory="32mb", extra=("--region-size", "16mb", "--flash-preallocate", "no",
                                            "--lease-ttl-ms", "600000")).start()
    c = s.client()
    keys = ["long1", "short", "long2", "capped"]
    for k in keys:
        c.set(k, b"L" * MIB)
    spill(c, 96, "push")
    assert wait_until(lambda: all(residencies(c, k) == ["flash"] for k in keys), 20), \
        {k: tier_stat(c, k) for k in keys}
    c.delete(*[f"push{i}" for i in range(96)])  # room in memory for the fetches

    fetch_without_reading(c, "long1")
    assert leased(c, "long1") == [True]

    c.execute_command("CONFIG", "SET", "lease-ttl-ms", "1")
    fetch_without_reading(c, "short")
    # A 1 ms lease lapses at once; the active expiry cycle retires it.
    assert wait_until(lambda: leased(c, "short") == [False], 5), tier_stat(c, "short")
    assert leased(c, "long1") == [True], "an earlier lease keeps its own length"

    c.execute_command("CONFIG", "SET", "lease-ttl-ms", "600000")
    fetch_without_reading(c, "long2")
    assert not wait_until(lambda: leased(c, "long2") != [True], 1), tier_stat(c, "long2")

    # No share of memory for leases: the object is fetched, but not leased.
    c.execute_command("CONFIG", "SET", "lease-max-fraction", "0")
    fetch_without_reading(c, "capped")
    assert leased(c, "capped") == [False]
    assert leased(c, "long2") == [True]
    assert c.get("capped") == b"L" * MIB
    c.close()


def test_promotion_threshold_applies_at_run_time(flash_servers):
    s = flash_servers(memory="32mb", extra=("--region-size", "16mb",
                                            "--flash-preallocate", "no")).start()
    c = s.client()
    # (offload-wait-ms stays long: the spill below waits for flash, and a
    # loaded machine made 50 ms answer -OOM.)
    for key, value in (("promotion-max-inflight", "4"), ("offload-wait-ms", "20000")):
        c.execute_command("CONFIG", "SET", key, value)
        assert config_get(c, key) == value
    c.execute_command("CONFIG", "SET", "promotion-threshold", "255")
    c.set("hot", b"h" * MIB)
    spill(c, 64, "push")
    assert wait_until(lambda: residencies(c, "hot") == ["flash"], 20), tier_stat(c, "hot")
    # Far below 255 hits (the default, 2, would have promoted): stays on flash.
    for _ in range(6):
        assert c.get("hot") == b"h" * MIB
        assert not wait_until(lambda: residencies(c, "hot") != ["flash"], 0.3), \
            tier_stat(c, "hot")
    # Threshold 1: the next hits promote. A promotion never waits for room,
    # so one may fail while memory is all dirty; each GET tries again.
    c.execute_command("CONFIG", "SET", "promotion-threshold", "1")

    def promoted():
        assert c.get("hot") == b"h" * MIB
        return residencies(c, "hot") == ["both"]

    assert wait_until(promoted, 10, 0.2), tier_stat(c, "hot")
    c.close()


def test_unknown_key_is_refused(tierkv_server):
    c = tierkv_server.client()
    got = reply_of(c, "CONFIG", "SET", "no-such-key", "1")
    assert got == ("error", "Unknown option or number of arguments for CONFIG SET - "
                            "'no-such-key'"), got
    c.close()


def error_then_closed(port, data):
    c = RawClient(port)
    try:
        c.send(data)
        reply = c.read_reply()
        return reply, c.closed_by_server()
    finally:
        c.close()


def test_network_limits_apply_at_run_time(make_tierkv):
    s = make_tierkv("--flash-size", "0")
    admin = RawClient(s.port)
    for key, value in (("max-inline-len", "1kb"),
                       ("max-object-size", "1mb"), ("proto-max-bulk-len", "1mb"),
                       ("max-key-size", "10")):
        assert admin.call("CONFIG", "SET", key, value) == b"+OK\r\n", key
    # An inline line that has not ended within max-inline-len bytes.
    assert error_then_closed(s.port, b"ECHO " + b"x" * 2000) == (
        b"-ERR Protocol error: too big inline request\r\n", True)
    assert error_then_closed(s.port, b"*2\r\n$4\r\nECHO\r\n$%d\r\n" % ((1 << 20) + 1)) == (
        b"-ERR Protocol error: invalid bulk length\r\n", True)
    reply = admin.call("SET", "k" * 11, "v")
    assert reply.startswith(b"-ERR ") and b"max-key-size" in reply, reply
    assert admin.call("SET", "k" * 10, "v") == b"+OK\r\n"
    # maxclients 1: this admin connection is the one; another is turned away.
    assert admin.call("CONFIG", "SET", "maxclients", "1") == b"+OK\r\n"
    extra = RawClient(s.port)
    assert extra.read_reply() == b"-ERR max number of clients reached\r\n"
    assert extra.closed_by_server()
    extra.close()
    assert admin.call("CONFIG", "SET", "maxclients", "100") == b"+OK\r\n"
    other = RawClient(s.port)
    assert other.call("PING") == b"+PONG\r\n"
    other.close()
    # Last, as CONFIG SET itself has four arguments.
    assert admin.call("CONFIG", "SET", "max-multibulk-args", "3") == b"+OK\r\n"
    assert error_then_closed(s.port, b"*4\r\n") == (
        b"-ERR Protocol error: invalid multibulk length\r\n", True)
    assert admin.call("SET", "a", "b") == b"+OK\r\n"
    admin.close()
