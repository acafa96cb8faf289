#!/usr/bin/python3
"""Restart time of tierkv-server against flash size, next to fio.

For each flash size: a tierkv-server on loopback (small memory) is filled
with objects of 4 KiB-8 MiB (log-uniform) up to 90% of its flash, then
  clean: SIGTERM (everything on flash, and the index snapshot once the
         flash side writes one), then a start;
  crash: a few more writes after that start, kill -9, then a start.
Each start is timed from the process launch to the first +PONG and to the
end of loading (INFO persistence loading:0, polled), and INFO gives the
index source and the last recovery's bytes and duration, whence the scan
rate. Then, with the server stopped, fio reads the same file sequentially
(io_uring, O_DIRECT, 1 MiB blocks, depth 16) over the bytes recovery read:
the scan rate is reported as a ratio to that.

    /usr/bin/python3 bench/restart/run.py [--sizes 1g,4g,16g] [--dir DIR]

Prints a table, writes bench/results/restart.json (and restart.png with
python3-matplotlib) and ends with a RESULT line. See docs/flash-tier.md
("Restart").
"""
import argparse
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchlib import RunRecord, free_port, parse_args_with_quick, parse_size, server_info, write_json  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RESULTS = os.path.join(ROOT, "bench", "results")
FILL_FRACTION = 0.9
LOW, HIGH = 4 << 10, 8 << 20
PROJECT_BYTES = 4e12  # the note projects restart times to a 4 TB device


def log_uniform_sizes(rng, total):
    sizes, done = [], 0
    while done < total:
        n = int(2 ** rng.uniform(LOW.bit_length() - 1, HIGH.bit_length() - 1))
        n = min(HIGH, max(LOW, n))
        sizes.append(n)
        done += n
    return sizes


class Server:
    """One tierkv-server on a flash file that outlives it."""

    def __init__(self, args, flash_path, flash_size, workdir):
        self.args, self.flash_path, self.flash_size = args, flash_path, flash_size
        self.log = open(os.path.join(workdir, "server.log"), "ab")
        self.proc, self.port = None, None

    def start(self):
        """Launches; returns (seconds to first PONG, seconds to loaded)."""
        self.port = free_port()
        argv = [self.args.server, "--port", str(self.port), "--bind", "127.0.0.1",
                "--metrics-port", "0", "--memory", self.args.memory,
                "--region-size", self.args.region_size, "--flash-size", str(self.flash_size),
                "--flash-path", self.flash_path, "--log-level", "info"]
        t0 = time.monotonic()
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT)
        pong = self._poll(t0, self._pongs)
        loaded = self._poll(t0, lambda: self.persistence().get("loading") == "0")
        return pong, loaded

    def _poll(self, t0, ready):
        deadline = t0 + self.args.timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"tierkv-server exited with {self.proc.returncode}")
            try:
                if ready():
                    return time.monotonic() - t0
            except OSError:
                pass
            time.sleep(0.002)
        raise RuntimeError(f"tierkv-server not ready within {self.args.timeout} s")

    def _pongs(self):
        with socket.create_connection(("127.0.0.1", self.port), timeout=5) as s:
            s.sendall(b"*1\r\n$4\r\nPING\r\n")
            return s.recv(64) == b"+PONG\r\n"

    def persistence(self):
        return server_info(self.port, "persistence")

    def stop(self, sig=signal.SIGTERM):
        self.proc.send_signal(sig)
        code = self.proc.wait(self.args.timeout)
        if sig == signal.SIGTERM and code != 0:
            raise RuntimeError(f"clean shutdown exited with {code}")


def fill(port, sizes, prefix, block, connections=2):
    """SETs prefix<i> for every size, pipelined over `connections` sockets."""
    errors = []

    def one(share):
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=120) as s:
                for start in range(0, len(share), 16):
                    batch = share[start:start + 16]
                    for i, n in batch:
                        key = b"%s%d" % (prefix, i)
                        off = (i * 7919) % (len(block) - n + 1)
                        s.sendall(b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n" % (len(key), key, n))
                        s.sendall(block[off:off + n])
                        s.sendall(b"\r\n")
                    expect = b"+OK\r\n" * len(batch)
                    got = b""
                    while len(got) < len(expect):
                        chunk = s.recv(65536)
                        if not chunk:
                            raise ConnectionError("server closed the connection")
                        got += chunk
                    if got != expect:
                        raise RuntimeError(f"SET failed: {got[:200]!r}")
        except Exception as e:  # noqa: BLE001 - reported by the caller
            errors.append(e)

    indexed = list(enumerate(sizes))
    threads = [threading.Thread(target=one, args=(indexed[k::connections],))
               for k in range(connections)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def run_fio(path, length):
    length = max(1 << 20, length // (1 << 20) * (1 << 20))
    args = ["fio", "--name=restart-seq", f"--filename={path}", "--readonly", "--rw=read",
            "--direct=1", "--ioengine=io_uring", "--bs=1m", "--iodepth=16",
            f"--size={length}", "--output-format=json"]
    out = subprocess.run(args, capture_output=True, text=True, check=False, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(f"fio failed ({out.returncode}): {out.stderr.strip()}")
    read = json.loads(out.stdout[out.stdout.index("{"):])["jobs"][0]["read"]
    return read["bw_bytes"] / 1e6


def restart(server, kind):
    pong, loaded = server.start()
    p = server.persistence()
    rate = float(p.get("recovery_rate_mb_s", 0))
    return {"kind": kind, "first_pong_s": pong, "loaded_s": loaded,
            "source": p.get("loading_source"), "recovery_ms": int(p.get("recovery_duration_ms", 0)),
            "recovery_bytes": int(p.get("recovery_bytes", 0)),
            "objects": int(p.get("recovery_objects", 0)), "scan_mb_s": rate}


def one_size(args, size, workdir, block):
    path = os.path.join(workdir, f"restart-{size >> 20}m.dat")
    server = Server(args, path, size, workdir)
    sizes = log_uniform_sizes(random.Random(size), int(size * FILL_FRACTION))
    server.start()
    t = time.monotonic()
    fill(server.port, sizes, b"k", block)
    fill_s = time.monotonic() - t
    t = time.monotonic()
    server.stop()
    stop_s = time.monotonic() - t
    clean = restart(server, "clean")
    fill(server.port, sizes[:64], b"after-", block)  # the index changed since the clean stop
    server.stop(signal.SIGKILL)
    crash = restart(server, "crash")
    server.stop(signal.SIGKILL)
    fio = run_fio(path, max(clean["recovery_bytes"], crash["recovery_bytes"]))
    for r in (clean, crash):
        r["fio_mb_s"] = fio
        r["scan_ratio"] = r["scan_mb_s"] / fio if fio else 0.0
    os.unlink(path)
    return {"flash_bytes": size, "objects_written": len(sizes), "bytes_written": sum(sizes),
            "fill_s": fill_s, "shutdown_s": stop_s, "runs": [clean, crash], "fio_seq_mb_s": fio}


def print_table(results):
    print(f"\n{'flash':>6} {'restart':>7} {'source':>8} {'objects':>8} {'PONG s':>7} "
          f"{'loaded s':>8} {'scan MB/s':>9} {'fio MB/s':>8} {'ratio':>6}")
    for res in results:
        for r in res["runs"]:
            print(f"{res['flash_bytes'] / (1 << 30):>5g}G {r['kind']:>7} {r['source'] or '?':>8} "
                  f"{r['objects']:>8} {r['first_pong_s']:>7.3f} {r['loaded_s']:>8.2f} "
                  f"{r['scan_mb_s']:>9.0f} {r['fio_mb_s']:>8.0f} {r['scan_ratio']:>6.2f}")


def projection(results):
    """Seconds a 4 TB device would take: crash at the slowest scan rate seen;
    clean as the largest size measured scaled by bytes if it scanned (no
    snapshot), else its time as measured (a snapshot is flat in size)."""
    crash = [r for res in results for r in res["runs"] if r["kind"] == "crash"]
    rate = min(r["scan_mb_s"] for r in crash) * 1e6 if crash else 0
    last = results[-1]["runs"][0]
    clean = (last["loaded_s"] if last["source"] == "snapshot"
             else PROJECT_BYTES / (last["scan_mb_s"] * 1e6 or 1))
    return {"crash_4tb_s": PROJECT_BYTES / rate if rate else 0.0, "clean_4tb_s": clean}


def plot(json_path, results):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6, 4))
    gib = [res["flash_bytes"] / (1 << 30) for res in results]
    for i, kind in enumerate(("clean", "crash")):
        ax.plot(gib, [res["runs"][i]["loaded_s"] for res in results], marker="o", label=kind)
    ax.set_xlabel("flash GiB")
    ax.set_ylabel("seconds to loaded")
    ax.legend()
    png = json_path.removesuffix(".json") + ".png"
    fig.tight_layout()
    fig.savefig(png)
    return png


def default_sizes(directory):
    """1, 4 and 16 GiB, fewer if the disk has not room for the largest twice over."""
    free = shutil.disk_usage(directory).free
    sizes = [s for s in (1 << 30, 4 << 30, 16 << 30) if 2 * s < free]
    return sizes or [256 << 20]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--server", default=os.environ.get(
        "TIERKV_SERVER", os.path.join(ROOT, "build", "src", "server", "tierkv-server")))
    ap.add_argument("--sizes", help="flash sizes, e.g. 1g,4g,16g (default: those that fit)")
    ap.add_argument("--dir", default=RESULTS, help="where the flash files go (a real disk)")
    ap.add_argument("--memory", default="64mb")
    ap.add_argument("--region-size", default="16mb")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per start or stop")
    ap.add_argument("--out", default=os.path.join(RESULTS, "restart.json"))
    args = parse_args_with_quick(ap, {"sizes": "256m"})
    run = RunRecord("restart")
    os.makedirs(args.dir, exist_ok=True)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    sizes = ([parse_size(s) for s in args.sizes.split(",")] if args.sizes
             else default_sizes(args.dir))
    workdir = tempfile.mkdtemp(prefix="tmp-restart-", dir=args.dir)
    block = random.Random(7).randbytes(HIGH * 2)
    started = time.time()
    results = []
    try:
        for size in sizes:
            print(f"{size >> 20} MiB flash: filling, restarting clean and after kill -9...",
                  flush=True)
            results.append(one_size(args, size, workdir, block))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print_table(results)
    proj = projection(results)
    write_json(args.out, {"results": results, "projection": proj}, run)
    try:
        note = f"wrote {os.path.relpath(args.out, ROOT)} and {plot(args.out, results)}"
    except ImportError:
        note = f"wrote {os.path.relpath(args.out, ROOT)}; no plot: python3-matplotlib is not installed"  # noqa: E501
    print(note)
    print(f"projected to 4 TB: clean {proj['clean_4tb_s']:.0f} s, crash {proj['crash_4tb_s']:.0f} s")
    clean = [res["runs"][0] for res in results]
    crash = [res["runs"][1] for res in results]
    gib = ",".join(f"{res['flash_bytes'] / (1 << 30):g}g" for res in results)
    clean_s = ",".join(f"{r['loaded_s']:.2f}" for r in clean)
    crash_s = ",".join(f"{r['loaded_s']:.2f}" for r in crash)
    # The headline: the crash scan's rate against fio's sequential read of
    # the same file (the worst size).
    worst = min(crash, key=lambda r: r["scan_ratio"])
    print(run.result_line({
        "ratio": f"{worst['scan_ratio']:.2f}", "scan_mb_s": f"{worst['scan_mb_s']:.0f}",
        "fio_mb_s": f"{worst['fio_mb_s']:.0f}", "sizes": gib,
        "clean_loaded_s": clean_s, "crash_loaded_s": crash_s,
        "first_pong_s": f"{max(r['first_pong_s'] for r in clean + crash):.3f}",
        "crash_scan_ratio": f"{min(r['scan_ratio'] for r in crash):.2f}",
        "clean_source": ",".join(r["source"] or "?" for r in clean),
        "seconds": f"{time.time() - started:.0f}"}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
