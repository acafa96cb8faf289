"""Transactions, RENAME and COPY on flash-only keys: EXEC fetches the values
its commands read before it runs, so it answers right and never holds a
network thread while flash is read; RENAME and COPY of a flash-only source
keep the value and the TTL."""
import socket
import threading
import time

import pytest

from conftest import encode_command
from flash_util import MIB, flash_servers, make_value, residencies  # noqa: F401
from test_bounded_reads import push_to_flash
from flash_util import push_out

SIZE = 3 * MIB + 17


def small_server(flash_servers, *extra):
    return flash_servers(memory="16mb", flash_size="256mb",
                         extra=["--eviction-policy", "lru", "--promotion-threshold", "255",
                                *extra]).start()


def test_exec_reads_flash_only_values(flash_servers):
    s = small_server(flash_servers)
    c = s.client()
    c.set("ctr", "41")
    c.set("big", make_value("big", 1, SIZE))
    push_out(c, ["ctr", "big"], "exec")
    p = c.pipeline()
    p.get("big").incr("ctr").strlen("big").append("big", "!").getrange("big", 0, 9)
    got, n, length, appended, head = p.execute()
    assert got == make_value("big", 1, SIZE)
    assert (n, length, appended) == (42, SIZE, SIZE + 1)
    assert head == got[:10]


def test_watch_on_flash_only_key(flash_servers):
    s = small_server(flash_servers)
    c, other = s.client(), s.client()
    push_to_flash(c, "w", 4096)
    with c.pipeline() as p:
        p.watch("w")
        assert p.get("w") == make_value("w", 1, 4096)  # WATCH did not need the value
        p.multi()
        p.set("w", "mine")
        assert p.execute() == [True]
    push_to_flash(c, "w", 4096)
    with c.pipeline() as p:
        p.watch("w")
        other.set("w", "theirs")
        p.multi()
        p.set("w", "mine")
        try:
            p.execute()
            raise AssertionError("EXEC ran although the watched key changed")
        except Exception as e:  # redis.WatchError
            assert type(e).__name__ == "WatchError"
    assert c.get("w") == b"theirs"


def test_rename_and_copy_flash_only_source(flash_servers):
    s = small_server(flash_servers)
    c = s.client()
    push_to_flash(c, "src", SIZE)
    c.pexpire("src", 600_000)
    assert c.copy("src", "dup")
    assert c.rename("src", "dst")
    assert not c.exists("src")
    for key in ("dst", "dup"):
        assert c.get(key) == make_value("src", 1, SIZE)
        assert 590_000 < c.pttl(key) <= 600_000


@pytest.mark.timing
def test_exec_waiting_for_flash_does_not_hold_the_network_thread(flash_servers):
    """One I/O thread and 300 ms per flash read: while an EXEC waits for its
    fetch, another client on the same thread is answered at once."""
    s = small_server(flash_servers, "--io-threads", "1", "--backing-latency-ns", "300000000")
    c = s.client()
    push_to_flash(c, "slow", 64 * 1024)
    sock = socket.create_connection(("127.0.0.1", s.port))
    sock.sendall(b"".join(encode_command(*a) for a in [["MULTI"], ["GET", "slow"], ["EXEC"]]))
    time.sleep(0.05)  # the EXEC is now waiting for its fetch
    started = time.monotonic()
    assert s.client().ping()
    ping_s = time.monotonic() - started
    sock.settimeout(10)
    reply = b""
    while not reply.endswith(make_value("slow", 1, 64 * 1024) + b"\r\n"):
        chunk = sock.recv(1 << 16)
        assert chunk, reply[:80]
        reply += chunk
    elapsed = time.monotonic() - started
    sock.close()
    assert reply.startswith(b"+OK\r\n+QUEUED\r\n*1\r\n$65536\r\n")
    assert ping_s < 0.2 < elapsed + 0.05, (ping_s, elapsed)


@pytest.mark.timing
def test_a_pipeline_that_waits_for_flash_gives_the_gate_back(flash_servers):
    """Exclusive commands in a pipelined batch keep the exec gate until the
    batch ends; a command of the batch that waits for flash (300 ms per
    read) ends it. Meanwhile clients on every I/O thread are answered at
    once, and the batch's replies are whole and in order."""
    s = small_server(flash_servers, "--io-threads", "2", "--backing-latency-ns", "300000000")
    c = s.client()
    push_to_flash(c, "slow", 64 * 1024)
    others = [s.client() for _ in range(4)]  # on both I/O threads
    for o in others:
        assert o.ping()
    batch = [["MSET", "a", "1", "b", "2"], ["MULTI"], ["INCR", "n"], ["EXEC"], ["GET", "slow"],
             ["MSET", "a", "3", "b", "4"]]
    sock = socket.create_connection(("127.0.0.1", s.port))
    sock.sendall(b"".join(encode_command(*a) for a in batch))
    time.sleep(0.05)  # the GET now waits for its flash read
    slowest = 0.0
    for i, o in enumerate(others):
        started = time.monotonic()
        assert o.set(f"other{i}", "x") is True
        assert o.mget("a", "b") == [b"1", b"2"]  # the batch's second MSET waits too
        slowest = max(slowest, time.monotonic() - started)
    value = make_value("slow", 1, 64 * 1024)
    want = (b"+OK\r\n+OK\r\n+QUEUED\r\n*1\r\n:1\r\n$65536\r\n" + value + b"\r\n+OK\r\n")
    sock.settimeout(10)
    reply = b""
    while len(reply) < len(want):
        chunk = sock.recv(1 << 16)
        assert chunk, reply[:80]
        reply += chunk
    sock.close()
    assert reply == want
    assert slowest < 0.2, slowest
    assert c.mget("a", "b") == [b"3", b"4"]


def test_concurrent_transactions_on_flash_keys(flash_servers):
    """Clients increment counters that memory pressure keeps pushing to
    flash, in transactions of two INCRs and a GET: every EXEC is whole
    (n+1, n+2, n+2) or a clear -BUSY / -OOM error, and no increment is lost."""
    s = small_server(flash_servers, "--chunk-size", "64kb")
    c = s.client()
    c.set("fctr", "0")
    push_out(c, ["fctr"], "setup")
    done = []
    errors = []
    stop = threading.Event()

    def pressure():
        filler = b"p" * (256 * 1024)
        p = s.client()
        i = 0
        while not stop.is_set():
            p.set(f"press:{i % 200}", filler)
            i += 1

    def worker():
        cl = s.client()
        for _ in range(40):
            p = cl.pipeline()
            p.incr("fctr").incr("fctr").get("fctr")
            try:
                first, second, got = p.execute()
            except Exception as e:  # noqa: BLE001
                errors.append(str(e))
                continue
            assert second == first + 1 and int(got) == second
            done.append(1)

    presser = threading.Thread(target=pressure)
    presser.start()
    workers = [threading.Thread(target=worker) for _ in range(3)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(120)
    stop.set()
    presser.join(30)
    assert all(e.startswith(("BUSY", "OOM")) for e in errors), errors[:3]
    assert done
    assert int(c.get("fctr")) == 2 * len(done)


def test_exec_with_fsync_always_is_durable(flash_servers):
    """With flash-fsync always, EXEC's reply waits until every write in it
    is on flash: after kill -9 the acknowledged transaction is all there."""
    s = flash_servers(memory="64mb", flash_size="256mb", extra=["--flash-fsync", "always"]).start()
    c = s.client()
    p = c.pipeline()
    p.set("d:a", "1").incr("d:a").mset({"d:b": "2", "d:c": "3"}).append("d:c", "x")
    assert p.execute() == [True, 2, True, 2]
    assert c.rename("d:b", "d:moved")
    s.kill()
    s.start()
    c = s.client()
    assert c.mget("d:a", "d:b", "d:c", "d:moved") == [b"2", None, b"3x", b"2"]
