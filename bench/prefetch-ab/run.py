#!/usr/bin/python3
"""Prefetch on exist, A/B against an all-in-memory oracle: time to first token
(TTFT) of a simulated inference engine (docs/benchmarks-prefetch.md).

A working set of P prefixes (each C data keys p<i>:c<j>:kv_bytes of V bytes,
and small companion keys p<i>:c<j>:metadata) lives on one flash file. Each
cell restarts a tierkv-server on it (memory empty: the working set is
flash-only), fills memory with filler as its regime says, and runs the native
driver (prefetch-ab-driver, built next to the server): c client threads probe
a prefix when its request arrives, and one engine thread GETs its chunks in
FIFO order, then computes. TTFT = arrival -> last GET byte.

Arms (all with promotion-on-hit no, demand-kick no):
  baseline    EXISTS of the data keys
  prefetch    TIER.EXISTS ... PREFETCH
  exists-map  EXISTS of the metadata keys, exists-prefetch-map metadata=kv_bytes
  oracle      the working set made resident first (checked with TIER.STAT) in a
              memory that holds it besides the filler, then EXISTS: the best
              TTFT any prefetch could reach
Regimes:
  comfortable        memory 1.5 x the working set, no filler
  constrained        memory 0.9 x, clean filler to 97 % (dirty-max-fraction 0
                     writes it back before the cell starts)
  constrained-dirty  the same, filler left dirty (a stress case)
  large-ws           memory 0.25 x, clean filler to 97 %
  seed               as constrained, with a modelled SSD (backing-latency-ns and
                     backing-bandwidth), compute per request >= the device time
                     per request, and open-loop Poisson arrivals at --seed-load
                     of the baseline's capacity (measured first)
  (comfortable, constrained and large-ws run on the raw device.)
Figures per (regime, c): median, p95, p99 TTFT per arm (median of the
repetitions), gap closed = (baseline - arm) / (baseline - oracle), the ceiling
(baseline - oracle) / baseline, the server CPU per request, and flash GETs,
promotions and attached reads. Arms are interleaved and rotated per repetition.
A probe-latency phase then times EXISTS against TIER.EXISTS ... PREFETCH.

    /usr/bin/python3 bench/prefetch-ab/run.py [--quick] [--reps N] [--build DIR]

Writes bench/results/prefetch-ab.json and .png; the last line is RESULT.
"""
import argparse
import math
import json
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchlib import (RunRecord, free_port, parse_args_with_quick, parse_size,  # noqa: E402
                      pyplot, server_info, wait_for_port, wait_loaded, write_json)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RESULTS = os.path.join(ROOT, "bench", "results")
MIB = 1 << 20

BASE_FLAGS = ("--promotion-on-hit", "no", "--demand-kick", "no")
ARMS = {
    "baseline": ("exists", ()),
    "prefetch": ("prefetch", ()),
    "exists-map": ("metadata", ("--exists-prefetch-map", "metadata=kv_bytes")),
    # Re-probed until resident: no dedup window, no lease cap in the way.
    "oracle": ("exists", ("--prefetch-dedup-ttl-ms", "0", "--lease-max-fraction", "1")),
}
COUNTERS = ("flash_hits", "flash_reads", "promotions_done", "prefetch_promoted",
            "prefetch_reads_attached", "prefetch_reads_served", "prefetch_failed_saturated",
            "prefetch_failed_busy", "prefetch_refused_lease_cap", "prefetch_cooldowns",
            "prefetch_leases_expired_unread", "offloads", "promotion_bytes_copied",
            "promotion_bytes_adopted", "evicted_keys", "prefetch_skipped_no_window")
QUICK = {"reps": 1, "requests": 150, "regimes": "constrained,seed", "probe_pairs_flash": 20,
         "probe_pairs_memory": 200}

# --- a small RESP2 client over a plain socket --------------------------------
# redis-py would turn every 4 MiB value into a bytes object (and copy it);
# this one discards bulk replies it does not keep into one scratch buffer, so
# the TTFT measured is the server's and the wire's, not Python's.

class RespError(Exception):
    pass


def encode(args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        if isinstance(a, str):
            a = a.encode()
        elif isinstance(a, int):
            a = b"%d" % a
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


class Resp:
    def __init__(self, port, timeout=120.0):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.f = self.sock.makefile("rb", buffering=1 << 20)
        self.scratch = memoryview(bytearray(1 << 20))

    def close(self):
        self.f.close()
        self.sock.close()

    def send(self, *commands):
        self.sock.sendall(b"".join(encode(c) for c in commands))

    def set_start(self, key, value):
        """Sends SET key value without building the whole command in memory."""
        self.sock.sendall(b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n" % (len(key), key, len(value)))
        self.sock.sendall(value)
        self.sock.sendall(b"\r\n")

    def call(self, *args, keep=True):
        self.send(args)
        reply = self.read(keep)
        if isinstance(reply, RespError):
            raise reply
        return reply

    def read(self, keep=True):
        """One reply. Errors are returned as RespError, not raised. A bulk
        string is returned as bytes with `keep`, else as its length (-1: nil)."""
        line = self.f.readline()
        if not line.endswith(b"\r\n"):
            raise ConnectionError("connection closed by the server")
        kind, body = line[:1], line[1:-2]
        if kind == b"+":
            return body.decode()
        if kind == b"-":
            return RespError(body.decode())
        if kind == b":":
            return int(body)
        if kind == b"$":
            n = int(body)
            if n < 0:
                return None if keep else -1
            if keep:
                data = self._read_exact(n + 2)
                return data[:-2]
            self._discard(n + 2)
            return n
        if kind == b"*":
            n = int(body)
            return None if n < 0 else [self.read(keep) for _ in range(n)]
        raise RespError(f"unexpected reply {line[:80]!r}")

    def _read_exact(self, n):
        data = self.f.read(n)
        if len(data) != n:
            raise ConnectionError("connection closed by the server")
        return data

    def _discard(self, n):
        while n > 0:
            got = self.f.readinto(self.scratch[:min(n, len(self.scratch))])
            if not got:
                raise ConnectionError("connection closed by the server")
            n -= got


# --- keys, values, bulk writes -----------------------------------------------

def data_key(p, j):
    return b"p%d:c%d:kv_bytes" % (p, j)


def meta_key(p, j):
    return b"p%d:c%d:metadata" % (p, j)


def filler_key(i):
    return b"filler:%d" % i


def set_many(port, items, connections=2, batch=4, retries=100):
    """SETs every (key, value), `batch` pipelined per connection; a SET refused
    because memory is full (flash still draining) is retried after a pause."""
    errors = []

    def one(share):
        try:
            c = Resp(port)
            try:
                pending = list(share)
                while pending:
                    now, pending = pending[:batch], pending[batch:]
                    for attempt in range(retries + 1):
                        for key, value in now:
                            c.set_start(key, value)
                        replies = [c.read() for _ in now]
                        failed = [it for it, r in zip(now, replies) if r != "OK"]
                        if not failed:
                            break
                        if attempt == retries or not all(
                                "OOM" in str(r) or "memory" in str(r).lower()
                                for r in replies if r != "OK"):
                            raise RuntimeError(f"SET failed: {[str(r) for r in replies][:3]}")
                        now = failed
                        time.sleep(0.1)
            finally:
                c.close()
        except Exception as e:  # noqa: BLE001 - reported by the caller
            errors.append(e)

    threads = [threading.Thread(target=one, args=(items[k::connections],))
               for k in range(connections)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def delete_many(port, keys, batch=256):
    c = Resp(port)
    try:
        for i in range(0, len(keys), batch):
            c.call("DEL", *keys[i:i + batch])
    finally:
        c.close()



class Server:
    """One tierkv-server on a flash file that outlives it (one per regime)."""

    def __init__(self, args, workdir, flash_path, flash_size):
        self.args, self.flash_path, self.flash_size = args, flash_path, flash_size
        self.log_path = os.path.join(workdir, "server.log")
        self.proc, self.port, self.argv = None, None, None
        self.cpus = None  # a set of CPUs to pin the server (all its threads) to

    def start(self, memory, flags=()):
        self.port = free_port()
        self.argv = [self.args.server, "--port", str(self.port), "--bind", "127.0.0.1",
                     "--metrics-port", "0", "--memory", str(memory),
                     "--flash-path", self.flash_path, "--flash-size", str(self.flash_size),
                     "--region-size", self.args.region_size, "--io-threads",
                     str(self.args.io_threads), "--log-level", "warn", *flags,
                     *self.args.server_arg]
        with open(self.log_path, "ab") as log:
            log.write(b"\n=== %s\n" % " ".join(self.argv).encode())
            log.flush()
            cpus = self.cpus
            self.proc = subprocess.Popen(
                self.argv, stdout=log, stderr=subprocess.STDOUT, cwd=os.path.dirname(self.log_path),
                preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None)
        try:
            wait_for_port(self.port, self.proc, 60)
            wait_loaded(self.port, self.proc, 600)
        except RuntimeError as e:
            self.kill()
            raise RuntimeError(f"{e}\n--- server log ---\n{self.log_tail()}") from None

    def stop(self):
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(120)
        except subprocess.TimeoutExpired:
            self.kill()
            raise RuntimeError(f"server did not stop within 120 s\n{self.log_tail()}") from None
        if code != 0:
            raise RuntimeError(f"clean shutdown exited with {code}\n{self.log_tail()}")

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def info(self):
        return server_info(self.port, "all")

    def log_tail(self, lines=20):
        try:
            with open(self.log_path, "rb") as f:
                return "\n".join(f.read().decode(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""



def settle(port, timeout):
    """Waits until the offloads are done: none in flight, nothing queued, and
    the offload and flash-write counters (and any dirty-bytes figure) still
    for three polls. False on timeout."""
    deadline = time.monotonic() + timeout
    last, stable = None, 0
    while True:
        f = server_info(port, "all")
        busy = num(f, "offloads_inflight", 0) > 0 or num(f, "offload_queue_bytes", 0) > 0
        sig = (f.get("offloads"), f.get("flash_user_write_bytes"),
               tuple(sorted((k, v) for k, v in f.items() if "dirty" in k)))
        stable = stable + 1 if not busy and sig == last else 0
        if stable >= 2:
            return True
        if time.monotonic() >= deadline:
            return False
        last = sig
        time.sleep(0.25)


def num(fields, name, default=None):
    try:
        return float(fields[name])
    except (KeyError, ValueError):
        return default



def percentile(values, q):
    """Linear interpolation between closest ranks (numpy's default)."""
    if not values:
        return None
    s = sorted(values)
    pos = (len(s) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)



def time_probe(conn, command, keys):
    t = time.perf_counter_ns()
    if command == "prefetch":
        conn.call("TIER.EXISTS", *keys, "PREFETCH")
    else:
        conn.call("EXISTS", *keys)
    return (time.perf_counter_ns() - t) / 1e3


def states(conn, keys):
    """TIER.STAT's state of each key: dirty, clean, ... in memory; flash if
    only flash holds it."""
    out = []
    for key in keys:
        stat = conn.call("TIER.STAT", key)
        fields = dict(zip(stat[0::2], stat[1::2])) if stat else {}
        out.append(fields.get(b"state", b"?").decode())
    return out


def probe_latency(args, workdir, pinned=False):
    """Median probe latency (us) of EXISTS and TIER.EXISTS ... PREFETCH over
    one prefix's chunk keys (--kv-bytes each), on keys all in memory and on
    flash-only keys, with the prefetch arm's flags and an otherwise idle server.

    Flash-only: a pool of groups 4x larger than memory is written, then the
    server restarts (memory empty). Each pair times EXISTS on one group and
    PREFETCH on another (alternating which goes first), both found flash-only
    right before (TIER.STAT, untimed: eviction is per key, so a group keeps
    some keys in memory for a while), then waits for the promotions it
    started to end. In memory: after another restart, a few groups are
    written (well under the memory budget) and checked in memory.

    Pinned: the server runs on CPU 1 and this client on CPU 0, so the work a
    prefetch starts after its reply cannot take the client's core. On a
    2-core machine that isolates the machine's share of the ratio."""
    chunks, size = args.chunks, args.kv
    value = random.Random(9).randbytes(size)
    group_bytes = chunks * size
    memory = max(16 * MIB, round_up(6 * group_bytes, MIB))
    pool = max(8, 4 * memory // group_bytes)
    flash_size = round_up(int(1.5 * (pool + 8) * group_bytes) + 8 * parse_size(args.region_size),
                          parse_size(args.region_size))
    server = Server(args, workdir, os.path.join(workdir, "probe.dat"), flash_size)
    client_cpus = os.sched_getaffinity(0)
    if pinned:
        server.cpus = {1}
        os.sched_setaffinity(0, {0})
    flags = list(BASE_FLAGS)

    def group(name, g):
        return [b"%s%d:c%d" % (name, g, j) for j in range(chunks)]

    out = {"flash": {"exists": [], "prefetch": []}, "memory": {"exists": [], "prefetch": []}}
    skipped = 0
    rng = random.Random(args.seed)
    try:
        server.start(memory, flags)
        set_many(server.port, [(k, value) for g in range(pool) for k in group(b"q", g)])
        server.stop()
        server.start(memory, flags)  # memory empty: every q key flash-only
        conn = Resp(server.port)
        try:
            cursor = 0
            for i in range(args.probe_pairs_flash):
                found = []
                for step in range(pool):
                    g = (cursor + step) % pool
                    if all(st == "flash" for st in states(conn, group(b"q", g))):
                        found.append(g)
                        if len(found) == 2:
                            break
                    else:
                        skipped += 1
                if len(found) < 2:
                    break
                cursor = found[1] + 1
                a, b = group(b"q", found[0]), group(b"q", found[1])
                order = (("exists", a), ("prefetch", b)) if i % 2 else \
                        (("prefetch", b), ("exists", a))
                for command, keys in order:
                    out["flash"][command].append(time_probe(conn, command, keys))
                deadline = time.monotonic() + 2.0  # let the promotions run off
                while time.monotonic() < deadline and "flash" in states(conn, b):
                    time.sleep(0.002)
        finally:
            conn.close()
        server.stop()
        server.start(memory, flags)
        conn = Resp(server.port)
        try:
            resident = 3
            set_many(server.port, [(k, value)
                                   for g in range(resident) for k in group(b"r", g)])
            in_memory = [st != "flash" for g in range(resident)
                         for st in states(conn, group(b"r", g))]
            for i in range(args.probe_pairs_memory):
                keys = group(b"r", rng.randrange(resident))
                order = ("exists", "prefetch") if i % 2 else ("prefetch", "exists")
                for command in order:
                    out["memory"][command].append(time_probe(conn, command, keys))
        finally:
            conn.close()
        server.stop()
    finally:
        server.kill()
        os.sched_setaffinity(0, client_cpus)
        try:
            os.unlink(server.flash_path)
        except OSError:
            pass
    result = {"keys_per_probe": chunks, "value_bytes": size, "memory": memory,
              "pool_groups": pool, "pairs_flash": len(out["flash"]["exists"]),
              "pairs_memory": len(out["memory"]["exists"]), "flash_groups_skipped": skipped,
              "resident_all_in_memory": all(in_memory), "pinned": pinned}
    for where in ("memory", "flash"):
        ex, pf = out[where]["exists"], out[where]["prefetch"]
        ex_m = statistics.median(ex) if ex else None
        pf_m = statistics.median(pf) if pf else None
        result[where] = {"exists_median_us": ex_m, "prefetch_median_us": pf_m,
                         "exists_p99_us": percentile(ex, 0.99),
                         "prefetch_p99_us": percentile(pf, 0.99),
                         "ratio": pf_m / ex_m if ex_m and pf_m else None}
    return result



def round_up(n, unit):
    return (n + unit - 1) // unit * unit


# --- main ----------------------------------------------------------------------------



# --- regimes and cells -----------------------------------------------------------

def make_regimes(args, ws):
    mem = lambda f: round_up(int(f * ws), MIB)  # noqa: E731
    clean = ("--dirty-max-fraction", "0")
    seed_model = ("--backing-latency-ns", str(args.seed_latency_ns),
                  "--backing-bandwidth", str(args.seed_bandwidth))
    all_regimes = [
        {"name": "comfortable", "memory": mem(1.5), "fill": 0.0, "flags": (), "c": [1, 4]},
        {"name": "constrained", "memory": mem(0.9), "fill": 0.97, "flags": clean, "c": [1, 4]},
        {"name": "constrained-dirty", "memory": mem(0.9), "fill": 0.97, "flags": (), "c": [4]},
        {"name": "large-ws", "memory": mem(0.25), "fill": 0.97, "flags": clean, "c": [1, 4]},
        {"name": "seed", "memory": mem(0.9), "fill": 0.97, "flags": clean + seed_model,
         "c": [4], "open": True},
    ]
    wanted = args.regimes.split(",")
    unknown = set(wanted) - {r["name"] for r in all_regimes}
    if unknown:
        raise SystemExit(f"unknown regime(s): {', '.join(sorted(unknown))}")
    return [r for r in all_regimes if r["name"] in wanted]


def fill(server, args, regime):
    """Filler up to the regime's share of memory; waits until it is settled
    (and written back, where the regime cleans it)."""
    n = int(regime["fill"] * regime["memory"] / (args.filler_bytes + 8192))
    if n:
        set_many(server.port, [(filler_key(i), args.filler_value) for i in range(n)])
        if not settle(server.port, args.settle_timeout):
            print("  warning: offloads did not settle after the filler", flush=True)
    return n


def make_resident(server, keys, timeout=60.0):
    """The oracle's preparation: prefetches every working-set key until
    TIER.STAT finds all of them in memory. False on timeout."""
    conn = Resp(server.port)
    try:
        deadline = time.monotonic() + timeout
        left = list(keys)
        while left and time.monotonic() < deadline:
            for i in range(0, len(left), 32):
                conn.call("TIER.EXISTS", *left[i:i + 32], "PREFETCH")
            time.sleep(0.05)
            left = [k for k, st in zip(left, states(conn, left)) if st == "flash"]
        return not left
    finally:
        conn.close()


def run_driver(args, port, pid, probe, c, requests, open_rate=None, compute_us=None):
    argv = [args.driver, "--port", str(port), "--probe", probe, "--clients", str(c),
            "--requests", str(requests), "--warmup", str(4 * c), "--prefixes", str(args.prefixes),
            "--chunks", str(args.chunks), "--value-bytes", str(args.kv),
            "--compute-us", str(compute_us if compute_us is not None else args.compute_us),
            "--seed", str(args.seed), "--server-pid", str(pid)]
    if open_rate:
        argv += ["--open", "--rate", f"{open_rate:.3f}"]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(f"driver failed ({out.returncode}): {out.stderr.strip()}")
    return json.loads(out.stdout)


def counters(before, after):
    return {n: (num(after, n) - num(before, n, 0.0)) if num(after, n) is not None else None
            for n in COUNTERS}


def run_cell(server, args, regime, arm, c, ws_keys):
    probe, arm_flags = ARMS[arm]
    memory = regime["memory"]
    if arm == "oracle":  # room for the working set besides the filler
        memory += round_up(int(1.3 * len(ws_keys) * args.kv), MIB)
    server.stop()
    server.start(memory, BASE_FLAGS + tuple(regime["flags"]) + arm_flags)
    fillers = fill(server, args, regime)
    resident = make_resident(server, ws_keys) if arm == "oracle" else None
    if resident is False:
        print("  warning: the oracle's working set did not all become resident", flush=True)
    before = server.info()
    compute = regime.get("compute_us")
    rate = regime.get("rate")
    d = run_driver(args, server.port, server.proc.pid, probe, c, args.requests, rate, compute)
    after = server.info()
    ttft = d["ttft_ms"]
    n = len(ttft)
    cell = {"regime": regime["name"], "arm": arm, "c": c, "n": n, "fillers": fillers,
            "memory": memory, "oracle_resident": resident,
            "median_ms": statistics.median(ttft) if ttft else None,
            "p95_ms": percentile(ttft, 0.95), "p99_ms": percentile(ttft, 0.99),
            "wait_median_ms": statistics.median(d["wait_ms"]) if n else None,
            "load_median_ms": statistics.median(d["load_ms"]) if n else None,
            "cpu_ms_per_request": 1e3 * d["server_cpu_s"] / max(d["requests"], 1),
            "bad_gets": d["bad_gets"], "probe_short": d["probe_short"],
            "seconds": d["seconds"], "counters": counters(before, after)}
    if d["bad_gets"] or d["probe_short"]:
        print(f"  warning: {d['bad_gets']} bad GETs, {d['probe_short']} short probes", flush=True)
    return cell


def calibrate_seed(server, args, regime, ws_keys):
    """The baseline's service time in the seed regime (closed loop, c = 1):
    the compute is set to at least the device time per request, and the
    open-loop rate to --seed-load of the resulting capacity."""
    server.stop()
    server.start(regime["memory"], BASE_FLAGS + tuple(regime["flags"]))
    fill(server, args, regime)
    d = run_driver(args, server.port, server.proc.pid, "exists", 1, 60, compute_us=0)
    load_ms = statistics.median(d["load_ms"])
    device_ms = args.chunks * args.kv / args.seed_bandwidth * 1e3 + args.seed_latency_ns / 1e6
    compute_ms = max(args.seed_compute_ms, device_ms, load_ms)
    service_ms = load_ms + compute_ms
    regime["compute_us"] = int(compute_ms * 1e3)
    regime["rate"] = args.seed_load * 1e3 / service_ms
    regime["calibration"] = {"load_median_ms": load_ms, "device_ms_model": device_ms,
                             "compute_ms": compute_ms, "service_ms": service_ms,
                             "rate_per_s": regime["rate"]}
    print(f"  seed: baseline load {load_ms:.2f} ms (model {device_ms:.2f} ms), compute "
          f"{compute_ms:.2f} ms, open loop at {regime['rate']:.1f}/s "
          f"({args.seed_load:.0%} of capacity)", flush=True)


# --- summary ---------------------------------------------------------------------

def median_of(cells, field):
    vals = [x[field] for x in cells if x.get(field) is not None]
    return statistics.median(vals) if vals else None


def window_ceiling(base, oracle):
    """The share of the baseline's median TTFT that loading inside the queue
    window can hide: min(its wait, its load - the oracle's) / its TTFT. What
    a prefetch saves beyond it comes from reuse (a promoted key read again),
    which a working set larger than memory does not allow."""
    if not base or not oracle or not base["median_ms"]:
        return None
    if base["wait_median_ms"] is None or base["load_median_ms"] is None \
            or oracle["load_median_ms"] is None:
        return None
    hidden = min(base["wait_median_ms"], base["load_median_ms"] - oracle["load_median_ms"])
    return max(hidden, 0.0) / base["median_ms"]


def summarize(cells, arms):
    """Per (regime, c, arm): the median over repetitions of each figure, and
    the gap closed against that (regime, c)'s baseline and oracle."""
    groups = {}
    for x in cells:
        groups.setdefault((x["regime"], x["c"], x["arm"]), []).append(x)
    rows = []
    for (regime, c, arm), xs in groups.items():
        row = {"regime": regime, "c": c, "arm": arm, "reps": len(xs)}
        for f in ("median_ms", "p95_ms", "p99_ms", "cpu_ms_per_request", "wait_median_ms",
                  "load_median_ms"):
            row[f] = median_of(xs, f)
        row["spread_median_ms"] = (max(x["median_ms"] for x in xs) - min(x["median_ms"] for x in xs)
                                   if all(x["median_ms"] is not None for x in xs) else None)
        for k in COUNTERS:
            vals = [x["counters"][k] for x in xs if x["counters"].get(k) is not None]
            row[k] = statistics.median(vals) if vals else None
        rows.append(row)
    index = {(r["regime"], r["c"], r["arm"]): r for r in rows}
    for r in rows:
        base = index.get((r["regime"], r["c"], "baseline"))
        oracle = index.get((r["regime"], r["c"], "oracle"))
        for stat in ("median", "p99"):
            b = base and base[f"{stat}_ms"]
            o = oracle and oracle[f"{stat}_ms"]
            a = r[f"{stat}_ms"]
            r[f"decrease_{stat}"] = (b - a) / b if b and a is not None else None
            r[f"ceiling_{stat}"] = (b - o) / b if b and o is not None else None
            r[f"gap_closed_{stat}"] = ((b - a) / (b - o) if b and o is not None and a is not None
                                       and abs(b - o) > 1e-9 else None)
        r["window_ceiling"] = window_ceiling(base, oracle)
    order = {a: i for i, a in enumerate(arms)}
    rows.sort(key=lambda r: (r["regime"], r["c"], order.get(r["arm"], 99)))
    return rows


def fmt(v, spec=".2f", none="-"):
    return none if v is None else format(v, spec)


def print_table(rows):
    print()
    print(f"{'regime':<18} {'c':>4} {'arm':<11} {'med ms':>8} {'p95 ms':>8} {'p99 ms':>8} "
          f"{'spread':>7} {'gap med':>7} {'gap p99':>7} {'ceil':>5} {'wceil':>5} {'decr':>6} "
          f"{'cpu ms':>6} "
          f"{'flashGET':>8} {'attach':>6} {'promo':>5}")
    for r in rows:
        c = "open" if r["regime"] == "seed" else str(r["c"])
        print(f"{r['regime']:<18} {c:>4} {r['arm']:<11} {fmt(r['median_ms']):>8} "
              f"{fmt(r['p95_ms']):>8} {fmt(r['p99_ms']):>8} {fmt(r['spread_median_ms']):>7} "
              f"{fmt(r['gap_closed_median']):>7} {fmt(r['gap_closed_p99']):>7} "
              f"{fmt(r['ceiling_median']):>5} {fmt(r['window_ceiling']):>5} "
              f"{fmt(r['decrease_median'], '.1%'):>6} "
              f"{fmt(r['cpu_ms_per_request']):>6} {fmt(r['flash_hits'], '.0f'):>8} "
              f"{fmt(r['prefetch_reads_attached'], '.0f'):>6} "
              f"{fmt(r['promotions_done'], '.0f'):>5}")
    print("gap = (baseline - arm) / (baseline - oracle); ceil = (baseline - oracle) / baseline; "
          "wceil = the share of the baseline's TTFT that its queue window can hide "
          "(min(wait, load - oracle's load) / TTFT); decr = decrease against the baseline; spread = max - min of the repetitions' "
          "medians; cpu = server CPU per request; flashGET = GETs the server read from flash; "
          "attach = GETs served by a prefetch in flight")


def print_probe(p, label):
    print()
    for where in ("memory", "flash"):
        x = p[where]
        print(f"{label}probe {where:<6}: EXISTS {fmt(x['exists_median_us'], '.1f')} us, TIER.EXISTS "
              f"PREFETCH {fmt(x['prefetch_median_us'], '.1f')} us, ratio {fmt(x['ratio'], '.3f')}")


def plot(png, rows, regimes, arms):
    plt = pyplot()
    if plt is None:
        return None
    combos = [(r["name"], c) for r in regimes for c in r["c"]]
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(combos)), 4))
    width = 0.8 / len(arms)
    for k, arm in enumerate(arms):
        vals = []
        for regime, c in combos:
            row = next((r for r in rows if (r["regime"], r["c"], r["arm"]) == (regime, c, arm)),
                       None)
            vals.append(row["median_ms"] if row and row["median_ms"] else 0)
        ax.bar([i + k * width for i in range(len(combos))], vals, width, label=arm)
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(combos))],
                  [f"{r}\nc={c}" if r != "seed" else "seed\nopen" for r, c in combos],
                  fontsize=8)
    ax.set_ylabel("median TTFT (ms)")
    ax.set_yscale("log")
    ax.set_title("prefetch-ab: median TTFT per regime and arm")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    plt.close(fig)
    return png


# --- main ------------------------------------------------------------------------

def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--server", default=None, help="default: BUILD/src/server/tierkv-server")
    ap.add_argument("--driver", default=None,
                    help="default: BUILD/bench/prefetch-ab/prefetch-ab-driver")
    ap.add_argument("--dir", default=RESULTS, help="where the flash file goes (a real disk)")
    ap.add_argument("--out", default=os.path.join(RESULTS, "prefetch-ab.json"))
    ap.add_argument("--regimes", default="comfortable,constrained,constrained-dirty,large-ws,seed")
    ap.add_argument("--arms", default="baseline,prefetch,exists-map,oracle")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--requests", type=int, default=600, help="per cell (a warm-up of 4c is cut)")
    ap.add_argument("--prefixes", type=int, default=64)
    ap.add_argument("--chunks", type=int, default=4)
    ap.add_argument("--kv-bytes", default="256kb")
    ap.add_argument("--filler-bytes", default="1mb")
    ap.add_argument("--compute-us", type=int, default=2000, help="closed-loop engine compute")
    ap.add_argument("--seed-latency-ns", type=int, default=200_000)
    ap.add_argument("--seed-bandwidth", type=parse_size, default=parse_size("300mb"),
                    help="bytes/s of the seed regime's modelled SSD")
    ap.add_argument("--seed-compute-ms", type=float, default=6.0)
    ap.add_argument("--seed-load", type=float, default=0.85,
                    help="open-loop arrival rate as a share of the baseline's capacity")
    ap.add_argument("--seed", type=int, default=20261204)
    ap.add_argument("--region-size", default="16mb")
    ap.add_argument("--io-threads", type=int, default=1)
    ap.add_argument("--settle-timeout", type=float, default=60.0)
    ap.add_argument("--probe-pairs-flash", type=int, default=60)
    ap.add_argument("--probe-pairs-memory", type=int, default=600)
    ap.add_argument("--server-arg", action="append", default=[])
    args = parse_args_with_quick(ap, QUICK)
    args.server = args.server or os.path.join(args.build, "src", "server", "tierkv-server")
    args.driver = args.driver or os.path.join(args.build, "bench", "prefetch-ab",
                                              "prefetch-ab-driver")
    args.kv = parse_size(args.kv_bytes)
    args.filler_bytes = parse_size(args.filler_bytes)
    args.arms = args.arms.split(",")
    for path in (args.server, args.driver):
        if not os.access(path, os.X_OK):
            raise SystemExit(f"{path} is not built: run ./scripts/build.sh first")
    return args


def main():
    args = parse_args()
    run = RunRecord("prefetch-ab")
    ws = args.prefixes * args.chunks * args.kv
    regimes = make_regimes(args, ws)
    args.filler_value = random.Random(7).randbytes(args.filler_bytes)
    value = random.Random(8).randbytes(args.kv)
    ws_keys = [data_key(p, j) for p in range(args.prefixes) for j in range(args.chunks)]
    ws_items = [(k, value) for k in ws_keys] + [
        (meta_key(p, j), b"m") for p in range(args.prefixes) for j in range(args.chunks)]
    n_cells = sum(len(r["c"]) for r in regimes) * len(args.arms) * args.reps + 2
    region = parse_size(args.region_size)
    max_memory = max(r["memory"] for r in regimes) + 2 * ws
    flash_size = round_up(2 * ws + n_cells * max_memory + 8 * region, region)
    os.makedirs(args.dir, exist_ok=True)
    if flash_size > shutil.disk_usage(args.dir).free // 2:
        raise SystemExit(f"not enough disk in {args.dir} for {flash_size >> 20} MiB of flash")
    workdir = tempfile.mkdtemp(prefix="tmp-prefetch-ab-", dir=args.dir)
    print(f"working set {args.prefixes} prefixes x {args.chunks} x {args.kv >> 10} KiB = "
          f"{ws / MIB:.0f} MiB; {args.requests} requests per cell; {args.reps} repetitions",
          flush=True)
    cells, probe, probe_pinned = [], None, None
    try:
        server = Server(args, workdir, os.path.join(workdir, "flash.dat"), flash_size)
        try:
            server.start(16 * MIB, BASE_FLAGS)  # the working set goes to flash
            set_many(server.port, ws_items)
            for regime in regimes:
                if regime.get("open"):
                    calibrate_seed(server, args, regime, ws_keys)
            for rep in range(args.reps):
                for regime in regimes:
                    for c in regime["c"]:
                        arms = args.arms[rep % len(args.arms):] + args.arms[:rep % len(args.arms)]
                        for arm in arms:
                            cell = run_cell(server, args, regime, arm, c, ws_keys)
                            cell["rep"] = rep
                            cells.append(cell)
                            print(f"  rep {rep} {regime['name']:<17} c={c} {arm:<10} median "
                                  f"{fmt(cell['median_ms'])} ms p99 {fmt(cell['p99_ms'])} ms, "
                                  f"flash GETs {fmt(cell['counters']['flash_hits'], '.0f')}, "
                                  f"attached {fmt(cell['counters']['prefetch_reads_attached'], '.0f')}"
                                  f" ({cell['seconds']:.1f} s)", flush=True)
            server.stop()
        finally:
            server.kill()
        t = time.monotonic()
        print("probe latency...", flush=True)
        probe = probe_latency(args, workdir)
        if len(os.sched_getaffinity(0)) >= 2:
            print(f"probe latency, server and client on their own cores... "
                  f"({time.monotonic() - t:.0f} s)", flush=True)
            probe_pinned = probe_latency(args, workdir, pinned=True)
        print(f"probe latency done ({time.monotonic() - t:.0f} s)", flush=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    rows = summarize(cells, args.arms)
    print_table(rows)
    if probe:
        print_probe(probe, "")
    if probe_pinned:
        print_probe(probe_pinned, "pinned ")
    result = result_figures(rows, probe, probe_pinned)
    config = {k: v for k, v in vars(args).items() if k != "filler_value"}
    write_json(args.out, {"config": config, "regimes": regimes, "summary": result, "rows": rows,
                          "probe_latency": probe, "probe_latency_pinned": probe_pinned,
                          "cells": cells}, run)
    png = plot(args.out.removesuffix(".json") + ".png", rows, regimes, args.arms)
    if png:
        print(f"wrote {os.path.relpath(png, ROOT)}")
    print(run.result_line({k: fmt(v, ".3f") for k, v in result.items()}))


def result_figures(rows, probe, probe_pinned=None):
    def row(regime, arm, c=4):
        return next((r for r in rows if (r["regime"], r["c"], r["arm"]) == (regime, c, arm)), None)

    seed = row("seed", "prefetch")
    slowdowns, cpu, maps, gaps = [], [], [], []
    for r in rows:
        if r["arm"] != "prefetch":
            continue
        base = row(r["regime"], "baseline", r["c"])
        if base and base["median_ms"] and r["median_ms"]:
            slowdowns.append(r["median_ms"] / base["median_ms"] - 1)
        if base and base["cpu_ms_per_request"] and r["cpu_ms_per_request"] is not None:
            cpu.append(r["cpu_ms_per_request"] / base["cpu_ms_per_request"])
        if (r["ceiling_median"] or 0) >= 0.2 and r["gap_closed_median"] is not None:
            gaps.append((r["gap_closed_median"], r))
        m = row(r["regime"], "exists-map", r["c"])
        if m and m["median_ms"] and r["median_ms"]:
            maps.append(m["median_ms"] / r["median_ms"])
    worst = min(gaps, key=lambda g: g[0]) if gaps else None

    def worst_ratio(p):
        return max((p[w]["ratio"] for w in ("memory", "flash")
                    if p and p[w]["ratio"] is not None), default=None)

    return {"seed_gap_closed_median": seed and seed["gap_closed_median"],
            "seed_gap_closed_p99": seed and seed["gap_closed_p99"],
            "seed_decrease_median": seed and seed["decrease_median"],
            "seed_ceiling_median": seed and seed["ceiling_median"],
            "worst_cell_slowdown": max(slowdowns) if slowdowns else None,
            "worst_gap_closed": worst[0] if worst else None,
            # The worst cell's bound: a closed loop at c=1 queues nothing,
            # so a working set larger than memory leaves no window to hide in.
            "worst_gap_window_ceiling": worst[1]["window_ceiling"] if worst else None,
            "cpu_ratio": statistics.median(cpu) if cpu else None,
            "cpu_ratio_worst": max(cpu) if cpu else None,
            "probe_ratio": worst_ratio(probe),
            "probe_ratio_pinned": worst_ratio(probe_pinned),
            "map_vs_prefetch": statistics.median(maps) if maps else None,
            "ratio": seed and seed["gap_closed_median"]}


if __name__ == "__main__":
    main()
