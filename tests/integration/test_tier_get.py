"""TIER.GET key [FROM memory|any] [WITHIN ms] (docs/kv-cache.md).

The contract: without options it is GET. FROM memory answers the value if
memory holds all of it, else null, and never reads flash or starts a
promotion. WITHIN ms answers the value if flash brings it into memory
within ms of the command, else null; that fetch goes on, so the value is
in memory afterwards. Absent keys are null either way. In a transaction
the values are fetched before EXEC runs, as GET's are (FROM memory
excepted). Bad options are -ERR. Each bounded miss counts in
tierkv_tier_get_bounded_misses_total{reason}."""
import pytest
import redis

from flash_util import MIB, flash_servers, num, wait_until  # noqa: F401
from test_prefetch import FLASH, in_memory, on_flash_only, spill, value_of


def tier_get(c, *args):
    return c.execute_command("TIER.GET", *args)


def misses(s, reason):
    line = f'tierkv_tier_get_bounded_misses_total{{reason="{reason}"}} '
    for row in s.metrics().splitlines():
        if row.startswith(line):
            return int(row[len(line):])
    return 0


def test_from_memory_misses_a_flash_only_value_and_reads_nothing(flash_servers):
    s = flash_servers(memory="64mb", extra=FLASH).start()
    c = spill(s, 2)
    c.set("hot", b"v" * 100)
    hits = num(s.flash_info(), "flash_hits")
    promotions = num(s.flash_info(), "promotions_attempted")
    assert tier_get(c, "k0", "FROM", "memory") is None
    assert tier_get(c, "absent", "FROM", "memory") is None
    assert tier_get(c, "hot", "FROM", "memory") == b"v" * 100
    assert num(s.flash_info(), "flash_hits") == hits
    assert num(s.flash_info(), "promotions_attempted") == promotions
    assert on_flash_only(c, "k0")
    assert misses(s, "memory") == 1  # the absent key is no bounded miss
    # Without a bound it is GET, from flash.
    assert tier_get(c, "k0") == value_of(0)
    assert tier_get(c, "k1", "FROM", "any") == value_of(1)


def test_within_fetches_in_time_and_a_zero_bound_misses(flash_servers):
    s = flash_servers(memory="64mb", extra=FLASH).start()
    c = spill(s, 2)
    assert tier_get(c, "k0", "WITHIN", "0") is None
    assert misses(s, "within") == 1
    assert on_flash_only(c, "k0"), "a zero bound starts no fetch"
    # A bound far past any read of 2 MiB: the value comes from memory.
    assert tier_get(c, "k0", "WITHIN", "30000") == value_of(0)
    assert in_memory(c, "k0")
    assert tier_get(c, "k0", "FROM", "memory") == value_of(0)
    assert tier_get(c, "absent", "WITHIN", "30000") is None
    assert misses(s, "within") == 1


def test_a_bound_that_passes_answers_a_miss_and_the_fetch_lands_later(flash_servers):
    # 40 MiB cannot come off flash in 1 ms on any disk (nor from the page
    # cache: it is copied into memory chunk by chunk), so the bound passes
    # first, however loaded the machine is.
    s = flash_servers(memory="128mb", extra=FLASH).start()
    c = s.client()
    big = value_of(7, 40 * MIB)
    c.set("big", big)
    for i in range(12):
        c.set(f"filler{i}", value_of(100 + i, 16 * MIB))
        if on_flash_only(c, "big"):
            break
    for i in range(12):
        c.delete(f"filler{i}")
    assert on_flash_only(c, "big")
    assert tier_get(c, "big", "WITHIN", "1") is None
    assert c.ping()  # the connection went on at once
    assert misses(s, "within") == 1
    assert wait_until(lambda: in_memory(c, "big"), 30), "the fetch stopped at the miss"
    assert tier_get(c, "big", "FROM", "memory") == big


def test_in_a_transaction_from_memory_misses_and_within_reads(flash_servers):
    s = flash_servers(memory="64mb", extra=FLASH).start()
    c = spill(s, 2)
    p = c.pipeline(transaction=True)
    p.execute_command("TIER.GET", "k0", "FROM", "memory")
    p.execute_command("TIER.GET", "k1", "WITHIN", "5")
    p.execute_command("TIER.GET", "absent", "WITHIN", "5")
    assert p.execute() == [None, value_of(1), None]
    assert on_flash_only(c, "k0")


@pytest.mark.parametrize("args,error", [
    (("FROM", "disk"), "FROM takes memory or any"),
    (("WITHIN", "-1"), "WITHIN takes a non-negative number"),
    (("WITHIN", "soon"), "WITHIN takes a non-negative number"),
    (("WITHIN", "86400001"), "at most a day"),
    (("WITHIN",), "syntax error"),
    (("FROM", "any", "FROM", "memory"), "syntax error"),
    (("WITHIN", "1", "WITHIN", "2"), "syntax error"),
    (("LATER", "1"), "syntax error"),
])
def test_bad_options_are_errors(flash_servers, args, error):
    s = flash_servers(memory="64mb", extra=FLASH).start()
    c = s.client()
    c.set("k", "v")
    with pytest.raises(redis.ResponseError, match=error):
        tier_get(c, "k", *args)
    assert tier_get(c, "k", "WITHIN", "1", "FROM", "any") == b"v"
