"""MULTI / EXEC / DISCARD / WATCH / UNWATCH, side by side with redis-server
(the same commands on both, replies compared byte for byte), redis-py's
transactional pipelines, and concurrency checks: EXEC and MSET are
isolated, and WATCH-based read-modify-write loses no update."""
import random
import socket
import struct
import threading
import time

import pytest
import redis

from conftest import RawClient, encode_command, rss_kib

MIB = 1024 * 1024

SEED = 1207


class RawPair:
    """One raw connection to each server; `same` sends a command to both and
    asserts byte-identical replies."""

    def __init__(self, ours_port, theirs_port):
        self.ours = RawClient(ours_port)
        self.theirs = RawClient(theirs_port)

    def same(self, *args):
        a, b = self.ours.call(*args), self.theirs.call(*args)
        assert a == b, f"{args!r}: tierkv={a!r} redis={b!r}"
        return a

    def close(self):
        self.ours.close()
        self.theirs.close()


@pytest.fixture
def raw(redis_server, tierkv_server):
    """Two clients (a, b) on each server, after FLUSHALL."""
    a = RawPair(tierkv_server.port, redis_server.port)
    b = RawPair(tierkv_server.port, redis_server.port)
    a.same("FLUSHALL")
    yield a, b
    a.close()
    b.close()


def test_queued_replies_and_exec_results(raw):
    a, _ = raw
    assert a.same("MULTI") == b"+OK\r\n"
    assert a.same("SET", "k", "1") == b"+QUEUED\r\n"
    a.same("INCR", "k")
    a.same("GET", "k")
    a.same("MGET", "k", "missing")
    a.same("DEL", "k")
    a.same("PING")
    assert a.same("EXEC") == b"*6\r\n+OK\r\n:2\r\n$1\r\n2\r\n*2\r\n$1\r\n2\r\n$-1\r\n:1\r\n+PONG\r\n"
    a.same("EXISTS", "k")
    a.same("MULTI")
    assert a.same("EXEC") == b"*0\r\n"


def test_resp3_replies(raw):
    a, b = raw
    for side in (a.ours, a.theirs):  # the HELLO replies differ (version, id)
        assert side.call("HELLO", "3").startswith(b"%7\r\n")
    a.same("MULTI")
    a.same("SET", "k", "v")
    a.same("GET", "missing")
    a.same("EXEC")
    b.same("SET", "w", "1")
    a.same("WATCH", "w")
    b.same("SET", "w", "2")
    a.same("MULTI")
    a.same("GET", "w")
    assert a.same("EXEC") == b"_\r\n"  # RESP3 null for an aborted EXEC


def test_errors_inside_exec_are_per_command(raw):
    a, _ = raw
    a.same("SET", "s", "not a number")
    a.same("MULTI")
    a.same("INCR", "s")
    a.same("SET", "t", "1")
    a.same("INCRBYFLOAT", "s", "1")
    a.same("EXPIRE", "t", "notint")
    a.same("GET", "t")
    a.same("EXEC")
    a.same("GET", "t")  # the commands after the errors ran


def test_queuing_error_aborts_exec(raw):
    a, _ = raw
    a.same("SET", "k", "before")
    a.same("MULTI")
    a.same("SET", "k", "after")
    a.same("NOSUCHCOMMAND", "x")
    a.same("GET")  # wrong arity
    a.same("SET", "k2", "v")
    assert a.same("EXEC").startswith(b"-EXECABORT")
    a.same("GET", "k")  # nothing ran
    a.same("EXISTS", "k2")
    a.same("EXEC")  # the transaction is over
    # A refused EXEC ends the transaction and says why (in MULTI or not).
    a.same("MULTI")
    a.same("SET", "k3", "v")
    assert a.same("EXEC", "extra").startswith(b"-EXECABORT Transaction discarded because of: ")
    a.same("EXEC")
    a.same("EXISTS", "k3")
    a.same("EXEC", "extra")


def test_control_command_errors(raw):
    a, _ = raw
    a.same("EXEC")
    a.same("DISCARD")
    a.same("MULTI")
    a.same("MULTI")  # nested: an error, the transaction goes on
    a.same("WATCH", "k")  # not allowed inside MULTI
    a.same("SET", "k", "1")
    a.same("EXEC")
    a.same("GET", "k")
    a.same("WATCH")
    a.same("MULTI", "x")
    a.same("UNWATCH")


def test_discard_drops_queue_and_watches(raw):
    a, b = raw
    a.same("SET", "w", "0")
    a.same("WATCH", "w")
    a.same("MULTI")
    a.same("SET", "k", "queued")
    a.same("DISCARD")
    a.same("EXISTS", "k")
    b.same("SET", "w", "changed")
    a.same("MULTI")  # DISCARD forgot the watch: this EXEC runs
    a.same("SET", "k", "ran")
    a.same("EXEC")
    a.same("GET", "k")


def test_watch_aborts_on_change_by_another_client(raw):
    a, b = raw
    a.same("SET", "k", "1")
    a.same("WATCH", "k", "other")
    b.same("SET", "k", "1")  # same value, new write
    a.same("MULTI")
    a.same("SET", "k", "mine")
    assert a.same("EXEC") == b"*-1\r\n"
    a.same("GET", "k")
    # The watches ended with EXEC: the next transaction runs.
    a.same("MULTI")
    a.same("SET", "k", "mine")
    a.same("EXEC")
    a.same("GET", "k")


@pytest.mark.parametrize("change", [
    ["DEL", "k"], ["UNLINK", "k"], ["FLUSHALL"], ["FLUSHDB"], ["INCR", "k"], ["APPEND", "k", "x"],
    ["EXPIRE", "k", "100"], ["SET", "k", "2", "KEEPTTL"], ["GETDEL", "k"], ["SETRANGE", "k", "0", "9"],
    ["RENAME", "k", "k2"], ["COPY", "o", "k", "REPLACE"], ["MSET", "k", "3", "o", "4"]])
def test_watch_aborts_on_each_kind_of_change(raw, change):
    a, b = raw
    a.same("SET", "k", "1")
    a.same("SET", "o", "other")
    a.same("WATCH", "k")
    b.same(*change)
    a.same("MULTI")
    a.same("GET", "k")
    assert a.same("EXEC") == b"*-1\r\n"


@pytest.mark.parametrize("change", [
    ["SET", "other", "1"], ["GET", "k"], ["SETNX", "k", "x"], ["PERSIST", "k"], ["EXISTS", "k"],
    ["DEL", "missing"], ["RENAMENX", "o", "k"], ["COPY", "o", "k"]])
def test_watch_survives_what_does_not_change_the_key(raw, change):
    a, b = raw
    a.same("SET", "k", "1")
    a.same("SET", "o", "other")
    a.same("WATCH", "k")
    b.same(*change)
    a.same("MULTI")
    a.same("GET", "k")
    assert a.same("EXEC") == b"*1\r\n$1\r\n1\r\n"


def test_watch_missing_key(raw):
    a, b = raw
    a.same("WATCH", "k")
    b.same("FLUSHALL")  # the key did not exist: not a change (Redis 7.0)
    a.same("MULTI")
    a.same("SET", "k", "1")
    a.same("EXEC")
    a.same("WATCH", "k2")
    b.same("SET", "k2", "created")
    a.same("MULTI")
    a.same("SET", "k2", "mine")
    a.same("EXEC")
    a.same("GET", "k2")


@pytest.mark.parametrize("change", [
    [["SET", "k", "x"], ["DEL", "k"]], [["INCR", "k"], ["RENAME", "k", "k2"]],
    [["MSET", "k", "x"], ["GETDEL", "k"]], [["APPEND", "k", "x"], ["UNLINK", "k"]],
    [["SET", "k2", "x"], ["RENAME", "k2", "k"], ["DEL", "k"]]])
def test_watch_missing_key_aborts_when_created_and_removed(raw, change):
    """WATCH of a missing key; another client creates the key and removes it
    again before EXEC: the key was changed (Redis touches it twice), so EXEC
    aborts although the key is missing again, as when it was watched."""
    a, b = raw
    a.same("WATCH", "k")
    for c in change:
        b.same(*c)
    a.same("MULTI")
    a.same("SET", "k", "mine")
    assert a.same("EXEC") == b"*-1\r\n"
    a.same("EXISTS", "k")


def test_watch_aborts_on_expiry(raw):
    a, _ = raw
    a.same("SET", "k", "v", "PX", "150")
    a.same("WATCH", "k")
    time.sleep(0.3)
    a.same("MULTI")
    a.same("SET", "x", "1")
    assert a.same("EXEC") == b"*-1\r\n"
    a.same("EXISTS", "x")


def test_watch_own_change_and_repeat_watch(raw):
    a, _ = raw
    a.same("SET", "k", "1")
    a.same("WATCH", "k")
    a.same("SET", "k", "2")  # a change by the watching client counts too
    a.same("WATCH", "k")  # watched again: the first snapshot stays
    a.same("MULTI")
    a.same("GET", "k")
    a.same("EXEC")


def test_unwatch_and_reset(raw):
    a, b = raw
    a.same("SET", "k", "1")
    a.same("WATCH", "k")
    a.same("UNWATCH")
    b.same("SET", "k", "2")
    a.same("MULTI")
    a.same("GET", "k")
    a.same("EXEC")
    # RESET leaves MULTI and forgets the watches.
    a.same("WATCH", "k")
    a.same("MULTI")
    a.same("SET", "k", "queued")
    a.same("RESET")
    a.same("EXEC")
    a.same("GET", "k")
    b.same("SET", "k", "3")
    a.same("MULTI")
    a.same("GET", "k")
    a.same("EXEC")


def test_unwatch_queued_inside_multi(raw):
    a, b = raw
    a.same("SET", "k", "1")
    a.same("WATCH", "k")
    a.same("MULTI")
    a.same("UNWATCH")  # queued: it runs inside EXEC, too late to help
    b.same("SET", "k", "2")
    a.same("EXEC")


def client_line(pair_side, name):
    for line in pair_side.call("CLIENT", "LIST").decode().split("\n"):
        if f" name={name} " in line:
            return dict(f.split("=", 1) for f in line.split(" ") if "=" in f)
    raise AssertionError(f"no client named {name}")


def test_client_list_shows_multi(raw):
    a, b = raw
    a.same("CLIENT", "SETNAME", "txnclient")
    for side in (b.ours, b.theirs):
        fields = client_line(side, "txnclient")
        assert (fields["multi"], fields["flags"]) == ("-1", "N")
    a.same("MULTI")
    a.same("SET", "k", "1")
    a.same("GET", "k")
    for side in (b.ours, b.theirs):
        fields = client_line(side, "txnclient")
        assert (fields["multi"], fields["flags"]) == ("2", "x")
    a.same("EXEC")
    for side in (b.ours, b.theirs):
        assert client_line(side, "txnclient")["multi"] == "-1"


def test_quit_inside_multi_closes(tierkv_server):
    c = RawClient(tierkv_server.port)
    assert c.call("MULTI") == b"+OK\r\n"
    assert c.call("SET", "quitkey", "1") == b"+QUEUED\r\n"
    assert c.call("QUIT") == b"+OK\r\n"
    assert c.closed_by_server()
    c.close()
    d = RawClient(tierkv_server.port)
    assert d.call("EXISTS", "quitkey") == b":0\r\n"
    assert d.call("EXEC") == b"-ERR EXEC without MULTI\r\n"
    d.close()


def wait_until_gone(c, name, timeout=5.0):
    """True once CLIENT LIST (asked on RawClient c) has no client `name`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if f" name={name} ".encode() not in c.call("CLIENT", "LIST"):
            return True
        time.sleep(0.01)
    return False


@pytest.mark.parametrize("how", ["close", "reset", "mid_exec"])
@pytest.mark.parametrize("which", ["tierkv", "redis"])
def test_dropped_client_in_multi_runs_nothing(tierkv_server, redis_server, which, how):
    """A client that WATCHes keys and queues commands in MULTI, then drops
    its socket without QUIT (a plain close, a reset, or a close in the
    middle of sending EXEC): the queued commands never run, its watches
    are gone without harm (writes to the watched keys keep working), and
    the server keeps serving: another client sees the keys unchanged, and
    a new client can WATCH / MULTI / EXEC the same key. Ten rounds, while
    a writer keeps changing one of the watched keys."""
    port = (tierkv_server if which == "tierkv" else redis_server).port
    b = RawClient(port)
    assert b.call("FLUSHALL") == b"+OK\r\n"
    assert b.call("MSET", "dk", "orig", "dother", "keep") == b"+OK\r\n"
    stop = threading.Event()
    writes = [0]

    def writer():  # changes the other watched key while clients come and go
        w = RawClient(port)
        try:
            while not stop.is_set() and writes[0] < 20000:
                assert w.call("SET", "dhot", str(writes[0])) == b"+OK\r\n"
                writes[0] += 1
        finally:
            w.close()

    t = threading.Thread(target=writer)
    t.start()
    try:
        for round_ in range(10):
            a = RawClient(port)
            name = f"dropper-{how}-{round_}"
            assert a.call("CLIENT", "SETNAME", name) == b"+OK\r\n"
            assert a.call("WATCH", "dk", "dhot", "dnew") == b"+OK\r\n"
            assert a.call("MULTI") == b"+OK\r\n"
            for cmd in [("SET", "dk", "dropped"), ("INCR", "dcount"), ("DEL", "dother"),
                        ("APPEND", "dk", "x"), ("SET", "dnew", "1")]:
                assert a.call(*cmd) == b"+QUEUED\r\n"
            if how == "reset":  # RST instead of FIN
                a.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            elif how == "mid_exec":
                a.send(encode_command("EXEC")[:-3])
            a.close()
            assert wait_until_gone(b, name), f"{name} still in CLIENT LIST"
            assert b.call("MGET", "dk", "dother", "dcount", "dnew") == \
                b"*4\r\n$4\r\norig\r\n$4\r\nkeep\r\n$-1\r\n$-1\r\n"
            # Writes to the keys the dropped client watched work.
            assert b.call("SET", "dk", "touched") == b"+OK\r\n"
            assert b.call("SET", "dk", "orig") == b"+OK\r\n"
            # A new client uses the same key in a transaction, normally.
            c = RawClient(port)
            assert c.call("WATCH", "dk") == b"+OK\r\n"
            assert c.call("GET", "dk") == b"$4\r\norig\r\n"
            assert c.call("MULTI") == b"+OK\r\n"
            assert c.call("SET", "dk", "mine") == b"+QUEUED\r\n"
            assert c.call("INCR", "dcount") == b"+QUEUED\r\n"
            assert c.call("EXEC") == b"*2\r\n+OK\r\n:1\r\n"
            # ... and its WATCH still aborts on another client's change.
            assert c.call("WATCH", "dk") == b"+OK\r\n"
            assert b.call("SET", "dk", "orig") == b"+OK\r\n"
            assert c.call("MULTI") == b"+OK\r\n"
            assert c.call("DEL", "dcount") == b"+QUEUED\r\n"
            assert c.call("EXEC") == b"*-1\r\n"
            assert c.call("DEL", "dcount") == b":1\r\n"
            assert c.call("QUIT") == b"+OK\r\n"
            c.close()
    finally:
        stop.set()
        t.join(30)
    assert not t.is_alive()
    assert writes[0] > 0
    assert b.call("GET", "dhot") == b"$%d\r\n%d\r\n" % (len(str(writes[0] - 1)), writes[0] - 1)
    assert b.call("PING") == b"+PONG\r\n"
    b.close()


def test_large_value_inside_multi_is_queued(raw):
    a, _ = raw
    big = b"x" * (3 << 20)  # large enough that tierkv streams it outside MULTI
    a.same("MULTI")
    a.same("SET", "big", big)
    a.same("STRLEN", "big")
    a.same("EXEC")
    a.same("STRLEN", "big")


def test_pipelined_transaction_in_one_write(raw):
    a, _ = raw
    batch = b"".join(encode_command(*c) for c in [
        ["MULTI"], ["SET", "p", "1"], ["INCRBY", "p", "41"], ["GET", "p"], ["EXEC"], ["GET", "p"]])
    for side in (a.ours, a.theirs):
        side.send(batch)
    for _ in range(6):
        ours, theirs = a.ours.read_reply(), a.theirs.read_reply()
        assert ours == theirs


# --- redis-py ----------------------------------------------------------------

@pytest.fixture(params=["tierkv", "redis"])
def client(request, tierkv_server, redis_server):
    server = tierkv_server if request.param == "tierkv" else redis_server
    c = server.client()
    c.flushall()
    yield c
    c.close()


def test_redis_py_default_pipeline(client):
    p = client.pipeline()  # transactional by default: MULTI ... EXEC
    p.set("a", "1").incr("a").get("a").mset({"b": "2", "c": "3"}).mget("a", "b", "c")
    assert p.execute() == [True, 2, b"2", True, [b"2", b"2", b"3"]]
    p = client.pipeline()
    p.set("s", "x").incr("s").get("s")
    with pytest.raises(redis.ResponseError):
        p.execute()
    assert client.get("s") == b"x"


def test_redis_py_transaction_helper_retries(client):
    client.set("n", "0")
    other = redis.Redis(connection_pool=client.connection_pool)
    calls = []

    def body(pipe):
        calls.append(1)
        n = int(pipe.get("n"))
        if len(calls) == 1:
            other.set("n", "100")  # makes the first EXEC fail
        pipe.multi()
        pipe.set("n", n + 1)

    client.transaction(body, "n")
    assert len(calls) == 2
    assert client.get("n") == b"101"


def test_redis_py_watch_error(client):
    client.set("w", "1")
    with client.pipeline() as p:
        p.watch("w")
        client.set("w", "2")
        p.multi()
        p.set("w", "3")
        with pytest.raises(redis.WatchError):
            p.execute()
    assert client.get("w") == b"2"


# --- concurrency ---------------------------------------------------------------

def run_threads(fn, n):
    errors = []

    def wrap(i):
        try:
            fn(i)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))

    threads = [threading.Thread(target=wrap, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors[:3]


def test_watch_read_modify_write_loses_no_update(tierkv_server):
    """A model of several clients incrementing random counters with
    WATCH / GET / MULTI / SET / EXEC and retrying on abort: every key ends
    at the number of increments the model made to it."""
    rng = random.Random(SEED)
    keys = [f"rmw:{i}" for i in range(4)]
    plans = [[rng.choice(keys) for _ in range(60)] for _ in range(6)]
    aborts = [0]
    lock = threading.Lock()
    tierkv_server.client().delete(*keys)

    def worker(i):
        c = tierkv_server.client()
        for key in plans[i]:
            while True:
                with c.pipeline() as p:
                    try:
                        p.watch(key)
                        n = int(p.get(key) or 0)
                        p.multi()
                        p.set(key, n + 1)
                        p.execute()
                        break
                    except redis.WatchError:
                        with lock:
                            aborts[0] += 1

    run_threads(worker, len(plans))
    model = {k: sum(plan.count(k) for plan in plans) for k in keys}
    c = tierkv_server.client()
    assert {k: int(c.get(k)) for k in keys} == model
    assert aborts[0] > 0  # the clients did contend


def test_exec_replies_fit_a_serial_order(tierkv_server):
    """Each transaction increments one counter twice and reads it: with
    isolation each EXEC sees n+1, n+2, n+2, and the pairs of all EXECs tile
    1..2N exactly; an interleaved EXEC would show a gap."""
    tierkv_server.client().delete("ser")
    results = [[] for _ in range(4)]

    def worker(i):
        c = tierkv_server.client()
        for _ in range(150):
            p = c.pipeline()
            p.incr("ser").incr("ser").get("ser")
            results[i].append(p.execute())

    run_threads(worker, len(results))
    seen = []
    for replies in results:
        for first, second, got in replies:
            assert second == first + 1 and int(got) == second
            seen += [first, second]
    assert sorted(seen) == list(range(1, len(seen) + 1))


def test_mset_and_exec_are_atomic_for_readers(tierkv_server):
    """Writers set ten keys to one value (MSET, or SETs in MULTI/EXEC);
    readers MGET them and must never see two values."""
    keys = [f"atom:{i}" for i in range(10)]
    tierkv_server.client().mset({k: "0" for k in keys})
    stop = threading.Event()
    torn = []

    def worker(i):
        c = tierkv_server.client()
        if i < 2:
            for v in range(1, 400):
                if i == 0:
                    c.mset({k: f"m{v}" for k in keys})
                else:
                    p = c.pipeline()
                    for k in keys:
                        p.set(k, f"x{v}")
                    p.execute()
            stop.set()
            return
        while not stop.is_set():
            got = c.mget(keys)
            if len(set(got)) != 1:
                torn.append(got)

    run_threads(worker, 5)
    assert not torn, torn[:2]


def test_msetnx_is_all_or_nothing_for_readers(tierkv_server):
    """Writers MSETNX three keys with their own tag, a deleter removes all
    three in one transaction, readers MGET them: a reader sees all three
    absent or all three with one tag, never a mix."""
    keys = ["nx:a", "nx:b", "nx:c"]
    tierkv_server.client().delete(*keys)
    stop = threading.Event()
    wins, torn = [], []

    def worker(i):
        c = tierkv_server.client()
        if i < 2:
            for round_ in range(300):
                if c.msetnx({k: f"{i}:{round_}" for k in keys}):
                    wins.append(i)
            stop.set()
        elif i == 2:
            while not stop.is_set():
                p = c.pipeline()
                p.delete(*keys)
                p.execute()
        else:
            while not stop.is_set():
                got = c.mget(keys)
                if len(set(got)) != 1:
                    torn.append(got)

    run_threads(worker, 5)
    assert wins  # some MSETNX did write
    assert not torn, torn[:2]


def test_commands_inside_exec_count_in_commandstats(pair):
    """As Redis, INFO commandstats counts each command EXEC ran."""
    def calls(client, name):
        stats = client.info("commandstats").get(f"cmdstat_{name}", {})
        return stats.get("calls", 0)

    for c in (pair.ours, pair.theirs):
        before = calls(c, "incrby"), calls(c, "exec")
        p = c.pipeline()
        p.incrby("cs", 1).incrby("cs", 2).incrby("cs", 3)
        assert p.execute() == [1, 3, 6]
        assert (calls(c, "incrby") - before[0], calls(c, "exec") - before[1]) == (3, 1)


def test_a_queue_past_the_client_limit_is_discarded_with_an_error(make_tierkv):
    """What a client queues in MULTI counts against client-query-buffer-limit:
    the command that would pass it gets an error and the queue is dropped,
    later commands are answered QUEUED but kept nowhere, EXEC answers
    -EXECABORT, the server's memory stays bounded and the client can go on."""
    s = make_tierkv("--flash-size", "0", "--client-query-buffer-limit", "16mb")
    c = RawClient(s.port, timeout=60)
    rss_before = rss_kib(s.proc.pid)
    value = b"v" * MIB
    c.call("MULTI")
    sent = 200  # 200 MiB queued if nothing stopped it
    c.send(b"".join(encode_command("SET", f"k{i}", value) for i in range(sent)))
    replies = [c.read_reply() for _ in range(sent)]
    errors = [i for i, r in enumerate(replies) if r.startswith(b"-ERR")]
    assert len(errors) == 1, replies[:20]
    assert 8 <= errors[0] <= 16, errors  # about 16 MiB went in first
    assert b"client-query-buffer-limit" in replies[errors[0]]
    assert all(r == b"+QUEUED\r\n" for i, r in enumerate(replies) if i != errors[0])
    assert c.call("EXEC").startswith(b"-EXECABORT")
    assert c.call("EXISTS", "k0") == b":0\r\n"
    assert rss_kib(s.proc.pid) - rss_before < 150 * 1024, "the queue was kept"
    c.call("MULTI")
    assert c.call("SET", "after", "1") == b"+QUEUED\r\n"
    assert c.call("EXEC") == b"*1\r\n+OK\r\n"
    c.close()
