"""Readahead of sequential ranged reads over the wire: TIER.READ and GETRANGE
of consecutive ranges of one flash object are detected and read ahead.
Seeded mixes of sequential runs and jumps are compared byte for byte with a
Python reference while the INFO # Stream readahead counters move (and agree
with /metrics); overwrite and DEL mid-sequence serve one version; the knobs
are settable with CONFIG SET."""
import random
import time

from flash_util import (KIB, MIB, flash_servers, make_value, num, residencies,  # noqa: F401
                        wait_until)

CHUNK = 64 * KIB
SIZE = 6 * MIB + 12345


def start(flash_servers, *extra):
    # No promotion: a value read from flash stays there.
    return flash_servers(memory="8mb", flash_size="128mb",
                         extra=["--chunk-size", "64k", "--region-size", "1mb",
                                "--eviction-policy", "lru", "--dirty-max-fraction", "1",
                                "--promotion-on-hit", "no", *extra]).start()


def ra_info(s):
    fields = s.info("stream")[0]
    names = ["sequences", "reads", "hits", "late", "wasted"]
    return {n: num(fields, f"stream_readahead_{n}") for n in names}


def put_big(c, key, seed):
    """`key` on flash only, and memory free again (look-ahead is charged to
    memory's use-once lane, which never evicts anything to make room)."""
    ref = make_value(key, seed, SIZE)
    c.set(key, ref)
    fill = 0
    while set(residencies(c, key)) != {"flash"}:
        assert fill < 2000, residencies(c, key)
        c.set(f"fill:{fill}", b"f" * CHUNK)
        fill += 1
    for i in range(fill):
        c.delete(f"fill:{i}")
    return ref


def read(c, key, off, length, rng):
    """TIER.READ or the same range by GETRANGE (inclusive end)."""
    if rng.random() < 0.3:
        return c.getrange(key, off, off + length - 1)
    return c.execute_command("TIER.READ", key, off, length)


def test_sequential_reads_are_read_ahead_and_match_the_reference(flash_servers):
    s = start(flash_servers)
    c = s.client()
    ref = put_big(c, "big", 1)
    for seed in (1, 2, 3):
        rng = random.Random(20261201 + seed)
        before = ra_info(s)
        off, reads, jumps = 0, 0, 0
        while reads < 400:
            if rng.random() < 0.05:  # a jump: the look-ahead ends
                off = rng.randrange(SIZE)
                jumps += 1
            length = rng.randrange(1, 3 * CHUNK)
            got = read(c, "big", off, length, rng)
            assert got == ref[off:off + length], (seed, off, length)
            off = off + len(got) if off + len(got) < SIZE else 0
            reads += 1
        after = ra_info(s)
        moved = {k: after[k] - before[k] for k in after}
        served = moved["hits"] + moved["late"]
        assert moved["sequences"] >= 1, moved
        assert moved["reads"] > 0 and served > reads / 2, moved
        assert moved["reads"] <= SIZE // CHUNK * (moved["sequences"] + 1), moved
        if jumps:
            assert moved["wasted"] > 0, moved
    # /metrics reads the same registry as INFO.
    info = ra_info(s)
    metrics = {x.split()[0]: float(x.split()[1]) for x in s.metrics().splitlines()
               if x.startswith("tierkv_stream_readahead_")}
    for n, v in info.items():
        assert metrics[f"tierkv_stream_readahead_{n}_total"] == v, (n, metrics)
    assert set(residencies(c, "big")) == {"flash"}
    # The lane gives back what it was charged once the bytes are sent and
    # the look-ahead ended (here: by a read of another key).
    c.set("other", b"x")
    c.execute_command("TIER.READ", "other", 0, 10)
    deadline = time.time() + 5
    while num(s.info("stream")[0], "stream_lane_bytes") != 0:
        assert time.time() < deadline, s.info("stream")[0]
        time.sleep(0.01)


def test_a_whole_sequence_reads_each_chunk_once_and_never_past_the_end(flash_servers):
    s = start(flash_servers)
    c = s.client()
    ref = put_big(c, "big", 2)
    before = ra_info(s)
    got = []
    for off in range(0, SIZE, CHUNK):
        got.append(c.execute_command("TIER.READ", "big", off, CHUNK))
    assert b"".join(got) == ref
    assert c.execute_command("TIER.READ", "big", SIZE, CHUNK) == b""
    moved = {k: v - before[k] for k, v in ra_info(s).items()}
    chunks = (SIZE + CHUNK - 1) // CHUNK
    # Every chunk after the second read, once each, none past the end, and
    # every read after the second served from them.
    assert moved == {"sequences": 1, "reads": chunks - 2, "hits": moved["hits"],
                     "late": chunks - 2 - moved["hits"], "wasted": 0}, moved


def test_overwrite_and_del_mid_sequence_serve_one_version(flash_servers):
    s = start(flash_servers)
    c = s.client()
    old = put_big(c, "k", 3)
    for i in range(4):
        assert c.execute_command("TIER.READ", "k", i * CHUNK, CHUNK) == old[i * CHUNK:(i + 1) * CHUNK]
    time.sleep(0.1)  # read ahead
    before = ra_info(s)
    new = make_value("k", 4, SIZE)
    c.set("k", new)
    assert c.execute_command("TIER.READ", "k", 4 * CHUNK, CHUNK) == new[4 * CHUNK:5 * CHUNK]
    assert ra_info(s)["wasted"] > before["wasted"]
    c.delete("k")
    assert c.execute_command("TIER.READ", "k", 5 * CHUNK, CHUNK) is None


def test_readahead_knobs_are_settable(flash_servers):
    s = start(flash_servers)
    c = s.client()
    ref = put_big(c, "big", 5)
    assert c.config_get("readahead") == {"readahead": "yes"}
    assert c.config_get("readahead-max-chunks") == {"readahead-max-chunks": "16"}
    assert c.config_set("readahead", "no")
    before = ra_info(s)
    for i in range(10):
        assert c.execute_command("TIER.READ", "big", i * CHUNK, CHUNK) == ref[i * CHUNK:(i + 1) * CHUNK]
    assert ra_info(s) == before
    assert c.config_set("readahead", "yes")
    assert c.config_set("readahead-max-chunks", "2")
    for i in range(10, 20):
        assert c.execute_command("TIER.READ", "big", i * CHUNK, CHUNK) == ref[i * CHUNK:(i + 1) * CHUNK]
    def moved():
        return {k: v - before[k] for k, v in ra_info(s).items()}
    # The window is refilled after the reply that used it: the last look-ahead
    # read may be issued just after the last TIER.READ returned.
    assert wait_until(lambda: moved()["reads"] >= 10, 5), moved()
    m = moved()
    assert m["sequences"] == 1 and m["hits"] + m["late"] == 8, m
    assert m["reads"] == 10, m  # chunks 12..21: a window of 2 past chunk 19
