#!/usr/bin/python3
"""What ACL checks cost: the same redis-benchmark rows against one
tierkv-server, logged in as the default user (every command and key: the
check is one bit and a flag) and as one of 20 users whose rules name
categories, commands and five key patterns each (the benchmark's keys
match the last pattern, so every key is checked against all five).

The two arms alternate, three rounds each, and each arm's median round
counts; the bound is the default user's arm of the same run. Writes
bench/results/acl-cost.json and .png; the last line is `RESULT
name=acl-cost ratio=<worst row: ACL ops/s over default ops/s>`.

  /usr/bin/python3 bench/acl-cost/run.py [--server PATH] [--rounds 3] [--quick]
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchlib import (RunRecord, free_port, redis_benchmark, report_ratio_rows,  # noqa: E402
                      resp, wait_for_port)

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
USERS = 20
ROWS = [("SET 100B -P16", "set", 100, 50, 16, 1_000_000),
        ("GET 100B -P16", "get", 100, 50, 16, 1_000_000),
        ("SET 4KiB", "set", 4096, 50, 1, 100_000)]


def command(port, *args):
    import socket
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(resp(*args))
        reply = s.recv(65536)
    if reply.startswith(b"-"):
        raise RuntimeError(f"{args[:3]}: {reply!r}")


def add_users(port):
    """20 users, as a fleet's services would have them; "bench7" is the one
    the benchmark logs in as, and its keys ("key:...") match its last
    pattern only."""
    for u in range(USERS):
        patterns = [f"~svc{u}:{p}:*" for p in range(4)] + [f"%RW~{'key' if u == 7 else f'x{u}'}:*"]
        command(port, "ACL", "SETUSER", f"bench{u}", "on", f">pw{u}", "resetchannels", "-@all",
                "+@read", "+@write", "+@keyspace", "+@connection", "-@dangerous", "+config|get",
                *patterns)


def benchmark(port, test, size, clients, pipeline, requests, login):
    rows = redis_benchmark(port, test, size, clients, pipeline, requests, ["-r", "100000", *login])
    return float(rows[0]["rps"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", default=os.environ.get(
        "TIERKV_SERVER", os.path.join(ROOT, "build", "src", "server", "tierkv-server")))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="a tenth of the requests, one round")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "acl-cost.json"))
    args = ap.parse_args()
    run = RunRecord("acl-cost")
    rounds = 1 if args.quick else args.rounds
    work = tempfile.mkdtemp(prefix="acl-cost-")
    port = free_port()
    log = open(os.path.join(work, "server.log"), "wb")
    proc = subprocess.Popen([os.path.abspath(args.server), "--port", str(port), "--bind",
                             "127.0.0.1", "--memory", "1gb", "--flash-size", "0",
                             "--metrics-port", "0", "--log-level", "warn"],
                            stdout=log, stderr=subprocess.STDOUT, cwd=work)
    results = []
    try:
        wait_for_port(port, proc)
        add_users(port)
        arms = {"default": [], "acl": ["--user", "bench7", "-a", "pw7"]}
        for name, test, size, clients, pipeline, requests in ROWS:
            if args.quick:
                requests //= 10
            ops = {arm: [] for arm in arms}
            for _ in range(rounds):
                for arm, login in arms.items():
                    ops[arm].append(benchmark(port, test, size, clients, pipeline, requests,
                                              login))
            med = {arm: sorted(v)[len(v) // 2] for arm, v in ops.items()}
            results.append({"row": name, "default_ops": med["default"], "acl_ops": med["acl"],
                            "rounds": ops, "ratio": med["acl"] / med["default"]})
    finally:
        proc.terminate()
        proc.wait(30)
        log.close()
        shutil.rmtree(work, ignore_errors=True)

    report_ratio_rows(run, args.out, {"users": USERS}, results,
                      ("default_ops", "default user ops/s"), ("acl_ops", "20 users, patterns"),
                      "ACL checks: 20 users with key patterns", "ops/s with ACL ÷ default user",
                      {"users": USERS})
    return 0


if __name__ == "__main__":
    sys.exit(main())
