"""Commands that read whole values (APPEND, INCR, GETRANGE, MGET ...) on
flash-only keys with a memory budget so small that fetched values are pushed
out again at once: every reply is right or a clear -BUSY / -OOM error, and
nothing stalls (a network thread never waits for the disk)."""
import socket
import threading

import redis

from conftest import encode_command, metric
from flash_util import KIB, MIB, flash_servers, make_value, num, push_out, residencies, wait_until  # noqa: F401
from test_bounded_reads import push_to_flash, read_bulk

KEYS = 8
THREADS = 6
OPS = 60
PREFIX = b"0123456789"


def base_value(i):
    return PREFIX + bytes([97 + i]) * (48 * KIB)


def clear_error(e):
    text = str(e)
    return text.startswith("BUSY") or text.startswith("OOM")


def test_value_commands_on_flash_only_keys_under_memory_pressure(flash_servers):
    s = flash_servers(memory="4mb", flash_size="256mb",
                      extra=["--chunk-size", "64kb", "--eviction-policy", "lru",
                             "--promotion-threshold", "255"]).start()
    c = s.client()
    ctrs = [f"ctr:{i}" for i in range(KEYS)]
    strs = [f"str:{i}" for i in range(KEYS)]
    for i in range(KEYS):
        c.set(ctrs[i], b"0")
        c.set(strs[i], base_value(i))
    push_out(c, ctrs + strs, "setup", 256 * KIB)

    incrs = [0] * KEYS
    appends = [0] * KEYS
    errors = []
    failures = []
    lock = threading.Lock()
    stop = threading.Event()

    def pressure():
        # Keeps memory full, so fetched values are evicted again soon.
        p = s.client(socket_timeout=30)
        filler = b"p" * (128 * KIB)
        n = 0
        while not stop.is_set() and n < 5000:
            p.set(f"press:{n % 64}", filler)
            n += 1

    def worker(t):
        w = s.client(socket_timeout=30)  # a stall fails the test
        for op in range(OPS):
            k = (t + op) % KEYS
            kind = op % 4
            try:
                if kind == 0:
                    w.incr(ctrs[k])
                    with lock:
                        incrs[k] += 1
                elif kind == 1:
                    w.append(strs[k], b"+")
                    with lock:
                        appends[k] += 1
                elif kind == 2:
                    got = w.getrange(strs[k], 0, 9)
                    if got != PREFIX:
                        failures.append(("getrange", strs[k], got))
                else:
                    got = w.mget(ctrs[k], strs[k])
                    if not got[1].startswith(PREFIX) or int(got[0]) < 0:
                        failures.append(("mget", k, got[0], got[1][:12]))
            except redis.exceptions.ResponseError as e:
                if not clear_error(e):
                    failures.append(("error", kind, str(e)))
                with lock:
                    errors.append(str(e))

    pusher = threading.Thread(target=pressure)
    pusher.start()
    workers = [threading.Thread(target=worker, args=(t,)) for t in range(THREADS)]
    for th in workers:
        th.start()
    for th in workers:
        th.join(120)
        assert not th.is_alive(), "a client stalled"
    stop.set()
    pusher.join(60)
    assert not failures, failures[:5]
    # Every acknowledged update is in the final values, and nothing else.
    for i in range(KEYS):
        assert int(c.get(ctrs[i])) == incrs[i], (ctrs[i], incrs[i])
        v = c.get(strs[i])
        assert v == base_value(i) + b"+" * appends[i], (strs[i], len(v), appends[i])
    fetched = num(s.flash_info(), "promotions_attempted")
    print(f"{sum(incrs)} INCR, {sum(appends)} APPEND acknowledged; {fetched:.0f} fetches; "
          f"{len(errors)} clear errors: {sorted(set(e[:40] for e in errors))}")
    # The values did come from flash, again and again.
    assert fetched >= 2 * KEYS
    assert c.ping()


def test_value_command_answers_busy_when_its_fetch_cannot_run(flash_servers):
    """The one promotion slot is held by a GET whose client does not read
    (a whole read copies into memory as it goes): INCR of a flash-only key
    cannot be fetched, retries with backoff, then answers -BUSY; once the
    reader drains, INCR works."""
    s = flash_servers(memory="128mb", flash_size="512mb",
                      extra=["--eviction-policy", "lru", "--offload-policy", "write_through",
                             "--promotion-threshold", "1", "--promotion-max-inflight", "1",
                             "--flash-read-window", "2"]).start()
    c = s.client()
    c.set("ctr", b"41")
    push_to_flash(c, "big", 32 * MIB)
    filler = b"f" * MIB
    written = 0
    for written in range(1024):  # the memory tier evicts per shard: go on until ctr left too
        if set(residencies(c, "ctr")) == {"flash"} and set(residencies(c, "big")) == {"flash"}:
            break
        c.set(f"more:{written}", filler)
    assert set(residencies(c, "ctr")) == {"flash"}
    # The copy never waits for an offload to make room, and on a loaded
    # machine write-through may leave filler dirty: give it free room.
    # push_to_flash's filler goes too: while write-through copies of it are
    # still in flight it cannot be evicted, and the copy may not wait.
    more = [f"more:{i}" for i in range(written)] + list(c.scan_iter("fill:*", count=1000))
    if more:
        c.delete(*more)
    stalled = socket.create_connection(("127.0.0.1", s.port), timeout=60)
    stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    stalled.sendall(encode_command("GET", "big"))
    # Its promotion holds the only slot while its window is full.
    assert wait_until(lambda: metric(s.metrics(), "tierkv_promotions_inflight") == 1, 30)
    try:
        c.incr("ctr")
        raise AssertionError("INCR ran without its value")
    except redis.exceptions.ResponseError as e:
        assert str(e).startswith("BUSY"), e
    assert read_bulk(stalled, 32 * MIB) == make_value("big", 1, 32 * MIB)
    stalled.close()
    assert c.incr("ctr") == 42

