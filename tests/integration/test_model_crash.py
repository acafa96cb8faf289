"""Model-based crash test (kill -9) for each flash-fsync policy; the contract
is in docs/contract.md:

* every policy: a key is absent or holds exactly a value that was written to
  it at some point (never a torn or mixed value, never another key's), and
  never a value whose own expiry (SET ... PX) has passed; its PTTL is the one
  that value was written with;
* fsync always: a key holds the value of its last acknowledged write, or of
  the write that was in flight when the server was killed (so an acknowledged
  SET is never lost unless superseded by a later write of the key), and an
  acknowledged DEL stays deleted;
* every policy: a key nobody wrote since the previous restart holds what it
  held then (it was recovered from the flash file; a kill, unlike a power
  loss, loses nothing the file has).

Two writer threads, each owning half of the keys (so each key's writes are in
order), SET values of 4 KiB .. 8 MiB (plain, PX short, PX long) and DEL; the
server is killed with SIGKILL at a random moment of the writing (while
writes are in flight), started again on the same flash file, and every key is
read back (GET + PTTL) and checked; then DBSIZE.

TIERKV_MODEL_CRASH_ROUNDS sets the kill/restart rounds (default 10);
scripts/model-torture.py --only crash --rounds N runs more.
"""
import os
import random
import threading
import time

import pytest
import redis

from flash_util import MIB, flash_servers, make_value  # noqa: F401
from model_util import (Entry, describe_read, now_ms, pttl_ok, read_values_and_ttls,
                        ttl_interval, value_id, value_size)

ROUNDS = int(os.environ.get("TIERKV_MODEL_CRASH_ROUNDS", "10"))
SEED = os.environ.get("TIERKV_MODEL_SEED")
WRITERS = 2
KEYS_PER_WRITER = 50
WRITE_CAP_PER_ROUND = 40 * MIB  # per writer
SHORT_TTL_MS = (100, 3000)
LONG_TTL_MS = (600_000, 3_600_000)
DELETED = "deleted"


class Write:
    """One write of a key: a value (Entry with its expiry) or DELETED."""
    __slots__ = ("entry", "acked", "op")

    def __init__(self, entry, op):
        self.entry = entry  # None for DEL
        self.acked = False
        self.op = op

    def __repr__(self):
        return f"{self.op}{'' if self.acked else ' (in flight)'}"


class KeyLog:
    """Every write of one key, in order; `current` is the key's state after
    the last check plus the acknowledged writes since."""

    def __init__(self):
        self.writes = []  # since the start: every value ever written is allowed (none/everysec)
        self.current = None  # Entry after the last acknowledged write (None: absent)
        self.pending = None  # the write in flight at the kill, if any
        self.touched = False  # written (or tried) since the last check


def writer(port, keys, logs, rng, seed_base, stop, errors, progress, w):
    c = redis.Redis(host="127.0.0.1", port=port, socket_timeout=30)
    n = 0
    try:
        while not stop.is_set() and progress[w] < WRITE_CAP_PER_ROUND:
            key = rng.choice(keys)
            log = logs[key]
            log.touched = True
            n += 1
            r = rng.random()
            if r < 0.12:
                wr = Write(None, "DEL")
                log.pending = wr
                log.writes.append(wr)
                c.delete(key)
                log.current = None
            else:
                vid = (seed_base + n, value_size(rng))
                ttl = None
                if r < 0.25:
                    ttl = rng.randint(*SHORT_TTL_MS)
                elif r < 0.32:
                    ttl = rng.randint(*LONG_TTL_MS)
                args = ["SET", key, make_value(key, *vid)] + (["PX", ttl] if ttl else [])
                t0 = now_ms()
                # The interval is widened to the worst case before the send, so
                # that a write in flight at the kill has a sound expiry too.
                wr = Write(Entry(vid, ttl_interval(t0, t0 + 60_000, ttl) if ttl else None),
                           f"SET {vid} px={ttl}")
                log.pending = wr
                log.writes.append(wr)
                reply = c.execute_command(*args)
                if reply is not True:
                    raise AssertionError(f"SET {key} replied {reply!r}")
                if ttl:
                    wr.entry.exp = ttl_interval(t0, now_ms(), ttl)
                log.current = wr.entry
                progress[w] += vid[1]
            wr.acked = True
            log.pending = None
    except (redis.ConnectionError, redis.TimeoutError):
        pass  # the kill: what was in flight stays pending
    except Exception as e:  # noqa: BLE001 - reported to the test thread
        errors.append(repr(e)[:300])
    finally:
        c.close()


def check_key(key, log, value, pttl, t0, t1, always):
    """None if the read fits the contract, else what is wrong."""
    # A key nobody wrote since the last check holds what was read then,
    # whatever the policy: it was recovered from the flash file, and a kill
    # loses no data the file already has (only a power loss could).
    strict = always or not log.touched
    why_strict = "fsync always" if always else "untouched since the last check"
    vid = value_id(key, value)
    if isinstance(vid, str):
        return f"{key!r}: {vid}"
    pending = [log.pending] if log.pending is not None else []
    if vid is None:
        if pttl != -2:
            return f"{key!r}: GET nil but PTTL {pttl}"
        if not strict:
            return None
        # Absent is right if the last acknowledged state is absent or
        # expired, or the write in flight was a DEL or a SET whose own
        # expiry may have passed by now.
        e = log.current
        if e is None or e.state(t0, t1) != "live":
            return None
        if any(p.entry is None or p.entry.state(t0, t1) != "live" for p in pending):
            return None
        return (f"{key!r}: absent after the crash, but its last acknowledged write "
                f"{e} is durable ({why_strict}); writes {log.writes[-4:]}")
    # Which writes could have produced this value.
    sources = [w for w in log.writes if w.entry is not None and w.entry.vid == vid]
    if not sources:
        return f"{key!r}: holds {describe_read(value)}, never written to it"
    e = sources[-1].entry
    if e.state(t0, t1) == "gone":
        return f"{key!r}: holds {vid}, written with an expiry that has passed: {e}"
    if strict:
        allowed = [log.current] + [p.entry for p in pending]
        if not any(a is not None and a.vid == vid for a in allowed):
            last = log.writes[-4:]
            if log.current is None:
                return (f"{key!r}: holds {vid}, but it was deleted by an acknowledged DEL "
                        f"({why_strict}); writes {last}")
            return (f"{key!r}: holds {vid}, not its last acknowledged value {log.current} "
                    f"nor the one in flight ({why_strict}); writes {last}")
    if not (pttl == -2 and e.state(t0, t1) == "either") and not pttl_ok(e, pttl, t0, t1):
        return f"{key!r}: holds {vid} with PTTL {pttl}, written with {e}"
    return None


def check_round(s, logs, always, label):
    c = s.client()
    bad, present = [], {}
    keys = list(logs)
    try:
        for i in range(0, len(keys), 8):
            batch = keys[i:i + 8]
            read, t0, t1 = read_values_and_ttls(c, batch)
            for k, value, pttl in read:
                why = check_key(k, logs[k], value, pttl, t0, t1, always)
                if why:
                    bad.append(why)
                vid = value_id(k, value)
                if vid is not None and not isinstance(vid, str):
                    present[k] = next(w.entry for w in reversed(logs[k].writes)
                                      if w.entry is not None and w.entry.vid == vid)
        d0 = now_ms()
        dbsize = c.dbsize()
        d1 = now_ms()
    finally:
        c.close()
    sure = sum(1 for e in present.values() if e.state(d0, d1) == "live")
    if not sure <= dbsize <= len(present):
        bad.append(f"DBSIZE {dbsize}, expected between {sure} (surely live) and {len(present)} "
                   f"(read present)")
    if bad:
        head = "\n  ".join(bad[:12])
        raise AssertionError(f"[{label}] {len(bad)} keys wrong after the crash "
                             f"({len(present)} present of {len(keys)}):\n  {head}\n"
                             f"--- server log ---\n{s.log_tail(12)}")
    # What was read is what the keys hold now.
    for k, log in logs.items():
        log.current = present.get(k)
        log.touched = False
        if log.pending is not None:
            log.pending.acked = True
            log.pending = None
    return len(present)


def crash_model(flash_servers, fsync, rounds=ROUNDS, seed=None):
    if seed is None:
        seed = int(SEED) if SEED else sum(map(ord, fsync)) * 104729
    label = f"crash-{fsync} seed={seed}"
    print(f"\n[model {label}] rounds={rounds}")
    flash_mib = max(512, rounds * WRITERS * WRITE_CAP_PER_ROUND // MIB * 2)
    s = flash_servers(memory="32mb", flash_size=f"{flash_mib}mb",
                      extra=("--region-size", "8mb", "--flash-preallocate", "no",
                             "--flash-fsync", fsync))
    always = fsync == "always"
    rng = random.Random(seed)
    keys = [[f"c{w}-{i}" for i in range(KEYS_PER_WRITER)] for w in range(WRITERS)]
    logs = {k: KeyLog() for ks in keys for k in ks}
    s.start()
    presents, acked = [], 0
    for rnd in range(rounds):
        stop, errors, progress = threading.Event(), [], [0] * WRITERS
        threads = [threading.Thread(target=writer, args=(
            s.port, keys[w], logs, random.Random(rng.random()),
            seed * 1_000_000 + (rnd * WRITERS + w) * 100_000, stop, errors, progress, w))
            for w in range(WRITERS)]
        for t in threads:
            t.start()
        kill_at = rng.uniform(0.1, 0.9) * WRITE_CAP_PER_ROUND * WRITERS
        deadline = time.time() + 30
        while sum(progress) < kill_at and time.time() < deadline and not errors:
            time.sleep(0.002)  # polling the writers' progress, not synchronisation
        s.kill()
        stop.set()
        for t in threads:
            t.join(30)
        assert not any(t.is_alive() for t in threads), "a writer did not stop"
        assert not errors, f"[{label}] round {rnd}: writer failed: {errors}\n{s.log_tail()}"
        acked += sum(1 for log in logs.values() for w in log.writes if w.acked)
        s.start()
        presents.append(check_round(s, logs, always, f"{label} round {rnd}"))
    print(f"[model {label}] keys present after each crash {presents}")
    s.kill()
    return presents


@pytest.mark.parametrize("fsync", ["none", "everysec", "always"])
def test_model_crash(flash_servers, fsync):
    presents = crash_model(flash_servers, fsync)
    assert max(presents) > 0, presents
