"""The cluster under faults (cluster_nemesis.py): clients through a cluster
client while a nemesis kills (-9) nodes and restarts them within and after
their lease TTL, pauses them past it (SIGSTOP), kills etcd, cuts a node's
link to etcd silently, drains, rebalances, joins nodes and deletes the slot
map. The checker finds no anomaly: no value that was never written, none a
write acknowledged before the read had replaced, none older than a value
already read. Every kind of fault is injected at least once (three times
in the torture run of ten minutes)."""
import json
import threading
import time

import pytest
import redis
from redis.cluster import ClusterNode, RedisCluster

from cluster_nemesis import FAULTS, Op, check, report, run
from cluster_util import SLOTS, Etcd, SlotClient, key_slot, send, slot_map, wait_until
from conftest import by_tier, reply_of
from tcp_proxy import TcpProxy


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


def test_a_slot_just_handed_on_is_asked_while_its_new_owner_lags(make_tierkv):
    """Each node adopts a map through its own watch. A moving slot flips
    while its target B is cut off from etcd: the source A has the new map,
    B still the old one, where A owns the slot, so B answers -MOVED back to
    A. A answers -ASK (not -MOVED) for a lease TTL after the flip, which B
    serves under either map: a cluster client's write lands, on B, and no
    client bounces between the two. Once that window is over A answers
    -MOVED as usual."""
    etcd = Etcd()
    proxies = [TcpProxy(("127.0.0.1", etcd.client_port)) for _ in range(2)]
    ttl = 8
    try:
        a, b = [make_tierkv("--flash-size", "0", "--cluster-enabled", "yes",
                            "--cluster-etcd", p.endpoint, "--cluster-name", "h",
                            "--cluster-lease-ttl", str(ttl), "--cluster-controller", "no")
                for p in proxies]
        ids = [n.client().execute_command("CLUSTER", "MYID").decode() for n in (a, b)]
        members = [(ids[0], "127.0.0.1", a.port), (ids[1], "127.0.0.1", b.port)]
        slot, owners = key_slot("foo"), [0] * SLOTS
        moving = json.loads(slot_map(1, members, owners))
        moving["moving"] = [{"slot": slot, "to": ids[1], "since": 1}]
        etcd.put("/tierkv/h/slotmap", json.dumps(moving))

        def version(node):
            info = node.client().info("cluster")
            return info["cluster_slot_map_version"] if info["cluster_state"] == "ok" else None

        wait_until(lambda: version(a) == 1 and version(b) == 1, what="both on the moving map")
        assert send(b.client(), True, "SET", "foo", "moved")  # as the migrator sends it
        assert reply_of(a.client(), "GET", "foo") == ("error", f"ASK {slot} 127.0.0.1:{b.port}")

        cut_at = time.monotonic()
        proxies[1].drop_all(True)  # B hears nothing more from etcd
        owners[slot] = 1
        etcd.put("/tierkv/h/slotmap", slot_map(2, members, owners))
        wait_until(lambda: version(a) == 2, what="A on the flipped map")
        flipped_at = time.monotonic()
        assert reply_of(a.client(), "SET", "foo", "x") == \
            ("error", f"ASK {slot} 127.0.0.1:{b.port}")
        assert reply_of(b.client(), "GET", "foo") in (
            ("error", f"MOVED {slot} 127.0.0.1:{a.port}"),  # the old map
            ("error", "CLUSTERDOWN The cluster is down"))   # past its lease TTL
        rc = RedisCluster(startup_nodes=[ClusterNode("127.0.0.1", a.port)],
                          decode_responses=True)
        written = False
        try:
            written = rc.set("foo", "written") and rc.get("foo") == "written"
            assert written
        except redis.exceptions.ClusterDownError:
            # B's last map read was at most half a TTL before the cut.
            assert time.monotonic() - cut_at >= ttl / 2, "B down within its lease"
        finally:
            rc.close()
        assert a.client().dbsize() == 0

        wait_until(lambda: reply_of(a.client(), "GET", "foo")
                   == ("error", f"MOVED {slot} 127.0.0.1:{b.port}"), timeout=ttl + 10,
                   what="-MOVED once the handoff window is over")
        assert time.monotonic() - flipped_at >= ttl - 1
        proxies[1].drop_all(False)
        wait_until(lambda: version(b) == 2, timeout=30, what="B back on the newest map")
        assert b.client().get("foo") == (b"written" if written else b"moved")
        assert a.client().dbsize() == 0
    finally:
        for p in proxies:
            p.close()
        etcd.close()


def test_a_slot_starting_to_move_waits_for_a_target_that_lags(make_tierkv):
    """The start of a move, mirrored: A takes the map that moves a slot to B
    while B, cut off from etcd, still has the one where A owns it alone. A
    answers -ASK to B for a key it does not hold; B, whose map does not
    import the slot, answers that client -TRYAGAIN, not -MOVED back to A.
    The client waits and starts again at A instead of bouncing between the
    two, and its write lands on B once B has the map (redis-server answers
    -MOVED here: its importing state is set before the source's)."""
    etcd = Etcd()
    proxies = [TcpProxy(("127.0.0.1", etcd.client_port)) for _ in range(2)]
    try:
        a, b = [make_tierkv("--flash-size", "0", "--cluster-enabled", "yes",
                            "--cluster-etcd", p.endpoint, "--cluster-name", "s",
                            "--cluster-lease-ttl", "8", "--cluster-controller", "no")
                for p in proxies]
        ids = [n.client().execute_command("CLUSTER", "MYID").decode() for n in (a, b)]
        members = [(ids[0], "127.0.0.1", a.port), (ids[1], "127.0.0.1", b.port)]
        slot, owners = key_slot("foo"), [0] * SLOTS
        etcd.put("/tierkv/s/slotmap", slot_map(1, members, owners))

        def version(node):
            info = node.client().info("cluster")
            return info["cluster_slot_map_version"] if info["cluster_state"] == "ok" else None

        wait_until(lambda: version(a) == 1 and version(b) == 1, what="both on the first map")
        proxies[1].drop_all(True)  # B hears nothing more from etcd
        moving = json.loads(slot_map(2, members, owners))
        moving["moving"] = [{"slot": slot, "to": ids[1], "since": 2}]
        etcd.put("/tierkv/s/slotmap", json.dumps(moving))
        wait_until(lambda: version(a) == 2, what="A on the moving map")
        assert reply_of(a.client(), "SET", "foo", "x") == \
            ("error", f"ASK {slot} 127.0.0.1:{b.port}")
        with pytest.raises(redis.exceptions.ResponseError) as refused:
            send(b.client(), True, "SET", "foo", "x")
        assert str(refused.value) in ("TRYAGAIN The slot is not being imported here yet",
                                      "CLUSTERDOWN The cluster is down")  # past its lease
        assert version(b) in (1, None)

        rc, outcome = SlotClient(a.port), {}
        writer = threading.Thread(target=lambda: outcome.update(
            reply=rc.call("foo", "SET", "foo", "written")))
        writer.start()
        time.sleep(1.0)  # the writer meets B's old map for a while
        assert writer.is_alive() and rc.max_hops <= 1, rc.max_hops
        proxies[1].drop_all(False)
        writer.join(timeout=60)
        assert outcome.get("reply") is True
        assert rc.max_hops <= 1, rc.max_hops  # A's -ASK, and no -MOVED back
        rc.close()
        assert version(b) == 2
        assert send(b.client(), True, "GET", "foo") == b"written"  # still moving: ASKING
        assert a.client().dbsize() == 0
    finally:
        for p in proxies:
            p.close()
        etcd.close()
