#!/usr/bin/python3
"""The seed's streaming experiment: 4096 use-once tiles on flash, backing
latency L, a consumer that computes C = 30 us per tile, look-ahead depth D
and P channels; in-process through StreamReader (tierkv-stream-pipeline)
and over the wire through TIER.STREAM + GET (this script's own client).

For each (L, P, D) it reports the time per tile, the speedup against D = 0,
the ideal speedup (L + C) / max(C, L / P, t_serve), and the ratio of the
bound time per tile, max(C, L / P, t_serve), to the measured one (measured
against measured: the D = 0 base also pays per-tile costs that L + C leaves
out, so speedup / ideal can pass 1). L is the
measured median chunk read latency (the model's L plus the device and the
read path) and t_serve the consumer's time to take a tile that had already
arrived. The overlap model saturates at D = ceil(L / C).

On the real device (L = 0) the ideal also has the device's own time per
read at queue depth P, t_dev(P) = 1 / IOPS, measured with fio in the same
run, in the same directory, with the block a tile's chunk read takes (its
data rounded up to 4 KiB plus the 4 KiB record header): L / P assumes a
device whose throughput grows P-fold with P reads in flight, and a virtual
disk's does not. Without fio, or if fio fails there, the term is left out
(and said so).

Prints a table and RESULT lines; writes bench/results/stream-pipeline-<ts>.json
and .png. Build first: cmake --build build --target tierkv-stream-pipeline tierkv-server
"""
import argparse
import json
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import benchlib  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def busy(ns):
    until = time.perf_counter_ns() + ns
    while time.perf_counter_ns() < until:
        pass


def data_dir(args, latency_ns):
    """A modelled latency is measured with the flash file in memory (tmpfs),
    so that the model's L is what is measured; L = 0 is the real device."""
    return args.model_dir if latency_ns > 0 else args.device_dir


def inproc(args, latency_ns):
    exe = os.path.join(args.build, "bench", "stream-pipeline", "tierkv-stream-pipeline")
    cmd = [exe, "--latency-ns", str(latency_ns), "--compute-ns", str(args.compute_ns),
           "--tiles", str(args.tiles), "--tile-bytes", str(args.tile_bytes),
           "--channels", args.channels, "--depths", args.depths,
           "--dir", data_dir(args, latency_ns)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=900).stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


class Wire:
    """A RESP client on one socket that reads bulk replies without a library."""

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=60)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def send(self, *args):
        out = b"*%d\r\n" % len(args)
        for a in args:
            a = a if isinstance(a, bytes) else str(a).encode()
            out += b"$%d\r\n%s\r\n" % (len(a), a)
        self.sock.sendall(out)

    def _need(self, n):
        while len(self.buf) < n:
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise ConnectionError("closed")
            self.buf += chunk

    def reply(self):
        while b"\r\n" not in self.buf:
            self._need(len(self.buf) + 1)
        line, self.buf = self.buf.split(b"\r\n", 1)
        if line[:1] == b"$" and line != b"$-1":
            n = int(line[1:])
            self._need(n + 2)
            data, self.buf = self.buf[:n], self.buf[n + 2:]
            return data
        if line[:1] == b"-":
            raise RuntimeError(line.decode())
        return line

    def call(self, *args):
        self.send(*args)
        return self.reply()


def start_server(args, workdir, latency_ns, extra=()):
    port, mport = benchlib.free_port(), benchlib.free_port()
    exe = os.path.join(args.build, "src", "server", "tierkv-server")
    argv = [exe, "--port", str(port), "--bind", "127.0.0.1", "--metrics-port", str(mport),
            "--memory", "64mb", "--flash-path", os.path.join(workdir, "flash.dat"),
            "--flash-size", "256mb", "--flash-preallocate", "no",
            "--backing-latency-ns", str(latency_ns),
            "--io-threads", "1", "--dirty-max-fraction", "1", *extra]
    log = open(os.path.join(workdir, "server.log"), "ab")
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=workdir)
    benchlib.wait_for_port(port, proc)
    benchlib.wait_loaded(port, proc)
    return proc, port


def stop_server(proc):
    proc.send_signal(signal.SIGTERM)
    proc.wait(120)


def wire_run(c, keys, depth, channels, compute_ns):
    start = time.perf_counter_ns()
    if depth > 0:
        c.call("TIER.STREAM", *keys, "DEPTH", depth, "CHANNELS", channels, "USEONCE")
    for k in keys:
        c.send("GET", k)
        if c.reply() is None:
            raise RuntimeError(f"{k} missing")
        busy(compute_ns)
    elapsed = time.perf_counter_ns() - start
    if depth > 0:
        c.call("TIER.STREAM", "RESET")
    return elapsed / len(keys)


def wire(args, latency_ns):
    workdir = tempfile.mkdtemp(prefix="tierkv-pipeline-wire-", dir=data_dir(args, latency_ns))
    keys = [f"tile:{i:05d}" for i in range(args.tiles)]
    proc, port = start_server(args, workdir, latency_ns)
    c = Wire(port)
    value = b"x" * args.tile_bytes
    for k in keys:
        c.send("SET", k, value)
    for _ in keys:
        c.reply()
    stop_server(proc)  # a clean shutdown writes memory to flash ...
    proc, port = start_server(args, workdir, latency_ns)  # ... and memory starts empty
    rows = []
    try:
        c = Wire(port)
        for p in [int(x) for x in args.channels.split(",")]:
            for d in [int(x) for x in args.depths.split(",")]:
                ns = wire_run(c, keys, d, p, args.compute_ns)
                rows.append({"mode": "wire", "L_ns": latency_ns, "C_ns": args.compute_ns, "P": p,
                             "D": d, "tiles": args.tiles, "ns_per_tile": ns})
        # t_serve over the wire: nothing to wait for, no compute.
        serve = wire_run(c, keys, 16, 8, 0)
        for r in rows:
            r["serve_ns"] = serve
    finally:
        stop_server(proc)
        shutil.rmtree(workdir, ignore_errors=True)
    return rows


def device_times(args):
    """fio random reads of tile-sized blocks at each P on the device: the
    device's time per read (ns) by queue depth, or {} without fio."""
    if shutil.which("fio") is None:
        print("fio is not installed: the device ideal has no t_dev(P) term", flush=True)
        return {}
    workdir = tempfile.mkdtemp(prefix="tierkv-pipeline-fio-", dir=args.device_dir)
    path = os.path.join(workdir, "device.dat")
    block = -(-args.tile_bytes // 4096) * 4096 + 4096
    mib = 1 << 20
    size = -(-max(args.tiles * block, 64 * mib) // mib) * mib
    try:
        with open(path, "wb") as f:
            for _ in range(size // (1 << 20)):
                f.write(os.urandom(1 << 20))
            f.flush()
            os.fsync(f.fileno())
        out = {}
        for p in [int(x) for x in args.channels.split(",")]:
            run = subprocess.run(
                ["fio", "--name=device", f"--filename={path}", "--readonly",
                 "--ioengine=io_uring", "--direct=1", "--rw=randread", f"--bs={block}",
                 f"--iodepth={p}", f"--size={size}", f"--runtime={args.fio_ms}ms",
                 "--time_based", "--randrepeat=0", "--output-format=json"],
                capture_output=True, text=True, check=True, timeout=120)
            read = json.loads(run.stdout[run.stdout.index("{"):])["jobs"][0]["read"]
            out[p] = 1e9 / read["iops"] if read["iops"] else 0.0
        return out
    except (subprocess.SubprocessError, ValueError, KeyError) as e:
        print(f"fio failed in {args.device_dir} ({e}): the device ideal has no t_dev(P) term",
              flush=True)
        return {}
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def annotate(rows, inproc_rows, device_ns):
    """Speedup against D = 0, ideal and ratio, per (mode, L, P)."""
    for r in rows:
        group = [x for x in rows if x["mode"] == r["mode"] and x["L_ns"] == r["L_ns"] and
                 x["P"] == r["P"]]
        base = next(x for x in group if x["D"] == 0)
        # L as measured: the in-process D = 0 run of the same L and P.
        ref = next(x for x in inproc_rows if x["L_ns"] == r["L_ns"] and x["P"] == r["P"] and
                   x["D"] == 0)
        L = ref["read_p50_ns"] or r["L_ns"]
        # t_serve: the quickest of the runs' median takes of a tile that had
        # arrived (a median inflated by preemption says nothing of the path).
        served = [x["serve_ns"] for x in group if x["D"] > 0 and x.get("serve_ns", 0) > 0]
        serve = min(served, default=0)
        C = r["C_ns"]
        dev = device_ns.get(r["P"], 0.0) if r["L_ns"] == 0 else 0.0
        r["device_ns"] = dev
        r["L_measured_ns"] = L
        r["speedup"] = base["ns_per_tile"] / r["ns_per_tile"]
        # The overlap model at this depth: D reads started ahead hide up to
        # D tile times, P channels deliver one tile per L / P.
        # On the real device (L = 0 rows) P channels deliver one tile per
        # fio's time per read at queue depth P, measured on the same disk in
        # the same run: this virtual disk does not scale with depth as L / P
        # assumes.
        overlap = min(r["D"], r["P"])
        if r["L_ns"] == 0 and dev:
            per_tile, per_tile_overlap = dev, device_ns.get(overlap, dev)
        else:
            per_tile, per_tile_overlap = L / r["P"], L / max(overlap, 1)
        r["ideal"] = (L + C) / max(C, per_tile, serve)
        r["model"] = 1.0 if r["D"] == 0 else (L + C) / max(C, per_tile_overlap, serve)
        r["bound_ns"] = max(C, per_tile, serve)
        r["ratio"] = r["bound_ns"] / r["ns_per_tile"]
        r["saturation_D"] = math.ceil(L / C)
        r["saturated"] = r["D"] >= r["saturation_D"] or r["model"] >= r["ideal"] * 0.999


def headline(rows):
    """The RESULT figures: the deepest in-process row at the first modelled
    latency and the most channels (speedup against its ideal), and the same
    row on the device."""

    def pick(mode, device):
        mine = [r for r in rows if r["mode"] == mode and (r["L_ns"] == 0) == device]
        if not mine:
            return None
        latency = mine[0]["L_ns"]
        mine = [r for r in mine if r["L_ns"] == latency]
        return max(mine, key=lambda r: (r["P"], r["D"]))

    head, device, wire = pick("inproc", False), pick("inproc", True), pick("wire", False)
    figures = {"ratio": f"{head['ratio']:.3f}", "us_per_tile": f"{head['ns_per_tile'] / 1e3:.1f}",
               "bound_us_per_tile": f"{head['bound_ns'] / 1e3:.1f}",
               "L_ns": head["L_ns"], "P": head["P"],
               "D": head["D"], "speedup": f"{head['speedup']:.2f}",
               "ideal": f"{head['ideal']:.2f}"}
    if device:
        figures["device_ratio"] = f"{device['ratio']:.3f}"
    if wire:
        figures["wire_ratio"] = f"{wire['ratio']:.3f}"
    return figures


def plot(rows, path):
    plt = benchlib.pyplot()
    if plt is None:
        return
    panels = sorted({(r["mode"], r["L_ns"]) for r in rows})
    fig, axes = plt.subplots(1, len(panels), figsize=(4.5 * len(panels), 4), squeeze=False)
    for ax, (mode, L) in zip(axes[0], panels):
        for p in sorted({r["P"] for r in rows}):
            pts = sorted((r["D"], r["speedup"], r["ideal"]) for r in rows
                         if r["mode"] == mode and r["L_ns"] == L and r["P"] == p)
            line, = ax.plot([x[0] for x in pts], [x[1] for x in pts], marker="o", label=f"P={p}")
            ax.axhline(pts[-1][2], color=line.get_color(), linestyle="--", linewidth=0.8)
        ax.set_title(f"{mode}, L={L // 1000} us")
        ax.set_xlabel("look-ahead depth D")
        ax.set_ylabel("speedup vs D=0 (dashed: ideal)")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--tiles", type=int, default=4096)
    ap.add_argument("--tile-bytes", type=int, default=16 << 10)
    ap.add_argument("--compute-ns", type=int, default=30_000)
    ap.add_argument("--latencies", default="50000,200000,0", help="L values, in-process")
    ap.add_argument("--wire-latencies", default="50000", help="L values over the wire")
    ap.add_argument("--channels", default="1,2,4")
    ap.add_argument("--depths", default="0,1,2,4,8")
    ap.add_argument("--model-dir", default="/dev/shm", help="flash files for L > 0")
    ap.add_argument("--device-dir", default="/tmp", help="flash files for L = 0 (a real disk)")
    ap.add_argument("--fio-ms", type=int, default=3000, help="fio time per P on the device")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results"))
    args = benchlib.parse_args_with_quick(ap, {"tiles": 1024, "depths": "0,2,4",
                                               "fio_ms": 1000})
    run = benchlib.RunRecord("stream-pipeline")

    latencies = [int(x) for x in args.latencies.split(",")]
    device_ns = device_times(args) if 0 in latencies else {}
    rows = []
    for L in latencies:
        rows += inproc(args, L)
    inproc_rows = list(rows)
    for L in [int(x) for x in args.wire_latencies.split(",") if x]:
        rows += wire(args, L)
    annotate(rows, inproc_rows, device_ns)
    for p, ns in sorted(device_ns.items()):
        print(f"device (fio, {(-(-args.tile_bytes // 4096) + 1) * 4} KiB random reads): QD {p}: "
              f"{ns / 1000:.1f} us per read")

    print(f"{'mode':7} {'L(us)':>6} {'Lmeas':>6} {'P':>2} {'D':>2} {'us/tile':>8} {'speedup':>8} "
          f"{'model':>6} {'ideal':>6} {'ratio':>6} {'sat':>3} {'hits':>5} {'late':>5}")
    for r in rows:
        print(f"{r['mode']:7} {r['L_ns'] / 1000:6.0f} {r['L_measured_ns'] / 1000:6.1f} {r['P']:2} "
              f"{r['D']:2} {r['ns_per_tile'] / 1000:8.1f} {r['speedup']:8.2f} {r['model']:6.2f} "
              f"{r['ideal']:6.2f} {r['ratio']:6.2f} {'yes' if r['saturated'] else 'no':>3} "
              f"{r.get('hits', '-'):>5} {r.get('late', '-'):>5}")
    base = os.path.join(args.out, "stream-pipeline")
    benchlib.write_json(base + ".json", {"args": vars(args), "device_ns": device_ns,
                                         "rows": rows}, run)
    plot(rows, base + ".png")
    print(run.result_line(headline(rows)))


if __name__ == "__main__":
    main()
