"""The heap on transparent huge pages (malloc-huge-pages, docs/memory-tier.md).

Contract checked here: the heap is left alone by default. With
`--malloc-huge-pages yes`, where the kernel gives huge pages on request
(transparent_hugepage "madvise"), the server re-executes itself once at
start with glibc's malloc.hugetlb tunable added to GLIBC_TUNABLES, in the
same process (the pid the test started is the one that serves, under its
own name), and glibc
then asks for huge pages for its heap: a mapping of the process carries
the kernel's "hg" flag (MADV_HUGEPAGE; nothing else in the server asks for
it). An operator's other tunables are kept, and an operator's own hugetlb
setting wins. By default, with `--malloc-huge-pages no`, or where the
kernel's mode is not madvise, no mapping is advised.

(/proc/<pid>/environ is no witness: glibc 2.36 rewrites GLIBC_TUNABLES in
place at start and shows only its first tunable there.)"""
import pytest

from conftest import start_tierkv

THP_MODE = "/sys/kernel/mm/transparent_hugepage/enabled"


def on_request():
    try:
        with open(THP_MODE) as f:
            return "[madvise]" in f.read()
    except OSError:
        return False


def advised_mappings(server):
    """Mappings with MADV_HUGEPAGE ("hg" in VmFlags)."""
    with open(f"/proc/{server.proc.pid}/smaps") as f:
        return sum(1 for line in f if line.startswith("VmFlags:") and " hg" in line)


def serving(tmp_path, extra=()):
    s = start_tierkv(str(tmp_path), ("--flash-size", "0", *extra))
    c = s.client()
    c.set("k", "v")
    assert c.get("k") == b"v"  # the process the test started serves
    return s


@pytest.mark.parametrize("operator, asks", [
    (None, True),
    ("glibc.malloc.trim_threshold=1048576", True),
    ("glibc.malloc.hugetlb=0", False),
])
def test_the_server_asks_glibc_for_huge_pages(tmp_path, monkeypatch, operator, asks):
    if operator is None:
        monkeypatch.delenv("GLIBC_TUNABLES", raising=False)
    else:
        monkeypatch.setenv("GLIBC_TUNABLES", operator)
    s = serving(tmp_path, ("--malloc-huge-pages", "yes"))
    try:
        with open(f"/proc/{s.proc.pid}/comm") as f:
            assert f.read().strip() == "tierkv-server"  # not "exe": ps and pkill find it
        if asks and on_request():
            assert advised_mappings(s) > 0
        else:
            assert advised_mappings(s) == 0
    finally:
        s.stop()


@pytest.mark.parametrize("extra", [(), ("--malloc-huge-pages", "no")])
def test_by_default_or_with_no_the_heap_is_left_alone(tmp_path, monkeypatch, extra):
    monkeypatch.delenv("GLIBC_TUNABLES", raising=False)
    s = serving(tmp_path, extra)
    try:
        assert advised_mappings(s) == 0
        assert s.client().config_get("malloc-huge-pages") == {"malloc-huge-pages": "no"}
    finally:
        s.stop()
