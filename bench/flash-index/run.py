#!/usr/bin/python3
"""DRAM and flash per small object, restart time and scan rate at scale.

Two arms, each on servers it starts on loopback:

  memory  tierkv-server (no flash) and redis-server side by side, each
          loaded with --memory-keys keys of 16 bytes and 100-byte values;
          RSS per key of each (RSS after the load minus RSS before, over the
          keys), and tierkv's as a ratio to redis's (the goal: <= 1.0); then
          the same on fresh servers with SET ... EX 3600 (expiries cost
          both a table beside the keys).
  flash   tierkv-server with 64 MiB of memory and a flash file large enough,
          loaded with 16-byte keys and 200-byte values up to each of
          --flash-objects (10M and 50M by default), so that nearly all of
          them live on flash. At each point: RSS, INFO's flash_objects,
          flash_used_bytes and flash_index_bytes. DRAM per flash-resident
          object is the RSS difference between the points over the objects
          added (the goal: <= 24 B); flash per object is flash_used_bytes
          over flash_objects, against the record's own size (64-byte header
          + key + value, goal <= 1.6x). Then a clean restart (the index
          snapshot) and a restart after kill -9 (the log scan), timed from
          launch to the end of loading. The clean restart's bound: fio's
          sequential O_DIRECT read of as many bytes as the snapshot took.

    /usr/bin/python3 bench/flash-index/run.py [--memory-keys 2000000]
        [--flash-objects 10000000,50000000] [--dir DIR] [--quick]

Prints a table, writes bench/results/flash-index.json (and .png with
python3-matplotlib), and ends with a RESULT line whose ratio is the memory
arm's redis RSS per key over tierkv's (1.0 or more meets the goal).
"""
import argparse
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import benchlib  # noqa: E402

RESULTS = os.path.join(benchlib.ROOT, "bench", "results")
KEY_BYTES = 16
RECORD_HEADER = 64


def rss_bytes(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def key_of(i):
    return b"key-%012d" % i  # 16 bytes


def load(port, first, last, value, batch=2000, ttl_s=0):
    """SETs key_of(i) for i in [first, last) (with EX ttl_s if given),
    pipelined on one connection: a sender thread keeps the pipe full while
    this thread counts the replies."""
    reply = b"+OK\r\n"
    head = b"*%d\r\n$3\r\nSET\r\n$%d\r\n" % (5 if ttl_s else 3, KEY_BYTES)
    tail = b"\r\n$%d\r\n%s\r\n" % (len(value), value)
    if ttl_s:
        tail += b"$2\r\nEX\r\n$%d\r\n%d\r\n" % (len(str(ttl_s)), ttl_s)
    with socket.create_connection(("127.0.0.1", port), timeout=300) as s:
        failure = []

        def send():
            try:
                for start in range(first, last, batch):
                    stop = min(last, start + batch)
                    s.sendall(b"".join(head + key_of(i) + tail for i in range(start, stop)))
            except OSError as e:
                failure.append(e)

        sender = threading.Thread(target=send)
        sender.start()
        expected = (last - first) * len(reply)
        got = 0
        while got < expected:
            data = s.recv(1 << 20)
            if not data:
                raise RuntimeError("server closed the connection during the load")
            if data.strip(b"+OK\r\n"):
                raise RuntimeError(f"unexpected reply {data[:80]!r}")
            got += len(data)
        sender.join()
        if failure:
            raise failure[0]


def snapshot_size(log):
    """The bytes of the last index snapshot the server's log reports."""
    found = re.findall(rb"index snapshot of \d+ objects \((\d+) bytes\)", log)
    return int(found[-1]) if found else 0


def read_from(path, offset):
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read()


class Peer:
    """A server process on a free loopback port."""

    def __init__(self, argv_for_port, workdir, name):
        self.port = benchlib.free_port()
        self.log = open(os.path.join(workdir, f"{name}.log"), "ab")
        self.argv = argv_for_port(self.port)
        self.proc = None

    def start(self, timeout):
        t0 = time.monotonic()
        self.proc = subprocess.Popen(self.argv, stdout=self.log, stderr=subprocess.STDOUT)
        benchlib.wait_for_port(self.port, self.proc, timeout)
        benchlib.wait_loaded(self.port, self.proc, timeout)
        return time.monotonic() - t0

    def info(self, section=None):
        return benchlib.server_info(self.port, section)

    def stop(self, sig=signal.SIGTERM, timeout=600):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(timeout)


def tierkv_argv(args, memory, flash_path=None, flash_size=0):
    def argv(port):
        out = [args.server, "--port", str(port), "--bind", "127.0.0.1", "--metrics-port", "0",
               "--memory", memory, "--flash-size", str(flash_size), "--log-level", "info"]
        if flash_path:
            # 21 B of snapshot per ~300 B object: the default 1/64 is too
            # small for the snapshot of a device full of them.
            out += ["--flash-path", flash_path, "--region-size", "16mb",
                    "--flash-snapshot-area", "0.08"]
            # What an operator of 50 M small objects chooses: the index
            # loads several times faster on huge pages (off by default).
            out += ["--malloc-huge-pages", "yes"]
        return out
    return argv


def memory_arm(args, workdir):
    """Each system loaded twice, on a fresh server each time: plain SETs (the
    goal's figure), then SETs with EX 3600, whose expiries both keep in a
    table beside the keys. Rows "tierkv", "redis", "tierkv_ttl", "redis_ttl"."""
    value = b"v" * 100
    rows = {}
    peers = {
        "tierkv": lambda: Peer(tierkv_argv(args, "8gb"), workdir, "tierkv-memory"),
        "redis": lambda: Peer(lambda port: [args.redis, "--port", str(port), "--bind",
                                            "127.0.0.1", "--save", "", "--appendonly", "no"],
                              workdir, "redis"),
    }
    for ttl_s, suffix in ((0, ""), (3600, "_ttl")):
        for name, make_peer in peers.items():
            peer = make_peer()
            peer.start(60)
            try:
                load(peer.port, 0, 1000, value, ttl_s=ttl_s)  # connections, first allocations
                before = rss_bytes(peer.proc.pid)
                t0 = time.monotonic()
                load(peer.port, 1000, 1000 + args.memory_keys, value, ttl_s=ttl_s)
                seconds = time.monotonic() - t0
                after = rss_bytes(peer.proc.pid)
                rows[name + suffix] = {"keys": args.memory_keys, "ttl_s": ttl_s,
                                       "rss_before": before, "rss_after": after,
                                       "rss_per_key": (after - before) / args.memory_keys,
                                       "load_keys_s": args.memory_keys / seconds}
            finally:
                peer.stop()
    return rows


def flash_arm(args, workdir):
    value = b"w" * 200
    targets = [int(benchlib.parse_size(t)) for t in args.flash_objects.split(",")]
    record = RECORD_HEADER + KEY_BYTES + len(value)
    flash_size = int(max(targets) * 330 * 1.25) + (1 << 30)
    path = os.path.join(workdir, "flash.img")
    server = Peer(tierkv_argv(args, "64mb", path, flash_size), workdir, "tierkv-flash")
    server.start(600)
    points, loaded = [], 0
    try:
        for target in targets:
            t0 = time.monotonic()
            load(server.port, loaded, target, value)
            seconds = time.monotonic() - t0
            loaded = target
            f = server.info("flash")
            point = {"keys_loaded": target, "rss": rss_bytes(server.proc.pid),
                     "flash_objects": int(f["flash_objects"]),
                     "flash_used_bytes": int(f["flash_used_bytes"]),
                     "flash_index_bytes": int(f["flash_index_bytes"]),
                     "load_keys_s": (target - (points[-1]["keys_loaded"] if points else 0)) / seconds}
            if point["flash_objects"] == 0:
                sys.exit(f"flash-index: no object is on flash after {target:,} keys "
                         "(64 MiB of memory holds them all): use larger --flash-objects")
            point["flash_bytes_per_object"] = point["flash_used_bytes"] / point["flash_objects"]
            point["index_bytes_per_object"] = point["flash_index_bytes"] / point["flash_objects"]
            points.append(point)
            print(f"  {target:>11,} keys: {point['flash_objects']:,} on flash, RSS "
                  f"{point['rss'] >> 20} MiB, flash {point['flash_bytes_per_object']:.0f} B/object",
                  flush=True)
        server.stop()
        log_at = server.log.tell()
        snapshot_bytes = snapshot_size(read_from(server.log.name, 0))
        clean_s = server.start(600)
        from_snapshot = "snapshot" if b"index loaded from the snapshot" in read_from(
            server.log.name, log_at) else "scan"
        objects_after_clean = int(server.info("flash")["flash_objects"])
        server.stop(signal.SIGKILL)
        crash_s = server.start(1800)
        objects_after_crash = int(server.info("flash")["flash_objects"])
    finally:
        server.stop()
    # The bound of a snapshot load: reading its bytes off this disk.
    snapshot_read_s = None
    if snapshot_bytes:
        snapshot_read_s = snapshot_bytes / (benchlib.fio_sequential(workdir, snapshot_bytes, "read")
                                            * 1e9)
    first, last = points[0], points[-1]
    added = last["flash_objects"] - first["flash_objects"]
    return {"points": points, "record_bytes": record,
            "dram_per_object": (last["rss"] - first["rss"]) / added if added else None,
            "flash_per_object_over_record": last["flash_bytes_per_object"] / record,
            "clean_restart_s": clean_s, "clean_restart_source": from_snapshot,
            "snapshot_bytes": snapshot_bytes, "snapshot_read_s": snapshot_read_s,
            "objects_after_clean": objects_after_clean,
            "crash_restart_s": crash_s, "objects_after_crash": objects_after_crash,
            "scan_objects_s": objects_after_crash / crash_s if crash_s else None}


def plot(path, memory, flash):
    plt = benchlib.pyplot()
    if plt is None:
        return None
    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.5))
    names = ["tierkv", "redis", "tierkv_ttl", "redis_ttl"]
    a.bar([n.replace("_ttl", "\nEX") for n in names], [memory[n]["rss_per_key"] for n in names])
    a.set_ylabel("RSS bytes per key (16 B key, 100 B value)")
    a.set_title("small keys in memory")
    xs = [p["flash_objects"] / 1e6 for p in flash["points"]]
    b.plot(xs, [p["rss"] / 2**20 for p in flash["points"]], marker="o", label="RSS (MiB)")
    b.set_xlabel("objects on flash (millions)")
    b.set_ylabel("MiB")
    b.set_title(f"DRAM per flash object: {flash['dram_per_object']:.0f} B")
    b.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--server", default=os.path.join(benchlib.ROOT, "build", "src", "server",
                                                     "tierkv-server"))
    ap.add_argument("--redis", default=shutil.which("redis-server") or "redis-server")
    ap.add_argument("--memory-keys", type=int, default=2_000_000)
    ap.add_argument("--flash-objects", default="10m,50m",
                    help="load points, comma-separated (k: thousands, m: millions)")
    ap.add_argument("--dir", default=None, help="where the flash file goes (default: a temp dir)")
    ap.add_argument("--json", default=os.path.join(RESULTS, "flash-index.json"))
    args = benchlib.parse_args_with_quick(ap, {"memory_keys": 200_000,
                                               "flash_objects": "500k,1500k"})
    args.flash_objects = ",".join(str(int(float(t[:-1]) * 1e6)) if t.endswith("m") else
                                  str(int(float(t[:-1]) * 1e3)) if t.endswith("k") else t
                                  for t in args.flash_objects.split(","))
    run = benchlib.RunRecord("flash-index")
    workdir = tempfile.mkdtemp(prefix="tierkv-flash-index-", dir=args.dir)
    try:
        memory = memory_arm(args, workdir)
        flash = flash_arm(args, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    t, r = memory["tierkv"], memory["redis"]
    print(f"\n{'memory arm':<34}{'tierkv':>12}{'redis':>12}")
    print(f"{'RSS per key (B)':<34}{t['rss_per_key']:>12.1f}{r['rss_per_key']:>12.1f}")
    tt, rt = memory["tierkv_ttl"], memory["redis_ttl"]
    print(f"{'RSS per key with EX (B)':<34}{tt['rss_per_key']:>12.1f}{rt['rss_per_key']:>12.1f}")
    print(f"{'load (keys/s)':<34}{t['load_keys_s']:>12.0f}{r['load_keys_s']:>12.0f}")
    print(f"\n{'flash arm':<20}{'keys':>12}{'on flash':>12}{'RSS MiB':>10}{'flash B/obj':>12}"
          f"{'index B/obj':>12}")
    for p in flash["points"]:
        print(f"{'':<20}{p['keys_loaded']:>12,}{p['flash_objects']:>12,}{p['rss'] >> 20:>10}"
              f"{p['flash_bytes_per_object']:>12.1f}{p['index_bytes_per_object']:>12.1f}")
    print(f"DRAM per flash object (RSS difference): {flash['dram_per_object']:.1f} B")
    print(f"flash per object over its record ({flash['record_bytes']} B): "
          f"{flash['flash_per_object_over_record']:.3f}")
    print(f"clean restart: {flash['clean_restart_s']:.2f} s from the "
          f"{flash['clean_restart_source']} ({flash['objects_after_clean']:,} "
          f"objects); after kill -9: {flash['crash_restart_s']:.2f} s "
          f"({flash['scan_objects_s']:,.0f} objects/s)")
    if flash["snapshot_read_s"]:
        print(f"bound: fio reads the {flash['snapshot_bytes'] / 1e9:.2f} GB snapshot in "
              f"{flash['snapshot_read_s']:.2f} s")
    ratio = r["rss_per_key"] / t["rss_per_key"]
    png = plot(os.path.join(RESULTS, "flash-index.png"), memory, flash)
    benchlib.write_json(args.json, {"memory": memory, "flash": flash, "png": png}, run)
    print(run.result_line({
        "ratio": round(ratio, 3),
        "mem_rss_per_key": round(t["rss_per_key"], 1),
        "redis_rss_per_key": round(r["rss_per_key"], 1),
        "mem_rss_per_key_ttl": round(tt["rss_per_key"], 1),
        "redis_rss_per_key_ttl": round(rt["rss_per_key"], 1),
        "dram_per_flash_object": round(flash["dram_per_object"], 1),
        "index_bytes_per_object": round(flash["points"][-1]["index_bytes_per_object"], 1),
        "flash_bytes_per_object": round(flash["points"][-1]["flash_bytes_per_object"], 1),
        "flash_over_record": round(flash["flash_per_object_over_record"], 3),
        "objects": flash["points"][-1]["flash_objects"],
        "clean_restart_s": round(flash["clean_restart_s"], 2),
        "clean_restart_from": flash["clean_restart_source"],
        "snapshot_read_s": round(flash["snapshot_read_s"], 2) if flash["snapshot_read_s"] else None,
        "crash_restart_s": round(flash["crash_restart_s"], 2),
        "scan_objects_s": round(flash["scan_objects_s"]),
    }))


if __name__ == "__main__":
    main()
