"""Miss-ratio curves over the wire (docs/sizing.md): INFO sizing, /metrics
and `tierkv size`.

Contract checked here: with every key sampled (mrc-sample-rate 1) and no
model short of room, every point of both curves is the server's own miss
ratio (first reads only); a DEL makes the next read a miss in the models as
in the server; /metrics has one series per point; `tierkv size` prints the
curves and the sizes for a target, exits 1 when the server keeps no curves
and 2 (one line on stderr) when it cannot reach the server."""
import os
import random
import re
import subprocess
import urllib.request

from conftest import TIERKV_SERVER, free_port, start_tierkv

TIERKV_CLI = os.path.normpath(os.environ.get(
    "TIERKV_CLI", os.path.join(os.path.dirname(TIERKV_SERVER), "..", "cli", "tierkv")))
POINTS = 11


def sizing(client):
    return client.info("sizing")


def points(info, tier):
    out = {}
    for name, value in info.items():
        m = re.fullmatch(rf"mrc_{tier}_([0-9.]+)x", name)
        if m:
            fields = value if isinstance(value, dict) else dict(
                f.split("=") for f in str(value).split(","))
            out[float(m.group(1))] = {k: float(v) for k, v in fields.items()}
    return out


def size_cli(*args):
    return subprocess.run([TIERKV_CLI, "size", *args], capture_output=True, text=True, timeout=30)


def look_aside(client, rng, keys, requests):
    """GET, and SET after a miss: the server's own misses and reads."""
    misses = 0
    for _ in range(requests):
        k = f"k{rng.randrange(keys)}"
        if client.get(k) is None:
            misses += 1
            client.set(k, b"v" * 100)
    return misses


def test_every_point_is_the_servers_miss_ratio_when_nothing_must_go(tmp_path):
    s = start_tierkv(str(tmp_path), ("--mrc-sample-rate", "1", "--mrc-max-bytes", "64mb"))
    try:
        c = s.client()
        misses = look_aside(c, random.Random(5), keys=500, requests=3000)
        info = sizing(c)
        assert info["mrc_enabled"] == 1
        assert info["mrc_sampled_reads"] == 3000
        for tier in ("memory", "tiered"):
            curve = points(info, tier)
            assert len(curve) == POINTS, curve
            for scale, p in curve.items():
                assert abs(p["miss_ratio"] - misses / 3000) < 1e-4, (tier, scale, p, misses)
                assert p["filled"] == 0
                assert p["size_error"] == 0  # every key sampled: sizes are exact
        # A DEL: the next read misses in every model too.
        c.delete("k1")
        assert c.get("k1") is None
        after = points(sizing(c), "memory")
        assert all(abs(p["miss_ratio"] - (misses + 1) / 3001) < 1e-4 for p in after.values())
        port = s.argv[s.argv.index("--metrics-port") + 1]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            text = r.read().decode()
        series = re.findall(r'^tierkv_mrc_miss_ratio\{tier="(\w+)",size_bytes="(\d+)"', text, re.M)
        assert sorted({t for t, _ in series}) == ["memory", "memory_flash"]
        assert len(series) == 2 * POINTS
        assert ("memory", str(512 << 20)) in series  # the 1x point: the configured memory
    finally:
        s.stop()


def test_size_command_shows_the_curves_and_the_size_for_a_target(tmp_path):
    s = start_tierkv(str(tmp_path), ("--mrc-sample-rate", "1", "--mrc-max-bytes", "64mb"))
    try:
        look_aside(s.client(), random.Random(6), keys=200, requests=1000)
        p = size_cli("--server", f"127.0.0.1:{s.port}", "--target", "0.5")
        assert p.returncode == 0, p.stderr
        lines = p.stdout.splitlines()
        assert sum(1 for line in lines if re.match(r"\s+[0-9.]+x\s", line)) == 2 * POINTS
        assert re.search(r"^memory: .* reaches a hit ratio of 0\.500$", p.stdout, re.M), p.stdout
        assert "caution: only 1000 sampled reads" in p.stdout
        assert "no model of the largest size has had to evict" in p.stdout
    finally:
        s.stop()


def test_size_command_failures_say_why_in_one_line(tmp_path):
    p = size_cli("--server", f"127.0.0.1:{free_port()}")
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
    p = size_cli("--target", "1.5")
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
    s = start_tierkv(str(tmp_path), ("--mrc-sample-rate", "0", "--flash-size", "0"))
    try:
        assert sizing(s.client())["mrc_enabled"] == 0
        p = size_cli("--server", f"127.0.0.1:{s.port}")
        assert p.returncode == 1 and "mrc-sample-rate is 0" in p.stderr, p.stderr
        assert len(p.stderr.strip().splitlines()) == 1
    finally:
        s.stop()
