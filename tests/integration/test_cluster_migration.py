"""Slot migration over the wire: keys move with their slots when the
controller rebalances (a node joins, or one drains), while clients keep
working through -ASK and -TRYAGAIN.

The contract: a slot changes owner only after every key of it has moved,
memory and flash alike, with its TTL, a value larger than memory included.
No key is lost or duplicated by a move that does not fail, and a read never
returns an older value than the last write, nor a key that was deleted."""
import os
import random
import re
import subprocess
import tempfile
import time

import pytest

from cluster_moves import (MIB, assert_holds, client_of, cluster_cli, drain, info,  # noqa: F401
                           managed, owner, settled, write_keys)
from cluster_util import SLOTS, SlotClient, key_slot, wait_until
from conftest import free_port
from test_preheat import tierkv_cli


def test_a_drain_moves_every_key_memory_and_flash_with_ttls(managed):
    etcd, start = managed
    # Memory far smaller than the data: most values live on flash only.
    # Small batches, and values over 64 KiB streaming in 64 KiB pieces.
    nodes = [start("--memory", "32mb", "--cluster-migrate-batch-keys", "7",
                   "--cluster-migrate-inline-bytes", "64kb") for _ in range(2)]
    wait_until(lambda: settled(nodes, lambda i, c: c > 8000), what="an even split")
    rc = client_of(nodes)
    rng = random.Random(7)
    model = {}
    for i in range(1500):
        model[f"k{i}"] = rng.randbytes(rng.choice([10, 1000, 40000]))
    for k, v in model.items():
        assert rc.set(k, v)
    ttl_keys = [f"k{i}" for i in range(0, 1500, 10)]
    for k in ttl_keys:
        assert rc.pexpire(k, 600_000)
    big = rng.randbytes(48 * MIB)  # larger than memory: it streams from flash
    assert rc.set("big", big)
    model["big"] = big
    source = owner(nodes, "big")
    target = next(n for n in nodes if n is not source)
    before = info(source)["cluster_slots_owned"]
    drain(etcd, source)
    wait_until(lambda: settled(nodes, lambda i, c: c == (SLOTS if nodes[i] is target else 0)),
               timeout=120,
               what="every slot on the node that stays")
    # Nothing left behind, nothing lost: the target holds every key.
    assert source.client().dbsize() == 0
    assert target.client().dbsize() == len(model)
    st, tt = info(source), info(target)
    assert st["cluster_keys_migrated_out"] >= before // 20  # ~half the keys
    assert tt["cluster_keys_migrated_in"] == st["cluster_keys_migrated_out"]
    assert st["cluster_keys_migration_dropped"] == 0
    rc.close()
    rc = client_of([target])
    for k, v in model.items():
        assert rc.get(k) == v, k
    for k in model:
        ttl = rc.pttl(k)
        if k in ttl_keys:
            assert 0 < ttl <= 600_000, (k, ttl)
        else:
            assert ttl == -1, (k, ttl)
    rc.close()


def test_a_model_through_a_join_and_a_drain(managed):
    """Seeded SET, GET, DEL and PEXPIRE through a cluster client while a
    fourth node joins and later a node drains: every read is the model's
    value (no move fails here, so not even a miss), deleted keys stay
    gone, and in the end each key is on exactly one node. The client is
    SlotClient: redis-py 4.x cannot follow -ASK to a node that owns no slot
    yet (redis-py#2432), which is what a joining node is."""
    etcd, start = managed
    nodes = [start("--flash-size", "0") for _ in range(3)]
    wait_until(lambda: settled(nodes, lambda i, c: c > 5000), what="an even split")
    rc = SlotClient(nodes[0].port)
    rng = random.Random(28)
    keys = [f"m:{i}" for i in range(400)] + [f"{{tag{i}}}:kv" for i in range(100)]
    model, expiring = {}, set()
    phase, deadline = "before", time.time() + 120
    ops = ops_after = 0
    while time.time() < deadline:
        ops += 1
        if phase == "before" and ops == 3000:
            nodes.append(start("--flash-size", "0"))
            phase = "joining"
        elif phase == "joining" and settled(nodes, lambda i, c: c > 3000):
            drain(etcd, nodes[0])
            phase = "draining"
        elif phase == "draining" and settled(nodes, lambda i, c: (c == 0) == (i == 0)):
            phase, ops_after = "after", ops
        elif phase == "after" and ops > ops_after + 2000:
            break
        k = rng.choice(keys)
        op = rng.random()
        if op < 0.35:
            v = f"{k}={ops}".encode()
            assert rc.call(k, "SET", k, v)
            model[k] = v
            expiring.discard(k)
        elif op < 0.45:
            assert rc.call(k, "DEL", k) == (1 if k in model else 0), k
            model.pop(k, None)
            expiring.discard(k)
        elif op < 0.5:
            assert rc.call(k, "PEXPIRE", k, 600_000) == (1 if k in model else 0), k
            if k in model:
                expiring.add(k)
        else:
            assert rc.call(k, "GET", k) == model.get(k), (k, phase, ops)
    assert phase == "after", f"the rebalance did not finish in time ({phase})"
    for k in keys:
        assert rc.call(k, "GET", k) == model.get(k), k
        ttl = rc.call(k, "PTTL", k)
        assert (ttl > 0) if k in expiring else (ttl == (-1 if k in model else -2)), (k, ttl)
    assert sum(n.client().dbsize() for n in nodes) == len(model)
    assert nodes[0].client().dbsize() == 0
    assert sum(info(n)["cluster_keys_migrated_in"] for n in nodes) > 0
    assert sum(info(n)["cluster_ask"] for n in nodes) > 0  # clients did follow -ASK
    # No two nodes sent the client to each other over and over: a stale
    # table, then -MOVED, then -ASK is the longest way to a key's node.
    assert rc.max_hops <= 4, rc.max_hops
    rc.close()


def test_cli_drains_rebalances_and_preheats_on_the_owner(managed):
    """tierkv cluster drain / rebalance / status steer the cluster through
    etcd with progress and exit codes; tierkv preheat follows -MOVED to the
    key's owner. Keys survive the round trip off a node and back."""
    etcd, start = managed
    src = tempfile.mkdtemp(prefix="tierkv-cli-src-")
    nodes = [start("--preheat-sources", f"file://{src}/") for _ in range(2)]
    wait_until(lambda: settled(nodes, lambda i, c: c > 8000), what="an even split")
    rc = SlotClient(nodes[0].port)
    for i in range(300):
        assert rc.call(f"c{i}", "SET", f"c{i}", f"v{i}")
    a, b = nodes
    address = f"127.0.0.1:{a.port}"
    drained = cluster_cli(etcd, "drain", address)
    assert drained.returncode == 0, drained.stderr
    assert "drained" in drained.stdout and "100.0%" in drained.stderr
    assert info(a)["cluster_slots_owned"] == 0 and a.client().dbsize() == 0
    status = cluster_cli(etcd, "status")
    assert status.returncode == 0, status.stderr
    row = next(line for line in status.stdout.splitlines() if address in line)
    assert row.split()[3] == "0" and row.endswith("draining"), status.stdout
    back = cluster_cli(etcd, "rebalance")
    assert back.returncode == 0, back.stderr
    assert settled(nodes, lambda i, c: c > 8000)
    for i in range(300):
        assert rc.call(f"c{i}", "GET", f"c{i}") == f"v{i}".encode()
    assert a.client().dbsize() + b.client().dbsize() == 300
    # preheat through the node that does not own the key lands on its owner.
    data = os.urandom(3 * MIB)
    with open(os.path.join(src, "w.bin"), "wb") as f:
        f.write(data)
    key = next(f"w{i}" for i in range(100) if owner([a, b], f"w{i}") is b)
    run = subprocess.run([tierkv_cli(), "preheat", os.path.join(src, "w.bin"), "--key", key,
                          "--server", address, "--quiet"], capture_output=True, text=True,
                         timeout=60)
    assert run.returncode == 0, run.stderr
    assert b.client().get(key) == data
    # Bad input: one line, exit 2.
    for args in (["drain", "no-such-node"], ["drain"], ["frobnicate"]):
        bad = cluster_cli(etcd, *args)
        assert bad.returncode == 2 and bad.stderr.count("\n") == 1, (args, bad.stderr)
    gone = subprocess.run([tierkv_cli(), "cluster", "status", "--etcd",
                           f"http://127.0.0.1:{free_port()}"], capture_output=True, text=True,
                          timeout=30)
    assert gone.returncode == 2 and gone.stderr.startswith("tierkv: etcd"), gone.stderr
    rc.close()


@pytest.mark.parametrize("victim", ["source", "target"])
def test_kill_9_during_a_move_loses_keys_never_values(managed, victim):
    """kill -9 either end while a drain moves keys: within the lease TTL
    (2 s) plus 2 s the survivor owns every slot, and every key reads as the
    last value written to it or as a miss; never an older value."""
    etcd, start = managed
    nodes = [start("--memory", "64mb") for _ in range(2)]
    wait_until(lambda: settled(nodes, lambda i, c: c > 8000), what="an even split")
    rc = SlotClient(nodes[0].port)
    rng = random.Random(9)
    model = {}
    for i in range(4000):
        k = f"k{i}"
        model[k] = rng.randbytes(16 * 1024)
        assert rc.call(k, "SET", k, model[k])
    source, target = nodes
    drain(etcd, source)
    # Overwrites race the move until the source has sent some keys.
    deadline, i = time.time() + 30, 0
    while info(source)["cluster_keys_migrated_out"] < 200 and time.time() < deadline:
        k = f"k{rng.randrange(4000)}"
        model[k] = f"{k} v{i}".encode()
        assert rc.call(k, "SET", k, model[k])
        i += 1
    rc.close()
    dead, survivor = (source, target) if victim == "source" else (target, source)
    dead.proc.kill()
    dead.proc.wait()
    killed = time.time()
    wait_until(lambda: settled([survivor], lambda i, c: c == SLOTS), timeout=20,
               what="the survivor owning every slot")
    assert time.time() - killed < 2 + 2 + 3  # TTL + 2 s, plus a poll's slack on a busy box
    rc = SlotClient(survivor.port)
    hits = 0
    for k, v in model.items():
        got = rc.call(k, "GET", k)
        assert got in (v, None), k
        hits += got is not None
    assert hits > 0
    rc.close()


def test_a_key_the_target_refuses_is_dropped_and_the_move_finishes(managed):
    """A value larger than the target's proto-max-bulk-len cannot move: the
    target refuses it, the source drops it (a miss, counted), and the rest
    of the slot moves and flips."""
    etcd, start = managed
    source = start("--flash-size", "0")
    wait_until(lambda: settled([source], lambda i, c: c == SLOTS), what="one node owning all")
    target = start("--flash-size", "0", "--proto-max-bulk-len", "1mb",
                   "--max-object-size", "1mb")
    nodes = [source, target]
    wait_until(lambda: settled(nodes, lambda i, c: c > 8000), what="an even split")
    rc = SlotClient(source.port)
    big = next(f"big{i}" for i in range(100) if owner(nodes, f"big{i}") is source)
    assert rc.call(big, "SET", big, b"x" * (2 * MIB))
    small = {f"s{i}": f"v{i}".encode() for i in range(200)}
    for k, v in small.items():
        assert rc.call(k, "SET", k, v)
    drain(etcd, source)
    wait_until(lambda: settled(nodes, lambda i, c: c == (0 if i == 0 else SLOTS)), timeout=60,
               what="the drain to finish")
    assert info(source)["cluster_keys_migration_dropped"] == 1
    assert rc.call(big, "GET", big) is None
    for k, v in small.items():
        assert rc.call(k, "GET", k) == v
    assert source.client().dbsize() == 0
    rc.close()


def split_with_password(start, n, b_flags=()):
    """Two nodes with requirepass s3cret (b also with `b_flags`), split
    evenly, holding n keys written through the cluster; returns the nodes
    and the model."""
    nodes = [start("--requirepass", "s3cret"), start("--requirepass", "s3cret", *b_flags)]
    wait_until(lambda: settled(nodes, lambda i, c: c > 8000, password="s3cret"),
               what="an even split")
    model = {}
    rc = client_of(nodes, password="s3cret")
    write_keys(rc, "p", n, model)
    rc.close()
    return nodes, model


def test_a_drain_with_requirepass_loses_nothing(managed):
    """Nodes with requirepass: the migrator logs in to the new owner with
    it (masterauth empty), and every key moves."""
    etcd, start = managed
    nodes, model = split_with_password(start, 1500)
    a, b = nodes
    drained = cluster_cli(etcd, "drain", f"127.0.0.1:{b.port}")
    assert drained.returncode == 0, drained.stderr
    assert b.client(password="s3cret").dbsize() == 0
    assert_holds(nodes, model, password="s3cret")


def test_a_refused_login_stalls_the_drain_and_keeps_every_key(managed):
    """A wrong masterauth: the new owner refuses the login, so no key moves
    and none is removed; tierkv cluster drain exits 1 with the reply. Once
    CONFIG SET masterauth is right, the same move finishes."""
    etcd, start = managed
    nodes, model = split_with_password(start, 600, ("--masterauth", "wrong"))
    a, b = nodes
    held = b.client(password="s3cret").dbsize()
    stalled = cluster_cli(etcd, "drain", f"127.0.0.1:{b.port}")
    assert stalled.returncode == 1, (stalled.stdout, stalled.stderr)
    why = stalled.stderr.splitlines()[-1]  # after the progress line
    assert why.startswith("tierkv: keys of") and "WRONGPASS" in why, stalled.stderr
    status = cluster_cli(etcd, "status")
    assert "stalled:" in status.stdout and "WRONGPASS" in status.stdout, status.stdout
    assert b.client(password="s3cret").dbsize() == held  # nothing removed
    assert info(b, password="s3cret")["cluster_keys_migration_dropped"] == 0
    assert_holds(nodes, model, password="s3cret")  # every key still served (from b)
    b.client(password="s3cret").config_set("masterauth", "s3cret")
    drained = cluster_cli(etcd, "drain", f"127.0.0.1:{b.port}")
    assert drained.returncode == 0, drained.stderr
    assert b.client(password="s3cret").dbsize() == 0
    assert_holds(nodes, model, password="s3cret")
    assert "stalled:" not in cluster_cli(etcd, "status").stdout


def test_draining_a_node_twice_loses_nothing(managed):
    """drain B, rebalance, write more, drain B again: the second drain moves
    the keys B gained since (the migrator does not take the second, equal
    set of moves for the first, already done). The rebalance moves keys
    back to B with its slots, so both drains have keys to move."""
    etcd, start = managed
    nodes = [start() for _ in range(2)]
    wait_until(lambda: settled(nodes, lambda i, c: c > 8000), what="an even split")
    a, b = nodes
    model = {}
    rc = client_of(nodes)
    write_keys(rc, "first", 800, model)
    for step in ("drain", "rebalance", "drain"):
        args = [step, f"127.0.0.1:{b.port}"] if step == "drain" else [step]
        done = cluster_cli(etcd, *args)
        assert done.returncode == 0, (step, done.stderr)
        if step == "rebalance":
            rc.close()
            rc = client_of(nodes)
            write_keys(rc, "second", 800, model)
            assert b.client().dbsize() > 300
    rc.close()
    assert b.client().dbsize() == 0
    assert_holds(nodes, model)


def test_a_preheat_whose_slot_moved_away_fails_and_leaves_nothing_behind(managed):
    """A TIER.PREHEAT job is routed when it is submitted and again when it
    publishes: its source answers only after the key's slot has moved to
    another node, so the job fails with the redirection, and the old owner
    holds no key that no one would route to."""
    from test_preheat import FaultyServer, wait_job
    etcd, start = managed
    faulty = FaultyServer(os.urandom(2 * MIB))
    try:
        nodes = [start("--preheat-sources", faulty.url("/")) for _ in range(2)]
        wait_until(lambda: settled(nodes, lambda i, c: c > 8000), what="an even split")
        a, b = nodes
        key = next(f"w{i}" for i in range(100) if owner(nodes, f"w{i}") is a)
        job_id = a.client().execute_command("TIER.PREHEAT", key, faulty.url("/gated"))
        drain(etcd, a)
        wait_until(lambda: settled(nodes, lambda i, c: c == (0 if i == 0 else SLOTS)),
                   timeout=60, what="the drain")
        faulty.gate.set()
        j = wait_job(a.client(), job_id)
        # -ASK while the node has just handed the slot on (docs/cluster.md).
        assert j["state"] == "failed" and re.search(r"(MOVED|ASK) \d+ 127.0.0.1:%d" % b.port,
                                                    j["error"]), j
        assert a.client().dbsize() == 0
        assert SlotClient(b.port).call(key, "GET", key) is None
    finally:
        faulty.stop()


def recv_line(sock):
    """One reply line, read a byte at a time (nothing after it is taken)."""
    line = b""
    while not line.endswith(b"\r\n"):
        byte = sock.recv(1)
        assert byte, "the connection was closed mid-line: %r" % line
        line += byte
    return line


def test_a_reader_that_stops_reading_does_not_stall_a_move(managed):
    """A GET streaming a flash value, started while its slot moves (it takes
    a fence pass), to a client that stops reading after a few bytes: the
    move finishes anyway (the stream reads pinned regions, so it lets its
    pass go), and the client, reading again, gets the whole value. The move
    is held back at first by a wrong masterauth, so the GET comes first."""
    import socket
    etcd, start = managed
    pw = ("--requirepass", "s3cret")
    a = start(*pw, "--memory", "32mb")
    b = start(*pw, "--memory", "32mb", "--masterauth", "wrong")
    nodes = [a, b]
    wait_until(lambda: settled(nodes, lambda i, c: c > 8000, password="s3cret"),
               what="an even split")
    rc = client_of(nodes, password="s3cret")
    slots = b.client(password="s3cret").execute_command("CLUSTER", "SLOTS")
    mine = [(first, last) for first, last, primary, *_ in slots if primary[1] == b.port]
    key = next(f"big{i}" for i in range(100)
               if any(f <= key_slot(f"big{i}") <= t for f, t in mine))
    value = os.urandom(48 * MIB)  # larger than memory: read from flash
    assert rc.set(key, value)
    rc.close()
    drain(etcd, b, password="s3cret")
    wait_until(lambda: info(b, password="s3cret")["cluster_migration_retries"] > 0,
               what="the move held back")
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    s.connect(("127.0.0.1", b.port))
    s.settimeout(60)  # a GET that never answers fails the test, not hangs it
    s.sendall(b"*2\r\n$4\r\nAUTH\r\n$6\r\ns3cret\r\n")
    assert recv_line(s) == b"+OK\r\n"
    # Each retry of the held-back move fences the key while it tries to log
    # in, and a GET in that window gets -TRYAGAIN: retried, as a cluster
    # client does.
    deadline = time.monotonic() + 30
    while True:
        s.sendall(b"*2\r\n$3\r\nGET\r\n$%d\r\n%s\r\n" % (len(key), key.encode()))
        head = recv_line(s)
        if not head.startswith(b"-TRYAGAIN") or time.monotonic() > deadline:
            break
        time.sleep(0.02)
    assert head == b"$%d\r\n" % len(value), head
    while len(head) < 64:  # the header and the first bytes, no more
        chunk = s.recv(64 - len(head))
        assert chunk, "the connection was closed before the GET answered"
        head += chunk
    b.client(password="s3cret").config_set("masterauth", "s3cret")
    wait_until(lambda: settled(nodes, lambda i, c: (c == 0) == (i == 1), password="s3cret"),
               timeout=60, what="the drain, while the reader is stalled")
    assert b.client(password="s3cret").dbsize() == 0
    want = len(b"$%d\r\n" % len(value)) + len(value) + 2
    got = bytearray(head)
    s.settimeout(30)
    while len(got) < want:
        chunk = s.recv(1 << 20)
        assert chunk, "the stream was cut"
        got += chunk
    s.close()
    assert bytes(got[len(got) - len(value) - 2:-2]) == value
