"""Values larger than memory.

Contract: with a flash tier, a SET whose value is larger than
large-value-memory-fraction of the memory budget (a value larger than the
whole budget included) is written straight to flash as it arrives, never
held whole by the server; it answers as Redis does (OK, or nil when NX/XX
fail), and then reads back exactly, whole or by any range, from flash; it
survives a clean restart and kill -9 (it is on the device when SET answers);
a failed or refused one leaves the previous value. Checked side by side
against a real redis-server with the same commands, and against the bytes
sent."""
import random
import threading
import time

import pytest
import redis

from conftest import by_tier, rss_kib
from flash_util import (MIB, execs_torn_while, flash_servers, make_value,  # noqa: F401
                        residencies, tier_stat)

FLAGS = ("--region-size", "16mb", "--flash-preallocate", "no")


def ranges(rng, size, count, chunk=MIB):
    """Seeded ranges, a third of them at chunk boundaries."""
    out = [(0, size - 1), (size - 1, size - 1), (size - 10, size + 100)]
    for i in range(count):
        if i % 3 == 0:
            b = rng.randrange(1, size // chunk + 1) * chunk
            out.append((b - rng.randrange(0, 3), b + rng.randrange(0, 3)))
        else:
            a = rng.randrange(0, size)
            out.append((a, min(size + 5, a + rng.choice([1, 100, 4096, chunk, 3 * chunk + 7]))))
    return out


def check_reads(c, key, value, seed):
    got = c.get(key)
    assert got is not None and len(got) == len(value), f"{key}: {len(got or b'')} bytes"
    assert got == value, f"{key}: bytes differ"
    rng = random.Random(seed)
    for a, b in ranges(rng, len(value), 40):
        assert c.getrange(key, a, b) == value[a:b + 1], f"{key} GETRANGE {a} {b}"
    a = rng.randrange(0, len(value))
    n = rng.randrange(1, 3 * MIB)
    assert c.execute_command("TIER.READ", key, a, n) == value[a:a + n]


def test_set_larger_than_memory_reads_back_every_range_across_restart(flash_servers):
    s = flash_servers(memory="16mb", flash_size="256mb", extra=FLAGS).start()
    c = s.client()
    big = make_value("big", 1, 40 * MIB + 12345)  # 2.5x the memory budget
    half = make_value("half", 2, 9 * MIB)  # above half the budget
    assert c.set("big", big) is True
    set_at = time.monotonic()
    assert c.set("half", half, ex=1000) is True

    def ttl_kept():
        # The deadline SET gave, less the time since (reads and restarts of
        # a loaded machine took over 10 s once), plus a second of slack.
        elapsed_ms = (time.monotonic() - set_at) * 1000
        return 1_000_000 - elapsed_ms - 1000 < c.pttl("half") <= 1_000_000

    for key, value in (("big", big), ("half", half)):
        check_reads(c, key, value, seed=len(value))
        assert tier_stat(c, key)["state"] == b"flash", tier_stat(c, key)
    used = int(s.info("memory")[0]["used_memory"])
    assert used <= 16 * MIB, used
    # A clean restart (snapshot), then kill -9 (scan): both bring back the
    # bytes and the expiry that SET gave after its value.
    s.restart()
    c = s.client()
    check_reads(c, "big", big, seed=7)
    check_reads(c, "half", half, seed=8)
    assert ttl_kept(), c.pttl("half")
    s.kill()
    s.start()
    c = s.client()
    check_reads(c, "big", big, seed=9)
    check_reads(c, "half", half, seed=10)
    assert ttl_kept(), c.pttl("half")
    assert c.pttl("big") == -1


def large_ops(rng, keys, count):
    """Seeded SET family commands on a few keys, values larger or smaller
    than memory; each op is a command tuple."""
    ops = []
    for _ in range(count):
        key = rng.choice(keys)
        size = rng.choice([20 * MIB + rng.randrange(MIB), 9 * MIB, 200_000, 100])
        value = make_value(key, rng.randrange(1000), size)
        kind = rng.random()
        if kind < 0.45:
            ops.append(("SET", key, value))
        elif kind < 0.55:
            ops.append(("SET", key, value, "NX"))
        elif kind < 0.65:
            ops.append(("SET", key, value, "XX"))
        elif kind < 0.75:
            ops.append(("SET", key, value, "EX", str(rng.randrange(100, 1000))))
        elif kind < 0.80:
            ops.append(("SET", key, value, "KEEPTTL"))
        elif kind < 0.85:
            ops.append(("EXPIRE", key, str(rng.randrange(100, 1000))))
        elif kind < 0.88:
            ops.append(("DEL", key))
        elif kind < 0.90:
            ops.append(("RENAME", key, rng.choice(keys)))
        elif kind < 0.92:
            ops.append(("RENAMENX", key, rng.choice(keys)))
        elif kind < 0.94:
            ops.append(("COPY", key, rng.choice(keys), *rng.choice([(), ("REPLACE",)])))
        else:
            ops.append(("SET", key, value, "PX", "0"))  # an error in both
    return ops


def reply(client, *args):
    try:
        return client.execute_command(*args)
    except redis.ResponseError as e:
        return ("error", str(e).split(" ")[0])


def test_large_sets_match_redis_key_by_key(flash_servers, make_redis):
    s = flash_servers(memory="16mb", flash_size="512mb", extra=FLAGS).start()
    r = make_redis().client()
    c = s.client()
    keys = [f"k{i}" for i in range(4)]
    ops = large_ops(random.Random(42), keys, 40)
    for i, op in enumerate(ops):
        want, got = reply(r, *op), reply(c, *op)
        assert got == want, f"op {i} {op[0]} {op[1]} {op[3:]}: tierkv {got!r}, redis {want!r}"
    def compare(c):
        for k in keys:
            assert c.get(k) == r.get(k), f"{k}: value differs from redis"
            t, rt = c.ttl(k), r.ttl(k)
            assert (t < 0) == (rt < 0) and abs(t - rt) <= 2, f"{k}: ttl {t} vs redis {rt}"
    compare(c)
    s.restart()
    compare(s.client())


@pytest.mark.slow
def test_rename_and_copy_of_values_larger_than_memory(flash_servers):
    """RENAME, RENAMENX and COPY of a value larger than memory copy it flash
    to flash: the destination reads back exactly with the source's TTL, the
    server never holds it whole, and it survives kill -9."""
    s = flash_servers(memory="16mb", flash_size="512mb", extra=FLAGS).start()
    c = s.client()
    big = make_value("big", 3, 40 * MIB + 777)
    assert c.set("big", big, px=900_000) is True
    c.set("small", "x")
    assert c.copy("big", "dup") is True
    assert c.copy("big", "small") is False  # no REPLACE: the destination stays
    assert c.get("small") == b"x"
    assert c.rename("big", "moved") is True
    assert c.exists("big") == 0
    assert c.renamenx("dup", "moved") is False
    assert c.copy("dup", "small", replace=True) is True
    assert c.renamenx("small", "fresh") is True
    with pytest.raises(redis.ResponseError, match="no such key"):
        c.rename("big", "other")
    used = int(s.info("memory")[0]["used_memory"])
    assert used <= 16 * MIB, used
    for key in ("moved", "dup", "fresh"):
        check_reads(c, key, big, seed=len(key))
        assert 880_000 < c.pttl(key) <= 900_000, (key, c.pttl(key))
    assert c.exists("small") == 0
    s.kill()
    s.start()
    c = s.client()
    assert c.exists("big", "small") == 0
    for key in ("moved", "dup", "fresh"):
        check_reads(c, key, big, seed=len(key) + 1)
        assert 0 < c.pttl(key) <= 900_000


def test_renames_of_a_flash_value_are_atomic_for_readers(flash_servers):
    """While a value larger than memory is renamed back and forth, a reader's
    EXISTS of both names always finds exactly one, and the value moves whole."""
    s = flash_servers(memory="16mb", flash_size="512mb", extra=FLAGS).start()
    c = s.client()
    value = make_value("a", 5, 12 * MIB + 5)  # past half the budget: flash only
    assert c.set("a", value) is True
    seen = []
    stop = threading.Event()

    def read():
        r = s.client()
        while not stop.is_set() and len(seen) < 200_000:
            seen.append(r.exists("a", "b"))

    reader = threading.Thread(target=read)
    reader.start()
    names = ["a", "b"]
    try:
        for i in range(16):
            assert c.rename(names[i % 2], names[(i + 1) % 2]) is True
    finally:
        stop.set()
        reader.join(timeout=30)
    assert seen and set(seen) == {1}, {n: seen.count(n) for n in set(seen)}
    assert c.exists("b") == 0 and c.get("a") == value


def test_a_large_set_lands_between_commands_never_inside_exec(flash_servers):
    """A SET larger than memory commits on a store worker; it still lands
    between two commands, as every write does: an EXEC that looks at the key
    at its start and at its end sees the same thing."""
    s = flash_servers(memory="16mb", flash_size="512mb", extra=FLAGS).start()
    writer = s.client()
    value = make_value("k", 9, 9 * MIB)  # past half the budget: flash only

    def churn():
        for _ in range(30):
            assert writer.set("k", value) is True
            assert writer.delete("k") == 1

    execs, torn = execs_torn_while(s, "k", churn)
    assert execs > 0
    assert not torn, f"{torn} of {execs} EXECs saw the key appear or vanish inside them"


def test_watch_of_an_absent_key_sees_a_large_set_that_came_and_went(flash_servers):
    """WATCH of an absent key aborts EXEC when another client created the key
    meanwhile, as Redis does, also when the key went again before EXEC and
    the value went straight to flash (a staged put, not a memory write)."""
    s = flash_servers(memory="16mb", flash_size="512mb", extra=FLAGS).start()
    watcher, other = s.client(), s.client()
    value = make_value("k", 3, 9 * MIB)  # past half the budget: flash only
    for round_ in range(3):
        pipe = watcher.pipeline()
        pipe.watch("k")
        assert other.set("k", value) is True
        assert residencies(other, "k") == ["flash"] * 9
        assert other.delete("k") == 1
        pipe.multi()
        pipe.set("k", f"mine{round_}")
        with pytest.raises(redis.WatchError):
            pipe.execute()
        assert watcher.get("k") is None
    # The control: with nothing created meanwhile, the same EXEC commits.
    pipe = watcher.pipeline()
    pipe.watch("k")
    pipe.multi()
    pipe.set("k", "mine")
    assert pipe.execute() == [True]
    assert watcher.get("k") == b"mine"


def test_set_get_of_a_value_larger_than_memory_is_refused_and_keeps_the_old_value(flash_servers):
    s = flash_servers(memory="16mb", extra=FLAGS).start()
    c = s.client()
    c.set("k", b"old")
    with pytest.raises(redis.ResponseError, match="SET GET is not supported"):
        c.set("k", make_value("k", 1, 20 * MIB), get=True)
    assert c.get("k") == b"old"
    # A syntax error after the value: nothing changes, the connection goes on.
    with pytest.raises(redis.ResponseError, match="syntax error"):
        c.execute_command("SET", "k", make_value("k", 2, 20 * MIB), "BOGUS")
    assert c.get("k") == b"old"
    assert c.ping()


def test_a_value_larger_than_flash_fails_and_keeps_the_old_value(flash_servers):
    s = flash_servers(memory="16mb", flash_size="128mb", extra=FLAGS).start()
    c = s.client()
    old = make_value("k", 1, 20 * MIB)
    assert c.set("k", old)
    with pytest.raises(redis.ResponseError, match="larger than the flash tier can hold"):
        c.set("k", make_value("k", 2, 128 * MIB))
    assert c.get("k") == old
    assert c.ping()


@pytest.mark.slow
def test_the_server_never_holds_a_large_value_whole(flash_servers):
    """Reading stops while the value's buffers wait for flash, so the
    server's memory grows by flash's write queue and a few chunks, not by
    the value."""
    s = flash_servers(memory="16mb", flash_size="1gb",
                      extra=FLAGS + ("--flash-write-queue", "16mb")).start()
    c = s.client()
    c.set("warm", make_value("warm", 0, 20 * MIB))  # the pool and buffers exist
    before = rss_kib(s.proc.pid)
    peak = [before]
    done = threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], rss_kib(s.proc.pid))
            time.sleep(0.005)

    t = threading.Thread(target=sample)
    t.start()
    # CI: 120 MiB, still 7x memory and 7x the write queue; torture: 300 MiB.
    size = by_tier(120, 300) * MIB
    value = make_value("huge", 3, size)
    try:
        assert c.set("huge", value)
    finally:
        done.set()
        t.join()
    grew_mib = (peak[0] - before) / 1024
    # Measured 29-60 MiB over ten runs of one build: the 16 MiB write queue,
    # the connection's buffers, and what the allocator's per-thread arenas
    # keep of freed chunk buffers. Holding the value would be its size.
    assert grew_mib < 72, f"RSS grew {grew_mib:.0f} MiB while a {size // MIB} MiB value arrived"
    assert c.strlen("huge") == len(value)
    mid = size // 2
    assert c.getrange("huge", mid, mid + 99) == value[mid:mid + 100]


def test_concurrent_large_sets_and_readers(flash_servers):
    s = flash_servers(memory="32mb", flash_size="1gb", extra=FLAGS).start()
    versions = {f"k{i}": [make_value(f"k{i}", v, 20 * MIB + v) for v in range(3)]
                for i in range(3)}
    errors = []

    def writer(key):
        c = s.client()
        try:
            for v in versions[key]:
                if c.set(key, v) is not True:
                    errors.append(f"{key}: SET did not answer OK")
        except redis.RedisError as e:
            errors.append(f"{key}: SET failed: {e}")

    def reader():
        c = s.client()
        deadline = time.time() + 60
        try:
            while time.time() < deadline and any(t.is_alive() for t in writers):
                for key in versions:
                    got = c.get(key)
                    if got is not None and got not in versions[key]:
                        errors.append(f"{key}: a read saw bytes of no version ({len(got)} bytes)")
        except redis.RedisError as e:
            errors.append(f"GET failed: {e}")

    writers = [threading.Thread(target=writer, args=(k,)) for k in versions]
    readers = [threading.Thread(target=reader) for _ in range(2)]
    for t in writers + readers:
        t.start()
    for t in writers + readers:
        t.join(120)
    assert not errors, f"{errors[:3]}\n{s.log_tail()}"
    c = s.client()
    for key, vs in versions.items():
        assert c.get(key) == vs[-1], key


def test_many_large_sets_at_once_share_flash_write_buffer(flash_servers):
    """flash-write-buffer caps the buffers of all values arriving at once:
    with room for two chunks, six clients sending large values together all
    get OK and read back exactly; the ones without a buffer wait (counted in
    INFO), the bytes held never pass the cap, and all of it is given back.
    The cap is set at run time (CONFIG SET), and a value below chunk-size is
    refused."""
    s = flash_servers(memory="16mb", flash_size="1gb", extra=FLAGS).start()
    c = s.client()
    with pytest.raises(redis.ResponseError, match="flash-write-buffer"):
        c.config_set("flash-write-buffer", str(MIB // 2))
    assert c.config_set("flash-write-buffer", str(2 * MIB))
    assert int(s.info("flash")[0]["flash_write_buffer_limit"]) == 2 * MIB
    values = {f"w{i}": make_value(f"w{i}", i, 12 * MIB + 1000 * i) for i in range(6)}
    errors, most = [], [0]
    done = threading.Event()

    def sample():
        probe = s.client()
        while not done.is_set():
            most[0] = max(most[0], int(probe.info("flash")["flash_write_buffer_used"]))
            time.sleep(0.001)

    def writer(key):
        try:
            if s.client().set(key, values[key]) is not True:
                errors.append(f"{key}: SET did not answer OK")
        except redis.RedisError as e:
            errors.append(f"{key}: {e}")

    sampler = threading.Thread(target=sample)
    sampler.start()
    writers = [threading.Thread(target=writer, args=(k,)) for k in values]
    for t in writers:
        t.start()
    for t in writers:
        t.join(120)
    done.set()
    sampler.join()
    assert not errors, f"{errors[:3]}\n{s.log_tail()}"
    flash = s.info("flash")[0]
    assert int(flash["flash_write_buffer_waits"]) > 0, flash
    assert int(flash["flash_write_buffer_used"]) == 0, flash
    # Even the value bytes read with the command wait for a buffer.
    assert most[0] <= 2 * MIB, most[0]
    for key, value in values.items():
        assert c.get(key) == value, key
