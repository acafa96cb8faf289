#!/usr/bin/python3
"""The KV-cache backend as LMCache uses it, against redis-server and the
machine's bounds, in one run (issue 38; docs/kv-cache.md).

tierkv-kv-cache-bench speaks LMCache's resp:// pattern (--threads threads,
one blocking connection each, one command in flight, strict replies) and
its redis:// sequence (the EXISTS chain of <k>metadata, then GET metadata
and kv_bytes of every chunk at once). Arms, each started here on loopback:

  redis         redis-server, values in memory
  mem           tierkv, values in memory
  flash         tierkv, memory a quarter of the data, the rest on flash
  flash-pf      the same with prefetch: exists-prefetch yes (resp://) and
                exists-prefetch-map metadata=kv_bytes (redis://)
  cluster-flash, cluster-flash-pf
                three tierkv nodes as one Redis Cluster (a one-member etcd),
                memory a quarter of the data between them, LMCache's
                redis-cluster:// keys without hash tags (a chunk's two keys
                usually on two nodes), each command sent to its slot's node;
                -pf with exists-prefetch-map metadata=kv_bytes, whose
                companions on other nodes travel as prefetch hints. Only the
                redis:// request (lookup + retrieve) runs here.

For each chunk size (--chunks, MiB) and arm: SET GB/s (the third pass over
the keys: the first two take fresh memory; the first is reported as
set_cold), GET GB/s, EXISTS/s key
by key, TIER.EXISTS ... PREFIX probes/s (tierkv), and the p50 / p99 of a
--request-chunks request (resp:// retrieve; redis:// lookup + retrieve).
Bounds measured in the same run: a loopback socket copy with the same
thread count and chunk size (for the memory arms; GET's reader drops the
bytes into one reused buffer, as the client does, and SET's lands them in
memory as large as the data, as the server does), and fio's sequential
O_DIRECT read of the flash directory (1 MiB blocks, QD 16; for the flash
arms). The loopback copy is also measured with MSG_ZEROCOPY sends, to say
whether zerocopy replies could pay on this wire (on loopback the kernel
copies them anyway).

  /usr/bin/python3 bench/kv-cache/run.py [--server PATH] [--chunks 1,4,8,16,32,64]
      [--data 512mb] [--threads 8] [--requests 40] [--quick]

Prints a table and `RESULT name=kv-cache ...` (ratio: GET from memory over
the loopback bound at 8 MiB); writes bench/results/kv-cache.json and .png.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchlib import (ROOT, Etcd, RunRecord, fio_sequential, free_port,  # noqa: E402
                      parse_args_with_quick, parse_size, pyplot, resp_call, server_info,
                      wait_for_port, wait_loaded, write_json)

DRIVER = os.path.join(ROOT, "build", "bench", "kv-cache", "tierkv-kv-cache-bench")
REDIS = shutil.which("redis-server") or "/usr/bin/redis-server"
MIB = 1 << 20
ARMS = ("redis", "mem", "flash", "flash-pf", "cluster-flash", "cluster-flash-pf")
SLOTS = 16384


def tierkv_argv(arm, args, port, memory, flash_path, data):
    argv = [args.server, "--port", str(port), "--bind", "127.0.0.1", "--metrics-port", "0",
            "--log-level", "warn", "--memory", str(memory), "--max-object-size", "1gb"]
    if arm == "mem":
        return argv + ["--flash-size", "0"]
    argv += ["--flash-path", flash_path, "--flash-size", str(4 * data), "--flash-preallocate",
             "no"]
    if arm.endswith("-pf"):
        argv += ["--exists-prefetch-map", "metadata=kv_bytes"]
    if arm == "flash-pf":
        argv += ["--exists-prefetch", "yes", "--promotion-max-inflight-bytes", "512mb"]
    return argv


def start(arm, args, work, data):
    port = free_port()
    if arm == "redis":
        argv = [REDIS, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                "--appendonly", "no", "--dir", work, "--proto-max-bulk-len", "1gb"]
    else:
        memory = 2 * data + (256 << 20) if arm == "mem" else max(data // 4, 64 << 20)
        argv = tierkv_argv(arm, args, port, memory, os.path.join(work, "flash.dat"), data)
    log = open(os.path.join(work, f"{arm}.log"), "wb")
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=work)
    wait_for_port(port, proc)
    if arm not in ("redis", "mem"):
        wait_loaded(port, proc)
    return proc, port, log


class Cluster:
    """Three tierkv nodes on one etcd, each slot owned by one of them (an
    even split), memory a quarter of `data` between them."""

    def __init__(self, arm, args, work, data):
        self.etcd = Etcd(os.path.join(work, f"{arm}-etcd"))
        self.nodes = []
        try:
            for i in range(3):
                port = free_port()
                argv = tierkv_argv(arm, args, port, max(data // 12, 48 << 20),
                                   os.path.join(work, f"{arm}-{i}.dat"), data)
                argv += ["--cluster-enabled", "yes", "--cluster-etcd", self.etcd.endpoint,
                         "--cluster-name", "kvbench", "--cluster-lease-ttl", "3"]
                log = open(os.path.join(work, f"{arm}-{i}.log"), "wb")
                proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=work)
                self.nodes.append((proc, port, log))
                wait_for_port(port, proc)
                wait_loaded(port, proc)
            self.wait_settled()
        except BaseException:
            self.stop()
            raise

    def wait_settled(self, timeout=120):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            infos = [server_info(port, "cluster") for _, port, _ in self.nodes]
            owned = [int(i.get("cluster_slots_owned", "0")) for i in infos]
            if (sum(owned) == SLOTS and min(owned) > 0
                    and all(i.get("cluster_slots_migrating_out") == "0" for i in infos)):
                return
            time.sleep(0.1)
        raise RuntimeError("the cluster did not settle")

    def slots(self):
        """The driver's --slots: first-last=port for each range."""
        ranges = resp_call(self.nodes[0][1], "CLUSTER", "SLOTS")
        return ",".join(f"{int(r[0])}-{int(r[1])}={int(r[2][1])}" for r in ranges)

    def stop(self):
        for proc, _, log in self.nodes:
            proc.terminate()
        for proc, _, log in self.nodes:
            proc.wait(60)
            log.close()
        self.etcd.stop()


def run_cluster_arm(arm, args, chunk, work):
    """The redis-cluster:// request: lookup (EXISTS chain) and retrieve."""
    keys = max(args.request_chunks, args.data // chunk)
    cluster = Cluster(arm, args, work, keys * chunk)
    try:
        slots = ("--slots", cluster.slots())
        drive(0, "set", chunk, keys, args, "--lmcache", *slots)
        lm = drive(0, "lmcache", chunk, keys, args, "--lmcache", "--seed", "2", *slots)
        return {"lmcache_p50_ms": lm["p50_ms"], "lmcache_p99_ms": lm["p99_ms"],
                "lookup_p50_ms": lm["lookup_p50_ms"]}
    finally:
        cluster.stop()


def drive(port, phase, chunk, keys, args, *extra, requests=None):
    argv = [DRIVER, "--port", str(port), "--phase", phase, "--chunk", str(chunk), "--keys",
            str(keys), "--threads", str(args.threads), "--requests",
            str(requests or args.requests),
            "--request-chunks", str(args.request_chunks), *extra]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"{phase} failed: {out.stderr.strip()[:300]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def run_arm(arm, args, chunk, work):
    keys = max(args.request_chunks, args.data // chunk)
    proc, port, log = start(arm, args, work, keys * chunk)
    try:
        # The first SETs take fresh memory (page faults, in both servers:
        # the first pass, and the second, while the old values still
        # live); a cache in service reuses what it evicted: the third pass
        # is the steady state.
        cold = drive(port, "set", chunk, keys, args)["gbps"]
        drive(port, "set", chunk, keys, args)
        r = {"set_cold": cold, "set": drive(port, "set", chunk, keys, args)["gbps"],
             # Every thread reads at least 8 values: a few large ones would
             # measure the last thread's tail.
             "get": drive(port, "get", chunk, keys, args, "--passes",
                          str(-(-8 * args.threads // keys)))["gbps"],
             "exists": drive(port, "exists", chunk, keys, args, "--passes",
                             str(-(-args.exists_ops // keys)))["ops_per_s"]}
        if arm != "redis":
            r["prefix"] = drive(port, "prefix", chunk, keys, args,
                                requests=20 * args.requests)["ops_per_s"]
        retrieve = drive(port, "retrieve", chunk, keys, args)
        r["retrieve_p50_ms"], r["retrieve_p99_ms"] = retrieve["p50_ms"], retrieve["p99_ms"]
        drive(port, "set", chunk, keys, args, "--lmcache")
        lm = drive(port, "lmcache", chunk, keys, args, "--lmcache", "--seed", "2")
        r["lmcache_p50_ms"], r["lmcache_p99_ms"] = lm["p50_ms"], lm["p99_ms"]
        r["lookup_p50_ms"] = lm["lookup_p50_ms"]
    finally:
        proc.terminate()
        proc.wait(60)
        log.close()
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--server", default=os.path.join(ROOT, "build", "src", "server",
                                                     "tierkv-server"))
    ap.add_argument("--chunks", default="1,4,8,16,32,64", help="chunk sizes, MiB")
    ap.add_argument("--data", default="512mb", help="bytes stored per arm and chunk size")
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--requests", type=int, default=40)
    ap.add_argument("--request-chunks", type=int, default=16)
    ap.add_argument("--exists-ops", type=int, default=40000, help="EXISTS per arm and size")
    ap.add_argument("--arms", default=",".join(ARMS))
    ap.add_argument("--json", default=os.path.join(ROOT, "bench", "results", "kv-cache.json"))
    args = parse_args_with_quick(ap, {"chunks": "4,8", "data": "128mb", "requests": 10,
                                      "exists_ops": 10000})
    args.data = parse_size(args.data)
    run = RunRecord("kv-cache")
    chunks = [int(c) * MIB for c in args.chunks.split(",")]
    arms = args.arms.split(",")
    work = tempfile.mkdtemp(prefix="tierkv-kv-cache-", dir=os.path.join(ROOT, "build"))
    results = {}
    try:
        fio = fio_sequential(work, "1g", "read")
        zerocopy = zerocopy_loopback(args)
        for chunk in chunks:
            keys = max(args.request_chunks, args.data // chunk)
            per_thread = ("--bytes-per-thread", str(max(args.data // args.threads, 256 * MIB)))
            row = {"loopback": drive(0, "loopback", chunk, keys, args, *per_thread)["gbps"],
                   "loopback_set": drive(0, "loopback", chunk, keys, args, *per_thread,
                                         "--into-memory")["gbps"]}
            for arm in arms:
                measure = run_cluster_arm if arm.startswith("cluster-") else run_arm
                row[arm] = measure(arm, args, chunk, work)
            results[chunk // MIB] = row
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report(args, arms, results, fio, zerocopy, run)


def zerocopy_loopback(args):
    """The loopback copy at 4 MiB with plain sends and with MSG_ZEROCOPY:
    whether zerocopy replies could pay on this machine's wire."""
    keys = max(args.request_chunks, args.data // (4 * MIB))
    common = ("--bytes-per-thread", str(256 * MIB))
    plain = drive(0, "loopback", 4 * MIB, keys, args, *common)
    zc = drive(0, "loopback", 4 * MIB, keys, args, *common, "--zerocopy")
    return {"plain_gbps": plain["gbps"], "zerocopy_gbps": zc["gbps"],
            "ratio": round(zc["gbps"] / plain["gbps"], 3),
            "copied_share": round(zc["zerocopy_copied"] / max(1, zc["zerocopy_sends"]), 3)}


def report(args, arms, results, fio, zerocopy, run):
    print(f"fio sequential read (1 MiB, QD 16): {fio:.2f} GB/s")
    print(f"loopback at 4 MiB: plain {zerocopy['plain_gbps']:.2f} GB/s, MSG_ZEROCOPY "
          f"{zerocopy['zerocopy_gbps']:.2f} GB/s ({zerocopy['copied_share']:.0%} of its sends "
          f"copied by the kernel after all)")
    head = f"{'MiB':>4} {'arm':>9} {'SET GB/s':>9} {'GET GB/s':>9} {'EXISTS/s':>9} " \
           f"{'PREFIX/s':>9} {'resp p50':>9} {'p99':>7} {'redis:// p50':>12} {'lookup':>7}"
    print(head)
    for mib, row in results.items():
        print(f"{mib:>4} {'loopback':>9} {row['loopback_set']:>9.2f} {row['loopback']:>9.2f}")
        for arm in arms:
            r = row[arm]
            if arm.startswith("cluster-"):
                print(f"{mib:>4} {arm:>9} {'':>9} {'':>9} {'':>9} {'':>9} {'':>9} {'':>7} "
                      f"{r['lmcache_p50_ms']:>12.2f} {r['lookup_p50_ms']:>7.2f}")
                continue
            print(f"{mib:>4} {arm:>9} {r['set']:>9.2f} {r['get']:>9.2f} {r['exists']:>9.0f} "
                  f"{r.get('prefix', 0):>9.0f} {r['retrieve_p50_ms']:>9.2f} "
                  f"{r['retrieve_p99_ms']:>7.2f} {r['lmcache_p50_ms']:>12.2f} "
                  f"{r['lookup_p50_ms']:>7.2f}")
    figures = goals(arms, results, fio)
    figures["zerocopy_over_copy"] = zerocopy["ratio"]
    figures["zerocopy_copied_share"] = zerocopy["copied_share"]
    for k, v in figures.items():
        print(f"  {k}: {v}")
    write_json(args.json, {"fio_read_gbps": fio, "zerocopy_loopback": zerocopy,
                           "results": results, "goals": figures}, run)
    plot(args.json.replace(".json", ".png"), arms, results)
    key = 8 if 8 in results else next(iter(results))
    print(run.result_line({"ratio": figures.get(f"get_mem_over_loopback_{key}mib", "?"),
                           **{k: v for k, v in figures.items()
                              if not k.startswith("get_mem_over_loopback_")},
                           "get_mem_over_loopback_min": figures.get("get_mem_over_loopback_min")}))


def goals(arms, results, fio):
    g = {}
    ratio = lambda a, b: round(a / b, 3) if b else 0.0  # noqa: E731
    for mib, row in results.items():
        if "mem" in arms:
            g[f"get_mem_over_loopback_{mib}mib"] = ratio(row["mem"]["get"], row["loopback"])
    mem = [v for k, v in g.items() if k.startswith("get_mem_over_loopback_")]
    if mem:
        g["get_mem_over_loopback_min"] = min(mem)
    if "mem" in arms:
        g["set_mem_over_loopback_min"] = min(ratio(r["mem"]["set"], r["loopback_set"])
                                             for r in results.values())
    if "mem" in arms and "redis" in arms:
        big = [r for m, r in results.items() if m >= 8] or list(results.values())
        g["get_mem_over_redis_8mib_up_min"] = min(ratio(r["mem"]["get"], r["redis"]["get"])
                                                  for r in big)
        g["exists_over_redis_min"] = min(ratio(r["mem"]["exists"], r["redis"]["exists"])
                                         for r in results.values())
    if "flash" in arms:
        g["get_flash_over_fio_median"] = round(
            statistics.median(r["flash"]["get"] for r in results.values()) / fio, 3)
    for name, arm in (("redis", "flash"), ("cluster", "cluster-flash")):
        if arm in arms and f"{arm}-pf" in arms:
            g[f"prefetch_cut_{name}_p50"] = round(statistics.median(
                1 - r[f"{arm}-pf"]["lmcache_p50_ms"] / r[arm]["lmcache_p50_ms"]
                for r in results.values()), 3)
            g[f"lookup_share_{name}_p50"] = round(statistics.median(
                r[arm]["lookup_p50_ms"] / r[arm]["lmcache_p50_ms"] for r in results.values()), 3)
    return g


def plot(path, arms, results):
    plt = pyplot()
    if plt is None:
        return
    fig, ax = plt.subplots(figsize=(7, 4))
    sizes = list(results)
    ax.plot(sizes, [results[m]["loopback"] for m in sizes], "k--", label="loopback bound")
    for arm in (a for a in arms if not a.startswith("cluster-")):
        ax.plot(sizes, [results[m][arm]["get"] for m in sizes], marker="o", label=f"GET {arm}")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("chunk size (MiB)")
    ax.set_ylabel("GB/s")
    ax.set_title("KV-cache GET, resp:// pattern")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
