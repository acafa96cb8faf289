"""Clean restarts: SIGTERM writes dirty memory objects to flash before exit,
so a server started again on the same flash file has every key, exactly."""
import os
import random

import pytest

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



def data_extents(path):
    """The (start, end) byte ranges of a sparse file that hold data."""
    extents, pos = [], 0
    fd = os.open(path, os.O_RDONLY)
    try:
        while True:
            try:
                start = os.lseek(fd, pos, os.SEEK_DATA)
            except OSError:  # ENXIO: no data past pos
                return extents
            pos = os.lseek(fd, start, os.SEEK_HOLE)
            extents.append((start, pos))
    finally:
        os.close(fd)


def damage_flash_file(path, how, rng):
    """Overwrites random 4 KiB blocks of the written data with garbage, or cuts
    the file in the middle of its data."""
    extents = [(a, b) for a, b in data_extents(path) if b - a >= 8192]
    assert extents, "the flash file holds no data"
    with open(path, "r+b") as f:
        if how == "truncate":
            # After a clean stop the last extent is the index snapshot at the
            # end of the device: cut in the middle of the region data before it.
            end = extents[-2][1] if len(extents) > 1 else extents[-1][1]
            f.truncate(rng.randrange(end // 3, 2 * end // 3) // 512 * 512 + 100)
            return
        for _ in range(24):
            start, end = rng.choice(extents)
            f.seek(rng.randrange(start, end - 4096))
            f.write(rng.randbytes(4096))


@pytest.mark.parametrize("how", ["scribble", "truncate"])
def test_damaged_flash_file_never_serves_a_wrong_value(flash_servers, how):
    s = flash_servers(memory="16mb", extra=FLAGS)
    s.start()
    items = mixed_items(96, seed=41)
    write_values(s, items)
    s.restart()  # everything is on flash now
    check_values(s, items)
    assert s.stop() == 0
    damage_flash_file(s.flash_path, how, random.Random(how))

    s.start()
    got = check_values(s, items, allow_missing=True)  # nil or exact, never wrong
    present = sum(1 for v in got.values() if v is not None)
    assert 0 < present < len(items), f"{present} of {len(items)} keys present after damage"
    c = s.client()
    assert c.ping()
    c.set("new", b"n" * (2 * MIB))
    assert c.get("new") == b"n" * (2 * MIB)
