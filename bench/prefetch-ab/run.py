#!/usr/bin/python3
"""Prefetch on exist, A/B: time to first token of a simulated inference engine.

N "prefixes" (each C chunk keys p<i>:c<j>:kv_bytes of kv-bytes, plus a small
companion key p<i>:c<j>:metadata) are written to a tierkv-server on loopback,
overflow memory to flash and settle. Then, per cell (regime x arm x
concurrency), the server is restarted on the same flash file (memory empty,
every prefix flash-only), filled with cold filler keys up to --fill-fraction
of its memory (not in the comfortable regime), settled, and c client threads
(one connection each) loop:

    arrival -> probe all chunk keys of a random prefix (EXISTS, or
    TIER.EXISTS ... PREFETCH) -> wait in one FIFO queue served by an engine
    thread -> the engine GETs every chunk key (pipelined), then computes for
    --compute-ms; the client's next request arrives when its request is done.

TTFT = arrival -> last GET done (the request's own compute is not in it).

Arms:      baseline       EXISTS,                      promotion-on-hit no, demand-kick no
           prefetch       TIER.EXISTS ... PREFETCH,    promotion-on-hit no, demand-kick no
           prefetch+kick  TIER.EXISTS ... PREFETCH,    promotion-on-hit no, demand-kick yes
           exists-map     EXISTS on the metadata keys, exists-prefetch yes and
                          exists-prefetch-map metadata=kv_bytes (not run by default)
Regimes:   comfortable    memory = 1.5 x the working set, no filler
           constrained    memory = 0.9 x the working set, filler to 97 % of memory
           large-ws       memory = 0.25 x the working set, filler to 97 % of memory
           <regime>/slow  the same with --backing-latency-ns (a slower SSD model)

A probe-latency phase then times EXISTS against TIER.EXISTS ... PREFETCH on
keys all in memory and on flash-only keys (median of each, ratio).

    /usr/bin/python3 bench/prefetch-ab/run.py [--quick] [--server PATH] [--dir DIR]

Prints a table, writes bench/results/prefetch-ab.json (and prefetch-ab.png
with python3-matplotlib) and ends with a RESULT line. Server config keys the
build does not know yet (promotion-on-hit, demand-kick, exists-prefetch) are
probed with CONFIG GET and left out, with a warning. See
docs/benchmarks-prefetch.md.
"""
import argparse
import math
import os
import queue
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
from benchlib import (RunRecord, free_port, parse_size, server_info, wait_for_port,  # noqa: E402
                      wait_loaded, write_json)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RESULTS = os.path.join(ROOT, "bench", "results")
MIB = 1 << 20

# The fields of INFO "# Prefetch"; read defensively (a missing one prints "-").
PREFETCH_FIELDS = (
    "prefetch_requested", "prefetch_deduplicated", "prefetch_in_memory", "prefetch_absent",
    "prefetch_queued", "prefetch_promoted", "prefetch_promoted_bytes",
    "prefetch_failed_saturated", "prefetch_failed_io", "prefetch_failed_gone",
    "prefetch_failed_busy", "prefetch_early_exits", "prefetch_refused_lease_cap",
    "prefetch_cooldowns", "prefetch_cooldown_ms", "demand_kicks",
    "prefetch_leases_expired_unread", "prefetch_reads_served", "prefetch_reads_attached")
GAUGES = ("prefetch_cooldown_ms",)
# Counters of INFO that exist today ("# Flash", "# Stats"), as deltas per cell.
OTHER_COUNTERS = ("promotions_attempted", "promotions_done", "promotions_failed", "flash_hits",
                  "flash_reads", "flash_read_bytes", "flash_reclaims", "flash_user_write_bytes",
                  "evicted_keys", "offloads")

ARMS = {
    "baseline": ("exists", {"promotion-on-hit": "no", "demand-kick": "no"}),
    "prefetch": ("tier-prefetch", {"promotion-on-hit": "no", "demand-kick": "no"}),
    "prefetch+kick": ("tier-prefetch", {"promotion-on-hit": "no", "demand-kick": "yes"}),
    "exists-map": ("exists-metadata", {"promotion-on-hit": "no", "demand-kick": "no",
                                       "exists-prefetch": "yes", "exists-prefetch-map": None}),
}
# The keys the arms need that are probed with CONFIG GET at start.
PROBED_KEYS = ("promotion-on-hit", "demand-kick", "exists-prefetch", "exists-prefetch-map")
# Without promotion-on-hit, the server promotes an object at its second flash
# hit (promotion-threshold 2): that would let the baseline promote. 255 (the
# largest) keeps it out of every cell of this size.
THRESHOLD_FALLBACK = "255"

DEFAULTS = {"prefixes": 24, "chunks": 4, "kv_bytes": "4mb", "concurrency": "1,2,4,8",
            "requests": 60, "probe_pairs_flash": 100, "probe_pairs_memory": 1000,
            "budget_s": 540.0}
QUICK = {"prefixes": 12, "chunks": 4, "kv_bytes": "2mb", "concurrency": "1,4",
         "requests": 20, "probe_pairs_flash": 30, "probe_pairs_memory": 300,
         "budget_s": 150.0}


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


# --- the server ----------------------------------------------------------------

class Server:
    """One tierkv-server on a flash file that outlives it (one per regime)."""

    def __init__(self, args, workdir, flash_path, flash_size):
        self.args, self.flash_path, self.flash_size = args, flash_path, flash_size
        self.log_path = os.path.join(workdir, "server.log")
        self.proc, self.port, self.argv = None, None, None

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
            self.proc = subprocess.Popen(self.argv, stdout=log, stderr=subprocess.STDOUT,
                                         cwd=os.path.dirname(self.log_path))
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


def known_config_keys(args, workdir):
    """The PROBED_KEYS this server build knows (CONFIG GET answers an empty
    list for an unknown key), asked of a memory-only server."""
    server = Server(args, workdir, "", 0)
    try:
        server.start(16 * MIB)
        c = Resp(server.port)
        try:
            return {k for k in PROBED_KEYS if c.call("CONFIG", "GET", k)}
        finally:
            c.close()
    finally:
        server.stop()
        server.kill()


def arm_flags(arm, known, map_rule):
    """The server flags of an arm that this build knows, and what was left out."""
    flags, missing = [], []
    for key, value in ARMS[arm][1].items():
        value = map_rule if value is None else value
        if key in known:
            flags += [f"--{key}", value]
        else:
            missing.append(f"{key}={value}")
            if key == "promotion-on-hit" and value == "no":
                flags += ["--promotion-threshold", THRESHOLD_FALLBACK]
    return flags, missing


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


# --- one cell ------------------------------------------------------------------

def percentile(values, q):
    """Linear interpolation between closest ranks (numpy's default)."""
    if not values:
        return None
    s = sorted(values)
    pos = (len(s) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def drive(port, args, probe, c, seed, deadline):
    """c clients and one engine; returns one record per request."""
    conns = [Resp(port) for _ in range(c)]
    fifo = queue.Queue()
    records, lock = [], threading.Lock()
    issued = [0]
    errors = []
    compute = args.compute_ms / 1000.0
    chunks = args.chunks

    def probe_prefix(conn, p):
        if probe == "exists":
            return conn.call("EXISTS", *[data_key(p, j) for j in range(chunks)])
        if probe == "tier-prefetch":
            return conn.call("TIER.EXISTS", *[data_key(p, j) for j in range(chunks)], "PREFETCH")
        return conn.call("EXISTS", *[meta_key(p, j) for j in range(chunks)])

    def client(i):
        rng = random.Random(f"{seed}/{c}/{i}")  # the same sequence in every arm
        conn = conns[i]
        try:
            while True:
                with lock:
                    if issued[0] >= args.requests or time.monotonic() >= deadline:
                        break
                    issued[0] += 1
                p = rng.randrange(args.prefixes)
                done = threading.Event()
                t0 = time.perf_counter()
                present = probe_prefix(conn, p)
                t_probe = time.perf_counter()
                fifo.put((p, t0, t_probe, present, conn, done))
                done.wait()
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    def engine():
        try:
            while True:
                item = fifo.get()
                if item is None:
                    return
                p, t0, t_probe, present, conn, done = item
                t_start = time.perf_counter()
                conn.send(*[("GET", data_key(p, j)) for j in range(chunks)])
                sizes = [conn.read(keep=False) for _ in range(chunks)]
                t_end = time.perf_counter()
                bad = sum(1 for s in sizes if not isinstance(s, int) or s != args.kv)
                records.append({"prefix": p, "ttft_ms": (t_end - t0) * 1e3,
                                "probe_ms": (t_probe - t0) * 1e3,
                                "wait_ms": (t_start - t_probe) * 1e3,
                                "load_ms": (t_end - t_start) * 1e3,
                                "present": present, "probe_short": present != chunks,
                                "bad_gets": bad})
                time.sleep(compute)
                done.set()
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)
            # Release the waiting clients so the cell ends.
            while True:
                try:
                    item = fifo.get_nowait()
                except queue.Empty:
                    break
                if item is not None:
                    item[-1].set()

    eng = threading.Thread(target=engine)
    eng.start()
    clients = [threading.Thread(target=client, args=(i,)) for i in range(c)]
    for t in clients:
        t.start()
    for t in clients:
        t.join()
    fifo.put(None)
    eng.join()
    for conn in conns:
        conn.close()
    if errors:
        raise errors[0]
    return records


def summarize(records):
    ttft = [r["ttft_ms"] for r in records]
    if not ttft:
        return {"n": 0, "median_ms": None, "mean_ms": None, "p99_ms": None}
    return {"n": len(ttft), "median_ms": statistics.median(ttft), "mean_ms": statistics.fmean(ttft),
            "p99_ms": percentile(ttft, 0.99),
            "probe_median_ms": statistics.median(r["probe_ms"] for r in records),
            "wait_median_ms": statistics.median(r["wait_ms"] for r in records),
            "load_median_ms": statistics.median(r["load_ms"] for r in records),
            "bad_gets": sum(r["bad_gets"] for r in records),
            "probe_short": sum(1 for r in records if r["probe_short"])}


def counters(before, after):
    out = {}
    for name in PREFETCH_FIELDS + OTHER_COUNTERS:
        a, b = num(after, name), num(before, name)
        if a is None:
            out[name] = None
        elif name in GAUGES or b is None:
            out[name] = a
        else:
            out[name] = a - b
    return out


def run_cell(server, args, regime, arm, c, known, ws_keys, seed, deadline, warned):
    flags, missing = arm_flags(arm, known, args.map_rule)
    if regime["latency_ns"]:
        flags += ["--backing-latency-ns", str(regime["latency_ns"])]
    server.stop()
    server.start(regime["memory"], flags)
    conn = Resp(server.port)
    try:
        present = conn.call("EXISTS", *ws_keys)
    finally:
        conn.close()
    if present != len(ws_keys):
        raise RuntimeError(f"only {present} of {len(ws_keys)} working-set keys are on the "
                           "server (flash too small?)")
    start_info = server.info()
    fillers = [filler_key(i) for i in range(regime["filler_objects"])]
    settled = True
    if fillers:
        set_many(server.port, [(k, args.filler_value) for k in fillers])
        settled = settle(server.port, args.settle_timeout)
        if not settled:
            print(f"  warning: offloads not settled within {args.settle_timeout} s", flush=True)
    before = server.info()
    t = time.monotonic()
    records = drive(server.port, args, ARMS[arm][0], c, seed, min(deadline, t + args.cell_seconds))
    seconds = time.monotonic() - t
    after = server.info()
    if fillers:
        delete_many(server.port, fillers)
    if not any(k.startswith("prefetch_") for k in after) and not warned.get("info"):
        warned["info"] = True
        print("  warning: INFO has no '# Prefetch' fields yet: those columns print '-'",
              flush=True)
    budget = num(before, "maxmemory", 0) or 1
    cell = {"regime": regime["name"], "arm": arm, "c": c, "chunks": args.chunks, "flags": flags,
            "flags_missing": missing, "memory": regime["memory"],
            "backing_latency_ns": regime["latency_ns"], "filler_objects": len(fillers),
            "settled": settled, "seconds": seconds,
            "dram_start_pct": 100.0 * num(before, "used_memory", 0) / budget,
            "memory_objects_at_restart": num(start_info, "memory_objects"),
            "counters": counters(before, after), "requests": records}
    cell.update(summarize(records))
    if cell.get("bad_gets"):
        print(f"  warning: {cell['bad_gets']} GETs returned a missing or short value",
              flush=True)
    if cell.get("probe_short"):
        print(f"  warning: {cell['probe_short']} probes counted fewer keys than the prefix has",
              flush=True)
    if cell["counters"].get("flash_reclaims"):
        print("  warning: flash reclaimed regions during the cell (flash too small?)", flush=True)
    return cell


# --- the probe-latency phase ---------------------------------------------------

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


def probe_latency(args, workdir, known):
    """Median probe latency (us) of EXISTS and TIER.EXISTS ... PREFETCH over
    one prefix's chunk keys (--kv-bytes each), on keys all in memory and on
    flash-only keys, with the prefetch arm's flags and an otherwise idle server.

    Flash-only: a pool of groups 4x larger than memory is written, then the
    server restarts (memory empty). Each pair times EXISTS on one group and
    PREFETCH on another (alternating which goes first), both found flash-only
    right before (TIER.STAT, untimed: eviction is per key, so a group keeps
    some keys in memory for a while), then waits for the promotions it
    started to end. In memory: after another restart, a few groups are
    written (well under the memory budget) and checked in memory."""
    chunks, size = args.chunks, args.kv
    group_bytes = chunks * size
    memory = max(16 * MIB, round_up(6 * group_bytes, MIB))
    pool = max(8, 4 * memory // group_bytes)
    flash_size = round_up(int(1.5 * (pool + 8) * group_bytes) + 8 * parse_size(args.region_size),
                          parse_size(args.region_size))
    server = Server(args, workdir, os.path.join(workdir, "probe.dat"), flash_size)
    flags, _ = arm_flags("prefetch", known, args.map_rule)

    def group(name, g):
        return [b"%s%d:c%d" % (name, g, j) for j in range(chunks)]

    out = {"flash": {"exists": [], "prefetch": []}, "memory": {"exists": [], "prefetch": []}}
    skipped = 0
    rng = random.Random(args.seed)
    try:
        server.start(memory, flags)
        set_many(server.port, [(k, args.filler_value) for g in range(pool) for k in group(b"q", g)])
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
            set_many(server.port, [(k, args.filler_value)
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
        try:
            os.unlink(server.flash_path)
        except OSError:
            pass
    result = {"keys_per_probe": chunks, "value_bytes": size, "memory": memory,
              "pool_groups": pool, "pairs_flash": len(out["flash"]["exists"]),
              "pairs_memory": len(out["memory"]["exists"]), "flash_groups_skipped": skipped,
              "resident_all_in_memory": all(in_memory)}
    for where in ("memory", "flash"):
        ex, pf = out[where]["exists"], out[where]["prefetch"]
        ex_m = statistics.median(ex) if ex else None
        pf_m = statistics.median(pf) if pf else None
        result[where] = {"exists_median_us": ex_m, "prefetch_median_us": pf_m,
                         "exists_p99_us": percentile(ex, 0.99),
                         "prefetch_p99_us": percentile(pf, 0.99),
                         "ratio": pf_m / ex_m if ex_m and pf_m else None}
    return result


# --- the report ------------------------------------------------------------------

def fmt(v, spec=".1f", none="-"):
    return none if v is None else format(v, spec)


def decrease(base, value):
    """Percent decrease of value against base (negative: slower)."""
    if base is None or value is None or base == 0:
        return None
    return 100.0 * (base - value) / base


def add_decreases(cells):
    base = {(x["regime"], x["c"]): x for x in cells if x["arm"] == "baseline"}
    for x in cells:
        b = base.get((x["regime"], x["c"]))
        for stat in ("median", "mean", "p99"):
            x[f"{stat}_decrease_pct"] = (decrease(b[f"{stat}_ms"], x[f"{stat}_ms"])
                                         if b and x["arm"] != "baseline" else None)


def failed_total(k):
    parts = [k.get(n) for n in ("prefetch_failed_saturated", "prefetch_failed_io",
                                "prefetch_failed_gone", "prefetch_failed_busy")]
    parts = [p for p in parts if p is not None]
    return sum(parts) if parts else None


def accuracy(k):
    served, promoted = k.get("prefetch_reads_served"), k.get("prefetch_promoted")
    if served is None or not promoted:
        return None
    return served / promoted


def flash_pct(x):
    hits, gets = x["counters"].get("flash_hits"), x["n"] * x["chunks"]
    return None if hits is None or not gets else 100.0 * hits / gets


def print_table(cells):
    head = (f"{'regime':<16} {'arm':<14} {'c':>2} {'n':>3} {'med ms':>7} {'mean ms':>7} "
            f"{'p99 ms':>7} {'dmed%':>6} {'dmean%':>6} {'dp99%':>6} {'dram%':>5} {'flash%':>6} "
            f"{'prom ok/fail':>12} {'pf prom':>7} {'pf fail':>7} {'early':>5} {'cool':>4} "
            f"{'kicks':>5} {'acc':>5} {'attach':>6}")
    print()
    print(head)
    print("-" * len(head))
    for x in cells:
        k = x["counters"]
        flash = flash_pct(x)
        prom = f"{fmt(k.get('promotions_done'), '.0f')}/{fmt(k.get('promotions_failed'), '.0f')}"
        print(f"{x['regime']:<16} {x['arm']:<14} {x['c']:>2} {x['n']:>3} "
              f"{fmt(x['median_ms']):>7} {fmt(x['mean_ms']):>7} {fmt(x['p99_ms']):>7} "
              f"{fmt(x['median_decrease_pct']):>6} {fmt(x['mean_decrease_pct']):>6} "
              f"{fmt(x['p99_decrease_pct']):>6} {fmt(x['dram_start_pct'], '.0f'):>5} "
              f"{fmt(flash, '.0f'):>6} {prom:>12} {fmt(k.get('prefetch_promoted'), '.0f'):>7} "
              f"{fmt(failed_total(k), '.0f'):>7} {fmt(k.get('prefetch_early_exits'), '.0f'):>5} "
              f"{fmt(k.get('prefetch_cooldowns'), '.0f'):>4} "
              f"{fmt(k.get('demand_kicks'), '.0f'):>5} {fmt(accuracy(k), '.2f'):>5} "
              f"{fmt(k.get('prefetch_reads_attached'), '.0f'):>6}")
    print("dX%: decrease of TTFT against baseline in the same regime and c (negative: slower); "
          "dram%: memory used when the clients start; flash%: GETs served from flash; "
          "prom: promotions of every trigger (INFO # Flash); pf: INFO # Prefetch; "
          "acc: prefetch_reads_served / prefetch_promoted; attach: GETs that waited for their "
          "key's promotion in flight (prefetch_reads_attached)")


def print_split(cells):
    head = (f"{'regime':<16} {'arm':<14} {'c':>2} {'probe ms':>8} {'wait ms':>8} {'load ms':>8} "
            f"{'evicted':>7} {'offloads':>8}")
    print("\nwhere the time goes (medians per request; evictions and offloads in the cell)")
    print(head)
    print("-" * len(head))
    for x in cells:
        k = x["counters"]
        print(f"{x['regime']:<16} {x['arm']:<14} {x['c']:>2} "
              f"{fmt(x.get('probe_median_ms'), '.2f'):>8} {fmt(x.get('wait_median_ms')):>8} "
              f"{fmt(x.get('load_median_ms')):>8} "
              f"{fmt(k.get('evicted_keys'), '.0f'):>7} {fmt(k.get('offloads'), '.0f'):>8}")


def print_probe(p):
    print(f"\nprobe latency, idle server, {p['keys_per_probe']} keys of "
          f"{p['value_bytes'] >> 10} KiB ({p['pairs_flash']} flash-only pairs, "
          f"{p['pairs_memory']} in memory):")
    print(f"{'where':<8} {'EXISTS us':>10} {'PREFETCH us':>12} {'ratio':>6}   "
          f"{'EXISTS p99':>10} {'PREFETCH p99':>12}")
    for where in ("memory", "flash"):
        r = p[where]
        print(f"{where:<8} {fmt(r['exists_median_us']):>10} {fmt(r['prefetch_median_us']):>12} "
              f"{fmt(r['ratio'], '.3f'):>6}   {fmt(r['exists_p99_us']):>10} "
              f"{fmt(r['prefetch_p99_us']):>12}")


def plot(png, cells, regimes, arms):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    names = [r["name"] for r in regimes]
    fig, axes = plt.subplots(2, len(names), figsize=(4 * len(names), 6.5), squeeze=False)
    for col, regime in enumerate(names):
        for row, stat in enumerate(("median_ms", "p99_ms")):
            ax = axes[row][col]
            for arm in arms:
                pts = sorted((x["c"], x[stat]) for x in cells
                             if x["regime"] == regime and x["arm"] == arm and x[stat] is not None)
                if pts:
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=arm)
            ax.set_xscale("log", base=2)
            ax.set_xticks(sorted({x["c"] for x in cells}))
            ax.get_xaxis().set_major_formatter(matplotlib.ticker.ScalarFormatter())
            ax.set_ylim(bottom=0)
            ax.set_title(f"{regime}: TTFT {stat.removesuffix('_ms')}", fontsize=10)
            ax.set_xlabel("clients (c)")
            ax.set_ylabel("ms")
            ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(png)
    return png


def round_up(n, unit):
    return (n + unit - 1) // unit * unit


# --- main ----------------------------------------------------------------------------

def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--server", default=os.environ.get(
        "TIERKV_SERVER", os.path.join(ROOT, "build", "src", "server", "tierkv-server")))
    ap.add_argument("--quick", action="store_true",
                    help="a 1-2 minute smoke run: 12 prefixes x 4 x 2 MiB, c 1,4, 20 requests")
    ap.add_argument("--dir", default=RESULTS, help="where the flash files go (a real disk)")
    ap.add_argument("--out", default=os.path.join(RESULTS, "prefetch-ab.json"))
    ap.add_argument("--prefixes", type=int, help="prefix objects (default 24)")
    ap.add_argument("--chunks", type=int, help="chunk keys per prefix (default 4)")
    ap.add_argument("--kv-bytes", help="bytes of one chunk key's value (default 4mb)")
    ap.add_argument("--meta-bytes", type=int, default=64, help="bytes of a metadata key")
    ap.add_argument("--concurrency", help="client counts (default 1,2,4,8)")
    ap.add_argument("--requests", type=int, help="requests per cell (default 60)")
    ap.add_argument("--compute-ms", type=float, default=20.0,
                    help="the engine's compute time per request")
    ap.add_argument("--arms", default="baseline,prefetch,prefetch+kick",
                    help=f"of {','.join(ARMS)}")
    ap.add_argument("--regimes", default="comfortable,constrained,large-ws")
    ap.add_argument("--comfortable-ratio", type=float, default=1.5,
                    help="memory / working set in the comfortable regime")
    ap.add_argument("--constrained-ratio", type=float, default=0.9,
                    help="memory / working set in the constrained regime")
    ap.add_argument("--large-ws-ratio", type=float, default=0.25,
                    help="memory / working set in the large-ws regime (<= 0.25: >= 4x)")
    ap.add_argument("--fill-fraction", type=float, default=0.97,
                    help="share of memory cold filler keys take at the start of a "
                         "constrained or large-ws cell")
    ap.add_argument("--backing-latency-ns", type=int, default=0,
                    help="backing-latency-ns of every regime")
    ap.add_argument("--slow-regimes", default="constrained",
                    help="regimes run again as <regime>/slow with --slow-latency-ns "
                         "('' for none)")
    ap.add_argument("--slow-latency-ns", type=int, default=500_000,
                    help="backing-latency-ns of the /slow regimes (a slower SSD model)")
    ap.add_argument("--map-rule", default="metadata=kv_bytes",
                    help="exists-prefetch-map of the exists-map arm")
    ap.add_argument("--headline-arm", default="prefetch",
                    help="the arm whose decreases the RESULT line reports")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--io-threads", type=int, default=2)
    ap.add_argument("--region-size", default="16mb")
    ap.add_argument("--settle-timeout", type=float, default=60.0)
    ap.add_argument("--cell-seconds", type=float, default=60.0, help="cap of one cell's clients")
    ap.add_argument("--budget-s", type=float,
                    help="cells not started by then are skipped (default 540; quick 150)")
    ap.add_argument("--probe-pairs-flash", type=int)
    ap.add_argument("--probe-pairs-memory", type=int)
    ap.add_argument("--server-arg", action="append", default=[],
                    help="extra server flag, e.g. --server-arg=--lease-ttl-ms=5000 (repeatable)")
    args = ap.parse_args()
    for name, value in (QUICK if args.quick else DEFAULTS).items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    args.server = os.path.abspath(args.server)
    args.kv = parse_size(args.kv_bytes)
    args.concurrency = [int(c) for c in args.concurrency.split(",")]
    args.arms = [a for a in args.arms.split(",") if a]
    for a in args.arms:
        if a not in ARMS:
            ap.error(f"unknown arm {a!r}; arms: {', '.join(ARMS)}")
    if "baseline" not in args.arms:
        ap.error("the arms must include baseline")
    return args


def make_regimes(args, ws_bytes):
    ratio = {"comfortable": args.comfortable_ratio, "constrained": args.constrained_ratio,
             "large-ws": args.large_ws_ratio}
    chosen = [r for r in args.regimes.split(",") if r]
    slow = [r for r in args.slow_regimes.split(",") if r]
    regimes = []
    for name in chosen + [s + "/slow" for s in slow]:
        base = name.removesuffix("/slow")
        if base not in ratio:
            raise SystemExit(f"unknown regime {base!r}; regimes: {', '.join(ratio)}")
        memory = max(16 * MIB, round_up(int(ws_bytes * ratio[base]), MIB))
        filler = 0 if base == "comfortable" else int(args.fill_fraction * memory) // args.kv
        regimes.append({"name": name, "memory": memory, "memory_ratio": ratio[base],
                        "filler_objects": filler,
                        "latency_ns": args.slow_latency_ns if name.endswith("/slow")
                        else args.backing_latency_ns})
    return regimes


def main():
    args = parse_args()
    run = RunRecord("prefetch-ab")
    started = time.monotonic()
    deadline = started + args.budget_s
    os.makedirs(args.dir, exist_ok=True)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    ws_bytes = args.prefixes * args.chunks * args.kv
    regimes = make_regimes(args, ws_bytes)
    value = random.Random(7).randbytes(args.kv)
    args.filler_value = value
    meta = random.Random(8).randbytes(args.meta_bytes)
    ws_keys = [data_key(p, j) for p in range(args.prefixes) for j in range(args.chunks)]
    ws_items = [(k, value) for k in ws_keys] + [
        (meta_key(p, j), meta) for p in range(args.prefixes) for j in range(args.chunks)]
    region = parse_size(args.region_size)
    workdir = tempfile.mkdtemp(prefix="tmp-prefetch-ab-", dir=args.dir)
    print(f"working set {args.prefixes} prefixes x {args.chunks} chunks x "
          f"{args.kv >> 10} KiB = {ws_bytes / MIB:.0f} MiB; c {args.concurrency}; "
          f"{args.requests} requests per cell; compute {args.compute_ms:g} ms", flush=True)
    cells, skipped, warnings, known, probe = [], [], [], None, None
    needed = {k for a in args.arms for k in ARMS[a][1]}
    warned = {}
    try:
        known = known_config_keys(args, workdir)
        for key in PROBED_KEYS:
            if key not in known and key in needed:
                fallback = (f"; every arm runs with --promotion-threshold {THRESHOLD_FALLBACK} "
                            "instead" if key == "promotion-on-hit" else "")
                warnings.append(f"WARNING: this tierkv-server has no config key '{key}': "
                                f"the arms run without it{fallback}")
                print(warnings[-1], flush=True)
        if "demand-kick" not in known and "prefetch+kick" in args.arms:
            warnings.append("WARNING: without demand-kick the prefetch+kick arm runs as the "
                            "prefetch arm")
            print(warnings[-1], flush=True)
        for regime in regimes:
            n_cells = len(args.arms) * len(args.concurrency)
            filler_bytes = regime["filler_objects"] * args.kv
            flash_size = round_up(int(1.25 * (ws_bytes + n_cells * filler_bytes))
                                  + 8 * region + 64 * MIB, region)
            if 2 * flash_size > shutil.disk_usage(args.dir).free:
                raise SystemExit(f"not enough disk in {args.dir} for a {flash_size >> 20} MiB "
                                 "flash file (twice over)")
            path = os.path.join(workdir, "flash.dat")
            server = Server(args, workdir, path, flash_size)
            try:
                server.start(regime["memory"])
                print(f"{regime['name']}: memory {regime['memory'] / MIB:.0f} MiB, filler "
                      f"{regime['filler_objects']} x {args.kv >> 10} KiB, flash "
                      f"{flash_size / MIB:.0f} MiB, backing latency {regime['latency_ns']} ns: "
                      "filling...", flush=True)
                t = time.monotonic()
                set_many(server.port, ws_items)
                if not settle(server.port, args.settle_timeout):
                    print("  warning: offloads did not settle after the fill", flush=True)
                print(f"  filled in {time.monotonic() - t:.1f} s", flush=True)
                for c in args.concurrency:
                    for arm in args.arms:
                        if time.monotonic() >= deadline:
                            skipped.append(f"{regime['name']}/{arm}/c{c}")
                            continue
                        cell = run_cell(server, args, regime, arm, c, known, ws_keys,
                                        args.seed, deadline, warned)
                        cells.append(cell)
                        print(f"  {arm:<14} c={c}: n={cell['n']} median "
                              f"{fmt(cell['median_ms'])} ms, p99 {fmt(cell['p99_ms'])} ms, "
                              f"dram {cell['dram_start_pct']:.0f}% at start, GETs from flash "
                              f"{fmt(flash_pct(cell), '.0f')}% ({cell['seconds']:.1f} s)",
                              flush=True)
                server.stop()
            finally:
                server.kill()
                try:
                    os.unlink(path)
                except OSError:
                    pass
        if time.monotonic() < deadline + 60:
            print("probe latency...", flush=True)
            probe = probe_latency(args, workdir, known)
        else:
            skipped.append("probe-latency")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    if skipped:
        warnings.append(f"WARNING: over the time budget ({args.budget_s:.0f} s), skipped: "
                        f"{', '.join(skipped)}")

    add_decreases(cells)
    if cells:
        print_table(cells)
        print_split(cells)
    if probe:
        print_probe(probe)

    def cell_of(regime, arm, c):
        for x in cells:
            if x["regime"] == regime and x["arm"] == arm and x["c"] == c:
                return x
        return None

    head = cell_of("constrained", args.headline_arm, 4)
    slowdowns = []
    for x in cells:
        if x["regime"] == "large-ws" and x["arm"] != "baseline":
            worst = [-d for d in (x["median_decrease_pct"], x["mean_decrease_pct"])
                     if d is not None]
            if worst:
                slowdowns.append(max(worst))
    probe_ratio = max((probe[w]["ratio"] for w in ("memory", "flash")
                       if probe and probe[w]["ratio"] is not None), default=None)
    summary = {
        "c4_constrained_median_decrease": head and head["median_decrease_pct"],
        "c4_constrained_p99_decrease": head and head["p99_decrease_pct"],
        "large_ws_worst_slowdown": max(slowdowns) if slowdowns else None,
        "probe_latency_ratio": probe_ratio,
        "headline_arm": args.headline_arm,
    }
    seconds = time.monotonic() - started
    config = {k: v for k, v in vars(args).items() if k not in ("filler_value",)}
    write_json(args.out, {"config": config, "regimes": regimes,
                          "known_config_keys": sorted(known or []), "warnings": warnings,
                          "summary": summary, "probe_latency": probe, "cells": cells,
                          "skipped": skipped}, run)
    png = args.out.removesuffix(".json") + ".png"
    out = os.path.relpath(args.out, ROOT)
    try:
        note = (f"wrote {out} and {os.path.relpath(plot(png, cells, regimes, args.arms), ROOT)}"
                if cells else f"wrote {out}; no plot: no cells ran")
    except ImportError:
        note = f"wrote {out}; no plot: python3-matplotlib is not installed"
    print(note)
    for w in warnings:
        print(w)
    pr = probe or {}
    print(run.result_line({
        "c4_constrained_median_decrease": fmt(summary["c4_constrained_median_decrease"]),
        "c4_constrained_p99_decrease": fmt(summary["c4_constrained_p99_decrease"]),
        "large_ws_worst_slowdown": fmt(summary["large_ws_worst_slowdown"]),
        "probe_latency_ratio": fmt(probe_ratio, ".3f"),
        "probe_ratio_memory": fmt(pr.get("memory", {}).get("ratio"), ".3f"),
        "probe_ratio_flash": fmt(pr.get("flash", {}).get("ratio"), ".3f"),
        "arm": args.headline_arm, "flags_missing": len(needed - (known or set())),
        "seconds": f"{seconds:.0f}"}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
