"""The cluster under faults (cluster_nemesis.py): clients through a cluster
client while a nemesis kills (-9) nodes and restarts them within and after
their lease TTL, pauses them past it (SIGSTOP), kills etcd, cuts a node's
link to etcd silently, drains, rebalances, joins nodes and deletes the slot
map. The checker finds no anomaly: no value that was never written, none a
write acknowledged before the read had replaced, none older than a value
already read. Every kind of fault is injected at least once (three times
in the torture run of ten minutes)."""
import pytest

from cluster_nemesis import FAULTS, Op, check, report, run
from conftest import by_tier


def test_the_checker_finds_each_kind_of_anomaly():
    def op(kind, arg, start, end, outcome="ok", reply=None):
        return Op(kind, "k", arg, start, end, outcome, reply)

    base = [op("set", "c0-1", 0, 1), op("set", "c0-2", 2, 3), op("append", "c0-3", 4, 5)]
    assert check(base + [op("get", "", 6, 7, reply=b"c0-2|c0-3")]) == []
    assert check(base + [op("get", "", 1.5, 2.5, reply=b"c0-1")]) == []  # concurrent with c0-2
    assert check(base + [op("get", "", 6, 7)]) == []  # a miss
    stale = check(base + [op("get", "", 6, 7, reply=b"c0-2")])
    assert len(stale) == 1 and "replaced" in stale[0]
    assert "never written" in check(base + [op("get", "", 6, 7, reply=b"c9-9")])[0]
    assert "never written" in check(base + [op("get", "", 6, 7, reply=b"c0-3")])[0]
    deleted = check(base + [op("del", "c0-4", 8, 9), op("get", "", 10, 11, reply=b"c0-2|c0-3")])
    assert len(deleted) == 1
    # An unacknowledged write may land any time: no anomaly to read it late.
    late = [op("set", "c0-1", 0, 1, "unknown"), op("set", "c0-2", 2, 3)]
    assert check(late + [op("get", "", 6, 7, reply=b"c0-1")]) == []
    # Two reads: the second, begun after the first ended, returns older.
    older = [op("set", "c0-1", 0, 1), op("set", "c0-2", 2, 8, "unknown"),
             op("get", "", 3, 4, reply=b"c0-2"), op("get", "", 5, 6, reply=b"c0-1")]
    assert "read before" in check(older)[0]


@pytest.mark.slow
def test_no_fault_loses_an_acknowledged_write_or_serves_an_older_value():
    seconds = by_tier(90, 600)
    lines = []
    summary = run(seconds, seed=36, log=lines.append)
    report(summary, log=lines.append)
    print("\n".join(lines))
    assert summary["anomalies"] == [], "\n".join(lines)
    assert summary["settled"], "\n".join(lines)
    least = by_tier(1, 3)
    assert all(summary["faults"][k] >= least for k in FAULTS), "\n".join(lines)
    ok = summary["outcomes"]
    assert ok[("get", "ok")] > 100 and ok[("set", "ok")] > 100, "\n".join(lines)
