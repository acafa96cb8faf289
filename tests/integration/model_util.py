"""A model of the key space for the model-based tests (test_model_restart.py,
test_model_crash.py; the contract they check is in docs/contract.md).

The model maps each key of a fixed universe to what it holds: a value id
(seed, size) -- the value itself is make_value(key, seed, size), so the model
keeps no bytes -- and its expiry. The client does not know the server's clock
reading at the moment a command runs, only that it lies between the send and
the reply, so an expiry is kept as an interval [lo, hi] of unix ms; a key is
"live" or "gone" only when the whole interval (widened by MARGIN_MS) is on
one side of the time of a read, and "either" otherwise (it is expiring right
then). Replies that tell whether a key existed (DEL, PEXPIRE, PERSIST, GET)
settle an "either" key.
"""
import re
import time

from flash_util import KIB, MIB, describe, make_value

# A key whose expiry is this close to the time of a read may be read either
# way: the server's clock and the client's are the same clock, but a command
# runs at some instant between send and reply, and ms are rounded.
MARGIN_MS = 50

_HEADER = re.compile(rb"^<([^|]*)\|(\d+)\|(\d+)\|[0-9a-f]{40}>")


def now_ms():
    return time.time() * 1000.0


def read_values_and_ttls(c, keys):
    """GET and PTTL of every key in one pipeline: a list of (key, value, pttl)
    and the client's send/reply window (t0, t1) in unix ms."""
    pipe = c.pipeline(transaction=False)
    for k in keys:
        pipe.get(k)
        pipe.pttl(k)
    t0 = now_ms()
    replies = pipe.execute(raise_on_error=False)
    t1 = now_ms()
    return [(k, replies[2 * j], replies[2 * j + 1]) for j, k in enumerate(keys)], t0, t1


def value_id(key, value):
    """(seed, size) of a value made by make_value for this key, None for nil,
    or a string saying what is wrong with it (torn, mixed, another key's)."""
    if value is None:
        return None
    m = _HEADER.match(bytes(value[:200]))
    if not m:
        return f"corrupt: no header ({len(value)} bytes, starts {bytes(value[:40])!r})"
    name, seed, size = m.group(1).decode(), int(m.group(2)), int(m.group(3))
    if name != key:
        return f"corrupt: holds the value of key {name!r}"
    if len(value) != size or value != make_value(key, seed, size):
        return f"corrupt: header says seed {seed}, {size} bytes; got {len(value)} bytes, mixed"
    return (seed, size)


def value_size(rng):
    """4 KiB .. 8 MiB: mostly small, some large (they go to flash first)."""
    r = rng.random()
    lo, hi = (4 * KIB, 64 * KIB) if r < 0.70 else (64 * KIB, MIB) if r < 0.92 else (MIB, 8 * MIB)
    return int(lo * (hi / lo) ** rng.random())


class Entry:
    """What a key holds: value id and expiry interval (None: no expiry)."""
    __slots__ = ("vid", "exp")

    def __init__(self, vid, exp=None):
        self.vid = vid
        self.exp = exp

    def state(self, t0, t1):
        """'live', 'gone' or 'either' for a read that ran between t0 and t1 (ms)."""
        if self.exp is None:
            return "live"
        lo, hi = self.exp
        if hi + MARGIN_MS <= t0:
            return "gone"
        if lo - MARGIN_MS > t1:
            return "live"
        return "either"

    def __repr__(self):
        if self.exp is None:
            return f"{self.vid} no-ttl"
        return f"{self.vid} exp[{self.exp[0]:.0f},{self.exp[1]:.0f}]"


def ttl_interval(t0, t1, ms):
    """The expiry a relative TTL of `ms` set between t0 and t1 can have."""
    return (t0 + ms - 2, t1 + ms + 2)


def pttl_ok(entry, pttl, t0, t1):
    """Whether a PTTL reply read between t0 and t1 fits the entry's expiry."""
    if entry.exp is None:
        return pttl == -1
    lo, hi = entry.exp
    return lo - t1 - MARGIN_MS <= pttl <= hi - t0 + MARGIN_MS


def scan_all(client, deadline_s=60.0, max_calls=100_000):
    """Every key SCAN returns, as a set of str (bounded in calls and time)."""
    seen, cursor, calls = set(), 0, 0
    deadline = time.time() + deadline_s
    while True:
        cursor, keys = client.scan(cursor=cursor, count=100)
        seen.update(k.decode() for k in keys)
        calls += 1
        if cursor == 0:
            return seen
        assert calls < max_calls and time.time() < deadline, \
            f"SCAN did not finish: {calls} calls, cursor {cursor}"


def describe_read(value):
    return describe(value)
