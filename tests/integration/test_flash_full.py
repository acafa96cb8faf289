"""A full flash tier: write three (torture: five) times more than fits. No
crash, the server keeps answering, the most recent keys are readable, older ones may be gone
(it is a cache), and nothing read back is ever wrong."""
import pytest

from conftest import by_tier
from flash_util import MIB, flash_servers, make_value, num, read_values, write_values  # noqa: F401

FLASH_MIB = 128


@pytest.mark.slow
def test_writing_far_more_than_flash_holds(flash_servers):
    s = flash_servers(memory="32mb", flash_size=f"{FLASH_MIB}mb",
                      extra=("--region-size", "8mb", "--chunk-size", "1mb"),
                      reclaim_ok=True)  # wrapping the log is the test
    s.start()
    # CI: 384 MiB, 3 wraps of the log; torture: 640 MiB, 5.
    items = [(f"k{i}", 3, 2 * MIB + i) for i in range(by_tier(192, 320))]
    for i in range(0, len(items), 32):
        write_values(s, items[i:i + 32], connections=2)
        assert s.alive(), s.log_tail()
    assert s.client().ping()

    info = s.flash_info()
    assert num(info, "flash_reclaims") > 0, info
    assert num(info, "flash_used_bytes") <= FLASH_MIB * MIB
    got = read_values(s, [k for k, _, _ in items], connections=2)
    wrong = [k for k, seed, size in items
             if got[k] is not None and got[k] != make_value(k, seed, size)]
    assert not wrong, f"wrong values: {wrong[:5]}"
    # The last 40 MiB written are within both the memory and the newest flash regions.
    recent = [k for k, _, _ in items[-20:]]
    missing = [k for k in recent if got[k] is None]
    assert not missing, f"recent keys gone: {missing}"
    present_bytes = sum(len(v) for v in got.values() if v is not None)
    assert present_bytes <= (FLASH_MIB + 32 + 16) * MIB, "more data readable than both tiers hold"
    assert num(s.flash_info(), "flash_checksum_failures") == 0
    # Still a working server: new writes land and read back.
    c = s.client()
    c.set("last", make_value("last", 4, 3 * MIB))
    assert c.get("last") == make_value("last", 4, 3 * MIB)
