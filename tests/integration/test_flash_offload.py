"""Offload to flash over the wire: data that no longer fits in memory goes to
flash on eviction and stays readable; INFO, /metrics and TIER.STAT show it."""
import random
import re

import pytest

from flash_util import (FLASH_INFO_FIELDS, MIB, check_values, flash_servers, num,  # noqa: F401
                        residencies, tier_stat, wait_until, write_values)

SMALL_FLASH = ("--region-size", "16mb", "--flash-preallocate", "no")


def spill_items(total_mib, prefix="k", seed=1):
    """2 MiB and mixed small values adding up to about total_mib MiB."""
    rng = random.Random(seed)
    items, total = [], 0
    while total < total_mib * MIB:
        size = rng.choice([2 * MIB, 2 * MIB, 700_000, 64 * 1024, 5000])
        items.append((f"{prefix}{len(items)}", seed, size))
        total += size
    return items


# flash-direct-io no reads and writes through the page cache (as memcached's
# extstore does): the same values must come back.
@pytest.mark.parametrize("direct_io", ["yes", "no"])
def test_evicted_values_are_offloaded_and_read_back_exactly(flash_servers, direct_io):
    s = flash_servers(memory="32mb", extra=SMALL_FLASH + ("--flash-direct-io", direct_io)).start()
    items = spill_items(128)  # four times the memory
    write_values(s, items)
    assert num(s.flash_info(), "flash_enabled") == 1
    if direct_io == "no":
        assert num(s.flash_info(), "flash_direct_io") == 0
    # Offloads are queued at eviction and land a little later.
    assert wait_until(lambda: num(s.flash_info(), "flash_write_bytes") >= 64 * MIB, 10), \
        s.flash_info()
    assert num(s.flash_info(), "flash_objects") > 0
    # The first keys written cannot all still be in memory: some chunk is on flash.
    c = s.client()
    assert wait_until(lambda: any("flash" in residencies(c, k) for k, _, _ in items[:10]), 10), \
        [residencies(c, k) for k, _, _ in items[:10]]
    check_values(s, items)
    info = s.flash_info()
    assert num(info, "flash_reads") > 0, info
    assert num(info, "flash_read_bytes") > 0, info
    assert num(info, "flash_checksum_failures") == 0, info
    # Device read latency, as percentiles: p50 <= p99 <= p99.9, all > 0.
    latency = dict(kv.split("=") for kv in info["flash_read_latency_usec"].split(","))
    p50, p99, p999 = (float(latency[q]) for q in ("p50", "p99", "p99.9"))
    assert 0 < p50 <= p99 <= p999, latency
    memory, _ = s.info("memory")
    assert int(memory["used_memory"]) <= 32 * MIB


def test_info_flash_section_has_every_field(flash_servers):
    s = flash_servers(memory="32mb", extra=SMALL_FLASH).start()
    info = s.flash_info()
    missing = [f for f in FLASH_INFO_FIELDS if f not in info]
    assert not missing, f"INFO flash lacks {missing}: {info}"
    for f in FLASH_INFO_FIELDS:
        float(info[f])  # every one is a number
    assert info["flash_enabled"] == "1"
    assert num(info, "flash_used_bytes") + num(info, "flash_free_bytes") <= 256 * MIB
    assert num(info, "flash_free_bytes") > 0
    used_before = num(info, "flash_used_bytes")
    write_values(s, spill_items(96))
    assert wait_until(lambda: num(s.flash_info(), "flash_used_bytes") > used_before + 32 * MIB,
                      10), s.flash_info()
    info = s.flash_info()
    assert num(info, "flash_chunks") >= num(info, "flash_objects") > 0
    assert num(info, "flash_write_amplification") >= 1.0
    # INFO with no section (the default set) and INFO all include it too.
    for section in ("default", "all"):
        _, titles = s.info(section)
        assert "Flash" in titles, f"INFO {section}: {titles}"


def test_metrics_endpoint_has_flash_series(flash_servers):
    s = flash_servers(memory="32mb", extra=SMALL_FLASH).start()
    write_values(s, spill_items(96))
    assert wait_until(lambda: num(s.flash_info(), "flash_write_bytes") >= 32 * MIB, 10)
    body = s.metrics()
    series = dict(re.findall(r"^(tierkv_flash_\w+(?:\{[^}]*\})?) (\S+)$", body, re.M))
    assert len(series) >= 5, f"tierkv_flash_* series: {sorted(series)}"
    written = [v for name, v in series.items() if "write" in name and "byte" in name]
    assert written and max(float(v) for v in written) >= 32 * MIB, series


def test_tier_stat_shows_residency_and_dirty(flash_servers):
    s = flash_servers(memory="32mb", extra=SMALL_FLASH).start()
    c = s.client()
    c.set("fresh", b"x" * (3 * MIB))
    # Just written with on_evict: in memory only, not yet on flash.
    for chunk in tier_stat(c, "fresh")["chunk_residency"]:
        assert chunk["residency"] == b"memory", chunk
        assert chunk["dirty"] in (1, True), chunk
    # Push it out of memory: then it is on flash, and clean.
    items = spill_items(96, prefix="push")
    write_values(s, items)

    def offloaded():
        r = residencies(c, "fresh")
        return "flash" in r and set(r) <= {"flash", "both"}

    assert wait_until(offloaded, 10), tier_stat(c, "fresh")
    for chunk in tier_stat(c, "fresh")["chunk_residency"]:
        assert chunk["dirty"] in (0, False), chunk
    assert c.get("fresh") == b"x" * (3 * MIB)


def test_write_through_puts_every_set_on_flash(flash_servers):
    s = flash_servers(memory="32mb",
                      extra=SMALL_FLASH + ("--offload-policy", "write_through")).start()
    c = s.client()
    c.set("wt", b"y" * (2 * MIB + 5))
    # The write to flash is queued at once; it lands soon after, and then the
    # memory copy is clean and the chunks are on both tiers.
    assert wait_until(lambda: residencies(c, "wt") == ["both"] * 3, 5), tier_stat(c, "wt")
    assert all(ch["dirty"] in (0, False) for ch in tier_stat(c, "wt")["chunk_residency"])
    assert num(s.flash_info(), "flash_objects") >= 1


def test_repeated_reads_promote_from_flash(flash_servers):
    s = flash_servers(memory="32mb",
                      extra=SMALL_FLASH + ("--promotion-threshold", "2")).start()
    c = s.client()
    c.set("hot", b"h" * MIB)
    write_values(s, spill_items(96, prefix="push"))
    assert wait_until(lambda: residencies(c, "hot") == ["flash"], 10), tier_stat(c, "hot")
    before = s.flash_info()

    def promoted():
        assert c.get("hot") == b"h" * MIB
        return residencies(c, "hot") == ["both"]

    assert wait_until(promoted, 10, 0.2), tier_stat(c, "hot")
    after = s.flash_info()
    assert num(after, "promotions_done") > num(before, "promotions_done"), after
    assert num(after, "promotions_attempted") >= num(after, "promotions_done")


def test_overwrite_and_delete_of_offloaded_keys(flash_servers):
    s = flash_servers(memory="32mb", extra=SMALL_FLASH).start()
    items = spill_items(96)
    write_values(s, items)
    c = s.client()
    wait_until(lambda: num(s.flash_info(), "offload_queue_bytes") == 0, 10)
    offloaded = [k for k, _, _ in items[:20] if "flash" in residencies(c, k)]
    assert len(offloaded) >= 4, "expected the oldest keys on flash"
    c.set(offloaded[0], b"new")
    c.delete(offloaded[1])
    assert c.get(offloaded[0]) == b"new"
    assert c.get(offloaded[1]) is None
    assert c.exists(offloaded[1]) == 0
    # The stale flash copies never come back, not even after a clean restart.
    s.restart()
    c = s.client()
    assert c.get(offloaded[0]) == b"new"
    assert c.get(offloaded[1]) is None
    rest = [it for it in items if it[0] not in offloaded[:2]]
    check_values(s, rest)
