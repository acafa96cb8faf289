"""Background writeback over the wire: with offload-policy on_evict, dirty
memory (data not yet on flash) falls under dirty-max-fraction of the memory
once writes stop, INFO and /metrics show it, every value still reads back,
and CONFIG SET dirty-max-fraction takes effect at run time."""
from conftest import metric
from flash_util import MIB, check_values, flash_servers, num, wait_until, write_values  # noqa: F401

MEMORY = 32 * MIB
SMALL_FLASH = ("--region-size", "16mb", "--flash-preallocate", "no")
# One 1 MiB value is at most this much chunk charge (a 1 MiB chunk, rounded
# by the allocator, plus the policy's bytes per entry).
ONE_OBJECT = MIB + 64 * 1024


def items_of(count, prefix, seed=1, size=MIB):
    return [(f"{prefix}{i}", seed, size) for i in range(count)]


def dirty_under(s, fraction):
    info = s.flash_info()
    return (num(info, "dirty_bytes") <= fraction * MEMORY + ONE_OBJECT
            and num(info, "writeback_inflight_bytes") == 0)


def test_dirty_bytes_fall_under_the_fraction_after_writes_stop(flash_servers):
    s = flash_servers(memory="32mb", extra=SMALL_FLASH).start()  # the default: 0.5
    c = s.client()
    assert c.execute_command("CONFIG", "GET", "dirty-max-fraction")[1] == b"0.5"
    items = items_of(128, "wb")  # 128 MiB: four times the memory
    write_values(s, items)
    assert wait_until(lambda: dirty_under(s, 0.5), 20), s.flash_info()
    # Evictions alone may have written everything down (on a fast machine
    # memory can be left nearly empty once the burst's offloads land), so
    # this test does not require writeback to have run; the next one does.
    info = s.flash_info()
    assert num(info, "writeback_bytes") >= num(info, "writeback_objects") * MIB, info
    body = s.metrics()
    assert metric(body, "tierkv_writeback_objects_total") >= num(info, "writeback_objects")
    assert metric(body, "tierkv_writeback_bytes_total") >= num(info, "writeback_bytes")
    assert metric(body, "tierkv_memory_dirty_bytes") <= 0.5 * MEMORY + ONE_OBJECT
    check_values(s, items)


def test_writeback_copies_dirty_data_down_without_evicting_it(flash_servers):
    s = flash_servers(memory="32mb", extra=SMALL_FLASH).start()  # the default: 0.5
    items = items_of(24, "wc")  # 24 MiB: fits in memory, but 3/4 of it dirty
    write_values(s, items)
    assert wait_until(lambda: dirty_under(s, 0.5), 20), s.flash_info()
    info = s.flash_info()
    # 24 MiB dirty against a 16 MiB limit: at least 7 objects had to be copied.
    assert num(info, "writeback_objects") >= 7, info
    assert num(info, "writeback_bytes") >= num(info, "writeback_objects") * MIB, info
    # Copied down, not evicted: every object is still in memory.
    assert int(s.info("memory")[0]["memory_objects"]) == len(items)
    check_values(s, items)


def test_config_set_dirty_max_fraction_takes_effect(flash_servers):
    s = flash_servers(memory="32mb", extra=SMALL_FLASH + ("--dirty-max-fraction", "1")).start()
    c = s.client()
    write_values(s, items_of(64, "a"))  # 64 MiB, twice the memory: evictions write it down
    assert wait_until(lambda: num(s.flash_info(), "offloads_inflight") == 0, 20)
    # Then memory close to full again (a burst through flash can leave it far
    # from full once its offloads land), short of where writes make room.
    memory, _ = s.info("memory")
    room = MEMORY * 7 // 8 - int(memory["used_memory"])
    top_up = items_of(max(room, 0) // ONE_OBJECT, "b")
    write_values(s, top_up)
    # Writeback off: memory holds only dirty data, and nothing was copied early.
    info = s.flash_info()
    assert num(info, "dirty_bytes") > 0.6 * MEMORY, info
    assert num(info, "writeback_objects") == 0, info
    objects = s.info("memory")[0]["memory_objects"]
    assert c.execute_command("CONFIG", "SET", "dirty-max-fraction", "0.2") in (b"OK", True)
    assert c.execute_command("CONFIG", "GET", "dirty-max-fraction")[1] == b"0.2"
    assert wait_until(lambda: dirty_under(s, 0.2), 20), s.flash_info()
    assert num(s.flash_info(), "writeback_objects") > 0
    # Copied down, not evicted: memory holds the same objects, now mostly clean.
    assert s.info("memory")[0]["memory_objects"] == objects
    check_values(s, top_up)
