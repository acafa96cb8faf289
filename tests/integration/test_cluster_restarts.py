"""Restarts during slot moves, over the wire.

The contract (docs/cluster.md, "Guarantees and failure modes"):
* a node restarted within the lease TTL, gracefully or by kill -9, keeps
  the keys of every slot it held without a break: a target keeps what it
  imported, and the move goes on from where it was;
* a source restarted mid-move never serves a key it had already moved,
  nor sends it again over a value written on the target since;
* a node whose slot moved away and back while it was down starts that
  slot empty: it never serves a value older than one acknowledged since.
The nodes write with flash-fsync always, so that a kill -9 loses no
acknowledged write and "nothing lost" can be asserted exactly."""
import os
import random
import signal
import time

import pytest

from cluster_moves import (assert_holds, client_of, drain, info, managed,  # noqa: F401
                           settled, write_keys)
from cluster_util import SLOTS, SlotClient, wait_until

DURABLE = ("--flash-fsync", "always", "--cluster-lease-ttl", "10")


def halfway(etcd, start, n_keys, value_size=2048):
    """Two durable nodes split evenly with `n_keys` keys, then a drain of
    the first; returns (source, target, model) once the source has moved
    some of its keys and is frozen (SIGSTOP) mid-move."""
    nodes = [start(*DURABLE, "--cluster-migrate-batch-keys", "8") for _ in range(2)]
    wait_until(lambda: settled(nodes, lambda i, c: c > 8000), what="an even split")
    rng = random.Random(36)
    model = {}
    rc = client_of(nodes)
    for i in range(n_keys):
        k = f"k{i}"
        model[k] = rng.randbytes(value_size)
        assert rc.set(k, model[k])
    rc.close()
    source, target = nodes
    drain(etcd, source)
    wait_until(lambda: info(source)["cluster_keys_migrated_out"] >= 100, timeout=60,
               what="the first keys moved")
    os.kill(source.proc.pid, signal.SIGSTOP)
    return source, target, model


def landed_keys(node, timeout=30.0):
    """The node's key count once its writes have landed on flash. With the
    source frozen no more keys arrive, but the last batch's may still be on
    their way: a key counts in DBSIZE as soon as it is in memory, and is
    acknowledged to the source, and sure to outlive a kill -9, only once it
    is durable. Landed: nothing waits for the flash writer, and neither the
    count nor the bytes written moved over a quarter of a second."""
    def reading():
        c = node.client()
        f = c.info("flash")
        return c.dbsize(), f["flash_write_bytes"], f["flash_write_buffer_used"]
    deadline = time.time() + timeout
    last = reading()
    while time.time() < deadline:
        time.sleep(0.25)
        now = reading()
        if now == last and now[2] == 0:
            return now[0]
        last = now
    raise AssertionError(f"the writes of {node.port} did not land: {last}")


def finish(nodes, source, target):
    wait_until(lambda: settled(nodes, lambda i, c: c == (0 if nodes[i] is source else SLOTS)),
               timeout=120, what="the drain to finish")
    assert source.client().dbsize() == 0


@pytest.mark.parametrize("kill", [False, True], ids=["graceful", "kill-9"])
def test_a_target_restarted_mid_move_keeps_what_it_imported(managed, kill):
    etcd, start = managed
    source, target, model = halfway(etcd, start, 3000)
    try:
        imported = landed_keys(target)
        assert imported >= 100
        target.restart(kill=kill)
        wait_until(lambda: info(target).get("cluster_state") == "ok", what="the target back up")
        # What it imported is still there, before the source sends any more.
        assert target.client().dbsize() >= imported
        assert info(target)["cluster_keys_purged"] == 0
    finally:
        os.kill(source.proc.pid, signal.SIGCONT)
    finish([source, target], source, target)
    assert_holds([source, target], model)


@pytest.mark.parametrize("kill", [False, True], ids=["graceful", "kill-9"])
def test_a_source_restarted_mid_move_serves_nothing_it_moved(managed, kill):
    """Keys moved before the restart are overwritten or deleted on the
    target; the restarted source must neither serve their old values nor
    send them again."""
    etcd, start = managed
    source, target, model = halfway(etcd, start, 3000)
    os.kill(source.proc.pid, signal.SIGCONT)
    rc = SlotClient(target.port)
    moved = [k for k in model if source_lacks(source, k)]
    assert len(moved) >= 50
    for i, k in enumerate(moved):
        if i % 2:
            assert rc.call(k, "SET", k, f"{k} after the move".encode())
            model[k] = f"{k} after the move".encode()
        else:
            assert rc.call(k, "DEL", k) == 1
            del model[k]
    rc.close()
    source.restart(kill=kill)
    finish([source, target], source, target)
    assert_holds([source, target], model)


def source_lacks(node, key):
    """Whether `node` moved `key` away (it answers -ASK for it); False for a
    key it holds, or of a slot it never owned (-MOVED)."""
    c = node.client()
    for _ in range(200):
        try:
            return c.exists(key) == 0
        except Exception as e:  # TRYAGAIN while its batch moves
            if str(e).startswith("ASK"):
                return True
            if str(e).startswith("MOVED"):
                return False
            if "TRYAGAIN" not in str(e):
                raise
            time.sleep(0.01)
    raise AssertionError(f"{key} stayed fenced")


def test_a_slot_that_moved_away_and_back_while_down_starts_empty(managed):
    """B stops (gracefully, so its flash keeps its keys) and stays down past
    its lease: its slots go to A, where clients overwrite B's keys. When B
    comes back and its slots move back to it, B must serve A's values, not
    the ones its flash kept."""
    etcd, start = managed
    nodes = [start("--cluster-lease-ttl", "2") for _ in range(2)]
    wait_until(lambda: settled(nodes, lambda i, c: c > 8000), what="an even split")
    a, b = nodes
    model = {}
    rc = client_of(nodes)
    write_keys(rc, "old", 600, model)
    rc.close()
    held = b.client().dbsize()
    assert held > 200
    b.proc.terminate()
    b.proc.wait(30)
    wait_until(lambda: settled([a], lambda i, c: c == SLOTS), timeout=30,
               what="A owning every slot")
    rc = client_of([a])
    for k in model:
        model[k] = f"{k} while B was down".encode()
        assert rc.set(k, model[k])
    rc.close()
    b.restart()
    wait_until(lambda: settled(nodes, lambda i, c: c > 8000), timeout=60,
               what="B's share back")
    # Whichever slots B gets back, every key it kept goes: those of the
    # slots it regains before they serve, the others as keys no one routes to.
    wait_until(lambda: info(b)["cluster_keys_purged"] >= held, timeout=60,
               what="B's old keys purged")
    assert info(b)["cluster_keys_purged"] == held
    assert_holds(nodes, model)


@pytest.mark.parametrize("kill", [False, True], ids=["graceful", "kill-9"])
def test_a_rolling_restart_of_every_node_loses_nothing(managed, kill):
    """Each of three nodes restarted in turn, within its lease TTL, while
    writes go on between restarts: every key acknowledged is there at the
    end, with its last value, and no slot was given away meanwhile."""
    etcd, start = managed
    nodes = [start(*DURABLE) for _ in range(3)]
    wait_until(lambda: settled(nodes, lambda i, c: c > 5000), what="an even split")
    version = info(nodes[0])["cluster_slot_map_version"]
    model = {}
    rc = client_of(nodes)
    write_keys(rc, "before", 900, model)
    rc.close()
    for n, node in enumerate(nodes):
        node.restart(kill=kill)
        wait_until(lambda: all(info(x).get("cluster_state") == "ok" for x in nodes),
                   what="every node up")
        rc = client_of(nodes)
        write_keys(rc, f"after{n}-", 200, model)
        rc.close()
    assert all(info(n)["cluster_slot_map_version"] == version for n in nodes)
    assert sum(info(n)["cluster_keys_purged"] for n in nodes) == 0
    assert_holds(nodes, model)
