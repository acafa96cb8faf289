#!/usr/bin/python3
"""tierkv-server against redis-server, same redis-benchmark runs on both.

Starts redis-server (no persistence, maxmemory = the same budget,
allkeys-lru) and one tierkv-server per --io-threads value (default 1 and
2, the server's default) on free loopback ports, runs redis-benchmark
SET/GET at several value sizes against each (alternating, so background
load hits all alike; three rounds, each server's median round counts),
then pipelined
MULTI/SET/GET/EXEC transactions from a small client of our own (redis-benchmark
has no transaction test), and prints ops/s, p50 and p99 for both with the
ratio ours/redis per io-threads setting. Writes bench/results/vs-redis.json
and vs-redis.png; the last line is `RESULT name=vs-redis ratio=<min ratio>
...` with the worst and geometric-mean ratio per setting.

  /usr/bin/python3 bench/vs-redis/run.py [--server PATH] [--memory 1gb]
      [--io-threads 1,2] [--quick] [--tls]

With --tls both servers also listen for TLS (same certificate, made with
the openssl CLI, mutual TLS as Redis defaults to), redis-benchmark runs
over it, the MULTI/EXEC rows are left out, and the bound is `openssl
speed` of the negotiated cipher (AES-256-GCM) on one core, measured in
the same run; the result is named vs-redis-tls.
"""
import argparse
import os
import shutil
import subprocess
import sys
import socket
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchlib import (RunRecord, free_port, pyplot, redis_benchmark, resp, wait_for_port,  # noqa: E402
                      wait_loaded, write_json)

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
from tls_util import Certs  # noqa: E402  (the tests' certificates, one copy)
REDIS = shutil.which("redis-server") or "/usr/bin/redis-server"

# name, value bytes, clients, pipeline, requests per test (SET and GET each)
# (1 MiB and 32 MiB move 4-5 GiB per test, so that one test lasts seconds,
# not the half second in which a scheduler hiccup decides the ratio.)
ROWS = [
    ("100B -P16", 100, 50, 16, 400_000),
    ("4KiB", 4096, 50, 1, 60_000),
    ("1MiB", 1 << 20, 4, 1, 4_000),
    ("32MiB", 32 << 20, 2, 1, 128),
]


def start(argv, port, workdir):
    log = open(os.path.join(workdir, "server.log"), "wb")
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=workdir)
    wait_for_port(port, proc)
    wait_loaded(port, proc)
    return proc, log


def stop(proc, log):
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    log.close()


TLS_ARGS = []  # redis-benchmark's --tls options, with --tls


def benchmark(port, size, clients, pipeline, requests):
    result = {}
    for row in redis_benchmark(port, "set,get", size, clients, pipeline, requests,
                               TLS_ARGS):
        result[row["test"]] = {
            "ops": float(row["rps"]),
            "p50_ms": float(row["p50_latency_ms"]),
            "p99_ms": float(row["p99_latency_ms"]),
        }
    return result


def txn_benchmark(port, clients, batch, requests, size=100):
    """MULTI / SET / GET / EXEC transactions, `batch` of them pipelined per
    round trip, from `clients` connections (threads; the sockets release
    the GIL). The replies are fixed, so a round is done when its bytes are
    in. ops = transactions/s; p50/p99 = one round trip."""
    value = b"v" * size
    rounds = max(1, requests // (clients * batch))
    latencies = []
    lock = threading.Lock()

    def client(i):
        key = f"txn:{i}"
        one = resp("MULTI") + resp("SET", key, value) + resp("GET", key) + resp("EXEC")
        reply = b"+OK\r\n+QUEUED\r\n+QUEUED\r\n*2\r\n+OK\r\n$%d\r\n%s\r\n" % (size, value)
        send, want = one * batch, len(reply) * batch
        mine = []
        with socket.create_connection(("127.0.0.1", port)) as sock:
            buf = bytearray(want)
            for _ in range(rounds):
                t0 = time.perf_counter()
                sock.sendall(send)
                got = 0
                view = memoryview(buf)
                while got < want:
                    n = sock.recv_into(view[got:], want - got)
                    if n == 0:
                        raise RuntimeError("connection closed")
                    got += n
                mine.append(time.perf_counter() - t0)
            if bytes(buf[:len(reply)]) != reply:
                raise RuntimeError(f"unexpected reply {bytes(buf[:80])!r}")
        with lock:
            latencies.extend(mine)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - started
    latencies.sort()
    return {"ops": rounds * clients * batch / elapsed,
            "p50_ms": latencies[len(latencies) // 2] * 1000,
            "p99_ms": latencies[int(len(latencies) * 0.99)] * 1000}


# name, clients, transactions pipelined per round trip, transactions
TXN_ROWS = [("MULTI/EXEC -P32", 8, 32, 200_000)]


def cipher_bound():
    """What one core encrypts with TLS 1.3's default cipher: the ceiling of
    a single-threaded server's TLS throughput on this machine."""
    out = subprocess.run(["openssl", "speed", "-evp", "aes-256-gcm", "-seconds", "2", "-bytes",
                          "16384"], capture_output=True, text=True, timeout=120, check=True)
    # The last line: "AES-256-GCM  <n>k" (1000s of bytes per second).
    last = [line for line in out.stdout.splitlines() if line.strip()][-1]
    return {"aes_256_gcm_mb_s": float(last.split()[-1].rstrip("k")) / 1000}


def result_row(name, size, clients, pipeline, requests, threads, ours, theirs):
    return {"row": name, "io_threads": threads, "value_bytes": size, "clients": clients,
            "pipeline": pipeline, "requests": requests, "tierkv": ours, "redis": theirs,
            "ratio": ours["ops"] / theirs["ops"] if theirs["ops"] else 0.0}


def median_of(samples):
    """The median ops/s, p50 and p99 of several rounds (each its own median),
    with the rounds' ops/s kept for the spread."""
    out = {}
    for field in ("ops", "p50_ms", "p99_ms"):
        values = sorted(x[field] for x in samples)
        out[field] = values[len(values) // 2]
    out["ops_rounds"] = [x["ops"] for x in samples]
    return out


def run_rows(args, redis_port, ours_ports):
    """Every row, `rounds` times over: redis, then each tierkv setting, in
    turn, so that a burst of background load hits every server alike; each
    server's figure is its median round."""
    results = []
    rounds = max(1, args.rounds)
    for name, size, clients, pipeline, requests in ([] if args.txn_only else ROWS):
        if args.quick:
            requests = max(requests // 10, clients * 2)
        runs = {"redis": []}
        for _ in range(rounds):
            runs["redis"].append(benchmark(redis_port, size, clients, pipeline, requests))
            for threads, port in ours_ports:
                runs.setdefault(threads, []).append(
                    benchmark(port, size, clients, pipeline, requests))
        for test in ("SET", "GET"):
            theirs = median_of([r[test] for r in runs["redis"]])
            for threads, _ in ours_ports:
                ours = median_of([r[test] for r in runs[threads]])
                results.append(result_row(f"{test} {name}", size, clients, pipeline, requests,
                                          threads, ours, theirs))
    for name, clients, batch, requests in ([] if args.tls else TXN_ROWS):
        if args.quick:
            requests //= 10
        runs = {"redis": []}
        for _ in range(rounds):
            runs["redis"].append(txn_benchmark(redis_port, clients, batch, requests))
            for threads, port in ours_ports:
                runs.setdefault(threads, []).append(txn_benchmark(port, clients, batch, requests))
        theirs = median_of(runs["redis"])
        for threads, _ in ours_ports:
            results.append(result_row(name, 100, clients, batch, requests, threads,
                                      median_of(runs[threads]), theirs))
    return results


def print_table(results):
    header = (f"{'row':<16} {'io':>3} {'tierkv ops/s':>13} {'p50 ms':>8} {'p99 ms':>8}   "
              f"{'redis ops/s':>12} {'p50 ms':>8} {'p99 ms':>8}   {'ratio':>6}")
    print(header)
    print("-" * len(header))
    for r in results:
        o, t = r["tierkv"], r["redis"]
        print(f"{r['row']:<16} {r['io_threads']:>3} {o['ops']:>13,.0f} {o['p50_ms']:>8.3f} "
              f"{o['p99_ms']:>8.3f}   {t['ops']:>12,.0f} {t['p50_ms']:>8.3f} "
              f"{t['p99_ms']:>8.3f}   {r['ratio']:>6.2f}")


def plot(results, settings, path):
    plt = pyplot()
    if plt is None:
        return
    rows = list(dict.fromkeys(r["row"] for r in results))
    fig, ax = plt.subplots(figsize=(9, 4.5))
    width = 0.8 / len(settings)
    for k, threads in enumerate(settings):
        ratios = [next(r["ratio"] for r in results if r["row"] == row and r["io_threads"] == threads)
                  for row in rows]
        ax.bar([i + k * width for i in range(len(rows))], ratios, width,
               label=f"--io-threads {threads}")
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks([i + width * (len(settings) - 1) / 2 for i in range(len(rows))])
    ax.set_xticklabels(rows, rotation=30, ha="right")
    ax.set_ylabel("tierkv ops/s ÷ redis ops/s")
    ax.set_title("tierkv against redis-server, same redis-benchmark runs")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"plot: {path}")


def summary(results, settings):
    """The RESULT figures: the worst row's ratio overall and per setting, and
    the geometric mean per setting."""
    figures = {"ratio": f"{min(r['ratio'] for r in results):.3f}"}
    for threads in settings:
        mine = [r for r in results if r["io_threads"] == threads]
        worst = min(mine, key=lambda r: r["ratio"])
        geo = 1.0
        for r in mine:
            geo *= r["ratio"]
        geo **= 1.0 / len(mine)
        figures[f"ratio_io{threads}"] = f"{worst['ratio']:.3f}"
        figures[f"worst_row_io{threads}"] = f"\"{worst['row']}\""
        figures[f"geomean_io{threads}"] = f"{geo:.3f}"
    return figures


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", default=os.environ.get(
        "TIERKV_SERVER", os.path.join(ROOT, "build", "src", "server", "tierkv-server")))
    ap.add_argument("--memory", default="1gb")
    ap.add_argument("--io-threads", default="1,2",
                    help="comma-separated: one tierkv-server per value (2 is the default)")
    ap.add_argument("--quick", action="store_true", help="a tenth of the requests, one round")
    ap.add_argument("--rounds", type=int, default=3,
                    help="rounds per row (each server's median round counts)")
    ap.add_argument("--txn-only", action="store_true", help="only the MULTI/EXEC rows")
    ap.add_argument("--tls", action="store_true", help="over TLS (see above)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    name = "vs-redis-tls" if args.tls else "vs-redis"
    args.out = args.out or os.path.join(ROOT, "bench", "results", f"{name}.json")
    run = RunRecord(name)
    args.server = os.path.abspath(args.server)
    if args.quick:
        args.rounds = 1
    settings = [t.strip() for t in args.io_threads.split(",") if t.strip()]

    work = tempfile.mkdtemp(prefix="vs-redis-")
    redis_port = free_port()
    redis_argv = [REDIS, "--port", str(redis_port), "--bind", "127.0.0.1", "--save", "",
                  "--appendonly", "no", "--maxmemory", args.memory,
                  "--maxmemory-policy", "allkeys-lru", "--dir", work]
    tls_ports, bound = {}, {}
    if args.tls:
        os.makedirs(os.path.join(work, "certs"))
        certs = Certs(os.path.join(work, "certs"))
        TLS_ARGS[:] = ["--tls", "--cacert", certs.path("ca.crt"), "--cert",
                       certs.path("client.crt"), "--key", certs.path("client.key")]
        tls_ports = {"redis": free_port()}
        redis_argv += ["--tls-port", str(tls_ports["redis"]), *certs.server_args()]
        bound = cipher_bound()
    servers = []
    started = time.time()
    try:
        servers.append(start(redis_argv, redis_port, work))
        ours_ports = []
        for threads in settings:
            port = free_port()
            ours_dir = os.path.join(work, f"tierkv-io{threads}")
            os.makedirs(ours_dir)
            tls = []
            if args.tls:
                tls_ports[threads] = free_port()
                tls = ["--tls-port", str(tls_ports[threads]), *certs.server_args()]
            servers.append(start([args.server, "--port", str(port), "--bind", "127.0.0.1",
                                  "--memory", args.memory, "--io-threads", threads,
                                  "--metrics-port", "0", "--log-level", "warn", *tls],
                                 port, ours_dir))
            ours_ports.append((threads, tls_ports.get(threads, port)))
        results = run_rows(args, tls_ports.get("redis", redis_port), ours_ports)
    finally:
        for proc, log in reversed(servers):
            stop(proc, log)
        shutil.rmtree(work, ignore_errors=True)

    print_table(results)
    if bound:
        print(f"bound: openssl speed, AES-256-GCM, one core, 16 KiB blocks: "
              f"{bound['aes_256_gcm_mb_s']:.0f} MB/s")
    write_json(args.out, {"memory": args.memory, "io_threads": settings, "tls": args.tls,
                          "bound": bound, "rounds": args.rounds, "rows": results}, run)
    plot(results, settings, os.path.splitext(args.out)[0] + ".png")
    extra = {"cipher_mb_s": f"{bound['aes_256_gcm_mb_s']:.0f}"} if bound else {}
    print(run.result_line({**summary(results, settings), **extra, "rows": len(results),
                           "seconds": f"{time.time() - started:.0f}"}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
