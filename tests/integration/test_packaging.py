"""tierkv-server's command line (--version, --help, bad flags) and the files
in packaging/: the example configuration loads, and a server started from
it with every line uncommented runs with the defaults; the Prometheus rules
pass promtool's check and their unit tests; the Grafana dashboard loads
and names only series a server exports."""
import json
import os
import re
import shutil
import subprocess
import urllib.request

from conftest import ROOT, TIERKV_SERVER, start_tierkv

EXAMPLE = os.path.join(ROOT, "packaging", "tierkv.toml")


def run(*args):
    return subprocess.run([TIERKV_SERVER, *args], capture_output=True, text=True, timeout=30)


def test_version_prints_and_exits_zero():
    p = run("--version")
    assert p.returncode == 0
    assert re.fullmatch(r"tierkv-server \d+\.\d+\.\d+ \(Redis 7\.0\.\d+ compatible\)\n", p.stdout)


def test_help_shows_units():
    p = run("--help")
    assert p.returncode == 0
    assert "--memory" in p.stdout and "(default 1gb)" in p.stdout
    assert "(default 2s)" in p.stdout  # offload-wait-ms
    assert "1073741824" not in p.stdout


def test_bad_flags_exit_nonzero_with_one_line():
    for args in (("--bogus",), ("--memory", "lots"), ("--lease-ttl-ms", "10x")):
        p = run(*args)
        assert p.returncode != 0, args
        assert len(p.stderr.strip().splitlines()) == 1, (args, p.stderr)


def test_example_config_is_what_the_server_prints():
    with open(EXAMPLE) as f:
        assert f.read() == run("--print-example-config").stdout


def test_server_runs_from_the_uncommented_example(tmp_path):
    lines = []
    with open(EXAMPLE) as f:
        for line in f:
            m = re.match(r"# ([a-z0-9-]+) = (.*)$", line)
            if m:
                lines.append(f"{m.group(1)} = {m.group(2)}\n")
    assert len(lines) > 40
    config = tmp_path / "tierkv.toml"
    config.write_text("".join(lines))
    # The flags override the file (ports, a small memory-only store).
    s = start_tierkv(str(tmp_path), ("--config", str(config), "--flash-size", "0"))
    try:
        c = s.client()
        assert c.config_get("lease-ttl-ms") == {"lease-ttl-ms": "10000"}
        assert c.config_get("slowlog-max-len") == {"slowlog-max-len": "128"}
        assert c.set("k", "v") and c.get("k") == b"v"
    finally:
        s.stop()


DASHBOARD = os.path.join(ROOT, "packaging", "grafana", "tierkv.json")
RULES_DIR = os.path.join(ROOT, "packaging", "prometheus")
# Series only a cluster node exports (render_cluster in http_metrics.cc).
CLUSTER_SOURCE = os.path.join(ROOT, "src", "server", "observe", "http_metrics.cc")


def series_named(text):
    """The tierkv_ series a PromQL text names (not recording rules, which
    have a colon)."""
    return {m for m in re.findall(r"(?<![:\w])tierkv_[a-z0-9_]+", text)}


def exported_series(tmp_path):
    """What a server with flash exports on /metrics, summaries' parts too."""
    s = start_tierkv(str(tmp_path))
    try:
        port = s.argv[s.argv.index("--metrics-port") + 1]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            text = r.read().decode()
    finally:
        s.stop()
    return {line.split("{")[0].split()[0] for line in text.splitlines()
            if line and not line.startswith("#")}


def test_prometheus_rules_load_and_their_unit_tests_pass():
    promtool = shutil.which("promtool")
    assert promtool, "promtool is missing: Debian's prometheus package (scripts/install-deps.sh)"
    for args in (("check", "rules", "tierkv-rules.yml"), ("test", "rules", "tierkv-rules.test.yml")):
        p = subprocess.run([promtool, *args], cwd=RULES_DIR, capture_output=True, text=True,
                           timeout=60)
        assert p.returncode == 0, (args, p.stdout, p.stderr)


def test_dashboard_loads_and_names_only_series_the_server_exports(tmp_path):
    with open(DASHBOARD) as f:
        d = json.load(f)
    assert d["title"] == "tierkv" and d["uid"] and isinstance(d["schemaVersion"], int)
    ids, exprs = set(), []
    for p in d["panels"]:
        assert p["id"] not in ids, p["id"]
        ids.add(p["id"])
        assert p["type"] and p["title"] and p["datasource"]["type"] == "prometheus", p
        g = p["gridPos"]
        assert all(isinstance(g[k], int) for k in "xywh") and g["x"] + g["w"] <= 24, p["title"]
        assert p["targets"], p["title"]
        for t in p["targets"]:
            assert t["refId"] and t["expr"], p["title"]
            exprs.append(t["expr"])
    titles = " ".join(p["title"].lower() for p in d["panels"])
    for topic in ("hit ratio", "memory", "flash", "prefetch", "write amplification", "latency",
                  "cluster", "miss ratio"):
        assert topic in titles, topic
    with open(os.path.join(RULES_DIR, "tierkv-rules.yml")) as f:
        exprs.append(f.read())
    named = set().union(*(series_named(e) for e in exprs))
    exported = exported_series(tmp_path)
    with open(CLUSTER_SOURCE) as f:
        cluster_only = series_named(f.read())
    unknown = sorted(n for n in named if n not in exported and n not in cluster_only)
    assert not unknown, f"the dashboard or rules name series no server exports: {unknown}"
