"""tierkv-trace against the anchor figures of the shared traces' README.

Runs the built tierkv-trace binary (env TIERKV_TRACE, default
build/src/cli/tierkv-trace) on every trace in the traces directory (env
TIERKV_TRACES_DIR, default ../shared/traces next to the repository) and checks
its LRU and MIN miss ratios against the README's table, which this test reads
itself rather than trusting the copy compiled into the tool.

The traces are not part of the repository. Without them (a fresh clone with
no ../shared/), the tests that replay them are skipped with the reason
"traces folder missing: ..." naming the path looked at, and the run's summary
says so (conftest.py); the tests of the tool's own behaviour still run.
"""
import json
import os
import re
import subprocess

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TIERKV_TRACE = os.environ.get("TIERKV_TRACE", os.path.join(ROOT, "build", "src", "cli", "tierkv-trace"))
TRACES_DIR = os.path.normpath(
    os.environ.get("TIERKV_TRACES_DIR", os.path.join(ROOT, "..", "shared", "traces")))
TOLERANCE = 0.001
README = os.path.join(TRACES_DIR, "README.md")
# The traces are an external data set (not in the repository): without them
# the tests that replay them are skipped, saying where they were looked for;
# the tests that need only the tool run anyway.
HAVE_TRACES = os.path.isfile(README)
TRACES_MISSING = (f"traces folder missing: no {README} (the shared traces are looked for in "
                  f"../shared/traces next to the repository, or in $TIERKV_TRACES_DIR)")
needs_traces = pytest.mark.skipif(not HAVE_TRACES, reason=TRACES_MISSING)


def readme_anchors():
    """{(trace, fraction): row} from the README's "Anchor numbers" table."""
    anchors = {}
    trace = requests = unique = None
    with open(README, encoding="utf-8") as f:
        for line in f:
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) != 9:
                continue
            size = re.fullmatch(r"(\d+)% = ([\d,]+)", cells[5])
            if not size:
                continue
            if cells[0]:
                trace = cells[0]
                requests = int(cells[1].replace(",", ""))
                unique = int(cells[2].replace(",", ""))
            anchors[(trace, int(size.group(1)) / 100)] = {
                "requests": requests, "unique": unique,
                "capacity": int(size.group(2).replace(",", "")),
                "lru": float(cells[6]), "min": float(cells[7]), "opt": float(cells[8])}
    return anchors


def run_tool(*args, timeout=300):
    return subprocess.run([TIERKV_TRACE, *args], capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    if not HAVE_TRACES:
        pytest.skip(TRACES_MISSING)
    out = tmp_path_factory.mktemp("trace") / "results.json"
    proc = run_tool("--traces-dir", TRACES_DIR, "--policies", "lru", "--json", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    with open(out) as f:
        return json.load(f)


@needs_traces
def test_readme_table_is_parsed():
    anchors = readme_anchors()
    assert len(anchors) == 8
    assert {t for t, _ in anchors} == {"cloudPhysicsIO", "OLTP", "orm-busy", "multi2"}


@needs_traces
def test_every_anchor_is_replayed(results):
    replayed = {(t["name"], s["fraction"]) for t in results["traces"] for s in t["sizes"]}
    assert set(readme_anchors()) <= replayed
    assert results["anchors_hold"] is True


# Without the traces there is nothing to parametrize over: one skipped case
# says so (collection must not fail).
@needs_traces
@pytest.mark.parametrize("key", sorted(readme_anchors()) if HAVE_TRACES else ["no-traces"])
def test_lru_and_min_match_the_readme(results, key):
    trace, fraction = key
    anchor = readme_anchors()[key]
    t = next(t for t in results["traces"] if t["name"] == trace)
    assert t["requests"] == anchor["requests"]
    assert t["unique"] == anchor["unique"]
    s = next(s for s in t["sizes"] if s["fraction"] == fraction)
    assert s["capacity"] == anchor["capacity"]
    lru = s["policies"]["lru"]["miss_ratio"]
    assert abs(lru - anchor["lru"]) <= TOLERANCE, f"{trace} {fraction}: LRU {lru} vs {anchor['lru']}"
    assert abs(s["min"] - anchor["min"]) <= TOLERANCE, f"{trace} {fraction}: MIN {s['min']} vs {anchor['min']}"
    assert abs(s["opt"] - anchor["opt"]) <= TOLERANCE, f"{trace} {fraction}: OPT {s['opt']} vs {anchor['opt']}"
    assert s["opt"] <= s["min"] <= lru


def test_a_figure_off_its_anchor_fails_the_run(tmp_path):
    # A trace named like an anchored one whose LRU figures cannot match.
    (tmp_path / "multi2.trace").write_text("1\n2\n1\n2\n3\n" * 50)
    proc = run_tool("--traces-dir", str(tmp_path), "--policies", "lru")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "MISS" in proc.stdout


@pytest.mark.parametrize("args", [
    ["--trace", "no-such-trace"],
    ["--fractions", "abc"],
    ["--fractions", "0"],
    ["--policies", "fifo"],
    ["--format", "csv"],
    ["--no-such-flag"],
])
def test_bad_input_is_one_line_error(args, tmp_path):
    # A traces directory of its own: the errors are about the input, and the
    # test runs without the shared traces too.
    (tmp_path / "multi2.trace").write_text("1\n2\n1\n")
    proc = run_tool("--traces-dir", str(tmp_path), *args)
    assert proc.returncode != 0
    assert proc.stdout == ""
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


# The online miss-ratio curve (docs/sizing.md) against exact replays through
# the real tier, at the server's defaults (mrc-sample-rate 1, mrc-max-bytes
# 1 MiB, memory a tenth of the unique objects). The goal is 0.03 at every
# size on every trace. cloudPhysicsIO's curve has a cliff: between 0.975x and
# 1.025x of its 8x point (a loop of about 39,000 objects) the exact miss
# ratio falls from 0.55 to 0.43. The few hundred keys the 1 MiB bound lets a
# model of that size sample place its size only within about 9 %, so that
# point may be off by up to the whole fall (issue 41); so may its 2x point.
# Every point must lie within 0.03 of what the exact curve does over the
# point's own size error (tierkv-trace exits 1 otherwise), and a trace with
# no such cliff within 0.03 of the exact point itself.
MRC_TRACES = ["OLTP", "cloudPhysicsIO", "multi2", "orm-busy"]
MRC_CLIFFS = {"cloudPhysicsIO": {"2x", "8x"}}


@needs_traces
@pytest.mark.parametrize("trace", MRC_TRACES)
def test_online_miss_ratio_curve_is_near_the_exact_one(trace):
    p = subprocess.run([TIERKV_TRACE, "--traces-dir", TRACES_DIR, "--trace", trace, "--mrc",
                        "--mrc-tolerance", "0.03"],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, (p.stdout, p.stderr)
    m = re.search(r"RESULT name=mrc-accuracy max_error=([0-9.]+) beyond_size_span=([0-9.]+)",
                  p.stdout)
    assert m and float(m.group(2)) <= 0.03, p.stdout
    rows = re.findall(r"^\s+([0-9.]+x)\s+\d+\s+[0-9.]+\s+[0-9.]+\s+([0-9.]+)", p.stdout, re.M)
    assert len(rows) == 11, p.stdout
    for scale, error in rows:
        if scale not in MRC_CLIFFS.get(trace, set()):
            assert float(error) <= 0.03, (scale, p.stdout)
