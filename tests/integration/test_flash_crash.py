"""Crash torture: SIGKILL the server while clients write, start it again on the
same flash file, and check every key.

A key is either absent or exactly one of the values acknowledged for it (or
the one write that was in flight at the kill: the server may have applied it
without getting to answer). Never a corrupt or mixed value. With
--flash-fsync always a SET is acknowledged only once it is durable, and a
DEL only once its tombstone is (DEL waits for it), so the key must hold
exactly its last acknowledged state: the last value, or absent after a DEL
(or the state the write in flight would leave).

TIERKV_TORTURE_ROUNDS sets the number of kill/restart rounds (3, or 10 under
./scripts/test.sh torture).
"""
import os
import random
import re
import threading
import time

import pytest
import redis

from conftest import by_tier
from flash_util import MIB, flash_servers, make_value, read_values  # noqa: F401

# Kill rounds, fills and restarts: seconds each; not in the quick tier.
pytestmark = pytest.mark.slow

# CI: 3 kill rounds; ./scripts/test.sh torture: 10.
ROUNDS = int(os.environ.get("TIERKV_TORTURE_ROUNDS", by_tier(3, 10)))
WRITERS = 2
KEYS_PER_WRITER = 40
WRITE_CAP_PER_ROUND = 24 * MIB  # per writer: keeps the whole run inside the flash file
SIZES = (4096, 60_000, 300_000, 1_100_000, 2 * MIB + 17, 5 * MIB + 123)
DELETED = "deleted"  # a value id: the key was deleted

_HEADER = re.compile(rb"^<([^|]*)\|(\d+)\|(\d+)\|[0-9a-f]{40}>")


def value_id(key, value):
    """(seed, size) of a value made by make_value for this key, None for nil,
    or a description of what is wrong with it."""
    if value is None:
        return None
    m = _HEADER.match(value[:200])
    if not m:
        return f"corrupt: no header ({len(value)} bytes, starts {value[:40]!r})"
    name, seed, size = m.group(1).decode(), int(m.group(2)), int(m.group(3))
    if name != key:
        return f"corrupt: value of key {name!r}"
    if len(value) != size or value != make_value(key, seed, size):
        return f"corrupt: header says seed {seed}, {size} bytes; got {len(value)} bytes, mixed"
    return (seed, size)


class Model:
    """What each key may hold: its value at the last check (baseline) and,
    since then, the acknowledged writes in order and the one in flight."""

    def __init__(self, keys):
        self.baseline = {k: None for k in keys}
        self.acked = {k: [] for k in keys}
        self.pending = {}

    def allowed(self, key, fsync_always):
        acked = [None if v == DELETED else v for v in self.acked[key]]
        pending = [None if self.pending[key] == DELETED else self.pending[key]] \
            if key in self.pending else []
        if not fsync_always:
            return {None, self.baseline[key], *acked, *pending}
        # An acknowledged DEL is as durable as a SET: its reply waited for
        # the tombstone to be fsynced.
        last = acked[-1] if acked else self.baseline[key]
        return {last, *pending}

    def settle(self, observed):
        """After a check, what was read is the new baseline."""
        self.baseline.update(observed)
        for k in self.acked:
            self.acked[k] = []
        self.pending.clear()


def writer(port, keys, model, rng, seed_base, stop, errors, progress, w):
    """SETs (and a few DELs) until the kill; progress[w] counts bytes acknowledged."""
    c = redis.Redis(host="127.0.0.1", port=port, socket_timeout=20)
    n = 0
    try:
        while not stop.is_set() and progress[w] < WRITE_CAP_PER_ROUND:
            key = rng.choice(keys)
            n += 1
            if rng.random() < 0.1:
                vid = DELETED
                model.pending[key] = vid
                c.delete(key)
            else:
                vid = (seed_base + n, rng.choice(SIZES))
                model.pending[key] = vid
                assert c.set(key, make_value(key, *vid)) is True
            del model.pending[key]
            model.acked[key].append(vid)
            progress[w] += 0 if vid == DELETED else vid[1]
    except (redis.ConnectionError, redis.TimeoutError):
        pass  # the kill: what was in flight stays pending
    except Exception as e:  # noqa: BLE001 - reported to the test thread
        errors.append(repr(e)[:300])  # redis-py quotes the whole command
    finally:
        c.close()


def check_round(s, model, fsync_always, round_no):
    got = read_values(s, list(model.baseline), connections=2)
    observed, bad = {}, []
    for key, value in got.items():
        vid = value_id(key, value)
        allowed = model.allowed(key, fsync_always)
        if vid not in allowed:
            bad.append((key, vid, sorted(map(str, allowed))))
        observed[key] = vid
    assert not bad, (f"round {round_no}: {len(bad)} keys wrong after restart, "
                     f"first (key, read, allowed): {bad[:4]}\n{s.log_tail()}")
    model.settle(observed)
    return sum(1 for v in observed.values() if v is not None)


def preload(s, model, rng):
    """Every key once, acknowledged: about 3.5 times the memory, so most of it
    is on flash before the first kill."""
    c = s.client()
    pipe = c.pipeline(transaction=False)
    vids = {}
    for i, key in enumerate(model.baseline):
        vids[key] = ((1 << 40) + i, rng.choice(SIZES))
        pipe.set(key, make_value(key, *vids[key]))
    replies = pipe.execute(raise_on_error=False)
    bad = [(key, str(r)[:200]) for key, r in zip(vids, replies) if r is not True]
    assert not bad, f"preload: {len(bad)} SETs failed, first: {bad[:3]}\n{s.log_tail()}"
    for key, vid in vids.items():
        model.acked[key].append(vid)
    c.close()


def torture(flash_servers, fsync, policy="on_evict"):
    flash_mib = max(256, ROUNDS * WRITERS * WRITE_CAP_PER_ROUND // MIB * 2)
    s = flash_servers(memory="16mb", flash_size=f"{flash_mib}mb",
                      extra=("--region-size", "8mb", "--flash-preallocate", "no",
                             "--flash-fsync", fsync, "--offload-policy", policy))
    fsync_always = fsync == "always"
    keys = [[f"w{w}-{i}" for i in range(KEYS_PER_WRITER)] for w in range(WRITERS)]
    model = Model([k for ks in keys for k in ks])
    rng = random.Random(f"torture-{fsync}-{policy}")
    total_acked, presents = 0, []
    s.start()
    preload(s, model, rng)
    for round_no in range(ROUNDS):
        stop, errors, progress = threading.Event(), [], [0] * WRITERS
        threads = [threading.Thread(target=writer, args=(
            s.port, keys[w], model, random.Random(rng.random()), (round_no * WRITERS + w) << 20,
            stop, errors, progress, w)) for w in range(WRITERS)]
        for t in threads:
            t.start()
        # Kill at a random point of the writing, while SETs are in flight.
        kill_at = rng.uniform(0.1, 0.9) * WRITE_CAP_PER_ROUND * WRITERS
        deadline = time.time() + 20
        while sum(progress) < kill_at and time.time() < deadline and not errors:
            time.sleep(0.002)
        s.kill()
        stop.set()
        for t in threads:
            t.join(30)
        assert not errors, f"round {round_no}: writer failed: {errors}\n{s.log_tail()}"
        acked = sum(len(v) for v in model.acked.values())
        assert acked > 0, f"round {round_no}: no write was acknowledged\n{s.log_tail()}"
        total_acked += acked
        s.start()
        presents.append(check_round(s, model, fsync_always, round_no))
    s.kill()
    return total_acked, presents


def test_crash_torture_fsync_none(flash_servers):
    acked, presents = torture(flash_servers, "none")
    assert acked >= ROUNDS
    # The preload went through memory and eviction to flash; a crash loses
    # what was only in memory, but what was on flash survives.
    assert presents[0] > 0, f"no key survived the first crash: {presents}"


def test_crash_torture_fsync_always(flash_servers):
    acked, presents = torture(flash_servers, "always")
    assert acked >= ROUNDS
    assert min(presents) > 0, presents


def test_crash_torture_write_through(flash_servers):
    acked, presents = torture(flash_servers, "none", "write_through")
    assert acked >= ROUNDS
    # Every SET was queued to flash at once: most keys outlive each crash.
    assert min(presents) > 0, presents
