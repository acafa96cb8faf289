"""Clean restarts: SIGTERM writes dirty memory objects to flash before exit,
so a server started again on the same flash file has every key, exactly."""
import random

from flash_util import (MIB, check_values, flash_servers, log_uniform_sizes, num,  # noqa: F401
                        write_values)

FLAGS = ("--region-size", "16mb", "--flash-preallocate", "no")


def mixed_items(total_mib, seed, prefix="k"):
    sizes = log_uniform_sizes(random.Random(seed), total_mib * MIB, 4096, 4 * MIB)
    return [(f"{prefix}{i}", seed, n) for i, n in enumerate(sizes)]


def test_clean_restart_brings_back_every_key(flash_servers):
    s = flash_servers(memory="32mb", extra=FLAGS).start()
    items = mixed_items(160, seed=11)
    write_values(s, items)
    # Overwrite a tenth (new sizes too), delete another tenth: the restart must
    # bring back the newest version and keep the deletions.
    rng = random.Random(5)
    changed = rng.sample(range(len(items)), len(items) // 5)
    overwritten, deleted = changed[: len(changed) // 2], changed[len(changed) // 2:]
    for i in overwritten:
        key, _, size = items[i]
        items[i] = (key, 12, max(4096, size // 3))
    write_values(s, [items[i] for i in overwritten])
    c = s.client()
    assert c.delete(*[items[i][0] for i in deleted]) == len(deleted)
    live = [it for i, it in enumerate(items) if i not in set(deleted)]
    check_values(s, live)

    s.restart()
    info = s.flash_info()
    assert num(info, "flash_enabled") == 1
    assert num(info, "flash_objects") >= len(live) * 0.5, info
    check_values(s, live)
    c = s.client()
    gone = [items[i][0] for i in deleted]
    assert c.exists(*gone) == 0
    assert c.dbsize() == len(live)

    # And once more: the reads above (and any promotion) changed nothing on disk.
    s.restart()
    check_values(s, live)
    assert s.client().dbsize() == len(live)


def test_restart_of_memory_only_data(flash_servers):
    # Everything fits in memory: nothing was evicted, so only the shutdown
    # flush puts it on flash.
    s = flash_servers(memory="64mb", extra=FLAGS).start()
    items = mixed_items(24, seed=21)
    write_values(s, items)
    assert num(s.flash_info(), "flash_objects") == 0  # on_evict: nothing offloaded yet
    s.restart()
    check_values(s, items)

