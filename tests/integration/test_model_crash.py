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
* fsync everysec: a key deleted before the last completed fsync stays
  deleted. Each round the test thread DELs the keys of its own that the last
  restart found (so they are on flash: DEL must write a tombstone), waits
  until /metrics counts a completed fsync after the replies, and only then
  lets the kill come;
* every policy: a key nobody wrote since the previous restart holds what it
  held then (it was recovered from the flash file; a kill, unlike a power
  loss, loses nothing the file has).

Two writer threads, each owning half of the keys (so each key's writes are in
order), SET values of 4 KiB .. 8 MiB (plain, PX short, PX long), DEL, and
change TTLs (PEXPIRE short or long, PERSIST); the server is killed with
SIGKILL at a random moment of the writing (while writes are in flight),
started again on the same flash file, and every key is read back (GET +
PTTL) and checked; then DBSIZE. A TTL read back must be one the value had:
under none/everysec any of them (a TTL change may be lost with the crash),
under always the last acknowledged one or the one in flight.

TIERKV_MODEL_CRASH_ROUNDS sets the kill/restart rounds (3, or 10 under
./scripts/test.sh torture);
scripts/model-torture.py --only crash --rounds N runs more.
"""
import os
import random
import threading
import time

import pytest
import redis

from conftest import by_tier
from flash_util import MIB, flash_servers, make_value  # noqa: F401
from model_util import (Entry, describe_read, now_ms, pttl_ok, read_values_and_ttls,
                        ttl_interval, value_id, value_size)

# Kill rounds, fills and restarts: seconds each; not in the quick tier.
pytestmark = pytest.mark.slow

# CI: 3 kill rounds; ./scripts/test.sh torture: 10.
ROUNDS = int(os.environ.get("TIERKV_MODEL_CRASH_ROUNDS", by_tier(3, 10)))
SEED = os.environ.get("TIERKV_MODEL_SEED")
WRITERS = 2
KEYS_PER_WRITER = 50
SYNCED_KEYS = 12  # the test thread's own keys, for the everysec DEL clause
FSYNC_WAIT_S = 10.0  # everysec fsyncs every second while flash is dirty
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
        # Deleted, and an fsync completed after the DEL's reply (everysec):
        # must be absent after the crash.
        self.synced_del = None


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
            elif r < 0.20 and log.current is not None:
                wr = change_ttl(c, key, log, rng, r < 0.165)
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


def change_ttl(c, key, log, rng, pexpire):
    """PEXPIRE (short or long) or PERSIST of a key the model has a value for:
    a write of the same value with another expiry. A reply of 0 says the key
    was gone (expired) when the command ran, which must not contradict the
    model; a PERSIST of a key without TTL changes nothing."""
    cur = log.current
    t0 = now_ms()
    if pexpire:
        ttl = rng.randint(*(SHORT_TTL_MS if rng.random() < 0.4 else LONG_TTL_MS))
        wr = Write(Entry(cur.vid, ttl_interval(t0, t0 + 60_000, ttl)), f"PEXPIRE {cur.vid} {ttl}")
        args = ["PEXPIRE", key, ttl]
    else:
        wr = Write(Entry(cur.vid, None), f"PERSIST {cur.vid}")
        args = ["PERSIST", key]
    log.pending = wr
    log.writes.append(wr)
    n = c.execute_command(*args)
    t1 = now_ms()
    if n == 1:
        if cur.state(t0, t1) == "gone" or (not pexpire and cur.exp is None):
            raise AssertionError(f"{' '.join(map(str, args))} replied 1, but the key holds {cur}")
        if pexpire:
            wr.entry.exp = ttl_interval(t0, t1, ttl)
        log.current = wr.entry
    elif not pexpire and cur.exp is None and cur.state(t0, t1) != "gone":
        wr.entry = cur  # nothing to persist: unchanged
    elif cur.state(t0, t1) == "live":
        raise AssertionError(f"{' '.join(map(str, args))} replied {n}, but the key holds {cur}")
    else:
        wr.entry, wr.op = None, wr.op + " (found it expired)"
        log.current = None
    return wr


def check_key(key, log, value, pttl, t0, t1, always):
    """(None, the write that explains the read) if the read fits the contract,
    else (what is wrong, None)."""
    # A key nobody wrote since the last check holds what was read then,
    # whatever the policy: it was recovered from the flash file, and a kill
    # loses no data the file already has (only a power loss could).
    strict = always or not log.touched
    why_strict = "fsync always" if always else "untouched since the last check"
    vid = value_id(key, value)
    if isinstance(vid, str):
        return f"{key!r}: {vid}", None
    pending = [log.pending] if log.pending is not None else []
    if vid is None:
        if pttl != -2:
            return f"{key!r}: GET nil but PTTL {pttl}", None
        if not strict:
            return None, None
        # Absent is right if the last acknowledged state is absent or
        # expired, or the write in flight was a DEL or a write whose
        # expiry may have passed by now.
        e = log.current
        if e is None or e.state(t0, t1) != "live":
            return None, None
        if any(p.entry is None or p.entry.state(t0, t1) != "live" for p in pending):
            return None, None
        return (f"{key!r}: absent after the crash, but its last acknowledged write "
                f"{e} is durable ({why_strict}); writes {log.writes[-4:]}"), None
    if log.synced_del is not None:
        return (f"{key!r}: holds {vid}, but it was deleted and an fsync completed after the "
                f"DEL's reply ({log.synced_del}); writes {log.writes[-4:]}"), None
    # Which writes could have produced this value: any with its value id
    # (SET, or a TTL change of it) under none/everysec; under always only the
    # last acknowledged state or the write in flight.
    sources = [w.entry for w in log.writes if w.entry is not None and w.entry.vid == vid]
    if not sources:
        return f"{key!r}: holds {describe_read(value)}, never written to it", None
    if strict:
        sources = [e for e in [log.current] + [p.entry for p in pending]
                   if e is not None and e.vid == vid]
        if not sources:
            last = log.writes[-4:]
            if log.current is None:
                return (f"{key!r}: holds {vid}, but it was deleted by an acknowledged DEL "
                        f"({why_strict}); writes {last}"), None
            return (f"{key!r}: holds {vid}, not its last acknowledged value {log.current} "
                    f"nor the one in flight ({why_strict}); writes {last}"), None
    live = [e for e in sources if e.state(t0, t1) != "gone"]
    if not live:
        return (f"{key!r}: holds {vid}, though every expiry it was given has passed: "
                f"{sources[-3:]}"), None
    for e in reversed(live):
        if (pttl == -2 and e.state(t0, t1) == "either") or pttl_ok(e, pttl, t0, t1):
            return None, e
    return f"{key!r}: holds {vid} with PTTL {pttl}, which fits none of {live[-3:]}", None


def check_round(s, logs, always, label):
    c = s.client()
    bad, present = [], {}
    keys = list(logs)
    try:
        for i in range(0, len(keys), 8):
            batch = keys[i:i + 8]
            read, t0, t1 = read_values_and_ttls(c, batch)
            for k, value, pttl in read:
                why, entry = check_key(k, logs[k], value, pttl, t0, t1, always)
                if why:
                    bad.append(why)
                elif entry is not None:
                    present[k] = entry
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
        log.synced_del = None
        if log.pending is not None:
            log.pending.acked = True
            log.pending = None
    return len(present)


def fsyncs_completed(s):
    """tierkv_flash_fsyncs_total from /metrics."""
    for line in s.metrics().splitlines():
        if line.startswith("tierkv_flash_fsyncs_total "):
            return int(float(line.split()[1]))
    raise AssertionError("/metrics has no tierkv_flash_fsyncs_total")


def synced_deletes(s, logs, keys, rnd):
    """everysec: DELs the test thread's keys that the last restart found
    (they are on flash, so each DEL must write a tombstone), SETs the others
    (1-2 MiB, so they are on flash by a later round), then waits (bounded)
    until /metrics counts an fsync completed after the replies. From then on
    the deleted keys must stay deleted through the kill."""
    c = s.client()
    deleted = []
    try:
        for i, key in enumerate(keys):
            log = logs[key]
            log.touched = True
            if log.current is not None:
                wr = Write(None, "DEL (then fsync)")
                log.pending = wr
                log.writes.append(wr)
                n = c.delete(key)
                if n == 1:
                    deleted.append(key)
            else:
                vid = (9 * 10**14 + rnd * 1000 + i, MIB + (rnd * 7919 + i * 104729) % MIB)
                wr = Write(Entry(vid), f"SET {vid}")
                log.pending = wr
                log.writes.append(wr)
                assert c.set(key, make_value(key, *vid)) is True
            log.current = wr.entry
            wr.acked = True
            log.pending = None
    finally:
        c.close()
    before = fsyncs_completed(s)
    deadline = time.time() + FSYNC_WAIT_S
    while (after := fsyncs_completed(s)) <= before:
        assert time.time() < deadline, f"no fsync completed in {FSYNC_WAIT_S} s\n{s.log_tail()}"
        time.sleep(0.02)  # polling /metrics, not synchronisation
    for key in deleted:
        logs[key].synced_del = f"tierkv_flash_fsyncs_total {before} -> {after} after it"
    return len(deleted)


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
    synced = [f"s-{i}" for i in range(SYNCED_KEYS)] if fsync == "everysec" else []
    logs.update({k: KeyLog() for k in synced})
    s.start()
    presents, acked, synced_dels = [], 0, 0
    for rnd in range(rounds):
        stop, errors, progress = threading.Event(), [], [0] * WRITERS
        threads = [threading.Thread(target=writer, args=(
            s.port, keys[w], logs, random.Random(rng.random()),
            seed * 1_000_000 + (rnd * WRITERS + w) * 100_000, stop, errors, progress, w))
            for w in range(WRITERS)]
        for t in threads:
            t.start()
        if synced:
            synced_dels += synced_deletes(s, logs, synced, rnd)
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
    if synced:
        print(f"[model {label}] keys deleted and fsynced before the kill: {synced_dels}")
        # The clause was exercised: some restart found keys to delete.
        assert synced_dels > 0, f"[{label}] no key was deleted before an fsync"
    s.kill()
    return presents


@pytest.mark.parametrize("fsync", ["none", "everysec", "always"])
def test_model_crash(flash_servers, fsync):
    presents = crash_model(flash_servers, fsync)
    assert max(presents) > 0, presents
