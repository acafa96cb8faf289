#!/usr/bin/python3
"""What background writeback costs the write path.

Starts a fresh tierkv-server (on_evict, a flash tier in a temp dir) per run,
writes `--volume` times its memory with redis-benchmark SETs of one value
size to (almost) distinct keys, so memory fills and then every SET has to
make room, and reads INFO flash afterwards. Arms: dirty-max-fraction 0.5
(the default: writeback on) and 1 (writeback off). Runs alternate arms, so
background load on a shared machine hits both alike; each arm runs --runs
times and reports the median with the min..max spread.

  /usr/bin/python3 bench/writeback-cost/run.py [--server PATH] [--memory 256mb]
      [--value 65536] [--volume 4] [--clients 8] [--runs 3]

Prints a table and `RESULT name=writeback-cost ...`; writes
bench/results/writeback-cost.json.
"""
import argparse
import csv
import io
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchlib import (RunRecord, free_port, parse_args_with_quick, plot_bars, parse_size, server_info, wait_for_port,  # noqa: E402
                      wait_loaded, write_json)

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BENCHMARK = shutil.which("redis-benchmark") or "/usr/bin/redis-benchmark"
ARMS = ("0.5", "1")


def one_run(args, fraction):
    work = tempfile.mkdtemp(prefix="wb-cost-")
    port = free_port()
    argv = [args.server, "--port", str(port), "--bind", "127.0.0.1", "--metrics-port", "0",
            "--memory", args.memory, "--io-threads", args.io_threads, "--log-level", "warn",
            "--flash-path", os.path.join(work, "flash.dat"), "--flash-size", args.flash_size,
            "--flash-preallocate", "no", "--offload-policy", "on_evict",
            "--dirty-max-fraction", fraction]
    log = open(os.path.join(work, "server.log"), "wb")
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=work)
    try:
        wait_for_port(port, proc)
        wait_loaded(port, proc)
        requests = int(args.volume * parse_size(args.memory) // args.value)
        cmd = [BENCHMARK, "-h", "127.0.0.1", "-p", str(port), "-t", "set", "-d", str(args.value),
               "-c", str(args.clients), "-n", str(requests), "-r", "100000000", "--csv"]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=True)
        row = next(csv.DictReader(io.StringIO(out.stdout)))
        info = server_info(port, "flash")
        cpu = server_info(port, "cpu")
        return {
            # CPU seconds of the server per 1000 SETs: steadier than ops/s
            # when other work shares the cores.
            "cpu_ms_per_1k": 1e6 * (float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"]))
            / requests,
            "ops": float(row["rps"]), "p50_ms": float(row["p50_latency_ms"]),
            "p99_ms": float(row["p99_latency_ms"]), "requests": requests,
            "offloads": int(info["offloads"]), "offload_waits": int(info["offload_waits"]),
            "writeback_objects": int(info["writeback_objects"]),
            "flash_user_write_bytes": int(info["flash_user_write_bytes"]),
        }
    finally:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        shutil.rmtree(work, ignore_errors=True)


def summary(runs, key):
    values = [r[key] for r in runs]
    return statistics.median(values), min(values), max(values)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", default=os.environ.get(
        "TIERKV_SERVER", os.path.join(ROOT, "build", "src", "server", "tierkv-server")))
    ap.add_argument("--memory", default="256mb")
    ap.add_argument("--flash-size", default="4gb")
    ap.add_argument("--io-threads", default="2")
    ap.add_argument("--value", type=int, default=64 << 10)
    ap.add_argument("--volume", type=float, default=4, help="bytes written, in memories")
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results",
                                                  "writeback-cost.json"))
    args = parse_args_with_quick(ap, {"runs": 1, "volume": 2})
    run = RunRecord("writeback-cost")
    args.server = os.path.abspath(args.server)

    results = {arm: [] for arm in ARMS}
    for i in range(args.runs):
        for arm in ARMS if i % 2 == 0 else reversed(ARMS):
            results[arm].append(one_run(args, arm))

    print(f"SET {args.value} B x {args.volume} x memory {args.memory}, {args.clients} clients, "
          f"{args.runs} runs per arm: median (min..max)")
    header = (f"{'dirty-max-fraction':<19} {'SET ops/s':>26} {'p50 ms':>20} {'p99 ms':>20} "
              f"{'CPU ms / 1k SETs':>22} {'flash MiB':>10} {'offloads':>9} {'writebacks':>10}")
    print(header)
    print("-" * len(header))
    for arm in ARMS:
        runs = results[arm]
        ops, p50, p99, cpu = (summary(runs, k) for k in ("ops", "p50_ms", "p99_ms",
                                                          "cpu_ms_per_1k"))
        written = summary(runs, "flash_user_write_bytes")[0] / (1 << 20)
        print(f"{arm:<19} {ops[0]:>9,.0f} ({ops[1]:,.0f}..{ops[2]:,.0f}) "
              f"{p50[0]:>6.3f} ({p50[1]:.3f}..{p50[2]:.3f}) "
              f"{p99[0]:>6.3f} ({p99[1]:.3f}..{p99[2]:.3f}) "
              f"{cpu[0]:>8.1f} ({cpu[1]:.1f}..{cpu[2]:.1f}) {written:>10,.0f} "
              f"{summary(runs, 'offloads')[0]:>9,.0f} "
              f"{summary(runs, 'writeback_objects')[0]:>10,.0f}")
    write_json(args.out, {"args": {k: v for k, v in vars(args).items() if k != "out"},
                          "runs": results}, run)
    on, off = results["0.5"], results["1"]
    ratio = summary(on, "ops")[0] / summary(off, "ops")[0]
    p99_ratio = summary(on, "p99_ms")[0] / summary(off, "p99_ms")[0]
    cpu_ratio = summary(on, "cpu_ms_per_1k")[0] / summary(off, "cpu_ms_per_1k")[0]
    plot_bars(os.path.splitext(args.out)[0] + ".png", "SET ops/s by dirty-max-fraction",
              {arm: summary(results[arm], "ops")[0] for arm in ARMS}, "SET ops/s")
    # The bound: the same SETs with dirty-max-fraction 1 (no background
    # writeback).
    print(run.result_line({
        "ratio": f"{ratio:.3f}", "ops_s": f"{summary(on, 'ops')[0]:.0f}",
        "no_writeback_ops_s": f"{summary(off, 'ops')[0]:.0f}", "ops_ratio": f"{ratio:.3f}",
        "p99_ratio": f"{p99_ratio:.3f}", "cpu_ratio": f"{cpu_ratio:.3f}", "runs": args.runs,
        "value": args.value, "memory": args.memory}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
