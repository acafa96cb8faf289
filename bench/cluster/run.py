#!/usr/bin/python3
"""Cluster mode: what it costs per request, and how fast a slot moves.

cost   two tierkv-servers on loopback, one with cluster-enabled no and one
       with cluster-enabled yes as a one-node cluster (its own etcd) that
       owns every slot, so nothing is redirected; the same redis-benchmark
       rows against each, alternating (each arm first in every other round),
       --rounds rounds, the median round counts. ratio = cluster ops/s /
       plain ops/s (goal >= 0.95, that is a cost of at most 1.05x).
move   two nodes under the controller. First a drain of an empty node
       (etcd writes, the controller's rounds, map watches, one scan pass),
       then back. Then --size bytes of 1 MiB values in one slot
       (hash tag), and a drain of that slot's owner, timed from the drain
       key to the map that flips it, and the source's pass alone. Twice: with memory larger than the
       data (every byte is in memory at both ends), and with --small-memory
       (most of it on flash at both ends).
bound  measured in the same run:
       loopback  one socket copy of --size bytes between two threads: into
                 memory the receiver never touched (the memory move's
                 bound: a target's memory is fresh until a move fills it,
                 and the kernel zeroes each page on first touch), and into
                 one 8 MiB buffer used over and over (the flash move's: the
                 target lands values in reused flash write buffers);
       disk      the flash bytes the move read (source) and wrote (target),
                 from INFO flash, at fio's sequential O_DIRECT read and
                 write rates of this one virtual disk, one after the other.
       Before either memory arm runs, 3x --size of memory is touched and
       freed once: on a VM the host backs each guest page on its first
       touch, far slower than the guest's own zeroing, and neither arm
       should pay for it.
       ratio = max(loopback, disk) time / the source's pass time (INFO
       cluster_migration_last_pass_ms: the scan that moves the keys). The
       whole move (drain key to flipped map) and an empty one are printed
       too: the difference is the controller's rounds and map watches.
       (redis-server is no bound here: a Python client filling it is
       slower than our migrator.)

Prints a table, writes bench/results/cluster.json and cluster.png; the last
line is `RESULT name=cluster ratio=<worst cost ratio> ...`.

    /usr/bin/python3 bench/cluster/run.py [--size 1g] [--rounds 4] [--streams 4]
                                          [--moves-only] [--quick]
"""
import argparse
import mmap
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchlib import (Etcd, RunRecord, fio_sequential, free_port, parse_args_with_quick,  # noqa: E402
                      parse_size, plot_bars, read_reply, redis_benchmark, resp, resp_call,
                      server_info,
                      wait_for_port, wait_loaded, write_json)

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SERVER = os.path.join(ROOT, "build", "src", "server", "tierkv-server")
SLOTS = 16384
MIB = 1 << 20

# name, value bytes, clients, pipeline, requests per test (SET and GET each)
ROWS = [("100B -P16", 100, 50, 16, 400_000), ("4KiB", 4096, 50, 1, 60_000)]


class Node:
    def __init__(self, workdir, name, memory, etcd=None, flash="4g", extra=()):
        self.dir = os.path.join(workdir, name)
        os.makedirs(self.dir)
        self.port = free_port()
        argv = [SERVER, "--port", str(self.port), "--bind", "127.0.0.1", "--memory", memory,
                "--metrics-port", str(free_port()),
                "--flash-path", os.path.join(self.dir, "flash.dat"), "--flash-size", flash]
        if etcd:
            argv += ["--cluster-enabled", "yes", "--cluster-etcd", etcd.endpoint,
                     "--cluster-name", "bench", "--cluster-lease-ttl", "3", *extra]
        self.log = open(os.path.join(self.dir, "server.log"), "wb")
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT, cwd=self.dir)
        wait_for_port(self.port, self.proc)
        wait_loaded(self.port, self.proc)

    def command(self, *args):
        return resp_call(self.port, *args)

    def info(self):
        return server_info(self.port, "cluster")

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def benchmark(port, size, clients, pipeline, requests):
    rows = redis_benchmark(port, "set,get", size, clients, pipeline, requests)
    return {row["test"]: float(row["rps"]) for row in rows}


def cost(args, workdir):
    """Per row and test: (plain ops/s, cluster ops/s) medians over rounds."""
    etcd = Etcd(os.path.join(workdir, "cost-etcd"))
    plain = Node(workdir, "plain", "1gb")
    clustered = Node(workdir, "clustered", "1gb", etcd)
    try:
        wait_until(lambda: clustered.info().get("cluster_slots_owned") == str(SLOTS), 30,
                   "the one-node cluster to own every slot")
        samples = {}
        for round_no in range(args.rounds):
            arms = (("plain", plain), ("cluster", clustered))
            for name, size, clients, pipeline, requests in ROWS:
                requests = max(1000, int(requests * args.scale))
                # Each arm goes first in every other round: neither always
                # meets the machine as the other left it.
                for arm, node in arms[::-1] if round_no % 2 else arms:
                    for test, ops in benchmark(node.port, size, clients, pipeline,
                                               requests).items():
                        samples.setdefault((name, test), {}).setdefault(arm, []).append(ops)
        redirects = int(clustered.info().get("cluster_moved", "0"))
    finally:
        for n in (plain, clustered):
            n.stop()
        etcd.stop()
    out = []
    for (name, test), arms in samples.items():
        p, c = median(arms["plain"]), median(arms["cluster"])
        out.append({"row": f"{test} {name}", "plain_ops": p, "cluster_ops": c, "ratio": c / p,
                    "plain_rounds": arms["plain"], "cluster_rounds": arms["cluster"]})
    return out, redirects


def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2]


def wait_until(cond, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.02)
    raise RuntimeError(f"timed out waiting for {what}")


def settled(nodes, owner=None):
    infos = [n.info() for n in nodes]
    if any(i.get("cluster_slots_migrating_out") != "0" for i in infos):
        return False
    owned = [int(i.get("cluster_slots_owned", "0")) for i in infos]
    if sum(owned) != SLOTS:
        return False
    return owner is None or owned[nodes.index(owner)] == SLOTS


def drain_and_wait(etcd, nodes, node):
    """Drains `node`; seconds until the other node owns every slot."""
    other = next(n for n in nodes if n is not node)
    node_id = node.command("CLUSTER", "MYID").decode()
    t0 = time.monotonic()
    etcd.put(f"/tierkv/bench/drain/{node_id}")
    wait_until(lambda: settled(nodes, other), 600, "the drain to finish")
    seconds = time.monotonic() - t0
    etcd.delete(f"/tierkv/bench/drain/{node_id}")
    wait_until(lambda: settled(nodes) and all(int(n.info()["cluster_slots_owned"]) > 0
                                              for n in nodes), 600, "the rebalance")
    return seconds


def owner_of(nodes, key):
    slot = int(nodes[0].command("CLUSTER", "KEYSLOT", key))
    for first, last, primary, *_ in nodes[0].command("CLUSTER", "SLOTS"):
        if int(first) <= slot <= int(last):
            return next(n for n in nodes if n.port == int(primary[1]))
    raise RuntimeError("no owner")


def fill_slot(node, size):
    """`size` bytes of 1 MiB values under one hash tag, pipelined."""
    value = os.urandom(MIB)
    count = size // MIB
    with socket.create_connection(("127.0.0.1", node.port), timeout=120) as s:
        f = s.makefile("rb")
        for start in range(0, count, 16):
            batch = range(start, min(count, start + 16))
            s.sendall(b"".join(resp("SET", f"{{slot}}:{i}", value) for i in batch))
            for _ in batch:
                read_reply(f)
    return count


def flash_bytes(node, which):
    return int(server_info(node.port, "flash").get(f"flash_{which}_bytes", "0"))


def move(args, workdir, label, memory):
    """(control s, move s, the source's pass s, keys, bytes moved, flash
    bytes read and written) for one memory size."""
    etcd = Etcd(os.path.join(workdir, f"{label}-etcd"))
    nodes = []
    try:
        extra = ("--cluster-migrate-streams", str(args.streams))
        nodes.append(Node(workdir, f"{label}-a", memory, etcd, extra=extra))
        wait_until(lambda: settled(nodes), 30, "the first node to own every slot")
        nodes.append(Node(workdir, f"{label}-b", memory, etcd, extra=extra))
        wait_until(lambda: settled(nodes) and all(int(n.info()["cluster_slots_owned"]) > 0
                                                  for n in nodes), 60, "the join")
        control = drain_and_wait(etcd, nodes, nodes[0])
        holder = owner_of(nodes, "{slot}")
        other = next(n for n in nodes if n is not holder)
        keys = fill_slot(holder, args.size)
        moved_before = int(holder.info()["cluster_bytes_migrated_out"])
        read_before = flash_bytes(holder, "read")
        written_before = flash_bytes(other, "write")
        seconds = drain_and_wait(etcd, nodes, holder)
        info = holder.info()
        moved = int(info["cluster_bytes_migrated_out"]) - moved_before
        pass_s = int(info["cluster_migration_last_pass_ms"]) / 1000
        if moved < keys * MIB:
            raise RuntimeError(f"{label}: {moved} bytes moved, {keys * MIB} expected")
        flash = {"read": flash_bytes(holder, "read") - read_before,
                 "written": flash_bytes(other, "write") - written_before}
        return control, seconds, pass_s, keys, moved, flash
    finally:
        for n in nodes:
            n.stop()
        etcd.stop()


def back_guest_memory(size):
    """Touches and frees `size` bytes. On a VM the host backs a guest page
    the first time the guest touches it, at a cost far above the guest's
    own first touch; which arm meets that first would decide the ratio, so
    neither does: both the bound and the move run on memory the host has
    backed already."""
    space = mmap.mmap(-1, size)
    for offset in range(0, size, 8 * MIB):
        space[offset:offset + 8 * MIB] = bytes(min(8 * MIB, size - offset))
    space.close()


def loopback_seconds(size, fresh):
    """One socket copy of `size` bytes between two threads: into one 8 MiB
    buffer used over and over, or (fresh) into `size` bytes of memory the
    receiver never touched, as a node's memory is before a move fills it."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    got = [0]

    def receive():
        conn, _ = listener.accept()
        space = mmap.mmap(-1, size) if fresh else bytearray(8 * MIB)
        view = memoryview(space)
        with conn:
            while True:
                n = conn.recv_into(view[got[0]:] if fresh else view)
                if n == 0:
                    break
                got[0] += n
        view.release()

    t = threading.Thread(target=receive)
    t.start()
    chunk = os.urandom(8 * MIB)
    t0 = time.monotonic()
    with socket.create_connection(("127.0.0.1", port)) as s:
        for _ in range(size // len(chunk)):
            s.sendall(chunk)
    t.join()
    seconds = time.monotonic() - t0
    listener.close()
    assert got[0] == size // len(chunk) * len(chunk)
    return seconds


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="1g", help="bytes in the slot that moves")
    ap.add_argument("--small-memory", default="256mb", help="memory of the flash case's nodes")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--scale", type=float, default=1.0, help="of the cost rows' request counts")
    ap.add_argument("--streams", type=int, default=4, help="cluster-migrate-streams of the nodes")
    ap.add_argument("--moves-only", action="store_true", help="skip the cost rows")
    ap.add_argument("--dir", default=None, help="working folder (default: a temp dir)")
    args = parse_args_with_quick(ap, {"size": "256m", "rounds": 1, "scale": 0.1})
    args.size = parse_size(args.size)
    run = RunRecord("cluster")
    workdir = tempfile.mkdtemp(prefix="tierkv-bench-cluster-", dir=args.dir)
    try:
        rows, redirects = ([{"row": "skipped", "plain_ops": 0, "cluster_ops": 0, "ratio": 0}], 0) \
            if args.moves_only else cost(args, workdir)
        back_guest_memory(3 * args.size)
        loop_fresh = loopback_seconds(args.size, fresh=True)
        mem = move(args, workdir, "memory", f"{max(2 * args.size, 1 << 30) // MIB}mb")
        flash = move(args, workdir, "flash", args.small_memory)
        loop = loopback_seconds(args.size, fresh=False)
        write_gbps = fio_sequential(workdir, args.size, "write")
        read_gbps = fio_sequential(workdir, args.size, "read")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    def disk(flash):
        return flash["read"] / 1e9 / read_gbps + flash["written"] / 1e9 / write_gbps

    print(f"{'cost row':<22}{'plain ops/s':>14}{'cluster ops/s':>15}{'ratio':>8}")
    for r in rows:
        print(f"{r['row']:<22}{r['plain_ops']:>14.0f}{r['cluster_ops']:>15.0f}{r['ratio']:>8.3f}")
    moves = []
    # In memory, the target lands the bytes in pages it never touched (the
    # kernel zeroes each on first touch: on these VMs that, not the copy, is
    # the cost); via flash, in its reused flash write buffers.
    for label, (control, seconds, data, keys, moved, flash_io), copy in (
            ("memory", mem, loop_fresh), ("flash", flash, loop)):
        bound = max(copy, disk(flash_io))
        moves.append({"case": label, "control_s": control, "move_s": seconds, "keys": keys,
                      "bytes": moved, "pass_s": data, "mb_s": moved / 1e6 / data,
                      "flash_read": flash_io["read"], "flash_written": flash_io["written"],
                      "disk_s": disk(flash_io), "copy_s": copy, "bound_s": bound,
                      "ratio": bound / data, "ratio_to_warm_copy": max(loop, disk(flash_io)) / data})
    print(f"\n{'move of one slot':<18}{'bytes':>12}{'empty s':>9}{'total s':>9}{'pass s':>8}"
          f"{'MB/s':>7}{'bound s':>9}{'ratio':>7}")
    for m in moves:
        print(f"{m['case']:<18}{m['bytes']:>12}{m['control_s']:>9.2f}{m['move_s']:>9.2f}"
              f"{m['pass_s']:>8.2f}{m['mb_s']:>7.0f}{m['bound_s']:>9.2f}{m['ratio']:>7.3f}")
    for m in moves:
        print(f"  {m['case']}: flash read {m['flash_read'] / 1e6:.0f} MB, written "
              f"{m['flash_written'] / 1e6:.0f} MB -> disk {m['disk_s']:.2f} s")
    print(f"bounds: socket copy {loop:.2f} s ({args.size / 1e6 / loop:.0f} MB/s), into fresh "
          f"memory {loop_fresh:.2f} s ({args.size / 1e6 / loop_fresh:.0f} MB/s; the memory "
          f"move's bound, its ratio to the reused-buffer copy {moves[0]['ratio_to_warm_copy']:.3f}"
          f"); fio read "
          f"{read_gbps:.2f} GB/s, write {write_gbps:.2f} GB/s; redirects in the cost runs: "
          f"{redirects}")
    worst = min(rows, key=lambda r: r["ratio"])
    results = os.path.join(ROOT, "bench", "results")
    write_json(os.path.join(results, "cluster.json"),
               {"cost": rows, "moves": moves, "loopback_s": loop, "loopback_fresh_s": loop_fresh,
                "fio_read_gbps": read_gbps,
                "fio_write_gbps": write_gbps, "size": args.size, "redirects": redirects}, run)
    plot_bars(os.path.join(results, "cluster.png"), "cluster mode: cost ratio and move ratio",
              {**{r["row"]: r["ratio"] for r in rows},
               **{f"move {m['case']}": m["ratio"] for m in moves}}, "ratio to the bound")
    print(run.result_line({
        "ratio": f"{worst['ratio']:.3f}", "worst_cost_row": worst["row"].replace(" ", "_"),
        "move_mem_ratio": f"{moves[0]['ratio']:.3f}",
        "move_flash_ratio": f"{moves[1]['ratio']:.3f}",
        "move_mem_mb_s": f"{moves[0]['mb_s']:.0f}", "move_flash_mb_s": f"{moves[1]['mb_s']:.0f}",
        "control_s": f"{moves[0]['control_s']:.2f}",
        "loopback_mb_s": f"{args.size / 1e6 / loop:.0f}",
        "loopback_fresh_mb_s": f"{args.size / 1e6 / loop_fresh:.0f}",
        "size": args.size}))


if __name__ == "__main__":
    main()
