"""A general isolation checker for MULTI/EXEC (issue 12).

Several clients run seeded random transactions over a few keys against a
tierkv-server with several I/O threads; every transaction's commands and its
raw EXEC reply are recorded. The history is then checked for a serial order
that explains it: every transaction starts with INCR seq, so the first
element of its EXEC reply is its position in the serial order. The committed
transactions are replayed one after another in that order on a redis-server,
and each replayed EXEC reply must equal the recorded one byte for byte; at
the end every key must hold on tierkv what it holds on the replay server.

Why the seq trick does not make the check vacuous: seq only says in which
order to replay; it constrains nothing else. Every other reply in an EXEC
(GET, MGET, EXISTS, INCR, APPEND's new length, DEL's count, RENAME's OK or
"no such key", INCR's not-an-integer error) depends on the keys' contents,
and the values written are unique per transaction. If another transaction's
commands ran in the middle of a transaction, or a transaction saw a state
that no prefix of the serial order produces, some reply differs from the
replay (test_checker_rejects_interleaved_histories shows that the checker
rejects histories produced by interleaving the same kind of transactions
command by command).

WATCH: a client that WATCHes sends INCR seq (n1), WATCH k, GET k, INCR seq
(n2), then MULTI ... EXEC, so its WATCH lies between places n1 and n2 of
the serial order. redis-server itself judges the outcome: during the replay
a client of the replay server WATCHes k at n1 (the earliest place) and
another at n2 (the latest). A committed transaction must also commit for
the latest watcher at its place (nothing changed k after n2), and k must
still hold what the GET read; an aborted one must also abort for the
earliest watcher at the latest place its EXEC can have (just before its
client's next place), and had no effect (the replay leaves it out and the
final state must match). test_checker_judges_watch_like_redis shows these
checks on hand-made histories.
"""
import random
import re
import threading
import time

import pytest

from conftest import RawClient, encode_command

SEED = 1212
KEYS = [f"k{i}" for i in range(6)]
SEQ = "seq"
ABORTED = b"*-1\r\n"
_EXEC_HEAD = re.compile(rb"\*(\d+)\r\n:(\d+)\r\n")


def random_transaction(rng, tag):
    """The commands of one transaction: INCR seq, then 1..6 random commands
    on KEYS. `tag` makes the values it writes unique."""
    cmds = [("INCR", SEQ)]
    for j in range(rng.randrange(1, 7)):
        k, k2 = rng.sample(KEYS, 2)
        value = str(rng.randrange(-20, 20)) if rng.random() < 0.5 else f"{tag}.{j}"
        op = rng.randrange(11)
        if op == 0:
            cmds.append(("SET", k, value))
        elif op == 1:
            cmds.append(("GET", k))
        elif op == 2:
            cmds.append(("INCR", k))
        elif op == 3:
            cmds.append(("APPEND", k, f"/{tag}.{j}"))
        elif op == 4:
            cmds.append(("DEL", k) if rng.random() < 0.5 else ("DEL", k, k2))
        elif op == 5:
            cmds.append(("MSET", k, value, k2, f"{tag}.{j}m"))
        elif op == 6:
            cmds.append(("RENAME", k, k2 if rng.random() < 0.9 else k))
        elif op == 7:
            cmds.append(("MGET", *KEYS))
        elif op == 8:
            cmds.append(("EXISTS", k, k2))
        elif op == 9:
            cmds.append(("STRLEN", k))
        else:
            cmds.append(("GET", k))
    return cmds


class Txn:
    """One transaction of the history. A WATCHing one also has n1 and n2,
    the replies of the INCR seq its client sent just before WATCH and just
    after the GET that follows it: the WATCH lies between those two places
    of the serial order."""

    def __init__(self, client, index, cmds, reply, watch=None, seen=None, n1=None, n2=None):
        self.client, self.index, self.cmds, self.reply = client, index, cmds, reply
        self.watch, self.seen, self.n1, self.n2 = watch, seen, n1, n2

    def committed(self):
        return self.reply != ABORTED

    def seq(self):
        m = _EXEC_HEAD.match(self.reply)
        assert m, f"EXEC reply does not start with INCR seq's reply: {self!r}"
        assert int(m.group(1)) == len(self.cmds), f"EXEC reply has the wrong length: {self!r}"
        return int(m.group(2))

    def positions(self):
        """The places in the serial order this transaction's client took."""
        marks = [self.n1, self.n2] if self.watch else []
        return marks + ([self.seq()] if self.committed() else [])

    def __repr__(self):
        w = (f" [seq {self.n1}] WATCH {self.watch} GET -> {self.seen!r} [seq {self.n2}]"
             if self.watch else "")
        return f"<client {self.client} txn {self.index}{w}: {self.cmds} -> {self.reply!r}>"


def run_transaction(c, cmds, pipelined):
    """MULTI, cmds, EXEC on a RawClient; the raw EXEC reply."""
    frames = [encode_command(*x) for x in [("MULTI",), *cmds, ("EXEC",)]]
    if pipelined:
        c.send(b"".join(frames))
        replies = [c.read_reply() for _ in frames]
    else:
        replies = []
        for f in frames:
            c.send(f)
            replies.append(c.read_reply())
    assert replies[0] == b"+OK\r\n", replies[0]
    assert replies[1:-1] == [b"+QUEUED\r\n"] * len(cmds), replies
    return replies[-1]


def incr_seq(c):
    reply = c.call("INCR", SEQ)
    assert reply.startswith(b":"), reply
    return int(reply[1:-2])


def watch_holds(watcher):
    """Whether an EXEC of the replay client `watcher` (which WATCHes a key)
    would run now: asks with MULTI / PING / EXEC, which ends its watch."""
    replies = [watcher.call("MULTI"), watcher.call("PING"), watcher.call("EXEC")]
    assert replies[:2] == [b"+OK\r\n", b"+QUEUED\r\n"], replies
    return replies[2] != ABORTED


def verify_serializable(history, final, replay_port):
    """Asserts that `history` has a serial order that explains it: the
    committed transactions, run one by one in the order of their seq
    replies on a fresh server at replay_port (the INCR seq of the WATCH
    brackets run at their places too), give the recorded EXEC replies and
    the final contents `final` ({key: raw GET reply}).

    WATCH is checked against redis-server itself: the replay server gets
    a WATCH of the key from a client of its own at the earliest (n1) and
    at the latest (n2) place the real WATCH can have in the serial order.
    A transaction that committed must commit with the latest watch (no
    change to the key after n2); one that aborted must abort with the
    earliest watch by the latest place its EXEC can have (just before
    its client's next place in the order)."""
    for t in history:
        assert t.watch or t.committed(), f"EXEC without WATCH aborted: {t!r}"
    at = {}
    for t in history:
        for p in t.positions():
            assert p not in at, f"two clients got seq {p}: {at[p]!r} and {t!r}"
            at[p] = t
    n = len(at)
    assert sorted(at) == list(range(1, n + 1)), "seq replies are not 1..N exactly"
    # The latest place an aborted EXEC can have: its client's next place.
    abort_checks = {}
    by_client = {}
    for t in history:
        by_client.setdefault(t.client, []).append(t)
    for txns in by_client.values():
        txns.sort(key=lambda t: t.index)
        for i, t in enumerate(txns):
            if not t.committed():
                later = [p for u in txns[i + 1:] for p in u.positions()]
                abort_checks.setdefault(min(later, default=n + 1), []).append(t)

    def context(p, since=None):
        """The places before p (from `since`, at most 40), one line each."""
        lines = []
        for q in range(max(1, p - 6 if since is None else since, p - 40), p):
            t = at[q]
            if t.watch and q in (t.n1, t.n2):
                lines.append(f"\n  seq {q}: the INCR seq of client {t.client}"
                             f" around its WATCH {t.watch}")
            else:
                lines.append(f"\n  seq {q}: {t!r}")
        return "".join(lines)

    r = RawClient(replay_port)
    watchers = {}
    try:
        assert r.call("FLUSHALL") == b"+OK\r\n"
        for p in range(1, n + 2):
            for t in abort_checks.get(p, []):
                assert not watch_holds(watchers.pop((id(t), "early"))), (
                    f"a WATCHed transaction aborted although nothing changed {t.watch} between"
                    f" the WATCH and the EXEC: {t!r}; the serial order since its first INCR seq:"
                    f"{context(p, t.n1)}")
                watchers.pop((id(t), "late")).close()
            if p > n:
                break
            t = at[p]
            if t.watch and p in (t.n1, t.n2):
                assert incr_seq(r) == p
                w = RawClient(replay_port)
                assert w.call("WATCH", t.watch) == b"+OK\r\n"
                watchers[(id(t), "early" if p == t.n1 else "late")] = w
                continue
            if t.watch:
                assert watch_holds(watchers.pop((id(t), "late"))), (
                    f"a WATCHed transaction committed although {t.watch} changed after the WATCH:"
                    f" {t!r}; the serial order since its first INCR seq:{context(p, t.n1)}")
                watchers.pop((id(t), "early")).close()
                got = r.call("GET", t.watch)
                assert got == t.seen, (
                    f"a WATCHed transaction committed although {t.watch} changed after it was read:"
                    f" the serial order has {got!r} there; {t!r};"
                    f" the serial order since its first INCR seq:{context(p, t.n1)}")
            replayed = run_transaction(r, t.cmds, True)
            assert replayed == t.reply, (
                f"no serial order explains transaction seq={p}: replayed in seq order its"
                f" EXEC gives {replayed!r}; {t!r}; the serial order just before:{context(p)}")
        assert not watchers
        for k in sorted(final):
            got = r.call("GET", k)
            assert got == final[k], f"final value of {k}: server={final[k]!r} serial replay={got!r}"
    finally:
        r.close()
        for w in watchers.values():
            w.close()


def read_final(port):
    c = RawClient(port)
    try:
        return {k: c.call("GET", k) for k in KEYS + [SEQ]}
    finally:
        c.close()


def run_clients(port, n_clients, n_txns, seed, watch_share=0.0, deadline_s=60.0):
    """n_clients threads, each n_txns seeded random transactions; the share
    watch_share of them first send INCR seq, WATCH a key, GET it, INCR seq.
    The list of all Txn."""
    histories = [[] for _ in range(n_clients)]
    errors = []
    deadline = time.monotonic() + deadline_s
    start = threading.Barrier(n_clients, timeout=30)

    def worker(i):
        rng = random.Random(seed * 1000 + i)
        c = RawClient(port)
        try:
            start.wait()
            for j in range(n_txns):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"client {i} ran out of time at transaction {j}")
                cmds = random_transaction(rng, f"c{i}t{j}")
                watch = seen = n1 = n2 = None
                if rng.random() < watch_share:
                    watch = rng.choice(KEYS)
                    n1 = incr_seq(c)
                    assert c.call("WATCH", watch) == b"+OK\r\n"
                    seen = c.call("GET", watch)
                    n2 = incr_seq(c)
                reply = run_transaction(c, cmds, pipelined=rng.random() < 0.5)
                histories[i].append(Txn(i, j, cmds, reply, watch, seen, n1, n2))
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(f"client {i}: {e!r}")
        finally:
            c.close()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n_clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(deadline_s + 30)
    assert not any(t.is_alive() for t in threads), "a client thread hung"
    assert not errors, errors[:3]
    return [t for h in histories for t in h]


@pytest.mark.parametrize("watch_share", [0.0, 0.5], ids=["plain", "watch"])
@pytest.mark.parametrize("seed", [SEED, SEED + 1])
def test_concurrent_transactions_are_serializable(make_tierkv, redis_server, seed, watch_share):
    """4 clients x 150 random transactions on 6 keys, on a server with 4 I/O
    threads; "watch": half of them WATCH one of the keys (bracketed by
    INCR seq) and GET it before MULTI."""
    s = make_tierkv("--io-threads", "4")
    c = s.client()
    assert c.config_get("io-threads") == {"io-threads": "4"}
    c.close()
    history = run_clients(s.port, n_clients=4, n_txns=150, seed=seed, watch_share=watch_share)
    final = read_final(s.port)
    verify_serializable(history, final, redis_server.port)
    # The check saw real concurrency: the serial order switches between the
    # clients often, and the transactions ran into each other's errors.
    order = [t.client for t in sorted((t for t in history if t.committed()), key=Txn.seq)]
    switches = sum(1 for a, b in zip(order, order[1:]) if a != b)
    assert switches >= 100, switches
    assert sum(b"-ERR" in t.reply for t in history) > 0


def interleaved_history(port, n_clients, n_txns, seed):
    """Transactions like the real ones, but each command sent on its own
    (no MULTI) by several clients in turn, so they interleave; the EXEC
    replies are put together from the single replies."""
    rng = random.Random(seed)
    clients = [RawClient(port) for _ in range(n_clients)]
    try:
        clients[0].call("FLUSHALL")
        history = []
        for j in range(n_txns):
            txns = [random_transaction(rng, f"c{i}t{j}") for i in range(n_clients)]
            replies = [[] for _ in range(n_clients)]
            for step in range(max(len(t) for t in txns)):
                for i, cmds in enumerate(txns):
                    if step < len(cmds):
                        replies[i].append(clients[i].call(*cmds[step]))
            for i, cmds in enumerate(txns):
                reply = b"*%d\r\n" % len(cmds) + b"".join(replies[i])
                history.append(Txn(i, j, cmds, reply))
        return history
    finally:
        for c in clients:
            c.close()


def final_state(**values):
    final = {k: b"$-1\r\n" for k in KEYS + [SEQ]}
    final.update({k: b"$%d\r\n%s\r\n" % (len(v), v.encode()) for k, v in values.items()})
    return final


def test_checker_rejects_interleaved_histories(redis_server, make_redis):
    """The checker is not vacuous: a history of the same random
    transactions whose commands interleaved is rejected, while the same
    transactions run whole one after another are accepted."""
    # A minimal case, made by hand: T2's SET lands between T1's SET and GET.
    t1 = Txn(1, 0, [("INCR", SEQ), ("SET", "k0", "a"), ("GET", "k0")],
             b"*3\r\n:1\r\n+OK\r\n$1\r\nb\r\n")
    t2 = Txn(2, 0, [("INCR", SEQ), ("SET", "k0", "b")], b"*2\r\n:2\r\n+OK\r\n")
    with pytest.raises(AssertionError, match="no serial order explains transaction seq=1"):
        verify_serializable([t1, t2], final_state(k0="b", seq="2"), redis_server.port)
    # Random transactions interleaved command by command: rejected.
    other = make_redis()
    for seed in range(3):
        history = interleaved_history(other.port, 4, 25, seed)
        final = read_final(other.port)
        with pytest.raises(AssertionError, match="no serial order explains"):
            verify_serializable(history, final, redis_server.port)
    # The same kind of transactions, each whole, one client after another: accepted.
    history = interleaved_history(other.port, 1, 100, 7)
    verify_serializable(history, read_final(other.port), redis_server.port)


def test_checker_judges_watch_like_redis(redis_server):
    """The WATCH part of the checker on hand-made histories: client 2 sent
    INCR seq (1), WATCH k0, GET k0, INCR seq (2 or 3), then its MULTI/EXEC."""
    def watcher(reply, seen=b"$-1\r\n", n2=2):
        return Txn(2, 0, [("INCR", SEQ), ("SET", "k0", "b")], reply, "k0", seen, 1, n2)

    def verify(*history, **final):
        verify_serializable(list(history), final_state(**final), redis_server.port)

    set_k0 = Txn(1, 0, [("INCR", SEQ), ("SET", "k0", "a")], b"*2\r\n:3\r\n+OK\r\n")
    # k0 changed after the WATCH: committing is wrong, aborting is right.
    with pytest.raises(AssertionError, match="committed although k0 changed after the WATCH"):
        verify(set_k0, watcher(b"*2\r\n:4\r\n+OK\r\n"), k0="b", seq="4")
    verify(set_k0, watcher(ABORTED), k0="a", seq="3")
    # k0 created and deleted again after the WATCH (a missing key): still a change.
    aba = Txn(1, 0, [("INCR", SEQ), ("SET", "k0", "a"), ("DEL", "k0")], b"*3\r\n:3\r\n+OK\r\n:1\r\n")
    with pytest.raises(AssertionError, match="committed although k0 changed after the WATCH"):
        verify(aba, watcher(b"*2\r\n:4\r\n+OK\r\n"), k0="b", seq="4")
    # Nothing changed k0: aborting is wrong.
    set_k1 = Txn(1, 0, [("INCR", SEQ), ("SET", "k1", "a")], b"*2\r\n:3\r\n+OK\r\n")
    with pytest.raises(AssertionError, match="aborted although nothing changed k0"):
        verify(set_k1, watcher(ABORTED), k1="a", seq="3")
    verify(set_k1, watcher(b"*2\r\n:4\r\n+OK\r\n"), k0="b", k1="a", seq="4")
    # k0 changed between seq 1 and 3, before or after the WATCH: both outcomes fit.
    early = Txn(1, 0, [("INCR", SEQ), ("SET", "k0", "a")], b"*2\r\n:2\r\n+OK\r\n")
    verify(early, watcher(ABORTED, n2=3), k0="a", seq="3")
    verify(early, watcher(b"*2\r\n:4\r\n+OK\r\n", seen=b"$1\r\na\r\n", n2=3), k0="b", seq="4")
    # ... but what the GET after the WATCH read must still be there at the commit.
    with pytest.raises(AssertionError, match="changed after it was read"):
        verify(early, watcher(b"*2\r\n:4\r\n+OK\r\n", n2=3), k0="b", seq="4")
