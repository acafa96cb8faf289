"""Flash that cannot be used: the server still serves from memory and says why.

* An unopenable flash path: the server starts, logs one clear error line,
  serves SET/GET from memory, and INFO shows flash_enabled:0 and flash_error.
* A full file system (ENOSPC, on a small tmpfs): writes to flash fail, the
  server keeps serving, counts the failures, and never returns a wrong value.
"""
import os
import subprocess

import pytest

from flash_util import MIB, flash_servers, make_value, num, read_values  # noqa: F401


def unopenable_paths(tmp_path):
    regular = tmp_path / "regular-file"
    regular.write_bytes(b"not a directory")
    return ["/proc/nonexistent/x", str(regular / "flash.dat")]


@pytest.mark.parametrize("which", [0, 1], ids=["proc-nonexistent", "under-regular-file"])
def test_unopenable_flash_path_serves_from_memory(flash_servers, tmp_path, which):
    path = unopenable_paths(tmp_path)[which]
    s = flash_servers(memory="32mb", flash_path=path).start()
    c = s.client()
    c.set("k", b"v" * 1000)
    assert c.get("k") == b"v" * 1000
    c.set("big", b"b" * (3 * MIB))
    assert c.get("big") == b"b" * (3 * MIB)

    info = s.flash_info()
    assert info.get("flash_enabled") == "0", info
    assert info.get("flash_error", "").strip(), f"no flash_error reason: {info}"

    # One clear line: it names the path and says it failed.
    lines = [ln for ln in s.log_text().splitlines()
             if path in ln and any(w in ln.lower() for w in ("error", "fail", "cannot", "unable"))]
    assert lines, f"no error line naming {path} in the log:\n{s.log_tail()}"
    assert s.alive()


@pytest.fixture
def small_tmpfs(tmp_path):
    """A 48 MiB tmpfs: a file system that fills up. Needs root (CI has it)."""
    assert os.geteuid() == 0, ("the ENOSPC test mounts a tmpfs and must run as root "
                               "(CI does); run it as root")
    mnt = tmp_path / "small-fs"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48m", "tmpfs", str(mnt)], check=True)
    try:
        yield str(mnt)
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_enospc_keeps_serving_and_counts_write_errors(flash_servers, small_tmpfs):
    s = flash_servers(memory="32mb", flash_size="256mb",
                      flash_path=os.path.join(small_tmpfs, "flash.dat"),
                      extra=("--flash-preallocate", "no", "--region-size", "8mb",
                             "--offload-wait-ms", "200"),  # bounds each failing SET
                      reclaim_ok=True)  # it asserts only nil-or-exact
    s.start()
    c = s.client(socket_timeout=30)
    items, errors = [], 0
    for i in range(80):  # 160 MiB: far more than the file system holds
        key = f"k{i}"
        try:
            assert c.set(key, make_value(key, 1, 2 * MIB)) is True
        except Exception as e:  # an error reply is allowed; a dead server is not
            assert s.alive(), f"server died at SET {i}: {e}\n{s.log_tail()}"
            errors += 1
        items.append(key)
    assert s.alive(), s.log_tail()
    assert c.ping()
    c.set("after", b"still here")
    assert c.get("after") == b"still here"

    # Every key: nil, or exactly what was written. Never a torn or wrong value.
    got = read_values(s, items, connections=2)
    bad = [k for k in items if got[k] is not None and got[k] != make_value(k, 1, 2 * MIB)]
    assert not bad, f"wrong values for {bad[:5]}"
    present = sum(1 for k in items if got[k] is not None)
    assert present > 0, "nothing readable at all"
    assert s.alive()
    info = s.flash_info()
    assert num(info, "flash_write_errors") > 0, info
    s.kill()  # before the tmpfs goes away
