#!/usr/bin/python3
"""Readahead over the wire: one large object on flash only, read from start
to end by consecutive TIER.READ ... USEONCE of one chunk each, with busy
compute C after each read, with `readahead yes` and `readahead no`
(CONFIG SET), alternating, several runs each.

Reports the time per read in each mode (median and min-max over the runs)
and the ratio no/yes (the speedup readahead gives), plus the readahead
counters of one run. L is backing-latency-ns with the flash file on tmpfs
(--model-dir), or the real device for L = 0 (--device-dir).

Build first: cmake --build build --target tierkv-server
"""
import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run as pipeline  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import benchlib  # noqa: E402


def info_stream(c):
    text = c.call("INFO", "stream").decode()
    return {k: float(v) for k, v in (x.split(":", 1) for x in text.split("\r\n") if ":" in x)}


def one_pass(c, size, chunk, compute_ns):
    start = time.perf_counter_ns()
    reads = 0
    for off in range(0, size, chunk):
        if len(c.call("TIER.READ", "big", off, chunk, "USEONCE")) != min(chunk, size - off):
            raise RuntimeError(f"short read at {off}")
        pipeline.busy(compute_ns)
        reads += 1
    return (time.perf_counter_ns() - start) / reads


def bench(args, latency_ns):
    workdir = tempfile.mkdtemp(prefix="tierkv-readahead-",
                               dir=args.model_dir if latency_ns > 0 else args.device_dir)
    extra = ["--chunk-size", str(args.chunk), "--readahead-max-chunks", str(args.max_chunks)]
    proc, port = pipeline.start_server(args, workdir, latency_ns, extra)
    size = args.size_mb << 20
    block = os.urandom(1 << 20)
    c = pipeline.Wire(port)
    c.call("SET", "big", block * args.size_mb)
    pipeline.stop_server(proc)  # a clean shutdown writes it to flash ...
    proc, port = pipeline.start_server(args, workdir, latency_ns, extra)  # ... memory is empty
    times = {"yes": [], "no": []}
    counters = {}
    try:
        c = pipeline.Wire(port)
        for _ in range(args.runs):
            for mode in ("no", "yes"):
                c.call("CONFIG", "SET", "readahead", mode)
                c.call("TIER.READ", "other", 0, 1)  # ends any look-ahead
                before = info_stream(c)
                times[mode].append(one_pass(c, size, args.chunk, args.compute_ns))
                after = info_stream(c)
                counters[mode] = {k.replace("stream_readahead_", ""): after[k] - before[k]
                                  for k in after if k.startswith("stream_readahead_")}
    finally:
        pipeline.stop_server(proc)
        shutil.rmtree(workdir, ignore_errors=True)
    return times, counters


def fmt(xs):
    return f"{statistics.median(xs) / 1000:.1f} ({min(xs) / 1000:.1f}-{max(xs) / 1000:.1f})"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(pipeline.ROOT, "build"))
    ap.add_argument("--latencies", default="500000,0", help="L values (ns)")
    ap.add_argument("--compute-ns", type=int, default=200_000)
    ap.add_argument("--size-mb", type=int, default=32)
    ap.add_argument("--chunk", type=int, default=256 << 10)
    ap.add_argument("--max-chunks", type=int, default=16)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--model-dir", default="/dev/shm")
    ap.add_argument("--device-dir", default="/tmp")
    ap.add_argument("--out", default=os.path.join(pipeline.ROOT, "bench", "results",
                                                  "readahead.json"))
    args = benchlib.parse_args_with_quick(ap, {"runs": 1, "size_mb": 8})
    run = benchlib.RunRecord("readahead")
    rows = []
    print(f"{'L(us)':>6} {'C(us)':>6} {'us/read no':>20} {'us/read yes':>20} {'ratio no/yes':>22}")
    for L in [int(x) for x in args.latencies.split(",")]:
        times, counters = bench(args, L)
        ratios = [n / y for n, y in zip(times["no"], times["yes"])]
        print(f"{L / 1000:6.0f} {args.compute_ns / 1000:6.0f} {fmt(times['no']):>20} "
              f"{fmt(times['yes']):>20} {statistics.median(ratios):.2f} "
              f"({min(ratios):.2f}-{max(ratios):.2f})")
        print(f"       counters of the last run: {counters}")
        # At best every read is hidden behind the compute (enough reads
        # ahead, in parallel): (L + C) / C. On the device (L = 0) the latency
        # is not known here.
        ideal = (L + args.compute_ns) / args.compute_ns if L else None
        rows.append({"L_ns": L, "C_ns": args.compute_ns, "chunk": args.chunk,
                     "ns_per_read": times, "speedups": ratios,
                     "speedup": statistics.median(ratios), "ideal": ideal,
                     "counters": counters})
    benchlib.write_json(args.out, {"args": {k: v for k, v in vars(args).items() if k != "out"},
                                   "rows": rows}, run)
    benchlib.plot_bars(os.path.splitext(args.out)[0] + ".png", "readahead speedup (no / yes)",
                       {f"L {r['L_ns'] // 1000} us": r["speedup"] for r in rows}, "speedup")
    head = rows[0]
    figures = {"speedup": f"{head['speedup']:.3f}", "L_ns": head["L_ns"],
               "C_ns": head["C_ns"],
               "speedup_min": f"{min(head['speedups']):.3f}",
               "speedup_max": f"{max(head['speedups']):.3f}"}
    if head["ideal"]:
        figures = {"ratio": f"{head['speedup'] / head['ideal']:.3f}",
                   "ideal": f"{head['ideal']:.3f}", **figures}
    for r in rows[1:]:
        figures[f"speedup_L{r['L_ns']}"] = f"{r['speedup']:.3f}"
    print(run.result_line(figures))


if __name__ == "__main__":
    main()
