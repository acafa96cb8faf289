"""A Jepsen-style fault run of a tierkv cluster on loopback.

Clients run SET, GET, DEL, APPEND and PEXPIRE on a few hundred keys through
a cluster client that follows -MOVED, -ASK and -TRYAGAIN, and record each
operation with its start, end and outcome. Meanwhile a nemesis injects, one
at a time and at random, every fault an operator or the machine can cause:

  kill9-fast   kill -9 of a node, restarted within its lease TTL
  kill9-slow   kill -9 of a node, restarted after its lease TTL
  pause        SIGSTOP of a node past its lease TTL, then SIGCONT
  etcd         etcd killed and restarted
  partition    a node's link to etcd drops traffic silently (no RST),
               past its lease TTL, then carries it again
  drain        a node drained (its slots move off), later rebalanced
  join         a new node joins (its share moves to it); at the most
               nodes, one is retired first (drained, then stopped)
  mapdel       the slot map deleted from etcd

Then it heals everything, lets the cluster settle, reads every key once
more, and checks the history. A cache may answer a miss; it may never
return a value that was never written, one whose write an acknowledged
write (a DEL included) had superseded before the read began, or one older
than a value another read had already returned before it began.

Nodes write with flash-fsync always: an acknowledged write survives a kill.

    /usr/bin/python3 tests/integration/cluster_nemesis.py --seconds 600

prints the operations, the faults of each kind and the anomalies, and ends
with one line: RESULT name=cluster_faults ops=... faults=... anomalies=...
"""
import argparse
import bisect
import collections
import os
import random
import shutil
import signal
import sys
import tempfile
import threading
import time

import redis

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster_util import SLOTS, Etcd, key_slot, send  # noqa: E402
from conftest import start_tierkv  # noqa: E402
from tcp_proxy import TcpProxy  # noqa: E402

TTL = 2  # s, the nodes' lease
NAME = "nem"
INF = float("inf")
FAULTS = ("kill9-fast", "kill9-slow", "pause", "etcd", "partition", "drain", "join", "mapdel")


class Node:
    """A tierkv node reaching etcd through its own proxy; restarts keep its
    ports, files and so its id."""

    def __init__(self, etcd, extra):
        self.proxy = TcpProxy(("127.0.0.1", etcd.client_port))
        self.dir = tempfile.mkdtemp(prefix="tierkv-nemesis-")
        self.server = start_tierkv(self.dir, [
            "--memory", "64mb", "--flash-fsync", "always", "--cluster-enabled", "yes",
            "--cluster-etcd", self.proxy.endpoint, "--cluster-name", NAME,
            "--cluster-lease-ttl", str(TTL), "--cluster-migrate-batch-keys", "16", *extra])
        self.port = self.server.port
        self.id = redis.Redis(port=self.port).execute_command("CLUSTER", "MYID").decode()
        self.paused = False

    def alive(self):
        return self.server.proc.poll() is None

    def info(self):
        return redis.Redis(port=self.port, socket_timeout=2).info("cluster")

    def close(self, keep_files=False):
        if self.paused:
            os.kill(self.server.proc.pid, signal.SIGCONT)
        self.server.stop()
        self.proxy.close()
        if not keep_files:
            shutil.rmtree(self.dir, ignore_errors=True)


class Client:
    """Follows the cluster protocol, retrying what did not run (redirections,
    TRYAGAIN, CLUSTERDOWN, a refused connection before a read) until its
    deadline. A write whose connection failed is not sent again: its outcome
    is unknown, and a second APPEND would apply twice."""

    def __init__(self, ports):
        self.ports = ports  # shared list of the nodes' ports
        self.conns = {}
        self.slots = [None] * SLOTS

    def conn(self, port):
        if port not in self.conns:
            self.conns[port] = redis.Redis(port=port, socket_timeout=2, socket_connect_timeout=1)
        return self.conns[port]

    def refresh(self):
        for port in random.sample(list(self.ports), len(self.ports)):
            try:
                table = self.conn(port).execute_command("CLUSTER", "SLOTS")
            except (redis.RedisError, OSError):
                continue
            for first, last, primary, *_ in table:
                for s in range(first, last + 1):
                    self.slots[s] = primary[1]
            return

    def call(self, key, write, *args, deadline_s=4.0):
        """("ok", reply), ("error", text) if it surely did not run, or
        ("unknown", text) for a write that may have. self.path: the nodes
        the last call was sent to, in order ("A" after one asked with
        ASKING)."""
        slot = key_slot(key)
        port, asking = self.slots[slot], False
        deadline = time.time() + deadline_s
        last = "no attempt"
        self.path = []
        while time.time() < deadline:
            if port is None:
                self.refresh()
                port = self.slots[slot] or random.choice(list(self.ports))
            self.path.append(f"{port}{'A' if asking else ''}")
            try:
                return "ok", send(self.conn(port), asking, *args)
            except redis.exceptions.ResponseError as e:
                last = str(e)
                kind, *rest = last.split(" ")
                if kind in ("MOVED", "ASK"):
                    port, asking = int(rest[1].rsplit(":", 1)[1]), kind == "ASK"
                    if kind == "MOVED":
                        self.slots[slot] = port
                    continue
                if kind in ("TRYAGAIN", "CLUSTERDOWN", "LOADING"):
                    time.sleep(0.05)
                    port, asking = None, False
                    continue
                return "error", last
            except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError) as e:
                last = str(e)
                self.conns.pop(port, None)
                if write:
                    return "unknown", last
                time.sleep(0.05)
                port, asking = None, False
        return ("unknown" if write else "error"), "deadline: " + last


Op = collections.namedtuple("Op", "kind key arg start end outcome reply path",
                            defaults=("",))


def client_loop(cid, ports, keys, stop, history, seed):
    rng = random.Random(seed)
    c = Client(ports)
    c.refresh()
    seq = 0
    while not stop.is_set():
        key = rng.choice(keys)
        r = rng.random()
        seq += 1
        tag = f"c{cid}-{seq}"
        if r < 0.35:
            kind, args, write = "set", ("SET", key, tag), True
        elif r < 0.70:
            kind, args, write = "get", ("GET", key), False
        elif r < 0.80:
            kind, args, write = "del", ("DEL", key), True
        elif r < 0.92:
            kind, args, write = "append", ("APPEND", key, "|" + tag), True
        else:
            kind, args, write = "pexpire", ("PEXPIRE", key, 600_000), True
        start = time.monotonic()
        outcome, reply = c.call(key, write, *args)
        end = time.monotonic()
        history.append(Op(kind, key, tag, start, end, outcome, reply, ">".join(c.path)))


class Nemesis:
    def __init__(self, etcd, nodes, ports, rng, log, max_nodes, retired):
        self.etcd, self.nodes, self.ports, self.rng, self.log = etcd, nodes, ports, rng, log
        self.retired = retired  # drained and stopped; their files go at the end
        self.max_nodes = max_nodes
        self.counts = collections.Counter()
        self.draining = None

    def wait(self, seconds, stop):
        stop.wait(seconds)

    def act(self, kind, stop):
        self.counts[kind] += 1
        self.log(f"nemesis: {kind} at {time.monotonic():.3f}")
        live = [n for n in self.nodes if n.alive() and not n.paused]
        victim = self.rng.choice(live)
        if kind == "kill9-fast":
            victim.server.restart(kill=True)
        elif kind == "kill9-slow":
            victim.server.proc.kill()
            victim.server.proc.wait()
            self.wait(TTL + 1.5, stop)
            victim.server.restart()
        elif kind == "pause":
            os.kill(victim.server.proc.pid, signal.SIGSTOP)
            victim.paused = True
            self.wait(TTL + 1.5, stop)
            os.kill(victim.server.proc.pid, signal.SIGCONT)
            victim.paused = False
        elif kind == "etcd":
            self.etcd.stop()
            self.wait(self.rng.uniform(0.5, TTL + 1), stop)
            self.etcd.start()
        elif kind == "partition":
            victim.proxy.drop_all(True)
            self.wait(TTL + 1.5, stop)
            victim.proxy.drop_all(False)
        elif kind == "drain":
            if self.draining is None:
                self.draining = victim.id
                self.etcd.put(f"/tierkv/{NAME}/drain/{victim.id}", "")
            else:
                self.etcd.delete_prefix(f"/tierkv/{NAME}/drain/")
                self.draining = None
        elif kind == "join":
            if len(self.nodes) >= self.max_nodes:
                self.decommission(stop)
            node = Node(self.etcd, [])
            self.nodes.append(node)
            self.ports.append(node.port)
        elif kind == "mapdel":
            self.etcd.delete(f"/tierkv/{NAME}/slotmap")

    def decommission(self, stop):
        """As an operator retires a node: drain it, then stop it for good."""
        node = self.rng.choice([n for n in self.nodes if n.alive() and not n.paused])
        self.etcd.delete_prefix(f"/tierkv/{NAME}/drain/")
        self.etcd.put(f"/tierkv/{NAME}/drain/{node.id}", "")
        deadline = time.time() + 60
        while time.time() < deadline and not stop.is_set():
            try:
                i = node.info()
                if i.get("cluster_slots_owned", 1) == 0 and i.get("cluster_slots_migrating_out",
                                                                   1) == 0:
                    break
            except (redis.RedisError, OSError):
                pass
            time.sleep(0.2)
        self.nodes.remove(node)
        self.ports.remove(node.port)
        node.close(keep_files=True)
        self.retired.append(node)
        self.etcd.delete_prefix(f"/tierkv/{NAME}/drain/")
        self.draining = None

    def run(self, stop):
        while not stop.is_set():
            self.wait(self.rng.uniform(1.0, 3.0), stop)
            if stop.is_set():
                return
            # The rarest kind first half of the time: every kind comes up.
            least = min(FAULTS, key=lambda k: self.counts[k])
            self.act(least if self.rng.random() < 0.5 else self.rng.choice(FAULTS), stop)


def heal(etcd, nodes, log):
    """Every node running, reachable, undrained; True once the map settled
    (every slot owned, none moving, every node up)."""
    if etcd.proc.poll() is not None:
        etcd.start()
    etcd.delete_prefix(f"/tierkv/{NAME}/drain/")
    for n in nodes:
        n.proxy.drop_all(False)
        if n.paused:
            os.kill(n.server.proc.pid, signal.SIGCONT)
            n.paused = False
        if not n.alive():
            n.server.restart()
    deadline = time.time() + 180
    while time.time() < deadline:
        try:
            infos = [n.info() for n in nodes]
            owned = sum(i.get("cluster_slots_owned", 0) for i in infos)
            moving = sum(i.get("cluster_slots_migrating_out", 1) for i in infos)
            if owned == SLOTS and moving == 0 and all(i["cluster_state"] == "ok" for i in infos):
                return True
        except (redis.RedisError, OSError):
            pass
        time.sleep(0.2)
    log("heal: the cluster did not settle")
    return False


def parse(value):
    """A value as (base, [suffixes]): "c1-5|c2-9" -> ("c1-5", ["c2-9"])."""
    parts = value.split("|")
    return parts[0], parts[1:]


def check(history):
    """The anomalies of a history (a list of strings, empty if none)."""
    anomalies = []
    by_key = collections.defaultdict(list)
    for op in history:
        by_key[op.key].append(op)
    for key, ops in by_key.items():
        writes = {}  # tag -> (kind, start, end)
        superseding = []  # (start, end) of acknowledged writes, DEL included
        for op in ops:
            if op.kind in ("set", "append", "del") and op.outcome in ("ok", "unknown"):
                end = op.end if op.outcome == "ok" else INF
                if op.kind != "del":
                    writes[op.arg] = (op.kind, op.start, end)
                if op.outcome == "ok":
                    superseding.append((op.start, op.end))
        reads = [op for op in ops if op.kind == "get" and op.outcome == "ok" and op.reply]
        # Both bounds as prefix maxima over end times, for a binary search:
        # a long run has thousands of operations per key.
        newest_write = Latest(superseding)
        seen = []  # (end of a read, start of the write it returned)
        for r in reads:
            base, suffixes = parse(r.reply.decode())
            made = [("set", base)] if base else []
            made += [("append", s) for s in suffixes]
            if not made or any(writes.get(t, (None,))[0] != k for k, t in made):
                anomalies.append(f"{key}: read {r.reply!r}, which was never written")
                continue
            _, w_start, w_end = writes[made[-1][1]]
            if w_end < newest_write.before(r.start):
                anomalies.append(f"{key}: read {r.reply!r} after an acknowledged write had "
                                 f"replaced it")
            seen.append((r, w_start, w_end))
        newest_read = Latest([(r.end, w_start) for r, w_start, _ in seen], by_first=True)
        for r, _, w_end in seen:
            if w_end < newest_read.before(r.start):
                anomalies.append(f"{key}: read {r.reply!r}, older than a value read before")
    return anomalies


class Latest:
    """Of (start, end) intervals: the latest start among those that ended
    before a time, by binary search over a prefix maximum. `by_first`: the
    pairs are (end, start) instead."""

    def __init__(self, pairs, by_first=False):
        items = sorted(((a, b) if by_first else (b, a)) for a, b in pairs)
        self.ends = [end for end, _ in items]
        self.best = []
        for _, start in items:
            self.best.append(max(start, self.best[-1]) if self.best else start)

    def before(self, t):
        i = bisect.bisect_left(self.ends, t)
        return self.best[i - 1] if i > 0 else -INF


def run(seconds, seed=36, clients=3, n_keys=300, max_nodes=4, log=print):
    """Runs the load and the nemesis for `seconds`; returns a summary dict."""
    rng = random.Random(seed)
    etcd = Etcd()
    nodes, retired = [], []
    anomalies = []
    log(f"monotonic {time.monotonic():.3f} is unix time {time.time():.3f}")
    try:
        nodes = [Node(etcd, []) for _ in range(3)]
        ports = [n.port for n in nodes]
        assert heal(etcd, nodes, log), "three fresh nodes did not settle"
        keys = [f"k{i}" for i in range(n_keys)]
        history, stop = [], threading.Event()
        threads = [threading.Thread(target=client_loop,
                                    args=(i, ports, keys, stop, history, seed * 100 + i))
                   for i in range(clients)]
        for t in threads:
            t.start()
        nemesis = Nemesis(etcd, nodes, ports, rng, log, max_nodes, retired)
        faults = threading.Thread(target=nemesis.run, args=(stop,))
        faults.start()
        stop.wait(seconds)
        stop.set()
        faults.join()
        for t in threads:
            t.join()
        settled = heal(etcd, nodes, log)
        final = Client(ports)
        final.refresh()
        for k in keys:
            start = time.monotonic()
            outcome, reply = final.call(k, False, "GET", k, deadline_s=10 if settled else 0.5)
            history.append(Op("get", k, "", start, time.monotonic(), outcome, reply))
        anomalies = check(history)
        outcomes = collections.Counter((op.kind, op.outcome) for op in history)
        outcomes[("get", "hit")] = sum(1 for op in history
                                       if op.kind == "get" and op.outcome == "ok" and op.reply)
        return {"ops": len(history), "outcomes": outcomes, "faults": nemesis.counts,
                "anomalies": anomalies, "settled": settled,
                "history": history if anomalies else None}
    finally:
        # After an anomaly the nodes' logs stay, for the story behind it.
        for n in nodes:
            n.close(keep_files=True)
        for n in nodes + retired:
            if anomalies:
                log(f"node {n.port} ({n.id}): files kept in {n.dir}")
            else:
                shutil.rmtree(n.dir, ignore_errors=True)
        etcd.close()


def report(summary, log=print):
    log(f"{'operation':<10} {'ok':>8} {'error':>8} {'unknown':>8}")
    for kind in ("set", "get", "del", "append", "pexpire"):
        o = summary["outcomes"]
        log(f"{kind:<10} {o[(kind, 'ok')]:>8} {o[(kind, 'error')]:>8} {o[(kind, 'unknown')]:>8}")
    log(f"reads that found a value: {summary['outcomes'][('get', 'hit')]}")
    log("faults: " + ", ".join(f"{k} {summary['faults'][k]}" for k in FAULTS))
    for a in summary["anomalies"][:20]:
        log("anomaly: " + a)
    if summary["anomalies"] and summary.get("history"):
        key = summary["anomalies"][0].split(":")[0]
        log(f"history of {key} (start end kind arg outcome reply nodes), from the first fault:")
        for op in summary["history"]:
            if op.key == key:
                log(f"  {op.start:.3f} {op.end:.3f} {op.kind} {op.arg} {op.outcome} {op.reply!r} "
                    f"{op.path}")
    faults = ",".join(f"{k}:{summary['faults'][k]}" for k in FAULTS)
    log(f"RESULT name=cluster_faults ops={summary['ops']} faults={faults} "
        f"anomalies={len(summary['anomalies'])} settled={'yes' if summary['settled'] else 'no'}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=600)
    parser.add_argument("--seed", type=int, default=36)
    args = parser.parse_args()
    summary = run(args.seconds, args.seed)
    report(summary)
    return 1 if summary["anomalies"] or not summary["settled"] else 0


if __name__ == "__main__":
    sys.exit(main())
