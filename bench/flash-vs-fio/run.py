#!/usr/bin/python3
"""Random-read throughput of tierkv from flash next to fio, on one file.

For each block size: tierkv-flash-bench opens a tierkv::Store with 8 MiB of
memory and a flash file, puts objects of that size until the file is nearly
full, persists them and empties memory, and stays up; then, per queue depth,
it reads random objects through Store::read (every one served from flash) and
fio reads random blocks of the same size from the same file
(ioengine=io_uring, direct=1, same depth, same total time). The same fill is
also read straight through FlashTier::read_chunk ("tier" rows), to show what
the Store layer costs. The time is cut into rounds in which ours and fio take
turns (ABBA order), because on a shared machine throughput swings 2-3x from
one second to the next: the ratio of each round is taken, and the median over
rounds is the figure reported. The RESULT ratios are the Store ones.

Then tierkv-server runs on loopback (8 MiB memory, flash), is loaded with
1 MiB objects and read by tierkv-wire-bench (random GETs, several pipelined
connections): the over-the-wire GB/s, next to fio at 1 MiB QD16 on the
server's file.

    /usr/bin/python3 bench/flash-vs-fio/run.py [--dir /disk/tmp] [--seconds 5]

Prints a table, writes bench/results/flash-vs-fio.json and ends with a
RESULT line. See docs/benchmarks-flash.md.
"""

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchlib import (RunRecord, free_port, load_average, parse_args_with_quick,  # noqa: E402
                      parse_size, server_info, wait_for_port, wait_loaded, write_json)

REPO = Path(__file__).resolve().parents[2]
GOALS = {4096: 0.6}  # ours/fio at QD16; 0.8 for every larger block size
DEFAULT_GOAL = 0.8
RECORD_HEADER = 64  # src/flash/record.h: RecordHeader (format v2)
BLOCK = 4096
READ_ALIGN = 512  # reads cover the record rounded to the O_DIRECT alignment


def size_name(n):
    if n % (1 << 20) == 0:
        return f"{n >> 20}M"
    if n % (1 << 10) == 0:
        return f"{n >> 10}K"
    return str(n)


def record_size(key_length, data_length):
    """Bytes a record occupies on flash (whole 4 KiB blocks)."""
    raw = RECORD_HEADER + key_length + data_length
    return (raw + BLOCK - 1) // BLOCK * BLOCK


def record_read_size(key_length, data_length):
    """Bytes one read of the record transfers (FlashTier::io_alignment, 512 here)."""
    raw = RECORD_HEADER + key_length + data_length
    return (raw + READ_ALIGN - 1) // READ_ALIGN * READ_ALIGN


def command_output(args):
    try:
        return subprocess.run(args, capture_output=True, text=True, check=False).stdout.strip()
    except OSError:
        return ""


def environment(directory):
    dirty = command_output(["git", "-C", str(REPO), "status", "--porcelain", "--", "src/flash"])
    return {
        "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "host": platform.node(),
        "kernel": platform.release(),
        "cpus": os.cpu_count(),
        "directory": str(directory),
        "file_system": command_output(["findmnt", "-n", "-o", "SOURCE,FSTYPE", "-T", str(directory)]),
        "fio_version": command_output(["fio", "--version"]),
        "git_commit": command_output(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"]),
        "src_flash_uncommitted_changes": bool(dirty),
    }


class Bench:
    """One tierkv-flash-bench process in --serve mode: fills, then reads on request."""

    def __init__(self, binary, directory, size_mib, block_size, warmup):
        args = [str(binary), "--serve", "--mode", "store", "--dir", str(directory),
                "--size-mib", str(size_mib), "--block-size", str(block_size),
                "--warmup", str(warmup)]
        self.proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.fill = self._next_event("fill")

    def _next_event(self, expected):
        for line in self.proc.stdout:
            line = line.strip()
            if not line.startswith("{"):
                continue
            event = json.loads(line)
            if event.get("event") != expected:
                raise RuntimeError(f"tierkv-flash-bench: expected {expected}, got {line}")
            return event
        raise RuntimeError(f"tierkv-flash-bench exited (code {self.proc.wait()}) before {expected}")

    def read(self, queue_depth, seconds, path="store"):
        self.proc.stdin.write(f"read {queue_depth} {seconds} {path}\n")
        self.proc.stdin.flush()
        return self._next_event("read")

    def close(self):
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write("quit\n")
                self.proc.stdin.close()
            except BrokenPipeError:
                pass
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def run_fio(path, extent, block_size, queue_depth, seconds, warmup, direct):
    args = ["fio", "--name=flash-vs-fio", f"--filename={path}", "--readonly",
            "--ioengine=io_uring", f"--direct={1 if direct else 0}", "--rw=randread",
            f"--bs={block_size}", f"--iodepth={queue_depth}", f"--size={extent}",
            # fio reads a plain number of seconds as an integer: give ms.
            f"--runtime={max(1, round(seconds * 1000))}ms",
            f"--ramp_time={round(warmup * 1000)}ms", "--time_based",
            "--norandommap", "--randrepeat=0", "--output-format=json"]
    out = subprocess.run(args, capture_output=True, text=True, check=False,
                         timeout=seconds + warmup + 30)
    if out.returncode != 0:
        raise RuntimeError(f"fio failed ({out.returncode}): {out.stderr.strip()}")
    # fio may print notes before the JSON document.
    job = json.loads(out.stdout[out.stdout.index("{"):])["jobs"][0]
    read = job["read"]
    runtime_s = read["runtime"] / 1000.0
    percentiles = read.get("clat_ns", {}).get("percentile", {})
    cpu_s = (job["usr_cpu"] + job["sys_cpu"]) / 100.0 * runtime_s
    return {
        "block_size": block_size,
        "queue_depth": queue_depth,
        "direct": direct,
        "ops_s": read["iops"],
        "mb_s": read["bw_bytes"] / 1e6,
        "lat_p50_us": percentiles.get("50.000000", 0) / 1e3,
        "lat_p99_us": percentiles.get("99.000000", 0) / 1e3,
        "cpu_percent": job["usr_cpu"] + job["sys_cpu"],
        "cpu_us_per_op": cpu_s * 1e6 / read["total_ios"] if read["total_ios"] else 0.0,
    }


def median(values):
    v = sorted(values)
    n = len(v)
    return (v[n // 2] + v[(n - 1) // 2]) / 2 if n else 0.0


def combine_ours(rounds):
    """One figure from per-round tierkv-flash-bench reads (equal durations)."""
    seconds = sum(r["seconds"] for r in rounds)
    ops = sum(r["ops"] for r in rounds)
    cpu_s = sum(r["cpu_percent"] / 100.0 * r["seconds"] for r in rounds)
    return {
        "ops": ops, "seconds": seconds, "ops_s": ops / seconds,
        "payload_mb_s": sum(r["payload_mb_s"] * r["seconds"] for r in rounds) / seconds,
        "device_mb_s": sum(r["device_mb_s"] * r["seconds"] for r in rounds) / seconds,
        "errors": sum(r["errors"] for r in rounds),
        "memory_hits": sum(r.get("memory_hits", 0) for r in rounds),
        "cpu_us_per_op": cpu_s * 1e6 / ops if ops else 0.0,
        "lat_p50_us": median([r["lat_p50_us"] for r in rounds]),
        "lat_p99_us": median([r["lat_p99_us"] for r in rounds]),
        "rounds": rounds,
    }


def combine_fio(rounds):
    n = len(rounds)
    return {
        "ops_s": sum(r["ops_s"] for r in rounds) / n,
        "mb_s": sum(r["mb_s"] for r in rounds) / n,
        "cpu_us_per_op": median([r["cpu_us_per_op"] for r in rounds]),
        "lat_p50_us": median([r["lat_p50_us"] for r in rounds]),
        "lat_p99_us": median([r["lat_p99_us"] for r in rounds]),
        "rounds": rounds,
    }


def run_case(bench, fill, bs, qd, args):
    """Store reads and fio in alternating rounds (plus tier reads); the case record."""
    slice_s = args.seconds / args.rounds
    record = record_read_size(fill["key_length"], bs)
    # Where padding doubles the bytes per read, also run fio reading as many
    # bytes per I/O as we do.
    with_record_fio = record >= bs * 1.5
    ours_rounds, fio_rounds, rec_rounds, tier_rounds = [], [], [], []
    ratios, tier_ratios = [], []

    def fio_slice(block):
        return run_fio(fill["file"], fill["written_extent_bytes"], block, qd, slice_s,
                       args.warmup, fill["direct_io"])

    for i in range(args.rounds):
        if i % 2 == 0:
            ours = bench.read(qd, slice_s)
            fio = fio_slice(bs)
        else:
            fio = fio_slice(bs)
            ours = bench.read(qd, slice_s)
        if with_record_fio:
            rec_rounds.append(fio_slice(record))
        if not args.no_tier:
            tier = bench.read(qd, slice_s, "tier")
            tier_rounds.append(tier)
            tier_ratios.append(tier["payload_mb_s"] / fio["mb_s"] if fio["mb_s"] else 0.0)
        ours_rounds.append(ours)
        fio_rounds.append(fio)
        ratios.append(ours["payload_mb_s"] / fio["mb_s"] if fio["mb_s"] else 0.0)
    case = {"block_size": bs, "queue_depth": qd, "record_size": record,
            "ours": combine_ours(ours_rounds), "fio": combine_fio(fio_rounds),
            "ratio": median(ratios), "ratio_rounds": ratios,
            "goal": goal_for(bs)}
    if with_record_fio:
        case["fio_record_size"] = combine_fio(rec_rounds)
    if tier_rounds:
        case["tier"] = combine_ours(tier_rounds)
        case["tier_ratio"] = median(tier_ratios)
        case["tier_ratio_rounds"] = tier_ratios
    return case








def wire_bench(args, *extra):
    cmd = [args.wire_bin, *map(str, extra)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(f"tierkv-wire-bench failed ({out.returncode}): {out.stderr.strip()} "
                           f"{out.stdout.strip()}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def run_wire(args, directory):
    """tierkv-server on loopback, 1 MiB objects from flash, GB/s; fio next to it."""
    size = 1 << 20
    objects = args.wire_mib
    port = free_port()
    flash_file = directory / "wire-bench.dat"
    flash_file.unlink(missing_ok=True)
    server = subprocess.Popen(
        [args.server, "--bind", "127.0.0.1", "--port", str(port), "--metrics-port", "0",
         "--memory", "8mb", "--chunk-size", "1mb", "--flash-size", f"{args.wire_flash_mib}mb",
         "--flash-path", str(flash_file), "--promotion-threshold", "255", "--log-level", "warn"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_for_port(port, server)
        wait_loaded(port, server)
        common = ["--port", port, "--objects", objects, "--size", "1m",
                  "--connections", args.wire_connections, "--pipeline", args.wire_pipeline]
        loaded = wire_bench(args, *common, "--load", "--pad-mib", 32)
        print(f"wire: loaded {objects} x 1 MiB in {loaded['seconds']:.1f} s "
              f"({loaded['mb_s']:.0f} MB/s over the wire)", flush=True)
        before = server_info(port)
        slice_s = args.seconds / args.wire_rounds
        extent = objects * record_size(24, size)
        gets, fios, ratios = [], [], []
        for i in range(args.wire_rounds):
            def get():
                return wire_bench(args, *common, "--seconds", slice_s, "--warmup", args.warmup)

            def fio():
                return run_fio(flash_file, extent, size, 16, slice_s, args.warmup, True)
            if i % 2 == 0:
                g, f = get(), fio()
            else:
                f, g = fio(), get()
            gets.append(g)
            fios.append(f)
            ratios.append(g["mb_s"] / f["mb_s"] if f["mb_s"] else 0.0)
        after = server_info(port)
    finally:
        server.terminate()
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        flash_file.unlink(missing_ok=True)

    def delta(name):
        return int(after.get(name, 0)) - int(before.get(name, 0))
    n = len(gets)
    result = {
        "object_size": size, "objects": objects, "connections": args.wire_connections,
        "pipeline": args.wire_pipeline, "load": loaded, "rounds": gets, "fio_rounds": fios,
        "gb_s": sum(g["gb_s"] for g in gets) / n,
        "fio_1m_qd16_gb_s": sum(f["mb_s"] for f in fios) / n / 1000,
        "ratio": median(ratios), "ratio_rounds": ratios,
        "errors": sum(g["errors"] for g in gets),
        "lat_p50_us": median([g["lat_p50_us"] for g in gets]),
        "lat_p99_us": median([g["lat_p99_us"] for g in gets]),
        "keyspace_hits": delta("keyspace_hits"), "flash_hits": delta("flash_hits"),
    }
    print(f"wire: GET 1 MiB over loopback {result['gb_s']:.3f} GB/s "
          f"({args.wire_connections} connections x {args.wire_pipeline} pipelined), "
          f"fio 1M QD16 {result['fio_1m_qd16_gb_s']:.3f} GB/s, ratio {result['ratio']:.2f}; "
          f"{result['flash_hits']} of {result['keyspace_hits']} hits from flash, "
          f"{result['errors']} errors", flush=True)
    return result


def goal_for(block_size):
    return GOALS.get(block_size, DEFAULT_GOAL)


def print_table(cases):
    head = (f"{'bs':>4} {'QD':>3} | {'ours op/s':>9} {'ours MB/s':>9} {'fio MB/s':>8} "
            f"{'ratio':>5} {'rounds min-max':>14} {'goal':>9} | {'dev MB/s':>8} {'fio@rec':>7} | "
            f"{'p50 us':>11} {'p99 us':>13} | {'CPU us/op':>11}")
    print(head)
    print("-" * len(head))
    for c in cases:
        ours, fio = c["ours"], c["fio"]
        rec = c.get("fio_record_size")
        rec_text = f"{rec['mb_s']:7.1f}" if rec else f"{'-':>7}"
        verdict = f"{'ok' if c['ratio'] >= c['goal'] else 'MISS'} {c['goal']:.1f}"
        spread = f"{min(c['ratio_rounds']):.2f}-{max(c['ratio_rounds']):.2f}"
        lat50 = f"{ours['lat_p50_us']:.0f}/{fio['lat_p50_us']:.0f}"
        lat99 = f"{ours['lat_p99_us']:.0f}/{fio['lat_p99_us']:.0f}"
        cpu = f"{ours['cpu_us_per_op']:.1f}/{fio['cpu_us_per_op']:.1f}"
        print(f"{size_name(c['block_size']):>4} {c['queue_depth']:>3} | "
              f"{ours['ops_s']:>9.0f} {ours['payload_mb_s']:>9.1f} {fio['mb_s']:>8.1f} "
              f"{c['ratio']:>5.2f} {spread:>14} {verdict:>9} | "
              f"{ours['device_mb_s']:>8.1f} {rec_text} | {lat50:>11} {lat99:>13} | {cpu:>11}")
    tier_cases = [c for c in cases if "tier" in c]
    if tier_cases:
        print("\nsame fill read straight from FlashTier::read_chunk (no Store), same fio turns:")
        for c in tier_cases:
            t = c["tier"]
            print(f"{size_name(c['block_size']):>4} {c['queue_depth']:>3} | tier {t['ops_s']:>9.0f} op/s "
                  f"{t['payload_mb_s']:>8.1f} MB/s  ratio {c['tier_ratio']:.2f} "
                  f"({min(c['tier_ratio_rounds']):.2f}-{max(c['tier_ratio_rounds']):.2f})  "
                  f"p50 {t['lat_p50_us']:.0f} us  CPU {t['cpu_us_per_op']:.1f} us/op")
    print("ratio: median over rounds of ours MB/s / fio MB/s; ours = Store::read, every read from "
          "flash. ours MB/s counts object bytes "
          "delivered;\ndev MB/s counts whole records read (header + key + data, padded to 4 KiB); "
          "fio@rec: fio with bs = our record size.\np50/p99 and CPU per op: ours/fio "
          "(ours: whole process, incl. key formatting and checks).")


def print_index(fills):
    print(f"\n{'objects':>12} | {'objects':>8} {'chunks':>8} {'index bytes':>12} "
          f"{'B/chunk':>8} {'B/object':>9} | {'write amp':>9}")
    for f in fills:
        label = (f"{size_name(f['chunk_size'] * f['chunks_per_object'])} "
                 f"({f['chunks_per_object']} ch)")
        print(f"{label:>12} | {f['objects']:>8} {f['chunks']:>8} {f['index_bytes']:>12} "
              f"{f['index_bytes_per_chunk']:>8.1f} {f['index_bytes_per_object']:>9.1f} | "
              f"{f['write_amplification']:>9.3f}")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bin", default=str(REPO / "build/bench/flash-vs-fio/tierkv-flash-bench"))
    p.add_argument("--dir", default=str(REPO / "bench/results/tmp-flash"),
                   help="directory on the disk under test (not a tmpfs)")
    p.add_argument("--size-mib", type=int, default=1024)
    p.add_argument("--block-sizes", default="4k,64k,1m")
    p.add_argument("--qd", default="1,16")
    p.add_argument("--seconds", type=float, default=5,
                   help="measured seconds per case and side, over all rounds")
    p.add_argument("--rounds", type=int, default=8, help="ours/fio turns per case")
    p.add_argument("--warmup", type=float, default=0.2,
                   help="unmeasured seconds before each turn (fio: ramp_time)")
    p.add_argument("--out", default=str(REPO / "bench/results/flash-vs-fio.json"))
    p.add_argument("--no-index-fill", action="store_true",
                   help="skip the extra fill with 8 MiB objects (8 chunks each)")
    p.add_argument("--no-tier", action="store_true",
                   help="skip the direct FlashTier::read_chunk turns")
    p.add_argument("--no-wire", action="store_true", help="skip the tierkv-server part")
    p.add_argument("--server", default=str(REPO / "build/src/server/tierkv-server"))
    p.add_argument("--wire-bin", default=str(REPO / "build/bench/flash-vs-fio/tierkv-wire-bench"))
    p.add_argument("--wire-mib", type=int, default=1024, help="1 MiB objects loaded into the server")
    p.add_argument("--wire-flash-mib", type=int, default=2048, help="server's --flash-size")
    p.add_argument("--wire-connections", type=int, default=4)
    p.add_argument("--wire-pipeline", type=int, default=4, help="GETs in flight per connection")
    p.add_argument("--wire-rounds", type=int, default=4)
    args = parse_args_with_quick(p, {"size_mib": 256, "seconds": 1.0, "rounds": 2,
                                     "wire_mib": 256, "wire_flash_mib": 512, "wire_rounds": 1})
    run = RunRecord("flash-vs-fio")

    binary = Path(args.bin)
    if not binary.exists():
        sys.exit(f"{binary} not found; build it with:\n"
                 f"  {REPO}/scripts/build.sh build -DCMAKE_BUILD_TYPE=Release -DTIERKV_BENCH=ON")
    if not args.no_wire and not (Path(args.server).exists() and Path(args.wire_bin).exists()):
        sys.exit(f"{args.server} or {args.wire_bin} not found (or give --no-wire)")
    if shutil.which("fio") is None:
        sys.exit("fio not found")
    directory = Path(args.dir)
    created_dir = not directory.exists()
    directory.mkdir(parents=True, exist_ok=True)
    fs_type = command_output(["stat", "-f", "-c", "%T", str(directory)])
    if fs_type == "tmpfs":
        sys.exit(f"{directory} is on tmpfs: give --dir on the disk under test")
    if shutil.disk_usage(directory).free < (max(args.size_mib, args.wire_flash_mib) << 20) * 2:
        sys.exit(f"not enough free space in {directory} for {args.size_mib} MiB")

    env = environment(directory)
    print(f"flash-vs-fio: {env['time_utc']}, {env['cpus']} CPUs, load average "
          f"{run.load_before}, {env['file_system']} at {directory}, {env['fio_version']}")
    if env["src_flash_uncommitted_changes"]:
        print(f"note: src/flash has uncommitted changes on top of {env['git_commit']}")
    started = time.monotonic()
    block_sizes = [parse_size(b) for b in args.block_sizes.split(",")]
    queue_depths = [int(q) for q in args.qd.split(",")]
    cases, fills = [], []
    flash_file = directory / "flash-bench.dat"
    try:
        for bs in block_sizes:
            bench = Bench(binary, directory, args.size_mib, bs, args.warmup)
            try:
                fill = bench.fill
                fills.append(fill)
                direct = fill["direct_io"]
                if not direct:
                    print(f"note: {fill['file']} does not take O_DIRECT: both sides buffered")
                print(f"{size_name(bs)}: filled {fill['written_extent_bytes'] >> 20} MiB "
                      f"({fill['objects']} objects) in {fill['fill_seconds']:.1f} s "
                      f"via {fill['io_backend']}, {'direct' if direct else 'buffered'} I/O",
                      flush=True)
                for qd in queue_depths:
                    case = run_case(bench, fill, bs, qd, args)
                    rounds = ", ".join(f"{r:.2f}" for r in case["ratio_rounds"])
                    errors = case["ours"]["errors"]
                    print(f"  QD{qd}: ours {case['ours']['payload_mb_s']:.1f} MB/s, "
                          f"fio {case['fio']['mb_s']:.1f} MB/s, ratio {case['ratio']:.2f} "
                          f"(rounds {rounds}){'' if errors == 0 else ', ERRORS %d' % errors}",
                          flush=True)
                    cases.append(case)
            finally:
                bench.close()
        if not args.no_index_fill:
            # Index cost per chunk beyond the first: many chunks per object.
            bench = Bench(binary, directory, args.size_mib, 8 << 20, args.warmup)
            fills.append(bench.fill)
            bench.close()
        wire = None if args.no_wire else run_wire(args, directory)
    finally:
        flash_file.unlink(missing_ok=True)
        if created_dir:
            try:
                directory.rmdir()
            except OSError:
                pass

    env["wall_seconds"] = round(time.monotonic() - started, 1)
    print()
    print_table(cases)
    print_index(fills)
    if wire:
        print(f"\nover the wire (tierkv-server, loopback, {wire['connections']} connections x "
              f"{wire['pipeline']} pipelined GETs of 1 MiB): {wire['gb_s']:.3f} GB/s, "
              f"p50 {wire['lat_p50_us']:.0f} us; fio 1M QD16 on the server's file: "
              f"{wire['fio_1m_qd16_gb_s']:.3f} GB/s (ratio {wire['ratio']:.2f}); "
              f"{wire['flash_hits']}/{wire['keyspace_hits']} hits from flash")
    print(f"\nload average at start {run.load_before}, at end {load_average()} "
          f"on {env['cpus']} CPUs (shared machine: absolute figures are noisy, ratios less so); "
          f"run took {env['wall_seconds']} s")

    def ratio(bs, qd=16):
        for c in cases:
            if c["block_size"] == bs and c["queue_depth"] == qd:
                return round(c["ratio"], 3)
        return None

    def index_per(size, what):
        for f in fills:
            if f["chunk_size"] * f["chunks_per_object"] == size:
                return round(f[f"index_bytes_per_{what}"], 1)
        return None

    def mb_s(side, bs=4096, qd=16):
        for c in cases:
            if c["block_size"] == bs and c["queue_depth"] == qd:
                key = "payload_mb_s" if side == "ours" else "mb_s"
                return round(c[side][key], 1)
        return None

    # The headline: 4 KiB random reads at QD16 through Store, against fio.
    result = {"ratio": ratio(4096), "store_4k_qd16_mb_s": mb_s("ours"),
              "fio_4k_qd16_mb_s": mb_s("fio"),
              "ratio_4k_qd16": ratio(4096), "ratio_64k_qd16": ratio(65536),
              "ratio_1m_qd16": ratio(1 << 20), "ratio_4k_qd1": ratio(4096, 1),
              "ratio_64k_qd1": ratio(65536, 1), "ratio_1m_qd1": ratio(1 << 20, 1),
              "wire_1m_gb_s": round(wire["gb_s"], 3) if wire else None,
              "fio_1m_qd16_gb_s": round(wire["fio_1m_qd16_gb_s"], 3) if wire else None,
              "index_b_per_object_4k": index_per(4096, "object"),
              "index_b_per_chunk_8m": index_per(8 << 20, "chunk"),
              "index_b_per_object_8m": index_per(8 << 20, "object")}
    write_json(args.out, {"environment": env, "cases": cases, "fills": fills, "wire": wire,
                          "result": result}, run)
    print(run.result_line(result))


if __name__ == "__main__":
    main()
