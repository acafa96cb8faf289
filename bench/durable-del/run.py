#!/usr/bin/python3
"""What durable removals cost: DEL and EXPIRE of flash-resident keys with
--flash-fsync always (the reply waits until the tombstone or expiry record is
on the device, fdatasync'ed) against none (the reply does not wait).

Each run starts a fresh tierkv-server on loopback (--memory 16mb, 1 GiB of
flash in 8 MiB regions, preallocated), SETs 4 groups of KEYS keys of 16 KiB
(pipelined), then 96 MiB of 256 KiB filler keys, which push the groups out
of memory; TIER.STAT of every key says how many are only on flash (the
table reports the share). Then, one group each:

  DEL seq     one connection, one DEL at a time: the latency of each
  EXPIRE seq  the same with EXPIRE key 3600 (a new expiry record)
  DEL c8      8 connections at once, each one DEL at a time (a connection
  EXPIRE c8   runs its next command only once the last one's reply is
              ready, so pipelining on one connection would not overlap
              anything; across connections the tier's group commit shares
              a write and its fdatasync among the records gathered)

Before the rows, the server is left to finish what the loading queued (INFO
offload_queue_bytes 0 and flash_write_bytes unchanged), and each run takes
the rows in another order. Three runs per policy (default), alternating the
policies; per row the median over the runs of the per-run p50 / p99 latency
and ops/s, with the spread (min-max over the runs). The client is Python on
the same 2 cores: the fsync=none rows with 8 connections are bounded by
it (and by the GIL), not by the server.

    /usr/bin/python3 bench/durable-del/run.py [--runs 3] [--keys 1000]

Prints a table, writes bench/results/durable-del.json and ends with
`RESULT name=durable-del ratio=<DEL seq ops/s, always / none>`. See
docs/tiering.md ("Versions across tiers") and docs/benchmarks.md.
"""
import argparse
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
from benchlib import (RunRecord, free_port, resp as command, parse_args_with_quick, plot_bars, server_info, wait_for_port, wait_loaded,  # noqa: E402
                      write_json)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RESULTS = os.path.join(ROOT, "bench", "results")
VALUE = 16 << 10
FILLER_VALUE, FILLER_BYTES = 256 << 10, 96 << 20
DEPTH = 32  # pipelined SETs of the loading
CONNECTIONS = 8
GROUPS = ("DEL seq", "EXPIRE seq", "DEL c8", "EXPIRE c8")


class Conn:
    """A bare RESP2 connection: no client library between the timer and the
    socket, so the latency measured is the server's plus loopback's."""

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=120)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = bytearray()

    def close(self):
        self.sock.close()

    def _line(self):
        while True:
            i = self.buf.find(b"\r\n")
            if i >= 0:
                line = bytes(self.buf[:i])
                del self.buf[:i + 2]
                return line
            self._fill()

    def _fill(self):
        chunk = self.sock.recv(1 << 16)
        if not chunk:
            raise ConnectionError("server closed the connection")
        self.buf += chunk

    def reply(self):
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind in (b"+", b":"):
            return int(rest) if kind == b":" else rest.decode()
        if kind == b"-":
            raise RuntimeError(f"server error: {rest.decode()}")
        if kind == b"$":
            n = int(rest)
            if n < 0:
                return None
            while len(self.buf) < n + 2:
                self._fill()
            data = bytes(self.buf[:n])
            del self.buf[:n + 2]
            return data
        if kind in (b"*", b"%"):
            n = int(rest) * (2 if kind == b"%" else 1)
            return None if n < 0 else [self.reply() for _ in range(n)]
        raise RuntimeError(f"unexpected reply {line[:80]!r}")

    def call(self, *args):
        self.sock.sendall(command(*args))
        return self.reply()

    def pipeline(self, commands):
        self.sock.sendall(b"".join(commands))
        return [self.reply() for _ in commands]


def start_server(args, fsync, workdir):
    port = free_port()
    argv = [args.server, "--port", str(port), "--bind", "127.0.0.1", "--metrics-port", "0",
            "--memory", "16mb", "--flash-path", os.path.join(workdir, "flash.dat"),
            "--flash-size", "1gb", "--region-size", "8mb", "--flash-fsync", fsync,
            "--log-level", "warn"]
    log = open(os.path.join(workdir, "server.log"), "ab")
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=workdir)
    wait_for_port(port, proc)
    wait_loaded(port, proc)
    return proc, log, port


def stop_server(proc, log):
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    log.close()


def load(conn, keys, size):
    value = os.urandom(size)
    for start in range(0, len(keys), DEPTH):
        replies = conn.pipeline([command("SET", k, value) for k in keys[start:start + DEPTH]])
        if any(r != "OK" for r in replies):
            raise RuntimeError(f"SET failed: {replies[:3]}")


def flash_only_share(conn, keys):
    """Share of `keys` that only flash holds (TIER.STAT state 'flash')."""
    flash = 0
    for k in keys:
        stat = conn.call("TIER.STAT", k)
        fields = dict(zip(stat[::2], stat[1::2])) if stat else {}
        flash += fields.get(b"state") == b"flash"
    return flash / len(keys)


def op_args(op, key):
    return ("DEL", key) if op == "DEL" else ("EXPIRE", key, 3600)


def timed_calls(conn, op, keys, lat):
    for k in keys:
        s = time.perf_counter()
        if conn.call(*op_args(op, k)) != 1:
            raise RuntimeError(f"{op} {k} did not find the key")
        lat.append(time.perf_counter() - s)


def measure(port, op, keys, connections):
    """`op` on every key over `connections` connections, each one command at
    a time: p50/p99 latency and ops/s."""
    conns = [Conn(port) for _ in range(connections)]
    lats = [[] for _ in conns]
    errors = []

    def one(i):
        try:
            timed_calls(conns[i], op, keys[i::connections], lats[i])
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(connections)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    took = time.perf_counter() - t0
    for c in conns:
        c.close()
    if errors:
        raise errors[0]
    lat = sorted(x for ls in lats for x in ls)
    return {"p50_us": lat[len(lat) // 2] * 1e6, "p99_us": lat[int(len(lat) * 0.99)] * 1e6,
            "ops_s": len(keys) / took}


def quiesce(port, timeout=60.0):
    """Waits (bounded) until the flash writes the loading queued are done:
    INFO offload_queue_bytes 0 and flash_write_bytes unchanged over 0.2 s."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        info = server_info(port, "flash")
        written = info.get("flash_write_bytes")
        if info.get("offload_queue_bytes") == "0" and written == last:
            return
        last = written
        time.sleep(0.2)
    raise RuntimeError("flash writes did not settle")


def one_run(args, fsync, order):
    workdir = tempfile.mkdtemp(prefix="tierkv-durable-del-", dir=args.dir)
    proc, log, port = start_server(args, fsync, workdir)
    try:
        conn = Conn(port)
        groups = {g: [f"g{i}:{j}" for j in range(args.keys)] for i, g in enumerate(GROUPS)}
        for keys in groups.values():
            load(conn, keys, VALUE)
        load(conn, [f"filler:{j}" for j in range(FILLER_BYTES // FILLER_VALUE)], FILLER_VALUE)
        share = flash_only_share(conn, [k for keys in groups.values() for k in keys])
        conn.close()
        quiesce(port)
        rows = {}
        for g in order:
            op, mode = g.split()
            rows[g] = measure(port, op, groups[g], 1 if mode == "seq" else CONNECTIONS)
        return {"fsync": fsync, "flash_only_share": share, "order": list(order), "rows": rows}
    finally:
        stop_server(proc, log)
        shutil.rmtree(workdir, ignore_errors=True)


def summary(runs, group, field):
    values = [r["rows"][group][field] for r in runs]
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--server", default=os.path.join(ROOT, "build", "src", "server",
                                                     "tierkv-server"))
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--keys", type=int, default=1000, help="keys per group")
    ap.add_argument("--dir", default=None, help="where the flash files go (default: /tmp)")
    args = parse_args_with_quick(ap, {"runs": 1, "keys": 200})
    run = RunRecord("durable-del")
    runs = {"always": [], "none": []}
    for i in range(args.runs):
        order = GROUPS[i % len(GROUPS):] + GROUPS[:i % len(GROUPS)]
        for fsync in ("always", "none") if i % 2 == 0 else ("none", "always"):
            r = one_run(args, fsync, order)
            runs[fsync].append(r)
            print(f"run {i + 1} fsync={fsync}: flash-only {r['flash_only_share']:.0%}, " +
                  ", ".join(f"{g} {v['ops_s']:.0f}/s" for g, v in r["rows"].items()),
                  flush=True)

    def cell(s, fmt):
        return f"{fmt.format(s['median'])} ({fmt.format(s['min'])}-{fmt.format(s['max'])})"

    table = {}
    print(f"\n{args.runs} runs, {args.keys} keys of {VALUE >> 10} KiB per row; median (min-max)")
    print(f"{'row':<12} {'fsync':<7} {'p50 us':>20} {'p99 us':>20} {'ops/s':>22}")
    for g in GROUPS:
        for fsync in ("none", "always"):
            rs = runs[fsync]
            entry = {f: summary(rs, g, f) for f in ("p50_us", "p99_us", "ops_s")}
            table.setdefault(g, {})[fsync] = entry
            p50, p99 = cell(entry["p50_us"], "{:.0f}"), cell(entry["p99_us"], "{:.0f}")
            print(f"{g:<12} {fsync:<7} {p50:>20} {p99:>20} {cell(entry['ops_s'], '{:.0f}'):>22}")
    shares = [r["flash_only_share"] for rs in runs.values() for r in rs]
    print(f"keys only on flash before the removals: {min(shares):.0%}-{max(shares):.0%}")
    write_json(os.path.join(RESULTS, "durable-del.json"),
               {"runs": runs, "table": table, "keys_per_row": args.keys, "value_bytes": VALUE},
               run)
    ratio = (table["DEL seq"]["always"]["ops_s"]["median"] /
             table["DEL seq"]["none"]["ops_s"]["median"])
    plot_bars(os.path.join(RESULTS, "durable-del.png"), "durable removals: median ops/s",
              {f"{g} {fsync}": table[g][fsync]["ops_s"]["median"]
               for g in table for fsync in table[g]}, "ops/s")
    print(run.result_line({
        "ratio": f"{ratio:.3f}",
        "del_always_ops_s": f"{table['DEL seq']['always']['ops_s']['median']:.0f}",
        "del_none_ops_s": f"{table['DEL seq']['none']['ops_s']['median']:.0f}",
        "del_always_p50_us": f"{table['DEL seq']['always']['p50_us']['median']:.0f}",
        "del_none_p50_us": f"{table['DEL seq']['none']['p50_us']['median']:.0f}"}))


if __name__ == "__main__":
    main()
