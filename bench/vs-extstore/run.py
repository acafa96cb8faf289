#!/usr/bin/python3
"""tierkv against memcached with extstore, driven by the same load generator.

Both get the same DRAM budget and the same flash size; the working set is
--working-set (default 4x memory). tierkv-loadgen writes every key once, runs
an unmeasured warm-up, then measures a closed-loop zipfian(0.99) mix of 90%
GET / 10% SET with values of 16-512 KiB (a GET miss is filled with a SET).
Every GET hit is verified byte for byte.

Each round starts a fresh memcached and a fresh tierkv-server on loopback, in
a temp dir under bench/results/, and measures them one after the other; the
order alternates between rounds (ABBA), and with several rounds the median of
each figure is reported. Prints a table, writes bench/results/vs-extstore.json,
and ends with the RESULT line.

    /usr/bin/python3 bench/vs-extstore/run.py [--rounds 2] [--ops 200000] [--seconds 20]

Builds nothing: build the two programs first with
    cmake -S . -B build-extstore -G Ninja -DTIERKV_BENCH=ON
    ninja -C build-extstore tierkv-server tierkv-loadgen
See docs/benchmarks-extstore.md.
"""
import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchlib import (RunRecord, free_port, parse_args_with_quick, parse_size, wait_for_port, wait_loaded,  # noqa: E402
                      write_json)

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
RESULTS = os.path.join(ROOT, "bench", "results")
MEMCACHED = shutil.which("memcached") or "/usr/bin/memcached"
MEMCACHED_STATS = ("get_hits", "get_misses", "evictions", "get_extstore", "miss_from_extstore",
                   "badcrc_from_extstore", "extstore_objects_written", "extstore_objects_read",
                   "extstore_bytes_written", "extstore_bytes_read", "extstore_objects_evicted",
                   "extstore_page_evictions", "curr_items")


def find_binary(explicit, env, relative):
    if explicit:
        return os.path.abspath(explicit)
    if os.environ.get(env):
        return os.path.abspath(os.environ[env])
    for build in ("build-extstore", "build"):
        path = os.path.join(ROOT, build, relative)
        if os.path.exists(path):
            return path
    return os.path.join(ROOT, "build-extstore", relative)








def cpu_seconds(pid):
    """(user, system) CPU time of a process, from /proc."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def run_loadgen(cmd, pid, timeout):
    """Runs the load generator; returns (exit code, stdout, stderr, server CPU).

    The server's (user, system) CPU is counted over the measured phase only:
    from the line the load generator prints when its warm-up ends (the load
    of every key and the warm-up would otherwise be charged to the measured
    operations) to its exit."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    err_lines, marks = [], {}

    def read_stderr():
        for line in proc.stderr:
            if line.startswith("loadgen: warm") and "start" not in marks:
                marks["start"] = cpu_seconds(pid)
            err_lines.append(line)

    reader = threading.Thread(target=read_stderr, daemon=True)
    reader.start()
    killer = threading.Timer(timeout, proc.kill)
    killer.start()
    try:
        out = proc.stdout.read()
        proc.wait()
    finally:
        killer.cancel()
    end = cpu_seconds(pid)
    reader.join()
    start = marks.get("start", end)
    cpu = (round(end[0] - start[0], 2), round(end[1] - start[1], 2))
    return proc.returncode, out, "".join(err_lines), cpu


def query(port, request, done):
    """Sends one request and reads until done(reply bytes) is true."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(request)
        reply = b""
        while not done(reply):
            chunk = s.recv(1 << 16)
            if not chunk:
                break
            reply += chunk
    return reply.decode(errors="replace")


def memcached_stats(port):
    text = query(port, b"stats\r\n", lambda r: r.endswith(b"END\r\n"))
    stats = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0] == "STAT" and parts[1] in MEMCACHED_STATS:
            stats[parts[1]] = int(parts[2])
    return stats


def tierkv_info(port):
    def complete(reply):
        head, _, body = reply.partition(b"\r\n")
        return head.startswith(b"$") and len(body) >= int(head[1:]) + 2
    text = query(port, b"INFO\r\n", complete)
    stats = {}
    for line in text.splitlines()[1:]:
        name, sep, value = line.partition(":")
        if sep and any(w in name for w in ("evicted", "flash", "hits", "misses", "memory_")):
            stats[name] = value.strip()
    return stats


def resident_bytes(path):
    """Bytes of a file held in the page cache (util-linux fincore), or None."""
    fincore = shutil.which("fincore")
    if not fincore or not os.path.exists(path):
        return None
    out = subprocess.run([fincore, "--bytes", "--noheadings", "--output", "RES", path],
                         capture_output=True, text=True)
    return int(out.stdout.split()[0]) if out.returncode == 0 and out.stdout.strip() else None


class PageCacheDropper:
    """Drops a file's clean pages from the page cache every interval.

    extstore reads its file with buffered I/O, so on a machine with free RAM its
    "flash" reads are served from the kernel's page cache (DRAM), while tierkv
    reads with O_DIRECT. Dropping the cached pages sends memcached's reads to
    the device too, so both get only their configured memory. It is a
    per-file, unprivileged hint (posix_fadvise DONTNEED) and touches nothing
    else on the machine.
    """

    def __init__(self, path, interval_s):
        self.path, self.interval_s = path, interval_s
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self):
        while not self.stop.wait(self.interval_s):
            try:
                fd = os.open(self.path, os.O_RDONLY)
            except OSError:
                continue
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)

    def __enter__(self):
        if self.interval_s > 0:
            self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        if self.thread.is_alive():
            self.thread.join()


class Peer:
    """One server process in its own directory; stopped and removed on exit."""

    def __init__(self, name, argv, port, workdir, stats_fn, buffered_file=None):
        self.name, self.argv, self.port, self.workdir = name, argv, port, workdir
        self.stats_fn = stats_fn
        self.buffered_file = buffered_file  # a data file read through the page cache
        self.proc = None

    def __enter__(self):
        os.makedirs(self.workdir, exist_ok=True)
        self.log = open(os.path.join(self.workdir, "server.log"), "wb")
        self.proc = subprocess.Popen(self.argv, stdout=self.log, stderr=subprocess.STDOUT,
                                     cwd=self.workdir)
        wait_for_port(self.port, self.proc)
        if self.name == "tierkv":
            wait_loaded(self.port, self.proc)
        return self

    def __exit__(self, *exc):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def server_log_tail(self):
        with open(os.path.join(self.workdir, "server.log"), "rb") as f:
            return f.read()[-2000:].decode(errors="replace")


def memcached_peer(args, workdir):
    port = free_port()
    ext = f"ext_path={workdir}/extstore:{args.flash >> 20}m,ext_wbuf_size={args.ext_wbuf_mb}"
    ext += f",ext_threads={args.ext_threads}"
    argv = [MEMCACHED, "-p", str(port), "-l", "127.0.0.1", "-U", "0", "-m", str(args.memory >> 20),
            "-I", args.item_max, "-t", str(args.threads), "-c", "1024", "-o", ext]
    if os.geteuid() == 0:
        argv[1:1] = ["-u", "root"]
    peer = Peer("memcached", argv, port, workdir, memcached_stats,
                buffered_file=os.path.join(workdir, "extstore"))
    return peer, "memcache"


def tierkv_peer(args, workdir):
    port = free_port()
    argv = [args.tierkv, "--port", str(port), "--bind", "127.0.0.1",
            "--memory", str(args.memory), "--flash-path", os.path.join(workdir, "flash.dat"),
            "--flash-size", str(args.flash), "--io-threads", str(args.threads),
            "--metrics-port", "0", "--log-level", "warn"]
    # Like with like: by default tierkv reads through the page cache too, and
    # its file is dropped as often as extstore's.
    flash_file = os.path.join(workdir, "flash.dat")
    if args.tierkv_io == "buffered":
        argv += ["--flash-direct-io", "no"]
        return Peer("tierkv", argv, port, workdir, tierkv_info, buffered_file=flash_file), "resp"
    return Peer("tierkv", argv, port, workdir, tierkv_info), "resp"


def measure(args, make_peer, scratch, keys):
    workdir = tempfile.mkdtemp(prefix="peer-", dir=scratch)
    peer, protocol = make_peer(args, workdir)
    cmd = [args.loadgen, "--port", str(peer.port), "--protocol", protocol,
           "--connections", str(args.connections), "--keys", str(keys),
           "--min-value", str(args.min_value), "--max-value", str(args.max_value),
           "--zipf", str(args.zipf), "--get-fraction", str(args.get_fraction),
           "--ops", str(args.ops), "--seconds", str(args.seconds),
           "--warm-ops", str(args.warm_ops), "--seed", str(args.seed)]
    drop_interval = 0
    if peer.buffered_file and not args.keep_page_cache:
        drop_interval = args.drop_interval_ms / 1e3
    with peer, PageCacheDropper(peer.buffered_file, drop_interval):
        code, stdout, stderr, (user_s, sys_s) = run_loadgen(cmd, peer.proc.pid,
                                                             2 * args.seconds + 600)
        if peer.buffered_file:
            result_cached = resident_bytes(peer.buffered_file)
        sys.stderr.write(stderr.replace("loadgen:", f"  {peer.name}:"))
        if code != 0 or not stdout.strip():
            raise RuntimeError(f"loadgen against {peer.name} failed (exit {code}); "
                               f"server log:\n{peer.server_log_tail()}")
        result = json.loads(stdout.strip().splitlines()[-1])
        result["server_user_s"], result["server_sys_s"] = user_s, sys_s
        result["server_cpu_s"] = round(user_s + sys_s, 2)
        result["server_stats"] = peer.stats_fn(peer.port)
        result["argv"] = peer.argv
        if peer.buffered_file:
            result["page_cache_dropped_every_ms"] = drop_interval * 1e3
            result["data_file_cached_bytes_at_end"] = result_cached
    return result


def summary(runs):
    """The median over rounds of the figures the table shows."""
    def med(fn):
        return statistics.median(fn(r) for r in runs)
    return {
        "hit_ratio": med(lambda r: r["hit_ratio"]),
        "ops_per_s": med(lambda r: r["ops_per_s"]),
        "p50_ms": med(lambda r: r["latency_op"]["p50_us"] / 1e3),
        "p99_ms": med(lambda r: r["latency_op"]["p99_us"] / 1e3),
        "get_p99_ms": med(lambda r: r["latency_get"]["p99_us"] / 1e3),
        "mb_per_s": med(lambda r: r["mb_per_s"]),
        "cpu_ms_per_op": med(lambda r: 1e3 * r["server_cpu_s"] / max(r["ops"], 1)),
        "user_ms_per_op": med(lambda r: 1e3 * r["server_user_s"] / max(r["ops"], 1)),
        "sys_ms_per_op": med(lambda r: 1e3 * r["server_sys_s"] / max(r["ops"], 1)),
        "client_cpu_ms_per_op": med(lambda r: 1e3 * r["client_cpu_s"] / max(r["ops"], 1)),
        "verify_errors": sum(r["verify_errors"] + r["warm"]["verify_errors"] for r in runs),
        "set_errors": sum(r["set_errors"] + r["load"]["set_errors"] + r["warm"]["set_errors"]
                          for r in runs),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tierkv", help="tierkv-server (default: build-extstore/, then build/)")
    ap.add_argument("--loadgen", help="tierkv-loadgen (default: build-extstore/, then build/)")
    ap.add_argument("--memory", default="256m", help="DRAM budget of each server")
    ap.add_argument("--flash", default="2g", help="flash size of each server")
    ap.add_argument("--working-set", help="bytes of distinct values (default: 4x memory)")
    ap.add_argument("--min-value", default="16k")
    ap.add_argument("--max-value", default="512k")
    ap.add_argument("--zipf", type=float, default=0.99)
    ap.add_argument("--get-fraction", type=float, default=0.9)
    ap.add_argument("--connections", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2, help="server worker/IO threads, both")
    ap.add_argument("--ops", type=int, default=200000, help="measured ops per system and round")
    ap.add_argument("--seconds", type=float, default=20, help="measuring time cap per run")
    ap.add_argument("--warm-ops", type=int, default=10000,
                    help="unmeasured zipfian ops after the load")
    ap.add_argument("--rounds", type=int, default=2, help="rounds, order alternating (ABBA)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--item-max", default="1m", help="memcached -I (must exceed --max-value)")
    ap.add_argument("--ext-wbuf-mb", type=int, default=8, help="memcached ext_wbuf_size")
    ap.add_argument("--ext-threads", type=int, default=1, help="memcached ext_threads")
    ap.add_argument("--drop-interval-ms", type=float, default=100,
                    help="how often extstore's file is dropped from the page cache")
    ap.add_argument("--tierkv-io", choices=("buffered", "direct"), default="buffered",
                    help="tierkv's flash I/O: buffered and dropped like extstore's file "
                    "(like with like), or O_DIRECT (memcached has no such mode)")
    ap.add_argument("--keep-page-cache", action="store_true",
                    help="let extstore read from the page cache (extra DRAM for memcached)")
    ap.add_argument("--out", default=os.path.join(RESULTS, "vs-extstore.json"))
    args = parse_args_with_quick(ap, {"rounds": 1, "ops": 40000, "seconds": 8,
                                      "warm_ops": 4000})
    run = RunRecord("vs-extstore")
    args.tierkv = find_binary(args.tierkv, "TIERKV_SERVER", "src/server/tierkv-server")
    args.loadgen = find_binary(args.loadgen, "TIERKV_LOADGEN",
                               "bench/vs-extstore/tierkv-loadgen")
    for name, path in (("tierkv-server", args.tierkv), ("tierkv-loadgen", args.loadgen),
                       ("memcached", MEMCACHED)):
        if not os.access(path, os.X_OK):
            print(f"missing {name}: {path}\nbuild it with:\n"
                  "  cmake -S . -B build-extstore -G Ninja -DTIERKV_BENCH=ON\n"
                  "  ninja -C build-extstore tierkv-server tierkv-loadgen", file=sys.stderr)
            return 2
    args.memory, args.flash = parse_size(args.memory), parse_size(args.flash)
    args.min_value, args.max_value = parse_size(args.min_value), parse_size(args.max_value)
    working_set = parse_size(args.working_set) if args.working_set else 4 * args.memory
    keys = max(1, round(working_set / ((args.min_value + args.max_value) / 2)))

    started = time.time()
    os.makedirs(RESULTS, exist_ok=True)
    scratch = tempfile.mkdtemp(prefix="tmp-vs-extstore-", dir=RESULTS)
    systems = {"memcached": memcached_peer, "tierkv": tierkv_peer}
    runs = {name: [] for name in systems}
    try:
        for rnd in range(args.rounds):
            order = ["memcached", "tierkv"] if rnd % 2 == 0 else ["tierkv", "memcached"]
            for name in order:
                print(f"round {rnd + 1}/{args.rounds}: {name}", file=sys.stderr)
                runs[name].append(measure(args, systems[name], scratch, keys))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    rows = {name: summary(r) for name, r in runs.items()}
    ours, theirs = rows["tierkv"], rows["memcached"]
    ratio = ours["ops_per_s"] / theirs["ops_per_s"] if theirs["ops_per_s"] else 0.0
    p99_ratio = ours["p99_ms"] / theirs["p99_ms"] if theirs["p99_ms"] else 0.0
    hit_ratio_ratio = ours["hit_ratio"] / theirs["hit_ratio"] if theirs["hit_ratio"] else 0.0

    print(f"memory {args.memory >> 20} MiB, flash {args.flash >> 20} MiB, working set "
          f"{working_set >> 20} MiB ({keys} keys, values {args.min_value >> 10}-"
          f"{args.max_value >> 10} KiB), zipf {args.zipf}, {args.get_fraction:.0%} GET, "
          f"{args.connections} connections, {args.rounds} round(s), medians")
    files = "extstore's and tierkv's files" if args.tierkv_io == "buffered" else \
        "extstore's file (tierkv: O_DIRECT)"
    print(f"{files}: " + ("page cache kept (extra DRAM)" if args.keep_page_cache else
                          f"dropped from the page cache every {args.drop_interval_ms:g} ms"))
    header = (f"{'system':<10} {'hit ratio':>9} {'ops/s':>9} {'p50 ms':>8} {'p99 ms':>8} "
              f"{'GET p99':>8} {'MB/s':>8} {'cpu ms/op':>9} {'user':>6} {'sys':>6} "
              f"{'verify err':>10} {'set err':>7}")
    print(header)
    print("-" * len(header))
    for name in ("tierkv", "memcached"):
        r = rows[name]
        print(f"{name:<10} {r['hit_ratio']:>9.3f} {r['ops_per_s']:>9,.0f} {r['p50_ms']:>8.2f} "
              f"{r['p99_ms']:>8.2f} {r['get_p99_ms']:>8.2f} {r['mb_per_s']:>8,.0f} "
              f"{r['cpu_ms_per_op']:>9.3f} {r['user_ms_per_op']:>6.3f} {r['sys_ms_per_op']:>6.3f} "
              f"{r['verify_errors']:>10} {r['set_errors']:>7}")
    print(f"ratios tierkv/memcached: ops/s {ratio:.3f}, hit ratio {hit_ratio_ratio:.3f}, "
          f"p99 {p99_ratio:.3f} (below 1 is better for p99)")
    # The load generator shares the machine: even a server that cost nothing
    # could serve no more than the cores over the client's own CPU per op.
    cores = os.cpu_count() or 1
    for r in rows.values():
        r["ceiling_ops_per_s"] = (1e3 * cores / r["client_cpu_ms_per_op"]
                                  if r["client_cpu_ms_per_op"] else 0.0)
    ceiling_ratio = (ours["ceiling_ops_per_s"] / theirs["ops_per_s"]
                     if theirs["ops_per_s"] else 0.0)
    of_ceiling = ours["ops_per_s"] / ours["ceiling_ops_per_s"] if ours["ceiling_ops_per_s"] else 0.0
    print(f"machine ceiling ({cores} cores over the client's CPU per op, a server costing "
          f"nothing): tierkv {ours['ceiling_ops_per_s']:,.0f} ops/s (client "
          f"{ours['client_cpu_ms_per_op']:.3f} ms/op), memcached "
          f"{theirs['ceiling_ops_per_s']:,.0f} ops/s (client "
          f"{theirs['client_cpu_ms_per_op']:.3f} ms/op); the largest ops/s ratio this machine "
          f"allows tierkv: {ceiling_ratio:.3f}; tierkv reaches {of_ceiling:.3f} of its ceiling")
    # Both servers make the same copies (socket, page cache) and loopback
    # wake-ups, in the kernel. A server whose own code cost nothing, and
    # whose kernel work per op were memcached's, could serve no more than
    # this: the bound any server doing memcached's system calls meets here.
    kernel_bound = (1e3 * cores / (ours["client_cpu_ms_per_op"] + theirs["sys_ms_per_op"])
                    if ours["client_cpu_ms_per_op"] + theirs["sys_ms_per_op"] else 0.0)
    kernel_bound_ratio = kernel_bound / theirs["ops_per_s"] if theirs["ops_per_s"] else 0.0
    of_kernel_bound = ours["ops_per_s"] / kernel_bound if kernel_bound else 0.0
    print(f"kernel bound (tierkv's client CPU plus memcached's system CPU per op, "
          f"{theirs['sys_ms_per_op']:.3f} ms, no user-space CPU): {kernel_bound:,.0f} ops/s, "
          f"{kernel_bound_ratio:.3f}x memcached; tierkv reaches {of_kernel_bound:.3f} of it")

    seconds = time.time() - started
    write_json(args.out, {
            "memory": args.memory, "flash": args.flash, "working_set": working_set, "keys": keys,
            "min_value": args.min_value, "max_value": args.max_value, "zipf": args.zipf,
            "get_fraction": args.get_fraction, "connections": args.connections,
            "threads": args.threads, "rounds": args.rounds, "seconds": round(seconds, 1),
            "tierkv_io": args.tierkv_io,
            "extstore_page_cache": "kept" if args.keep_page_cache else
            f"dropped every {args.drop_interval_ms:g} ms",
            "summary": rows, "ratio_ops": ratio, "ratio_p99": p99_ratio,
            "ratio_hit": hit_ratio_ratio, "ceiling_ratio": ceiling_ratio,
            "of_ceiling": of_ceiling, "kernel_bound_ratio": kernel_bound_ratio,
            "of_kernel_bound": of_kernel_bound, "runs": runs,
        }, run)
    print(f"wrote {os.path.relpath(args.out, ROOT)}; no plot: python3-matplotlib is not installed"
          if not have_matplotlib() else plot(args.out, runs))
    verify_errors = ours["verify_errors"] + theirs["verify_errors"]
    cpu_ratio = (ours["cpu_ms_per_op"] / theirs["cpu_ms_per_op"]
                 if theirs["cpu_ms_per_op"] else 0.0)
    print(run.result_line({
        "ratio": f"{ratio:.3f}", "ops_s": f"{ours['ops_per_s']:.0f}",
        "memcached_ops_s": f"{theirs['ops_per_s']:.0f}",
        "cpu_ms_per_op": f"{ours['cpu_ms_per_op']:.3f}",
        "memcached_cpu_ms_per_op": f"{theirs['cpu_ms_per_op']:.3f}",
        "cpu_ratio": f"{cpu_ratio:.3f}", "ceiling_ratio": f"{ceiling_ratio:.3f}",
        "of_ceiling": f"{of_ceiling:.3f}", "kernel_bound_ratio": f"{kernel_bound_ratio:.3f}",
        "of_kernel_bound": f"{of_kernel_bound:.3f}",
        "user_ratio": f"{ours['user_ms_per_op'] / max(theirs['user_ms_per_op'], 1e-9):.3f}",
        "sys_ratio": f"{ours['sys_ms_per_op'] / max(theirs['sys_ms_per_op'], 1e-9):.3f}",
        "hit_ratio_ours": f"{ours['hit_ratio']:.3f}",
        "hit_ratio_theirs": f"{theirs['hit_ratio']:.3f}", "p99_ratio": f"{p99_ratio:.3f}",
        "verify_errors": verify_errors, "seconds": f"{seconds:.0f}"}))
    return 1 if verify_errors else 0


def have_matplotlib():
    try:
        import matplotlib  # noqa: F401
        return True
    except ImportError:
        return False


def plot(json_path, runs):
    """Bars of hit ratio, ops/s and p99 per system (one per round)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    figures = (("hit ratio", lambda r: r["hit_ratio"]), ("ops/s", lambda r: r["ops_per_s"]),
               ("p99 ms", lambda r: r["latency_op"]["p99_us"] / 1e3))
    fig, axes = plt.subplots(1, len(figures), figsize=(12, 4))
    for ax, (title, fn) in zip(axes, figures):
        for i, (name, rs) in enumerate(runs.items()):
            ax.bar([i + 0.8 * k / len(rs) for k in range(len(rs))], [fn(r) for r in rs],
                   width=0.8 / len(rs), label=name)
        ax.set_xticks(range(len(runs)), list(runs))
        ax.set_title(title)
    png = json_path.removesuffix(".json") + ".png"
    fig.tight_layout()
    fig.savefig(png)
    return f"wrote {os.path.relpath(json_path, ROOT)} and {os.path.relpath(png, ROOT)}"


if __name__ == "__main__":
    sys.exit(main())
