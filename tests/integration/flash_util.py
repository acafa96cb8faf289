"""Helpers for the over-the-wire flash tests (tests/integration/test_flash_*.py).

A FlashServer is one tierkv-server bound to a work directory whose flash
file outlives the process: stop() (SIGTERM), kill() (SIGKILL) and start()
again with the same flags recover what the previous run left on flash.

Values are generated deterministically from (key, seed, size), so a test can
check every byte it reads without keeping the values: make_value() lays a
per-value header over a rotation of one random block, and check_value()
regenerates and compares.
"""
import hashlib
import os
import random
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import urllib.request

import pytest
import redis

from conftest import TIERKV_SERVER, free_ports, note_server_log, wait_for_port, wait_loaded

KIB = 1 << 10
MIB = 1 << 20

# The fields the "# Flash" INFO section must have.
FLASH_INFO_FIELDS = (
    "flash_enabled", "flash_used_bytes", "flash_free_bytes", "flash_objects", "flash_chunks",
    "flash_regions", "flash_reclaims", "flash_reinsertions", "flash_reads", "flash_read_bytes",
    "flash_write_bytes", "flash_write_amplification", "flash_checksum_failures",
    "flash_write_errors", "promotions_attempted", "promotions_done", "promotions_failed",
    "offload_queue_bytes", "dirty_bytes", "writeback_inflight_bytes", "writeback_objects",
    "writeback_bytes")


class FlashServer:
    """A tierkv-server whose work directory (and flash file) survives restarts.

    Every start() picks fresh ports, so a restart never races the previous
    process's sockets; the log of every run is appended to server.log.

    A test gives itself the flash it needs: which objects a reclaim drops is
    not the test's to choose, so the flash_servers fixture fails a test whose
    servers reclaimed (INFO flash_reclaims, summed over its runs) unless it
    passed reclaim_ok=True, and then it must assert only what it controls."""

    def __init__(self, workdir, memory="64mb", flash_size="256mb", flash_path=None, extra=(),
                 reclaim_ok=False):
        self.reclaim_ok = reclaim_ok
        self.reclaims = 0  # flash_reclaims of the runs that ended
        self.workdir = workdir
        self.flash_path = flash_path or os.path.join(workdir, "flash.dat")
        self.memory = memory
        self.flash_size = flash_size
        self.extra = list(extra)
        self.log_path = os.path.join(workdir, "server.log")
        note_server_log(self.log_path)
        self.proc = None
        self.port = None
        self.metrics_port = None
        self.starts = 0

    def argv(self):
        return [TIERKV_SERVER, "--port", str(self.port), "--bind", "127.0.0.1",
                "--metrics-port", str(self.metrics_port), "--memory", self.memory,
                "--flash-path", self.flash_path, "--flash-size", self.flash_size, *self.extra]

    def start(self, timeout=60.0, loaded=True):
        """Starts the server and, with `loaded`, waits for its flash index to
        load (until then data commands answer -LOADING)."""
        assert self.proc is None or self.proc.poll() is not None, "server already running"
        self.port, self.metrics_port = free_ports(2)
        self.starts += 1
        with open(self.log_path, "ab") as log:
            log.write(b"\n=== start %d: %s\n" % (self.starts, " ".join(self.argv()).encode()))
            log.flush()
            self.proc = subprocess.Popen(self.argv(), stdout=log, stderr=subprocess.STDOUT,
                                         cwd=self.workdir)
        try:
            wait_for_port(self.port, self.proc, timeout)
            if loaded:
                wait_loaded(self.port, self.proc, timeout)
        except RuntimeError as e:
            raise AssertionError(f"{e}\n--- server log ---\n{self.log_tail()}") from None
        return self

    def count_reclaims(self):
        """Adds this run's flash_reclaims to self.reclaims, before it ends. A
        server that does not answer (stopped, or asking for a password) is
        not counted."""
        if not self.alive():
            return
        c = self.client(socket_timeout=2)
        try:
            c.set_response_callback("INFO", lambda r, **kw: r)
            fields, _ = parse_info(c.execute_command("INFO", "flash").decode())
            self.reclaims += int(fields.get("flash_reclaims", 0))
        except (redis.RedisError, OSError):
            pass
        finally:
            c.close()

    def stop(self, timeout=60.0):
        """SIGTERM and wait: a clean shutdown. Returns the exit code."""
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        self.count_reclaims()
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"server did not exit within {timeout}s of SIGTERM\n"
                                 f"{self.log_tail()}") from None

    def kill(self):
        """SIGKILL: a crash; nothing gets a chance to flush."""
        if self.proc is not None and self.proc.poll() is None:
            self.count_reclaims()
            self.proc.kill()
            self.proc.wait()

    def restart(self):
        code = self.stop()
        assert code == 0, f"clean shutdown exited with {code}\n{self.log_tail()}"
        return self.start()

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def client(self, **kw):
        kw.setdefault("socket_timeout", 60)
        return redis.Redis(host="127.0.0.1", port=self.port, **kw)

    def info(self, section="flash"):
        """INFO <section> as (dict of str -> str, list of section titles)."""
        c = self.client()
        try:
            c.set_response_callback("INFO", lambda r, **kw: r)
            text = c.execute_command("INFO", section).decode()
        finally:
            c.close()
        return parse_info(text)

    def flash_info(self):
        """The "# Flash" INFO section as a dict; fails if the section is absent."""
        fields, titles = self.info("flash")
        assert "Flash" in titles, f"INFO flash has no '# Flash' section: titles={titles}"
        return fields

    def metrics(self):
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        return urllib.request.urlopen(url, timeout=10).read().decode()

    def log_text(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode(errors="replace")

    def log_tail(self, lines=30):
        return "\n".join(self.log_text().splitlines()[-lines:])


def parse_info(text):
    fields, titles = {}, []
    for line in text.splitlines():
        if line.startswith("#"):
            titles.append(line[1:].strip())
        elif ":" in line:
            k, v = line.split(":", 1)
            fields[k] = v
    return fields, titles


def num(fields, name):
    """A numeric INFO field; fails with the field list if it is missing."""
    assert name in fields, f"INFO has no '{name}': {sorted(fields)}"
    return float(fields[name])


@pytest.fixture
def flash_servers():
    """Makes FlashServers, each in its own temp dir; all stopped and removed afterwards."""
    made = []

    def make(**kw):
        d = tempfile.mkdtemp(prefix="tierkv-flash-")
        s = FlashServer(d, **kw)
        made.append(s)
        return s

    yield make
    for s in made:
        s.kill()
        shutil.rmtree(s.workdir, ignore_errors=True)
    for s in made:
        assert s.reclaim_ok or s.reclaims == 0, (
            f"flash reclaimed {s.reclaims} times under a test that did not expect it: give it "
            f"more flash (flash_size={s.flash_size}), or pass reclaim_ok=True and assert only "
            f"what it controls")


# --- deterministic values ----------------------------------------------------

# Not a multiple of any chunk size: consecutive chunks of one value start at
# different phases of the block, so a chunk served at the wrong index shows.
_BLOCK_LEN = MIB + 4093
_BLOCK = random.Random(0x7165).randbytes(_BLOCK_LEN)


def make_value(key, seed, size):
    """`size` bytes that depend on key, seed and size only.

    A header names them (so a mixed-up value says where it came from); the
    rest is the block, rotated by an offset hashed from them."""
    if isinstance(key, str):
        key = key.encode()
    digest = hashlib.sha1(b"%s/%d/%d" % (key, seed, size)).digest()
    header = b"<%s|%d|%d|%s>" % (key, seed, size, digest.hex().encode())
    if size <= len(header):
        return header[:size]
    body = size - len(header)
    start = int.from_bytes(digest[:4], "little") % _BLOCK_LEN
    parts = [header]
    view = memoryview(_BLOCK)
    while body > 0:
        piece = view[start:start + body]
        parts.append(piece)
        body -= len(piece)
        start = 0
    return b"".join(parts)


def describe(value):
    """Where a value came from, for assertion messages."""
    if value is None:
        return "nil"
    head = bytes(value[:120])
    end = head.find(b">")
    return f"{len(value)} bytes, header {head[:end + 1] if end >= 0 else head!r}"


def log_uniform_sizes(rng, total_bytes, low, high):
    """Sizes log-uniform in [low, high] until they add up to total_bytes."""
    sizes, total = [], 0
    lo, hi = low.bit_length() - 1, high.bit_length() - 1
    while total < total_bytes:
        n = min(high, max(low, int(2 ** rng.uniform(lo, hi))))
        n = min(n, total_bytes - total) if total_bytes - total >= low else n
        sizes.append(n)
        total += n
    return sizes


def wait_until(predicate, timeout, interval=0.1):
    """True once predicate() is true; False after timeout."""
    deadline = time.time() + timeout
    while True:
        if predicate():
            return True
        if time.time() >= deadline:
            return False
        time.sleep(interval)


# --- bulk writes and checked reads ------------------------------------------

def _batches(items, batch_bytes):
    batch, size = [], 0
    for item in items:
        batch.append(item)
        size += item[2]
        if size >= batch_bytes:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


def _run_striped(server, items, connections, work):
    """Runs work(client, share) on `connections` threads, each with its own
    connection and every connections-th item; re-raises the first failure."""
    from concurrent.futures import ThreadPoolExecutor

    def one(i):
        c = server.client()
        try:
            return work(c, items[i::connections])
        finally:
            c.close()

    with ThreadPoolExecutor(connections) as pool:
        return [f.result() for f in [pool.submit(one, i) for i in range(connections)]]


def write_values(server, items, connections=3, batch_bytes=16 * MIB):
    """SETs make_value(key, seed, size) for every (key, seed, size) item,
    pipelined; fails unless every SET answered OK."""

    def work(c, share):
        for batch in _batches(share, batch_bytes):
            pipe = c.pipeline(transaction=False)
            for key, seed, size in batch:
                pipe.set(key, make_value(key, seed, size))
            replies = pipe.execute(raise_on_error=False)
            bad = [(b[0], str(r)[:200]) for b, r in zip(batch, replies) if r is not True]
            assert not bad, f"{len(bad)} SETs failed, first: {bad[:3]}\n{server.log_tail()}"

    _run_striped(server, items, connections, work)


def read_values(server, keys, connections=3, batch_keys=16):
    """GETs every key, pipelined; returns {key: value or None}."""

    def work(c, share):
        got = {}
        for i in range(0, len(share), batch_keys):
            batch = share[i:i + batch_keys]
            pipe = c.pipeline(transaction=False)
            for key in batch:
                pipe.get(key)
            got.update(zip(batch, pipe.execute()))
        return got

    out = {}
    for part in _run_striped(server, list(keys), connections, work):
        out.update(part)
    return out


def mismatches(items, got, allow_missing=False):
    """The (key, what was read, what was expected) of every item whose value
    was not read back exactly (or, with allow_missing, was neither exact nor nil)."""
    bad = []
    for key, seed, size in items:
        value = got[key]
        if value is None and allow_missing:
            continue
        if value is None or len(value) != size or value != make_value(key, seed, size):
            bad.append((key, describe(value), f"seed {seed}, {size} bytes"))
    return bad


def check_values(server, items, connections=3, allow_missing=False):
    """Reads every item back; fails listing the first mismatches."""
    got = read_values(server, [k for k, _, _ in items], connections)
    bad = mismatches(items, got, allow_missing)
    assert not bad, f"{len(bad)} of {len(items)} keys wrong, first: {bad[:5]}"
    return got


def tier_stat(client, key):
    """TIER.STAT as a dict (str keys), chunk_residency as a list of dicts."""

    def as_dict(flat):
        return {flat[i].decode(): flat[i + 1] for i in range(0, len(flat), 2)}

    reply = client.execute_command("TIER.STAT", key)
    if reply is None:
        return None
    stat = as_dict(reply)
    stat["chunk_residency"] = [as_dict(c) for c in stat["chunk_residency"]]
    return stat


def residencies(client, key):
    stat = tier_stat(client, key)
    assert stat is not None and stat["size"] > 0, f"TIER.STAT {key!r}: key is gone: {stat}"
    return [c["residency"].decode() for c in stat["chunk_residency"]]


def execs_torn_while(s, key, churn, gets=300):
    """Runs EXECs of `EXISTS key`, `gets` GETs, `EXISTS key` from another
    client while churn() runs; returns (EXECs run, those whose two EXISTS
    differed). A write that lands between commands never tears one."""
    reader = s.client()
    reader.set("filler", "x")
    stop = threading.Event()
    torn, execs = [], [0]

    def read():
        while not stop.is_set() and execs[0] < 100_000:
            p = reader.pipeline(transaction=True)
            p.exists(key)
            for _ in range(gets):
                p.get("filler")
            p.exists(key)
            got = p.execute()
            execs[0] += 1
            if got[0] != got[-1]:
                torn.append((got[0], got[-1]))

    t = threading.Thread(target=read)
    t.start()
    try:
        churn()
    finally:
        stop.set()
        t.join(timeout=60)
    return execs[0], len(torn)


def on_flash_only(client, keys):
    """True if no chunk of any key in `keys` is in memory."""
    return all(set(residencies(client, k)) == {"flash"} for k in keys)


def push_out(client, keys, prefix="fill", size=MIB, limit=2000):
    """Writes filler values of `size` bytes (`prefix`:0, :1, ...) until every
    key in `keys` (a key or a list) lives on flash only; returns the filler
    keys written, for the caller to delete. Bounded by `limit` values."""
    keys = [keys] if isinstance(keys, (str, bytes)) else list(keys)
    filler = b"f" * size
    for i in range(limit):
        client.set(f"{prefix}:{i}", filler)
        if i % 4 == 3 and on_flash_only(client, keys):
            return [f"{prefix}:{j}" for j in range(i + 1)]
    raise AssertionError(f"{keys} never left memory: {[residencies(client, k) for k in keys]}")
