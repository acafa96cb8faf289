"""Prefetch on exist over the wire (docs/prefetch.md).

The contract: a probe answers exactly as EXISTS, from the indexes alone; with
PREFETCH (or plain EXISTS under exists-prefetch / exists-prefetch-map) each
flash-only key it names is promoted in the background, leased until its
first read, so the GET that follows is served from memory; plain EXISTS
with both settings off never promotes anything; one key is never promoted
twice at once whatever mix of probes, demand kicks and GETs asks; leased
bytes stay under lease-max-fraction; memory full of dirty data makes a
prefetch fail for room, start a cooldown and stop the next batch early;
every outcome is an INFO # Prefetch field and a /metrics series."""
import random
import socket
import threading

import pytest

from conftest import encode_command
from flash_util import MIB, flash_servers, num, push_out, tier_stat, wait_until  # noqa: F401

FLASH = ("--region-size", "16mb", "--flash-preallocate", "no", "--promotion-on-hit", "no")
VALUE = 2 * MIB

PREFETCH_FIELDS = (
    "prefetch_requested", "prefetch_deduplicated", "prefetch_in_memory", "prefetch_absent",
    "prefetch_queued", "prefetch_promoted", "prefetch_promoted_bytes",
    "prefetch_failed_saturated", "prefetch_failed_io", "prefetch_failed_gone",
    "prefetch_failed_busy", "prefetch_dropped", "prefetch_early_exits",
    "prefetch_refused_lease_cap", "prefetch_refused_table_full", "demand_kicks",
    "demand_kicks_promoted", "demand_kicks_failed", "demand_kicks_refused",
    "prefetch_cooldowns", "prefetch_cooldown_ms", "prefetch_cooldown_remaining_ms",
    "prefetch_reads_served", "prefetch_leases_expired_unread", "prefetch_accuracy",
    "prefetch_dedup_entries", "prefetch_reads_attached", "promotion_bytes_adopted",
    "promotion_bytes_copied", "prefetch_skipped_no_window", "prefetch_window_share",
    "prefetch_promotion_us")


def value_of(i, size=VALUE):
    return random.Random(i).randbytes(64) * (size // 64)


def prefetch_info(s):
    fields, titles = s.info("prefetch")
    assert "Prefetch" in titles, titles
    return fields


def in_memory(c, key):
    stat = tier_stat(c, key)
    return stat is not None and all(ch["residency"] != b"flash" for ch in stat["chunk_residency"])


def on_flash_only(c, key):
    """Every chunk of `key` on flash only (not in_memory() means only some)."""
    stat = tier_stat(c, key)
    return stat is not None and all(ch["residency"] == b"flash" for ch in stat["chunk_residency"])


def spill(s, n, prefix="k"):
    """Writes n values, then enough filler that they all go to flash, then
    deletes the filler, so memory has free room and the values are on flash
    only."""
    c = s.client()
    for i in range(n):
        c.set(f"{prefix}{i}", value_of(i))
    # Eviction visits the index shards in turn, so how much filler pushes a
    # given key out varies: write until every key left memory (bounded).
    filler = 0
    for filler in range(1, 400):
        c.set(f"filler{filler}", value_of(1000 + filler % 97))
        if filler >= 48 and filler % 8 == 0 and all(
                on_flash_only(c, f"{prefix}{i}") for i in range(n)):
            break
    assert wait_until(lambda: num(s.flash_info(), "offloads_inflight") == 0, 20)
    for f in range(1, filler + 1):
        c.delete(f"filler{f}")
    for i in range(n):
        assert on_flash_only(c, f"{prefix}{i}"), f"{prefix}{i} still in memory"
    return c


def test_plain_exists_never_promotes(flash_servers):
    s = flash_servers(memory="64mb", extra=FLASH).start()
    c = spill(s, 6)
    before = num(s.flash_info(), "promotions_attempted")
    for _ in range(10):
        assert c.exists(*[f"k{i}" for i in range(6)], "nope") == 6
        assert c.execute_command("TIER.EXISTS", "k0", "k1") == 2  # no PREFETCH: no prefetch
    assert all(not in_memory(c, f"k{i}") for i in range(6))
    assert num(s.flash_info(), "promotions_attempted") == before
    assert num(prefetch_info(s), "prefetch_requested") == 0


def test_tier_exists_prefetch_then_get_is_served_from_memory(flash_servers):
    s = flash_servers(memory="64mb", extra=FLASH).start()
    c = spill(s, 4)
    keys = [f"k{i}" for i in range(4)]
    assert c.execute_command("TIER.EXISTS", *keys, "absent", "PREFETCH") == 4
    assert wait_until(lambda: all(in_memory(c, k) for k in keys), 10), \
        [tier_stat(c, k) for k in keys]
    stat = tier_stat(c, "k0")
    assert all(ch["leased"] == 1 for ch in stat["chunk_residency"]), stat
    hits = num(s.flash_info(), "flash_hits")
    for i, k in enumerate(keys):
        assert c.get(k) == value_of(i)
    assert num(s.flash_info(), "flash_hits") == hits, "a GET after the prefetch went to flash"
    assert all(ch["leased"] == 0 for ch in tier_stat(c, "k0")["chunk_residency"])
    p = prefetch_info(s)
    assert num(p, "prefetch_requested") == 5
    assert num(p, "prefetch_absent") == 1
    assert num(p, "prefetch_queued") == 4
    assert num(p, "prefetch_promoted") == 4
    assert num(p, "prefetch_promoted_bytes") == 4 * VALUE
    assert num(p, "prefetch_reads_served") == 4
    assert num(p, "prefetch_accuracy") == 1.0
    assert num(p, "prefetch_dedup_entries") == 0  # promoted keys leave the table
    # The same probe again: the keys are in memory now.
    c.execute_command("TIER.EXISTS", *keys, "PREFETCH")
    assert num(prefetch_info(s), "prefetch_in_memory") == 4
    metrics = s.metrics()
    assert "tierkv_prefetch_promoted_total 4" in metrics
    assert "tierkv_prefetch_reads_served 4" in metrics


def test_tier_exists_prefix_counts_the_leading_run_and_prefetches_only_it(flash_servers):
    """TIER.EXISTS ... PREFIX [PREFETCH] is LMCache's chunk-by-chunk lookup
    in one round trip: the length of the leading run of present keys, and
    only that run is prefetched (the chunk after the gap is not read next)."""
    s = flash_servers(memory="64mb", extra=FLASH).start()
    c = spill(s, 4)
    keys = [f"k{i}" for i in range(4)]
    assert c.execute_command("TIER.EXISTS", "k0", "k1", "gap", "k2", "PREFIX") == 2
    assert c.execute_command("TIER.EXISTS", "gap", "k0", "PREFIX") == 0
    assert c.execute_command("TIER.EXISTS", *keys, "PREFIX") == 4
    assert num(prefetch_info(s), "prefetch_requested") == 0  # no PREFETCH: none
    assert c.execute_command("TIER.EXISTS", "k0", "k1", "gap", "k2", "PREFETCH", "PREFIX") == 2
    assert wait_until(lambda: in_memory(c, "k0") and in_memory(c, "k1"), 10)
    p = prefetch_info(s)
    assert num(p, "prefetch_requested") == 2
    assert not in_memory(c, "k2") and not in_memory(c, "k3")
    # A key named like the option is a key when nothing else precedes it.
    assert c.execute_command("TIER.EXISTS", "prefix") == 0


def test_a_get_during_its_prefetch_takes_its_chunks_instead_of_reading_flash_again(flash_servers):
    """A GET that arrives while the key's prefetch is still reading it is
    served from that read (one flash read of each chunk, not two), byte-exact;
    GETs of other keys read flash. A 1 s modelled flash latency keeps the
    prefetch in flight while the GETs come."""
    s = flash_servers(memory="64mb", extra=FLASH + ("--backing-latency-ns", "1000000000")).start()
    c = spill(s, 2)
    chunks = VALUE // MIB
    reads = num(s.flash_info(), "flash_reads")
    assert c.execute_command("TIER.EXISTS", "k0", "PREFETCH") == 1
    results = {}

    def get(name, key):
        results[name] = s.client().get(key)

    threads = [threading.Thread(target=get, args=(n, k))
               for n, k in (("a", "k0"), ("b", "k0"), ("c", "k1"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert results == {"a": value_of(0), "b": value_of(0), "c": value_of(1)}
    p = prefetch_info(s)
    assert num(p, "prefetch_reads_attached") == 2, p
    assert wait_until(lambda: num(prefetch_info(s), "prefetch_promoted") == 1, 10), prefetch_info(s)
    # k0: the prefetch's read only; k1 (nothing in flight): its GET's own.
    assert num(s.flash_info(), "flash_reads") - reads == 2 * chunks, s.flash_info()
    assert in_memory(c, "k0")
    p = prefetch_info(s)
    assert num(p, "prefetch_reads_served") == 1, p  # the attached GET was its first read
    assert num(p, "promotion_bytes_adopted") == VALUE, p
    assert num(p, "promotion_bytes_copied") == 0, p
    # In memory now: a GET reads nothing and attaches to nothing.
    assert c.get("k0") == value_of(0)
    assert num(prefetch_info(s), "prefetch_reads_attached") == 2


def test_a_client_that_closes_while_attached_leaves_the_prefetch_to_finish(flash_servers):
    """A GET attached to its key's prefetch whose client goes away ends
    alone: the prefetch still installs the value, nothing is read twice, and
    the next GET is served from memory, byte-exact. Each device read takes
    1 s (the most backing-latency-ns allows), so that the GET reaches the
    prefetch while it reads on a loaded machine (at 0.5 s it came after the
    install once in ten runs beside two busy loops)."""
    s = flash_servers(memory="64mb", extra=FLASH + ("--backing-latency-ns", "1000000000")).start()
    c = spill(s, 1)
    reads = num(s.flash_info(), "flash_reads")
    assert c.execute_command("TIER.EXISTS", "k0", "PREFETCH") == 1
    # The prefetch is queued to a worker: the GET attaches only once its read
    # is in flight (holding read buffers), which a loaded machine delays.
    assert wait_until(lambda: num(s.flash_info(), "flash_read_buffer_used") > 0, 10), \
        str((prefetch_info(s), s.flash_info()))
    quitter = socket.create_connection(("127.0.0.1", s.port), timeout=30)
    quitter.sendall(encode_command("GET", "k0"))
    assert wait_until(lambda: num(prefetch_info(s), "prefetch_reads_attached") == 1, 10), \
        str((prefetch_info(s), s.flash_info()))
    quitter.close()
    assert wait_until(lambda: num(prefetch_info(s), "prefetch_promoted") == 1, 30), \
        str((prefetch_info(s), s.flash_info()))
    assert c.get("k0") == value_of(0)
    assert in_memory(c, "k0")
    assert num(s.flash_info(), "flash_reads") - reads == VALUE // MIB
    assert s.alive()


def test_exists_prefetch_and_the_companion_map(flash_servers):
    s = flash_servers(memory="64mb", extra=FLASH).start()
    c = s.client()
    for i in range(3):
        c.set(f"chunk{i}metadata", b"meta")
        c.set(f"{{chunk{i}}}:metadata", b"meta")
        c.set(f"chunk{i}kv_bytes", value_of(i))
        c.set(f"{{chunk{i}}}:kv_bytes", value_of(10 + i))
    spill(s, 0)
    assert not in_memory(c, "chunk0kv_bytes")
    # The map alone (exists-prefetch stays no).
    c.config_set("exists-prefetch-map", "metadata=kv_bytes")
    assert c.config_get("exists-prefetch-map") == {"exists-prefetch-map": "metadata=kv_bytes"}
    assert c.exists("chunk0metadata") == 1
    assert c.exists("{chunk1}:metadata") == 1
    assert wait_until(lambda: in_memory(c, "chunk0kv_bytes"), 10)
    assert wait_until(lambda: in_memory(c, "{chunk1}:kv_bytes"), 10)
    assert not in_memory(c, "chunk2kv_bytes"), "a chunk nobody probed was prefetched"
    assert c.get("chunk0kv_bytes") == value_of(0)
    # exists-prefetch: plain EXISTS prefetches the probed key itself.
    c.config_set("exists-prefetch-map", "")
    c.config_set("exists-prefetch", "yes")
    assert c.exists("chunk2kv_bytes") == 1
    assert wait_until(lambda: in_memory(c, "chunk2kv_bytes"), 10)
    with pytest.raises(Exception, match="exists-prefetch-map"):
        c.config_set("exists-prefetch-map", "=kv_bytes")


def test_exists_answers_match_redis_with_prefetch_on(flash_servers, redis_server):
    s = flash_servers(memory="64mb", extra=FLASH + ("--exists-prefetch", "yes")).start()
    ours, theirs = s.client(), redis_server.client()
    theirs.flushall()
    rng = random.Random(7)
    for i in range(30):
        if rng.random() < 0.6:
            ours.set(f"e{i}", b"v" * rng.choice([10, 300_000]))
            theirs.set(f"e{i}", b"v")
    for _ in range(50):
        keys = [f"e{rng.randrange(40)}" for _ in range(rng.randrange(1, 8))]
        assert ours.exists(*keys) == theirs.exists(*keys), keys
    theirs.flushall()


def test_no_double_promotion_under_concurrent_probes_kicks_and_gets(flash_servers):
    s = flash_servers(memory="96mb", extra=FLASH + ("--demand-kick", "yes")).start()
    n = 8
    spill(s, n)
    before = num(s.flash_info(), "promotions_done")
    errors = []

    def worker(seed):
        c = s.client()
        rng = random.Random(seed)
        try:
            for _ in range(40):
                i = rng.randrange(n)
                if rng.random() < 0.5:
                    c.execute_command("TIER.EXISTS", f"k{i}", f"k{(i + 1) % n}", "PREFETCH")
                elif c.get(f"k{i}") != value_of(i):
                    errors.append(f"k{i} wrong value")
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    c = s.client()
    # Memory holds all eight, so a key promoted once stays: more than one
    # promotion of a key would show as more than n promotions done.
    done = num(s.flash_info(), "promotions_done") - before
    assert done <= n, f"{done} promotions of {n} keys"
    assert all(c.get(f"k{i}") == value_of(i) for i in range(n))


def test_leased_bytes_stay_under_the_cap(flash_servers):
    s = flash_servers(memory="64mb", extra=FLASH + ("--lease-max-fraction", "0.1")).start()
    c = spill(s, 10)  # 20 MiB; the cap is 6.4 MiB: three 2 MiB objects
    keys = [f"k{i}" for i in range(10)]
    assert c.execute_command("TIER.EXISTS", *keys, "PREFETCH") == 10
    assert wait_until(lambda: num(prefetch_info(s), "prefetch_promoted")
                      + num(prefetch_info(s), "prefetch_refused_lease_cap") == 10, 10), \
        prefetch_info(s)
    p = prefetch_info(s)
    assert num(p, "prefetch_refused_lease_cap") >= 7, p
    leased = sum(VALUE for k in keys if in_memory(c, k)
                 and all(ch["leased"] for ch in tier_stat(c, k)["chunk_residency"]))
    assert leased <= 0.1 * 64 * MIB


def test_lease_expiry_makes_a_prefetch_evictable_and_counts_it_wasted(flash_servers):
    # 1 GiB of flash: the filler that pushes k0 out must not also reclaim it.
    s = flash_servers(memory="64mb", flash_size="1gb", extra=FLASH + ("--lease-ttl-ms", "200")).start()
    c = spill(s, 1)
    c.execute_command("TIER.EXISTS", "k0", "PREFETCH")
    assert wait_until(lambda: in_memory(c, "k0"), 10)
    # Unread: the active expiry ends the lease once it ran out; then new
    # data can push the copy out.
    assert wait_until(lambda: num(prefetch_info(s), "prefetch_leases_expired_unread") == 1, 10), \
        prefetch_info(s)
    push_out(c, "k0", "late", 2 * MIB)
    p = prefetch_info(s)
    assert num(p, "prefetch_leases_expired_unread") == 1, p
    assert num(p, "prefetch_reads_served") == 0, p
    assert num(p, "prefetch_accuracy") < 1.0
    assert c.get("k0") == value_of(0)


def test_dirty_memory_cools_prefetch_down_and_stops_the_batch(flash_servers):
    # Writeback off: memory stays full of dirty data, which a prefetch may
    # not evict.
    s = flash_servers(memory="64mb", extra=FLASH + ("--dirty-max-fraction", "1")).start()
    c = s.client()
    for i in range(12):
        c.set(f"k{i}", value_of(i))
    for i in range(40):  # 80 MiB of never-flushed data: memory is dirty
        c.set(f"dirty{i}", value_of(500 + i))
    assert wait_until(lambda: num(s.flash_info(), "offloads_inflight") == 0, 20)
    # Landed offloads left free room: top it up with dirty data to where
    # writes start offloading ahead (budget - budget/16).
    budget = 64 * MIB
    top = 0
    while num(s.info("memory")[0], "used_memory") + 3 * MIB < budget - budget // 16:
        c.set(f"top{top}", value_of(700 + top, MIB))
        top += 1
    keys = [f"k{i}" for i in range(6)]
    assert c.execute_command("TIER.EXISTS", *keys, "PREFETCH") == 6
    assert wait_until(lambda: num(prefetch_info(s), "prefetch_failed_saturated") >= 1, 10), \
        prefetch_info(s)
    p = prefetch_info(s)
    assert num(p, "prefetch_cooldowns") >= 1
    assert num(p, "prefetch_cooldown_remaining_ms") > 0
    queued = num(p, "prefetch_queued")
    assert c.execute_command("TIER.EXISTS", *keys, "PREFETCH") == 6
    p = prefetch_info(s)
    assert num(p, "prefetch_queued") == queued, "a probe during the cooldown queued work"
    assert num(p, "prefetch_early_exits") >= 1
    # Nothing dirty was dropped to make room.
    for i in range(40):
        assert c.get(f"dirty{i}") == value_of(500 + i)


def test_demand_kick_and_its_counters(flash_servers):
    s = flash_servers(memory="64mb", extra=FLASH).start()
    c = spill(s, 2)
    assert c.get("k0") == value_of(0)
    assert num(prefetch_info(s), "demand_kicks") == 0, "demand-kick defaults to no"
    c.config_set("demand-kick", "yes")
    assert c.get("k1") == value_of(1)
    assert wait_until(lambda: in_memory(c, "k1"), 10)
    p = prefetch_info(s)
    assert num(p, "demand_kicks") == 1
    assert num(p, "demand_kicks_promoted") == 1
    assert num(p, "demand_kicks_failed") == 0
    assert num(p, "demand_kicks_refused") == 0


def test_dedup_ttl_and_runtime_knobs(flash_servers):
    # Flash far larger than all this test writes (sparse: only what is
    # written takes disk), so reclaim never drops the keys it reads back.
    s = flash_servers(memory="64mb", flash_size="16gb", extra=FLASH).start()
    c = spill(s, 2)
    for key, value in (("prefetch-dedup-ttl-ms", "60000"), ("prefetch-dedup-max-entries", "1024"),
                       ("prefetch-cooldown-ms", "250"), ("prefetch-cooldown-max-ms", "4000"),
                       ("demand-kick-max-failures", "5"), ("promotion-on-hit", "no"),
                       ("prefetch-min-window-share", "0.5")):
        c.config_set(key, value)
        assert c.config_get(key) == {key: value}
    with pytest.raises(Exception, match="prefetch-cooldown-max-ms"):
        c.config_set("prefetch-cooldown-max-ms", "100")  # below the cooldown
    assert c.config_get("promotion-workers") == {"promotion-workers": "4"}
    with pytest.raises(Exception, match="immutable"):
        c.config_set("promotion-workers", "8")
    c.execute_command("TIER.EXISTS", "k0", "PREFETCH")
    assert wait_until(lambda: in_memory(c, "k0"), 10)
    # The job ends just after the install: wait for it to leave the table.
    assert wait_until(lambda: num(prefetch_info(s), "prefetch_dedup_entries") == 0, 10)
    c.get("k0")
    # A key named twice in one probe: the second is in flight, deduplicated.
    c.delete(*push_out(c, "k0", "again", 2 * MIB))
    c.execute_command("TIER.EXISTS", "k0", "k0", "PREFETCH")
    p = prefetch_info(s)
    assert num(p, "prefetch_deduplicated") == 1, str(p)
    assert wait_until(lambda: in_memory(c, "k0"), 10)
    # Promoted, read, pushed out again: a later probe prefetches it again (a
    # promoted key leaves the dedup table), within the TTL.
    c.get("k0")
    c.delete(*push_out(c, "k0", "again", 2 * MIB))
    c.execute_command("TIER.EXISTS", "k0", "PREFETCH")
    assert wait_until(lambda: in_memory(c, "k0"), 10)
    assert num(prefetch_info(s), "prefetch_deduplicated") == 1
    assert num(s.flash_info(), "flash_reclaims") == 0


def test_every_prefetch_field_is_in_info_and_metrics(flash_servers):
    s = flash_servers(memory="64mb", extra=FLASH).start()
    p = prefetch_info(s)
    missing = [f for f in PREFETCH_FIELDS if f not in p]
    assert not missing, f"INFO prefetch lacks {missing}: {p}"
    for f in PREFETCH_FIELDS:
        float(p[f])
    metrics = s.metrics()
    for f in PREFETCH_FIELDS:
        series = "tierkv_" + f
        assert series in metrics, f"/metrics lacks {series}"
    default, titles = s.info("")
    assert "Prefetch" in titles
