#!/usr/bin/python3
"""SET and GET of values larger than memory, against redis-server.

tierkv runs with a memory budget smaller than the value (--memory 64mb) and
a flash tier in a temp dir on disk, so every SET streams its value to flash
as it arrives and every GET reads it back from flash; redis-server holds the
value in memory. Both are started here on loopback and measured in the same
run, alternating, --rounds times; per round: one SET and one GET of a
--value-byte value over one connection, and the server's peak RSS growth
during the SET; then a RENAME of it (tierkv copies it flash to flash, redis
moves a pointer); during the SET and the RENAME another client PINGs in a
loop, and the longest PING shows how long each held other clients up. The
ratio is redis's time over tierkv's (above 1: tierkv is
faster); the figures are the median round and the min..max spread.

  /usr/bin/python3 bench/large-values/run.py [--server PATH] [--value 256mb]
      [--memory 64mb] [--rounds 3]

Prints a table and `RESULT name=large-values ...`; writes
bench/results/large-values.json.
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import redis

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchlib import (RunRecord, free_port, parse_args_with_quick, plot_bars, parse_size, wait_for_port, wait_loaded,  # noqa: E402
                      write_json)

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
REDIS = shutil.which("redis-server") or "/usr/bin/redis-server"


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def start(name, args, work):
    port = free_port()
    if name == "tierkv":
        argv = [args.server, "--port", str(port), "--bind", "127.0.0.1", "--metrics-port", "0",
                "--memory", args.memory, "--log-level", "warn", "--flash-preallocate", "no",
                "--flash-path", os.path.join(work, "flash.dat"), "--flash-size", args.flash_size,
                "--max-object-size", "1gb"]
    else:
        argv = [REDIS, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                "--appendonly", "no", "--dir", work]
    log = open(os.path.join(work, f"{name}.log"), "wb")
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=work)
    wait_for_port(port, proc)
    if name == "tierkv":
        wait_loaded(port, proc)
    return proc, port, log


def one_round(proc, port, value, key):
    c = redis.Redis(host="127.0.0.1", port=port, socket_timeout=600)
    before = rss_kib(proc.pid)
    peak = [before]
    done = threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], rss_kib(proc.pid))
            time.sleep(0.01)

    sampler = threading.Thread(target=sample)
    sampler.start()
    result = {}
    set_s, set_stall_s = probed(port, lambda: result.update(ok=c.set(key, value)))
    ok = result["ok"]
    t1 = time.perf_counter()
    done.set()
    sampler.join()
    got = c.get(key)
    t2 = time.perf_counter()
    assert ok is True and got == value, "value did not come back whole"
    rename_s, rename_stall_s = probed(port, lambda: c.rename(key, key + ":moved"))
    assert c.strlen(key + ":moved") == len(value) and not c.exists(key)
    c.delete(key + ":moved")
    c.close()
    return {"set_s": set_s, "get_s": t2 - t1, "rename_s": rename_s,
            "set_ping_stall_s": set_stall_s, "rename_ping_stall_s": rename_stall_s,
            "rss_growth_mib": (peak[0] - before) / 1024}


def probed(port, fn):
    """Runs fn() and returns its time and the longest PING another client
    saw meanwhile (how long fn held everyone else up)."""
    longest = [0.0]
    stop = threading.Event()
    ready = threading.Event()

    def probe():
        p = redis.Redis(host="127.0.0.1", port=port, socket_timeout=600)
        p.ping()
        ready.set()
        while not stop.is_set():
            a = time.perf_counter()
            p.ping()
            longest[0] = max(longest[0], time.perf_counter() - a)
        p.close()

    prober = threading.Thread(target=probe)
    prober.start()
    ready.wait(10)
    t0 = time.perf_counter()
    fn()
    t1 = time.perf_counter()
    stop.set()
    prober.join()
    return t1 - t0, longest[0]


def spread(values):
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--server", default=os.path.join(ROOT, "build/src/server/tierkv-server"))
    ap.add_argument("--value", default="256mb")
    ap.add_argument("--memory", default="64mb")
    ap.add_argument("--flash-size", default="2gb")
    ap.add_argument("--rounds", type=int, default=3)
    args = parse_args_with_quick(ap, {"value": "128mb", "rounds": 1})
    run = RunRecord("large-values")
    size = parse_size(args.value)
    value = os.urandom(size)
    work = tempfile.mkdtemp(prefix="large-values-", dir=os.environ.get("TMPDIR_DISK", "/var/tmp"))
    servers = {}
    rounds = {"tierkv": [], "redis": []}
    try:
        for name in ("tierkv", "redis"):
            servers[name] = start(name, args, work)
        for r in range(args.rounds):
            for name in ("tierkv", "redis") if r % 2 == 0 else ("redis", "tierkv"):
                proc, port, _ = servers[name]
                rounds[name].append(one_round(proc, port, value, f"v{r}"))
    finally:
        for proc, _, log in servers.values():
            proc.terminate()
            proc.wait(60)
            log.close()
        shutil.rmtree(work, ignore_errors=True)
    res = {name: {k: spread([x[k] for x in rs]) for k in rs[0]} for name, rs in rounds.items()}
    ratios = {op: spread([b[op] / a[op] for a, b in zip(rounds["tierkv"], rounds["redis"])])
              for op in ("set_s", "get_s")}
    mib = size / (1 << 20)
    print(f"value {mib:.0f} MiB, tierkv memory {args.memory} (the value goes to flash), "
          f"{args.rounds} rounds, median (min..max)")
    print(f"{'':8} {'SET MB/s':>22} {'GET MB/s':>22} {'RSS growth MiB':>20}"
          f" {'RENAME ms':>22} {'longest PING ms: in SET':>24} {'in RENAME':>18}")
    for name in ("tierkv", "redis"):
        s, g, m = res[name]["set_s"], res[name]["get_s"], res[name]["rss_growth_mib"]
        rn = res[name]["rename_s"]
        ss, rs = res[name]["set_ping_stall_s"], res[name]["rename_ping_stall_s"]
        print(f"{name:8} {mib / s['median']:10.0f} ({mib / s['max']:.0f}..{mib / s['min']:.0f})"
              f" {mib / g['median']:10.0f} ({mib / g['max']:.0f}..{mib / g['min']:.0f})"
              f" {m['median']:10.0f} ({m['min']:.0f}..{m['max']:.0f})"
              f" {1e3 * rn['median']:10.1f} ({1e3 * rn['min']:.1f}..{1e3 * rn['max']:.1f})"
              f" {1e3 * ss['median']:13.1f} ({1e3 * ss['min']:.1f}..{1e3 * ss['max']:.1f})"
              f" {1e3 * rs['median']:8.1f} ({1e3 * rs['min']:.1f}..{1e3 * rs['max']:.1f})")
    out = {"value_bytes": size, "memory": args.memory, "rounds": rounds, "summary": res,
           "ratio_redis_over_tierkv": ratios}
    write_json(os.path.join(ROOT, "bench/results/large-values.json"), out, run)
    plot_bars(os.path.join(ROOT, "bench/results/large-values.png"),
              f"one {mib:.0f} MiB value: MB/s (median)",
              {f"{name} {op}": mib / res[name][f"{op}_s"]["median"]
               for name in ("tierkv", "redis") for op in ("set", "get")}, "MB/s")
    print(run.result_line({
        "ratio": f"{ratios['set_s']['median']:.2f}",
        "set_mb_s": f"{mib / res['tierkv']['set_s']['median']:.0f}",
        "redis_set_mb_s": f"{mib / res['redis']['set_s']['median']:.0f}",
        "set_ratio": f"{ratios['set_s']['median']:.2f}",
        "get_ratio": f"{ratios['get_s']['median']:.2f}",
        "tierkv_rss_growth_mib": f"{res['tierkv']['rss_growth_mib']['median']:.0f}",
        "tierkv_rename_mb_s": f"{mib / res['tierkv']['rename_s']['median']:.0f}",
        "tierkv_ping_ms_in_set": f"{1e3 * res['tierkv']['set_ping_stall_s']['median']:.1f}",
        "tierkv_ping_ms_in_rename": f"{1e3 * res['tierkv']['rename_ping_stall_s']['median']:.1f}"}))


if __name__ == "__main__":
    main()
