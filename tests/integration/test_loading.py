"""The server while its flash index loads (issue 13): connections are
accepted at once, data commands answer -LOADING, PING, INFO and /metrics
work, INFO # Persistence shows the progress with Redis's field names, and
once loaded every key is there, exactly.

The flash image (1 GiB of values, 4 KiB-4 MiB) is made once per module: a
clean SHUTDOWN puts everything on flash, then a start and a kill -9, so that
every start after it recovers by scanning the device (a start after kill -9
never uses a snapshot). The scan reads about 1 GiB, and sleeps per record
(key-load-delay), so that it can be watched whatever the device's speed. Side by side with redis-server where Redis has the
behaviour: a redis-server loading a slowed-down RDB answers the same texts.
"""
import os
import random
import re
import shutil
import subprocess
import tempfile
import time

import pytest
import redis
from redis.backoff import ConstantBackoff
from redis.retry import Retry

from conftest import REDIS_SERVER, RawClient, free_port, is_loading, wait_for_port, wait_loaded
from flash_util import MIB, FlashServer, check_values, log_uniform_sizes, parse_info, write_values

# A 1 GiB image, scanned on every start: not in the quick tier.
pytestmark = pytest.mark.slow

# The scan of a 1 GiB image served from the page cache can end within a few
# commands; key-load-delay (as Redis's) makes every start load for seconds.
FLAGS = ("--region-size", "16mb", "--flash-preallocate", "no", "--key-load-delay", "2000")
FILL_MIB = 1024
LOADING = b"-LOADING tierkv is loading the dataset in memory\r\n"
REDIS_LOADING = b"-LOADING Redis is loading the dataset in memory\r\n"


@pytest.fixture(scope="module")
def image():
    """A FlashServer (stopped) whose flash file holds `items` and must be scanned."""
    d = tempfile.mkdtemp(prefix="tierkv-loading-")
    s = FlashServer(d, memory="32mb", flash_size="1536mb", extra=FLAGS)
    sizes = log_uniform_sizes(random.Random(13), FILL_MIB * MIB, 4096, 4 * MIB)
    items = [(f"k{i}", 13, n) for i, n in enumerate(sizes)]
    s.start()
    write_values(s, items)
    assert s.stop() == 0, s.log_tail()
    s.start()  # whatever this one loads from, the next start after kill -9 scans
    s.kill()
    yield s, items
    s.kill()
    shutil.rmtree(d, ignore_errors=True)


def persistence(port):
    c = RawClient(port)
    try:
        reply = c.call("INFO", "persistence")
    finally:
        c.close()
    assert reply.startswith(b"$"), reply
    return parse_info(reply.decode())[0]


def watch_loading(s, started_s):
    """INFO samples while loading:1 (the last one says loading:0)."""
    samples = []
    deadline = time.time() + 120
    while time.time() < deadline:
        f = persistence(s.port)
        samples.append(f)
        if f["loading"] == "0":
            return samples
        assert f["async_loading"] == "0"
        assert f["loading_source"] == "scan", f
        assert started_s - 1 <= int(f["loading_start_time"]) <= time.time() + 1, f
        total, done = int(f["loading_total_bytes"]), int(f["loading_loaded_bytes"])
        assert 0 <= done <= total, f
        if total:
            assert float(f["loading_loaded_perc"]) == pytest.approx(done * 100 / total, abs=0.01)
        assert int(f["loading_eta_seconds"]) >= 0, f
    raise AssertionError(f"still loading after 120 s: {samples[-1]}")


def test_loading_answers_then_every_key_is_there(image):
    s, items = image
    started = time.time()
    s.start(loaded=False)
    raw = RawClient(s.port)
    assert raw.call("INFO", "persistence").find(b"loading:1\r\n") > 0, "loaded too fast to watch"
    # Connections are served at once: PING, and data commands answer -LOADING.
    assert raw.call("PING") == b"+PONG\r\n"
    assert raw.call("GET", "k0") == LOADING
    assert raw.call("SET", "k0", "x") == LOADING
    assert raw.call("SET", "big", b"v" * (2 * MIB)) == LOADING  # streamed: skipped, not stored
    assert raw.call("DBSIZE") == LOADING
    assert raw.call("CONFIG", "SET", "timeout", "0") == LOADING
    assert raw.call("CONFIG", "GET", "timeout") == b"*2\r\n$7\r\ntimeout\r\n$1\r\n0\r\n"
    keyspace = raw.call("INFO", "keyspace")
    metrics = s.metrics()
    still = is_loading(s.port)
    assert still, "loaded too fast to watch"
    assert b"db0:" not in keyspace
    assert re.search(r"^tierkv_loading 1$", metrics, re.M), metrics
    # The total is known once the region headers are read, a moment after
    # loading began (a loaded machine made that moment visible).
    deadline = time.time() + 10
    while (not re.search(r"^tierkv_loading_total_bytes [1-9]", metrics, re.M)
           and re.search(r"^tierkv_loading 1$", metrics, re.M) and time.time() < deadline):
        time.sleep(0.01)
        metrics = s.metrics()
    assert re.search(r"^tierkv_loading_total_bytes [1-9]", metrics, re.M), metrics
    samples = watch_loading(s, started)
    loading = [f for f in samples if f["loading"] == "1"]
    assert len({f["loading_loaded_bytes"] for f in loading}) >= 2, loading[:3]
    done = samples[-1]
    assert done["loading_source"] == "scan"
    assert int(done["recovery_objects"]) == len(items), done
    assert int(done["recovery_bytes"]) == int(loading[-1]["loading_total_bytes"]), done
    assert int(done["recovery_duration_ms"]) > 0 and float(done["recovery_rate_mb_s"]) > 0, done
    metrics = s.metrics()
    assert re.search(r"^tierkv_loading 0$", metrics, re.M), metrics
    assert re.search(rf"^tierkv_recovery_bytes {done['recovery_bytes']}$", metrics, re.M)
    assert re.search(r"^tierkv_recovery_duration_seconds 0*[0-9]+\.[0-9]{6}$", metrics, re.M)
    # Everything is there, exactly; the log says where the index came from.
    assert raw.call("DBSIZE") == b":%d\r\n" % len(items)
    check_values(s, items)
    assert re.search(rf"flash index loaded from scan: {len(items)} objects, "
                     rf"{done['recovery_bytes']} bytes in [0-9.]+ s", s.log_text()), s.log_tail()
    raw.close()
    s.kill()


def test_a_client_that_retries_on_loading_succeeds(image):
    s, items = image
    s.start(loaded=False)
    # redis-py (Debian's 4.3) raises BusyLoadingError and, by default, does not retry.
    plain = s.client()
    with pytest.raises(redis.exceptions.BusyLoadingError):
        plain.get(items[0][0])
    assert is_loading(s.port), "loaded too fast to watch"
    # With a Retry and BusyLoadingError among the errors to retry on, it does.
    patient = s.client(retry=Retry(ConstantBackoff(0.02), 6000),
                       retry_on_error=[redis.exceptions.BusyLoadingError])
    key, seed, size = items[-1]
    value = patient.get(key)
    assert not is_loading(s.port)
    assert value is not None and len(value) == size
    assert patient.set("after-loading", b"v") is True
    s.kill()


def test_shutdown_while_loading_exits_at_once_without_writing(image):
    s, items = image
    s.start(loaded=False)
    raw = RawClient(s.port)
    assert is_loading(s.port), "loaded too fast to watch"
    raw.send(b"*1\r\n$8\r\nSHUTDOWN\r\n")
    assert raw.closed_by_server(30)
    assert s.proc.wait(30) == 0, s.log_tail()
    log = s.log_text().split("=== start")[-1]
    assert "shutdown while the flash index loads: nothing to write to flash" in log, log
    assert "bytes to flash at shutdown" not in log
    # SIGTERM alike.
    s.start(loaded=False)
    assert is_loading(s.port), "loaded too fast to watch"
    assert s.stop(30) == 0, s.log_tail()
    assert "bytes to flash at shutdown" not in s.log_text().split("=== start")[-1]
    # The image is untouched: the next start has every key.
    s.start()
    assert s.client().dbsize() == len(items)
    s.kill()


# --- side by side with redis-server -----------------------------------------

@pytest.fixture(scope="module")
def loading_redis():
    """A redis-server loading an RDB of 20000 keys slowly (key-load-delay),
    serving clients between keys; yields its port while it loads."""
    d = tempfile.mkdtemp(prefix="redis-loading-")
    port = free_port()
    base = [REDIS_SERVER, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
            "--appendonly", "no", "--dir", d]
    log = open(os.path.join(d, "server.log"), "wb")
    proc = subprocess.Popen(base, stdout=log, stderr=subprocess.STDOUT, cwd=d)
    wait_for_port(port, proc)
    c = redis.Redis(host="127.0.0.1", port=port)
    pipe = c.pipeline(transaction=False)
    for i in range(20000):
        pipe.set(f"k{i}", b"x" * 100)
    pipe.execute()
    c.save()
    c.shutdown(nosave=True)
    proc.wait(10)
    proc = subprocess.Popen(base + ["--key-load-delay", "500",
                                    "--loading-process-events-interval-bytes", "1024"],
                            stdout=log, stderr=subprocess.STDOUT, cwd=d)
    wait_for_port(port, proc)
    yield port
    proc.kill()
    proc.wait()
    log.close()
    shutil.rmtree(d, ignore_errors=True)


def test_loading_replies_as_redis(image, loading_redis):
    s, _ = image
    s.start(loaded=False)
    ours, theirs = RawClient(s.port), RawClient(loading_redis)
    assert is_loading(s.port) and is_loading(loading_redis), "loaded too fast to compare"
    for args in (("GET", "k1"), ("SET", "k1", "v"), ("DBSIZE",), ("EXISTS", "k1"), ("SCAN", "0"),
                 ("FLUSHALL",), ("ECHO", "hi"), ("TIME",), ("SELECT", "0"), ("CLIENT", "ID"),
                 ("CONFIG", "GET", "port"), ("SHUTDOWN", "BOGUS")):
        a, b = ours.call(*args), theirs.call(*args)
        if args == ("TIME",) or args == ("CLIENT", "ID") or args[0] == "CONFIG":
            assert a[:1] == b[:1], (args, a, b)  # the same kind of reply, values differ
        else:
            assert a == b.replace(b"Redis is loading", b"tierkv is loading"), (args, a, b)
    # Ours answers PING while loading (issue 13); Redis 7.0 answers -LOADING.
    assert ours.call("PING") == b"+PONG\r\n"
    assert theirs.call("PING") == REDIS_LOADING
    # Ours refuses WATCH while loading (a key not scanned yet would be
    # watched as absent); Redis 7.0 answers OK.
    assert ours.call("WATCH", "k1") == REDIS_LOADING.replace(b"Redis", b"tierkv")
    assert theirs.call("WATCH", "k1") == b"+OK\r\n"
    fields = ("loading", "async_loading", "loading_start_time", "loading_total_bytes",
              "loading_loaded_bytes", "loading_loaded_perc", "loading_eta_seconds")
    a, b = persistence(s.port), persistence(loading_redis)
    if a["loading"] == "1" and b["loading"] == "1":
        assert all(f in a for f in fields) and all(f in b for f in fields), (a, b)
    ours.close()
    theirs.close()
    wait_loaded(s.port, s.proc)
    s.kill()
