"""Load: redis-benchmark against tierkv-server, plain and pipelined, with
zero errors (checked through INFO commandstats and the INCR counter)."""
import csv
import io
import re
import shutil
import subprocess

import pytest

from conftest import RawClient

BENCHMARK = shutil.which("redis-benchmark") or "/usr/bin/redis-benchmark"
TESTS = "ping,set,get,mset,incr"
REQUESTS = 20000


def run_benchmark(port, *extra):
    cmd = [BENCHMARK, "-h", "127.0.0.1", "-p", str(port), "-t", TESTS, "-c", "50",
           "-n", str(REQUESTS), "--csv", *extra]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=True)
    rows = list(csv.DictReader(io.StringIO(out.stdout)))
    return {r["test"]: r for r in rows}, out.stderr


def commandstats(port):
    c = RawClient(port)
    try:
        frame = c.call("INFO", "commandstats").decode()
    finally:
        c.close()
    stats = {}
    for m in re.finditer(r"cmdstat_(\w+):calls=(\d+),usec=\d+,usec_per_call=[\d.]+,"
                         r"rejected_calls=(\d+),failed_calls=(\d+)", frame):
        stats[m.group(1)] = tuple(int(x) for x in m.group(2, 3, 4))
    return stats


@pytest.mark.parametrize("pipeline", [1, 16])
def test_redis_benchmark_without_errors(make_tierkv, pipeline):
    s = make_tierkv("--io-threads", "2")
    rows, stderr = run_benchmark(s.port, "-P", str(pipeline))
    assert "Could not fetch server CONFIG" not in stderr
    for name in ("PING_INLINE", "PING_MBULK", "SET", "GET", "INCR", "MSET (10 keys)"):
        assert name in rows, (name, rows.keys())
        assert float(rows[name]["rps"]) > 1000, rows[name]
    stats = commandstats(s.port)
    for cmd in ("ping", "set", "get", "incr", "mset"):
        calls, rejected, failed = stats[cmd]
        assert calls >= REQUESTS, (cmd, stats[cmd])
        assert rejected == 0 and failed == 0, (cmd, stats[cmd])
    # Every INCR landed on redis-benchmark's one counter key.
    c = RawClient(s.port)
    assert c.call("GET", "counter:__rand_int__") == b"$%d\r\n%d\r\n" % (
        len(str(REQUESTS)), REQUESTS)
    c.close()
