#!/usr/bin/python3
"""Scan resistance, the seed's shape: memory holds 512 chunks; a hot set of
200 chunks is read 3 times per token while 3000 use-once chunks stream past,
for 10 tokens, under each eviction policy, with USEONCE and without it.

The ideal is that only the first token's hot reads miss (each hot chunk's
first read, from flash; promotion-on-hit admits it then): 1 - 200/6000 =
96.7 %. The goal is a hot-set hit ratio of at least 0.95 of that with
USEONCE under every policy.

Prints a table and RESULT lines; writes bench/results/scan-resistance-<ts>.json
and .png. Build first: cmake --build build --target tierkv-scan-resistance
"""
import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import benchlib  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def plot(rows, path):
    plt = benchlib.pyplot()
    if plt is None:
        return
    policies = sorted({r["policy"] for r in rows})
    fig, ax = plt.subplots(figsize=(6, 3.5))
    width = 0.35
    for j, once in enumerate((True, False)):
        vals = [next(r["hit_ratio"] for r in rows if r["policy"] == p and r["useonce"] == once)
                for p in policies]
        ax.bar([i + (j - 0.5) * width for i in range(len(policies))], vals, width,
               label="USEONCE" if once else "plain reads")
    ax.axhline(rows[0]["ideal"], color="black", linestyle="--", linewidth=0.8, label="ideal")
    ax.set_xticks(range(len(policies)), policies)
    ax.set_ylabel("hot-set hit ratio")
    ax.set_ylim(0, 1.05)
    ax.legend(loc="center right")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--policies", default="s3fifo,lru,clock,sieve")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results"))
    args = benchlib.parse_args_with_quick(ap, {"policies": "s3fifo,lru"})
    run = benchlib.RunRecord("scan-resistance")
    exe = os.path.join(args.build, "bench", "scan-resistance", "tierkv-scan-resistance")
    out = subprocess.run([exe, "--policies", args.policies], check=True, capture_output=True,
                         text=True, timeout=1800).stdout
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    print(f"{'policy':8} {'mode':>9} {'hot hits':>8} {'hit ratio':>9} {'ideal':>6} "
          f"{'of ideal':>8} {'evicted':>8}")
    for r in rows:
        r["of_ideal"] = r["hit_ratio"] / r["ideal"]
        mode = "useonce" if r["useonce"] else "plain"
        print(f"{r['policy']:8} {mode:>9} {r['hot_hits']:8} {r['hit_ratio']:9.4f} "
              f"{r['ideal']:6.4f} {r['of_ideal']:8.3f} {r['evicted_chunks']:8}")
    base = os.path.join(args.out, "scan-resistance")
    benchlib.write_json(base + ".json", {"args": vars(args), "rows": rows}, run)
    plot(rows, base + ".png")
    # The headline: the first policy (the default, s3fifo) reading the scan
    # with USEONCE, against the ideal hit ratio.
    head = next(r for r in rows if r["useonce"])
    print(run.result_line({"ratio": f"{head['of_ideal']:.3f}", "policy": head["policy"],
                           "hit_ratio": f"{head['hit_ratio']:.4f}",
                           "ideal": f"{head['ideal']:.4f}",
                           "worst_of_ideal": f"{min(r['of_ideal'] for r in rows):.3f}"}))


if __name__ == "__main__":
    main()
