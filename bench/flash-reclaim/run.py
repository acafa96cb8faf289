#!/usr/bin/python3
"""Reclaim that keeps what is read: FIFO reclaim against FIFO with hit-based
reinsertion (flash-reinsertion), on the real traces (issue 39; docs/tiering.md).

Each cell replays one trace (../shared/traces, used in place) through a real
Store with tierkv-flash-reclaim-replay: memory --memory-fraction of the
unique objects' bytes (4000 B values: one 4 KiB block each), flash
--flash-ratios times memory, as a look-aside cache (GET, and SET on a miss). --churn levels rewrite that
share of the hits, leaving dead bytes in the log; the flash tier's live
share at the end is printed beside each cell. Both arms of a cell run the
same requests in the same run; FIFO is the baseline the ratio is taken
against.

Per cell: the flash hit ratio (flash hits over the requests memory missed)
and the write amplification (device bytes over user bytes) of each arm.

  /usr/bin/python3 bench/flash-reclaim/run.py [--traces-dir DIR]
      [--flash-ratios 2,8] [--churn 0,0.2] [--max-requests 1000000] [--quick]

Prints a table and `RESULT name=flash-reclaim ratio=<median over cells of
reinsertion's flash hit ratio over FIFO's> ...`; writes
bench/results/flash-reclaim.json and .png. Without the traces directory it
says so, prints `RESULT ... ratio=skipped` and exits 0 (a clone without
../shared).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchlib import ROOT, RunRecord, parse_args_with_quick, pyplot, write_json  # noqa: E402

DRIVER = os.path.join(ROOT, "build", "bench", "flash-reclaim", "tierkv-flash-reclaim-replay")
TRACES = os.path.normpath(os.path.join(ROOT, "..", "shared", "traces"))


def traces_in(directory):
    if not os.path.isdir(directory):
        return []
    names = sorted(f for f in os.listdir(directory) if not f.endswith((".md", ".txt")))
    return [os.path.join(directory, f) for f in names]


def replay(path, args, ratio, churn, reinsertion, work):
    argv = [DRIVER, "--trace", path, "--dir", work, "--flash-ratio", str(ratio), "--churn",
            str(churn), "--memory-fraction", str(args.memory_fraction), "--max-requests",
            str(args.max_requests)]
    if reinsertion:
        argv.append("--reinsertion")
    out = subprocess.run(argv, capture_output=True, text=True, timeout=1800, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"{os.path.basename(path)}: {out.stderr.strip()[-300:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--traces-dir", default=TRACES)
    ap.add_argument("--flash-ratios", default="2,8")
    ap.add_argument("--churn", default="0,0.2")
    ap.add_argument("--memory-fraction", type=float, default=0.05)
    ap.add_argument("--max-requests", type=int, default=1_000_000)
    ap.add_argument("--json", default=os.path.join(ROOT, "bench", "results", "flash-reclaim.json"))
    args = parse_args_with_quick(ap, {"flash_ratios": "4", "churn": "0.2",
                                      "max_requests": 100_000})
    traces = traces_in(args.traces_dir)
    if not traces:
        print(f"no traces in {args.traces_dir} (../shared/traces): nothing to replay")
        print("RESULT name=flash-reclaim ratio=skipped reason=no-traces")
        return
    run = RunRecord("flash-reclaim")
    cells = []
    with tempfile.TemporaryDirectory(prefix="tierkv-flash-reclaim-",
                                     dir=os.path.join(ROOT, "build")) as work:
        for path in traces:
            for ratio in (float(r) for r in args.flash_ratios.split(",")):
                for churn in (float(c) for c in args.churn.split(",")):
                    fifo = replay(path, args, ratio, churn, False, work)
                    hits = replay(path, args, ratio, churn, True, work)
                    cells.append({"trace": os.path.basename(path).split(".")[0],
                                  "flash_ratio": ratio, "churn": churn, "fifo": fifo,
                                  "reinsertion": hits})
    report(args, cells, run)


def report(args, cells, run):
    print(f"{'trace':>15} {'flash/mem':>9} {'churn':>5} {'live':>5} {'FIFO hit':>9} "
          f"{'reins hit':>9} {'ratio':>6} {'FIFO WA':>8} {'reins WA':>8} {'miss FIFO':>9} "
          f"{'miss reins':>10}")
    ratios = []
    for c in cells:
        f, r = c["fifo"], c["reinsertion"]
        ratio = r["flash_hit_ratio"] / f["flash_hit_ratio"] if f["flash_hit_ratio"] else 1.0
        c["ratio"] = round(ratio, 4)
        ratios.append(ratio)
        print(f"{c['trace']:>15} {c['flash_ratio']:>9.0f} {c['churn']:>5.2f} "
              f"{f['flash_live_share']:>5.2f} {f['flash_hit_ratio']:>9.4f} "
              f"{r['flash_hit_ratio']:>9.4f} {ratio:>6.3f} {f['write_amplification']:>8.3f} "
              f"{r['write_amplification']:>8.3f} {f['miss_ratio']:>9.4f} {r['miss_ratio']:>10.4f}")
    figures = {
        "ratio": round(statistics.median(ratios), 4),
        "worst_ratio": round(min(ratios), 4),
        "cells_higher": sum(1 for x in ratios if x > 1.0),
        "cells_lower": sum(1 for x in ratios if x < 1.0),
        "cells": len(ratios),
        "wa_reinsertion_max": max(c["reinsertion"]["write_amplification"] for c in cells),
        "wa_fifo_max": max(c["fifo"]["write_amplification"] for c in cells),
    }
    write_json(args.json, {"cells": cells, "figures": figures}, run)
    plot(args.json.replace(".json", ".png"), cells)
    print(run.result_line(figures))


def plot(path, cells):
    plt = pyplot()
    if plt is None:
        return
    fig, ax = plt.subplots(figsize=(8, 4))
    labels = [f"{c['trace']}\n{c['flash_ratio']:.0f}x c{c['churn']}" for c in cells]
    xs = range(len(cells))
    ax.bar([x - 0.2 for x in xs], [c["fifo"]["flash_hit_ratio"] for c in cells], 0.4,
           label="FIFO")
    ax.bar([x + 0.2 for x in xs], [c["reinsertion"]["flash_hit_ratio"] for c in cells], 0.4,
           label="FIFO + reinsertion")
    ax.set_xticks(list(xs))
    ax.set_xticklabels(labels, fontsize=7)
    ax.set_ylabel("flash hit ratio")
    ax.set_title("Flash reclaim on the real traces")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
