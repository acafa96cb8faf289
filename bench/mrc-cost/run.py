#!/usr/bin/python3
"""What the miss-ratio curves cost (docs/sizing.md): the same
redis-benchmark rows against two tierkv-servers, one with the curves at
their defaults (mrc-sample-rate 1, mrc-max-bytes 1 MiB: every key sampled
at first, each model's rate falling as its share of the bound fills) and
one with mrc-sample-rate 0 (no curves). Each row first fills the key
space, so that the models have settled to their rates.

The arms alternate, three rounds each, and each arm's median round counts;
the bound is the arm without curves, in the same run. Writes
bench/results/mrc-cost.json and .png; the last line is `RESULT
name=mrc-cost ratio=<worst row: ops/s with curves over ops/s without>`.

  /usr/bin/python3 bench/mrc-cost/run.py [--server PATH] [--rounds 3] [--quick]
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchlib import (RunRecord, free_port, redis_benchmark, report_ratio_rows,  # noqa: E402
                      wait_for_port)

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
KEYS = 1_000_000
ROWS = [("SET 100B -P16", "set", 100, 50, 16, 2_000_000),
        ("GET 100B -P16", "get", 100, 50, 16, 2_000_000)]


def benchmark(port, test, size, clients, pipeline, requests):
    rows = redis_benchmark(port, test, size, clients, pipeline, requests, ["-r", str(KEYS)])
    return float(rows[0]["rps"])


def start(server, work, name, extra):
    d = os.path.join(work, name)
    os.makedirs(d)
    port = free_port()
    log = open(os.path.join(d, "server.log"), "wb")
    proc = subprocess.Popen([os.path.abspath(server), "--port", str(port), "--bind", "127.0.0.1",
                             "--memory", "1gb", "--flash-size", "0", "--metrics-port", "0",
                             "--log-level", "warn", *extra],
                            stdout=log, stderr=subprocess.STDOUT, cwd=d)
    wait_for_port(port, proc)
    return proc, port, log


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", default=os.environ.get(
        "TIERKV_SERVER", os.path.join(ROOT, "build", "src", "server", "tierkv-server")))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="a tenth of the requests, one round")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "mrc-cost.json"))
    args = ap.parse_args()
    run = RunRecord("mrc-cost")
    rounds = 1 if args.quick else args.rounds
    work = tempfile.mkdtemp(prefix="mrc-cost-")
    servers = {}
    results = []
    try:
        servers["curves"] = start(args.server, work, "curves", [])
        servers["none"] = start(args.server, work, "none", ["--mrc-sample-rate", "0"])
        for proc, port, _ in servers.values():  # the key space, and the models' rates
            benchmark(port, "set", 100, 50, 16, KEYS // (10 if args.quick else 1))
        for name, test, size, clients, pipeline, requests in ROWS:
            if args.quick:
                requests //= 10
            ops = {arm: [] for arm in servers}
            for _ in range(rounds):
                for arm, (_, port, _) in servers.items():
                    ops[arm].append(benchmark(port, test, size, clients, pipeline, requests))
            med = {arm: sorted(v)[len(v) // 2] for arm, v in ops.items()}
            results.append({"row": name, "curves_ops": med["curves"], "none_ops": med["none"],
                            "rounds": ops, "ratio": med["curves"] / med["none"]})
    finally:
        for proc, _, log in servers.values():
            proc.terminate()
            proc.wait(30)
            log.close()
        shutil.rmtree(work, ignore_errors=True)

    report_ratio_rows(run, args.out, {"keys": KEYS}, results, ("none_ops", "no curves ops/s"),
                      ("curves_ops", "curves ops/s"), "Miss-ratio curves: cost per operation",
                      "ops/s with curves ÷ without")
    return 0


if __name__ == "__main__":
    sys.exit(main())
