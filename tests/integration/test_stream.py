"""TIER.READ and TIER.STREAM over the wire: ranged reads at chunk boundaries
from either tier against a Python reference, look-ahead in order, stopped by
RESET and by out-of-order reads, keys changed mid-stream, use-once scans
beside a hot set, and bad input. (TIER.* has no redis counterpart; GETRANGE
stays identical to redis in test_strings.py.)"""
import random
import time

import pytest
import redis

from flash_util import KIB, MIB, flash_servers, make_value, num, push_out, residencies, tier_stat  # noqa: F401

CHUNK = 64 * KIB


def start(flash_servers, *extra):
    return flash_servers(memory="4mb", flash_size="128mb",
                         extra=["--chunk-size", "64k", "--region-size", "1mb",
                                "--eviction-policy", "lru", "--dirty-max-fraction", "1",
                                *extra]).start()


def stream_info(s):
    fields = s.info("stream")[0]
    return {k: num(fields, k) for k in fields}


def test_tier_read_ranges_match_the_reference_in_both_tiers(flash_servers):
    s = start(flash_servers)
    c = s.client()
    sizes = [1, CHUNK - 1, CHUNK, CHUNK + 1, 3 * CHUNK + 5]
    values = {}
    for i, size in enumerate(sizes):
        values[f"f{i}"] = make_value(f"f{i}", 1, size)
        c.set(f"f{i}", values[f"f{i}"])
    # The filler goes: the m* values must fit in memory beside nothing, or a
    # slow flash writer leaves the filler dirty and evicts them instead.
    c.delete(*push_out(c, list(values), size=CHUNK))
    for i, size in enumerate(sizes):  # written after: these stay in memory
        values[f"m{i}"] = make_value(f"m{i}", 2, size)
        c.set(f"m{i}", values[f"m{i}"])
    assert set(residencies(c, "m4")) == {"memory"}
    rng = random.Random(20261201)

    def near_boundary():
        return max(rng.randrange(5) * CHUNK + rng.randrange(3) - 1, 0)

    for _ in range(300):
        key = rng.choice(sorted(values))
        ref = values[key]
        off, length = near_boundary(), near_boundary()
        args = ["TIER.READ", key, off, length] + (["USEONCE"] if rng.random() < 0.5 else [])
        assert c.execute_command(*args) == ref[off:off + length], (key, off, length)
        # GETRANGE's end is inclusive; only non-negative indexes are compared here.
        end = off + max(length, 1) - 1
        assert c.getrange(key, off, end) == ref[off:end + 1], (key, off, end)
    assert c.execute_command("TIER.READ", "absent", 0, 10) is None


def test_tier_read_bad_input_is_an_error_not_a_crash(flash_servers):
    s = start(flash_servers)
    c = s.client()
    c.set("k", b"value")
    bad = [("TIER.READ", "k"), ("TIER.READ", "k", "0"), ("TIER.READ", "k", "-1", "3"),
           ("TIER.READ", "k", "0", "-3"), ("TIER.READ", "k", "x", "3"),
           ("TIER.READ", "k", "0", "3", "NOPE"), ("TIER.READ", "k", "0", "3", "USEONCE", "x"),
           ("TIER.STREAM",), ("TIER.STREAM", "k", "DEPTH", "-1"),
           ("TIER.STREAM", "k", "DEPTH", "x"), ("TIER.STREAM", "k", "CHANNELS", "0"),
           ("TIER.STREAM", "k", "DEPTH", "99999")]
    for args in bad:
        with pytest.raises(redis.ResponseError) as e:
            c.execute_command(*args)
        assert str(e.value).startswith(("wrong number", "value is not", "offset", "length",
                                        "syntax", "DEPTH", "CHANNELS")), (args, str(e.value))
    assert c.execute_command("TIER.READ", "k", 1, 3) == b"alu"
    assert c.execute_command("TIER.READ", "k", 99, 3) == b""


def test_stream_serves_keys_in_order_from_look_ahead(flash_servers):
    s = start(flash_servers)
    c = s.client()
    keys = [f"tile:{i}" for i in range(40)]
    for k in keys:
        c.set(k, make_value(k, 3, CHUNK + 100))
    push_out(c, keys, size=CHUNK)
    before = stream_info(s)
    assert c.execute_command("TIER.STREAM", *keys, "DEPTH", 4, "CHANNELS", 2, "USEONCE") == 40
    for k in keys:
        assert c.get(k) == make_value(k, 3, CHUNK + 100), k
    after = stream_info(s)
    issued = after["stream_lookahead_reads"] - before["stream_lookahead_reads"]
    served = (after["stream_lookahead_hits"] - before["stream_lookahead_hits"] +
              after["stream_late"] - before["stream_late"])
    wasted = after["stream_wasted"] - before["stream_wasted"]
    assert 0 < issued <= len(keys)  # never past the last key
    assert served + wasted == issued and wasted <= 2
    # /metrics reads the same registry as INFO.
    metrics = s.metrics()
    line = next(x for x in metrics.splitlines()
                if x.startswith("tierkv_stream_lookahead_reads_total "))
    assert float(line.split()[1]) == after["stream_lookahead_reads"]
    # Use-once: nothing was kept in memory.
    assert all(set(residencies(c, k)) == {"flash"} for k in keys)
    # The lane gives back what it was charged once the bytes are sent.
    deadline = time.time() + 5
    while stream_info(s)["stream_lane_bytes"] != 0:
        assert time.time() < deadline, stream_info(s)
        time.sleep(0.01)


def test_reset_and_out_of_order_reads_end_the_look_ahead(flash_servers):
    s = start(flash_servers)
    c = s.client()
    keys = [f"tile:{i}" for i in range(20)]
    for k in keys:
        c.set(k, make_value(k, 4, 1000))
    push_out(c, keys, size=CHUNK)
    base = stream_info(s)
    c.execute_command("TIER.STREAM", *keys, "DEPTH", 4, "CHANNELS", 4)
    deadline = time.time() + 5
    while stream_info(s)["stream_lookahead_reads"] - base["stream_lookahead_reads"] < 4:
        assert time.time() < deadline
        time.sleep(0.01)
    assert c.get(keys[0]) == make_value(keys[0], 4, 1000)
    assert c.get(keys[10]) == make_value(keys[10], 4, 1000)  # out of order
    mid = stream_info(s)
    assert mid["stream_wasted"] - base["stream_wasted"] >= 3
    time.sleep(0.1)
    assert stream_info(s)["stream_lookahead_reads"] == mid["stream_lookahead_reads"]
    # A new stream, then RESET: dropped unread.
    c.execute_command("TIER.STREAM", *keys[12:], "DEPTH", 3)
    while stream_info(s)["stream_lookahead_reads"] - mid["stream_lookahead_reads"] < 3:
        assert time.time() < deadline + 5
        time.sleep(0.01)
    assert c.execute_command("TIER.STREAM", "RESET") == b"OK"
    end = stream_info(s)
    assert end["stream_wasted"] - mid["stream_wasted"] == 3
    assert c.get(keys[12]) == make_value(keys[12], 4, 1000)


def test_del_and_overwrite_mid_stream_serve_one_version(flash_servers):
    s = start(flash_servers)
    c = s.client()
    keys = [f"tile:{i}" for i in range(10)]
    for k in keys:
        c.set(k, make_value(k, 5, 2 * CHUNK + 9))
    push_out(c, keys, size=CHUNK)
    c.execute_command("TIER.STREAM", *keys, "DEPTH", 10, "CHANNELS", 10)
    time.sleep(0.2)  # everything read ahead
    c.delete(keys[3])
    c.set(keys[6], b"new")
    for i, k in enumerate(keys):
        want = None if i == 3 else b"new" if i == 6 else make_value(k, 5, 2 * CHUNK + 9)
        assert c.get(k) == want, k


def test_use_once_scan_never_evicts_the_hot_set(flash_servers):
    s = start(flash_servers, "--promotion-threshold", "1")
    c = s.client()
    scan = [f"scan:{i}" for i in range(100)]
    for k in scan:
        c.set(k, make_value(k, 6, CHUNK))
    c.delete(*push_out(c, scan, size=CHUNK))  # memory is empty again
    hot = [f"hot:{i}" for i in range(16)]  # 1 MiB of a 4 MiB memory
    for k in hot:
        c.set(k, make_value(k, 7, CHUNK))
    assert all(set(residencies(c, k)) == {"memory"} for k in hot)
    for _ in range(2):
        c.execute_command("TIER.STREAM", *scan, "DEPTH", 8, "USEONCE")
        for k in scan:
            assert c.get(k) == make_value(k, 6, CHUNK)
        for k in scan[::7]:
            assert c.execute_command("TIER.READ", k, 0, CHUNK, "USEONCE") == make_value(k, 6, CHUNK)
    resident = sum(1 for k in hot if set(residencies(c, k)) == {"memory"})
    assert resident == len(hot)
    assert sum(1 for k in scan if "memory" in residencies(c, k)) == 0
    assert stream_info(s)["stream_useonce_dropped_chunks"] >= len(scan)
    assert tier_stat(c, hot[0])["size"] == CHUNK
