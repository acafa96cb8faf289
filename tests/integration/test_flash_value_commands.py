"""Commands that read whole values (APPEND, INCR, GETRANGE, MGET ...) on
flash-only keys with a memory budget so small that fetched values are pushed
out again at once: every reply is right or a clear -BUSY / -OOM error, and
nothing stalls (a network thread never waits for the disk)."""
import threading

import redis

from flash_util import KIB, flash_servers, num, residencies  # noqa: F401

KEYS = 8
THREADS = 6
OPS = 60
PREFIX = b"0123456789"


def base_value(i):
    return PREFIX + bytes([97 + i]) * (48 * KIB)


def all_on_flash(c, keys):
    return all(set(residencies(c, k)) == {"flash"} for k in keys)


def push_out(c, keys, tag):
    """Writes filler until every key in `keys` lives on flash only."""
    filler = b"f" * (256 * KIB)
    for i in range(400):
        c.set(f"fill:{tag}:{i}", filler)
        if i % 8 == 7 and all_on_flash(c, keys):
            return
    raise AssertionError("keys never left memory")


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
    push_out(c, ctrs + strs, "setup")

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
