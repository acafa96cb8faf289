"""exists-prefetch-map across nodes (docs/kv-cache.md, prefetch_hints.h).

LMCache's redis-cluster:// keys carry no hash tags, so a chunk's
<k>metadata and <k>kv_bytes usually live on different nodes. The contract:
the EXISTS of <k>metadata on its node answers as EXISTS does, at once, and
that node hints the owner of <k>kv_bytes, which prefetches it into memory;
the hint is counted as sent on one side and received on the other, and is
not counted as an absent key. A key hinted within the dedup window is not
hinted again. Whatever the owner's state (stopped, killed, restarted), the
probe's answer is unchanged and never waits for it: hints are dropped and
counted, and flow again once the owner is back."""
import os
import signal

from cluster_moves import client_of, info, managed, owner, settled  # noqa: F401
from cluster_util import wait_until
from flash_util import MIB, make_value
from kv_clients import chunk_hashes, lmcache_key

FLASH = ("--memory", "24mb", "--flash-size", "256mb", "--region-size", "16mb",
         "--flash-preallocate", "no", "--exists-prefetch-map", "metadata=kv_bytes",
         "--cluster-prefetch-hints-dedup-ms", "600000")


def residency(node, key):
    stat = node.client().execute_command("TIER.STAT", key)
    if stat is None:
        return None
    fields = dict(zip(stat[::2], stat[1::2]))
    chunks = [dict(zip(c[::2], c[1::2])) for c in fields[b"chunk_residency"]]
    return {c[b"residency"] for c in chunks}


def split_chunk(nodes, document):
    """A chunk of `document` whose two keys are on different nodes."""
    for h in chunk_hashes(document, 64):
        k = lmcache_key(h)
        a, b = owner(nodes, k + "metadata"), owner(nodes, k + "kv_bytes")
        if a is not b:
            return k, a, b
    raise AssertionError("every chunk's keys on one node")


def spill(rc, nodes, node, key):
    """Writes filler through the cluster until `key` is on flash only on
    `node`, then deletes the filler (memory has room again)."""
    filler = []
    for i in range(400):
        name = f"filler{i}"
        rc.set(name, b"f" * MIB)
        filler.append(name)
        if i % 8 == 7 and residency(node, key) == {b"flash"}:
            break
    assert residency(node, key) == {b"flash"}
    for name in filler:
        rc.delete(name)


def start(managed, *extra):
    etcd, begin = managed
    nodes = [begin(*FLASH, *extra) for _ in range(3)]
    wait_until(lambda: settled(nodes, lambda i, c: c > 5000), what="an even split")
    return nodes, client_of(nodes)


def stored_chunk(nodes, rc, document):
    k, a, b = split_chunk(nodes, document)
    value = make_value(k, 1, 2 * MIB)
    assert rc.set(k + "kv_bytes", value)
    assert rc.set(k + "metadata", b"m" * 28)
    spill(rc, nodes, b, k + "kv_bytes")
    return k, a, b, value


def test_a_probe_hints_the_companions_owner_which_prefetches_it(managed):
    nodes, rc = start(managed)
    k, a, b, value = stored_chunk(nodes, rc, 1)
    absent_before = a.client().info("prefetch")["prefetch_absent"]
    assert a.client().exists(k + "metadata") == 1
    wait_until(lambda: b"flash" not in residency(b, k + "kv_bytes"), timeout=30,
               what="the companion promoted on its own node")
    assert info(a)["cluster_prefetch_hints_sent"] == 1
    assert info(b)["cluster_prefetch_hints_received"] == 1
    assert info(b)["cluster_prefetch_hints_ignored"] == 0
    assert a.client().info("prefetch")["prefetch_absent"] == absent_before
    # Probed again within the window: no second hint.
    for _ in range(5):
        assert a.client().exists(k + "metadata") == 1
    assert info(a)["cluster_prefetch_hints_deduplicated"] == 5
    assert info(a)["cluster_prefetch_hints_sent"] == 1
    assert rc.get(k + "kv_bytes") == value
    rc.close()


def test_hints_off_sends_nothing(managed):
    nodes, rc = start(managed, "--cluster-prefetch-hints", "no")
    k, a, b, _ = stored_chunk(nodes, rc, 2)
    assert a.client().exists(k + "metadata") == 1
    assert "cluster_prefetch_hints_sent" not in info(a)
    assert residency(b, k + "kv_bytes") == {b"flash"}
    rc.close()


def test_a_stopped_or_killed_owner_never_delays_the_probe(managed):
    nodes, rc = start(managed)
    k, a, b, _ = stored_chunk(nodes, rc, 3)
    others = [lmcache_key(h) for h in chunk_hashes(4, 64)]
    # Metadata keys on `a` whose kv_bytes are on `b`: each probe hints `b`.
    probes = [x + "metadata" for x in others
              if owner(nodes, x + "metadata") is a and owner(nodes, x + "kv_bytes") is b][:8]
    assert probes
    for x in probes:
        rc.set(x, b"m")
    os.kill(b.proc.pid, signal.SIGSTOP)
    try:
        c = a.client(socket_timeout=5)  # a probe that waited on b would time out
        for _ in range(3):
            assert sum(c.exists(x) for x in probes) == len(probes)
        assert c.exists(k + "metadata") == 1
    finally:
        os.kill(b.proc.pid, signal.SIGCONT)
    b.restart(kill=True)
    wait_until(lambda: settled(nodes, lambda i, c: c > 5000), timeout=60, what="b back")
    c = a.client(socket_timeout=5)
    assert sum(c.exists(x) for x in probes) == len(probes)
    # Once b is back, a new key's hint reaches it (after the link's retry pause).
    fresh = [x for x in (lmcache_key(h) for h in chunk_hashes(5, 256))
             if owner(nodes, x + "metadata") is a and owner(nodes, x + "kv_bytes") is b][:40]
    for x in fresh:
        rc.set(x + "metadata", b"m")
    received = info(b).get("cluster_prefetch_hints_received", 0)

    def hinted_again():
        for x in fresh:
            c.exists(x + "metadata")
        return info(b).get("cluster_prefetch_hints_received", 0) > received

    try:
        wait_until(hinted_again, timeout=30, what="hints flowing to the restarted node")
    except AssertionError:
        print("A", {k: v for k, v in info(a).items() if "hint" in k})
        print("B", {k: v for k, v in info(b).items() if "hint" in k}, len(fresh))
        print(open(a.log_path).read()[-3000:])
        raise
    st = info(a)
    assert st["cluster_prefetch_hints_sent"] + st["cluster_prefetch_hints_dropped"] >= len(probes)
    rc.close()
