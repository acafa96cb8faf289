"""Preheat over the wire: TIER.PREHEAT / TIER.JOB / TIER.JOBS against real
HTTP servers started here on 127.0.0.1 (nginx-light serving Range requests,
and small Python servers that fail in chosen ways) and file:// sources.

The contract: a job that ends "done" leaves the key holding exactly the
source's bytes (checked by SHA-256), in memory with CACHE yes and on flash in
every case, also after a restart; a job that fails or is cancelled leaves the
key's previous value readable and nothing partial visible; a source outside
preheat-sources is refused at once with an error naming the key.
"""
import hashlib
import http.server
import os
import shutil
import socketserver
import subprocess
import tempfile
import threading
import time

import pytest
import redis

from conftest import free_port, metric, wait_for_port
from flash_util import MIB, execs_torn_while, flash_servers, wait_until  # noqa: F401 (a fixture)
from flash_util import push_out

NGINX = shutil.which("nginx") or "/usr/sbin/nginx"


def sha256(data):
    return hashlib.sha256(data).hexdigest()


class Nginx:
    """nginx serving `root` on a loopback port (Range requests, ETags)."""

    def __init__(self, root):
        self.root = root
        self.dir = tempfile.mkdtemp(prefix="tierkv-nginx-")
        self.port = free_port()
        conf = os.path.join(self.dir, "nginx.conf")
        with open(conf, "w") as f:
            f.write(f"""daemon off;
worker_processes 1;
pid {self.dir}/nginx.pid;
error_log {self.dir}/error.log;
events {{ worker_connections 64; }}
http {{
  access_log off;
  client_body_temp_path {self.dir}/body;
  proxy_temp_path {self.dir}/proxy;
  fastcgi_temp_path {self.dir}/fastcgi;
  uwsgi_temp_path {self.dir}/uwsgi;
  scgi_temp_path {self.dir}/scgi;
  server {{
    listen 127.0.0.1:{self.port};
    root {root};
  }}
}}
""")
        self.proc = subprocess.Popen([NGINX, "-c", conf, "-p", self.dir],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for_port(self.port, self.proc)

    def url(self, path=""):
        return f"http://127.0.0.1:{self.port}/{path}"

    def stop(self):
        self.proc.terminate()
        self.proc.wait(10)
        shutil.rmtree(self.dir, ignore_errors=True)


class FaultyHandler(http.server.BaseHTTPRequestHandler):
    """Serves /dies (sends half of each range, then closes), /stalls (sends
    half of each range, then nothing until the server stops), /hangs (answers
    no HEAD until the server stops), /changes (a new ETag on every
    request), /novalidator (neither ETag nor Last-Modified), /shifted
    (each range one byte later than asked, and says so in Content-Range)
    and /gated (no GET answered before `server.gate` is set) over a body of
    `server.body`. GETs are counted by path."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def _headers(self, code, length, extra=()):
        self.send_response(code)
        self.send_header("Content-Length", str(length))
        self.send_header("Accept-Ranges", "bytes")
        if self.path == "/changes":
            self.server.etag_serial += 1
            self.send_header("ETag", f'"v{self.server.etag_serial}"')
        elif self.path != "/novalidator":
            self.send_header("ETag", '"fixed"')
        for k, v in extra:
            self.send_header(k, v)
        self.end_headers()

    def do_HEAD(self):
        if self.path == "/hangs":
            self.server.released.wait(60)
            self.close_connection = True
            return
        self._headers(200, len(self.server.body))

    def do_GET(self):
        body = self.server.body
        with self.server.lock:
            self.server.gets[self.path] = self.server.gets.get(self.path, 0) + 1
        if self.path == "/gated":
            self.server.gate.wait(60)
        first, last = 0, len(body) - 1
        rng = self.headers.get("Range")
        if rng:
            a, b = rng.split("=")[1].split("-")
            first, last = int(a), int(b)
            if self.path == "/shifted" and last + 1 < len(body):
                first, last = first + 1, last + 1
        part = body[first:last + 1]
        self._headers(206, len(part), [("Content-Range", f"bytes {first}-{last}/{len(body)}")])
        if self.path in ("/dies", "/stalls"):
            self.wfile.write(part[:len(part) // 2])
            self.wfile.flush()
            if self.path == "/stalls":
                self.server.released.wait(60)
            self.close_connection = True
            return
        self.wfile.write(part)


class FaultyServer(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True

    def __init__(self, body):
        super().__init__(("127.0.0.1", 0), FaultyHandler)
        self.body = body
        self.etag_serial = 0
        self.gets = {}
        self.lock = threading.Lock()
        self.released = threading.Event()
        self.gate = threading.Event()
        self.thread = threading.Thread(target=self.serve_forever, daemon=True)
        self.thread.start()

    def url(self, path):
        return f"http://127.0.0.1:{self.server_address[1]}{path}"

    def stop(self):
        self.released.set()
        self.shutdown()
        self.server_close()


@pytest.fixture
def world(flash_servers):
    """A source directory served by nginx and a faulty server, and a tierkv
    that allows both (and file:// under the directory)."""
    root = tempfile.mkdtemp(prefix="tierkv-preheat-src-")
    os.chmod(root, 0o755)  # nginx's workers run as another user when we are root
    nginx = Nginx(root)
    faulty = FaultyServer(os.urandom(6 * MIB + 123))
    s = flash_servers(memory="64mb", flash_size="512mb",
                      extra=("--region-size", "16mb", "--chunk-size", "1mb",
                             "--preheat-retries", "1",
                             "--preheat-sources",
                             f"{nginx.url()},{faulty.url('/')},file://{root}/"))
    s.start()
    yield s, nginx, faulty, root
    faulty.stop()
    nginx.stop()
    shutil.rmtree(root, ignore_errors=True)


def write_source(root, name, data):
    path = os.path.join(root, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
    return path


def job(c, job_id):
    reply = c.execute_command("TIER.JOB", job_id)
    it = iter(reply)
    return {k.decode(): (v.decode() if isinstance(v, bytes) else v) for k, v in zip(it, it)}


def wait_job(c, job_id, timeout=120):
    deadline = time.time() + timeout
    while time.time() < deadline:
        j = job(c, job_id)
        if j["state"] not in ("queued", "running"):
            return j
        time.sleep(0.01)
    raise AssertionError(f"job {job_id} still {j} after {timeout}s")


def test_http_preheat_gives_the_source_bytes_in_memory_and_on_flash(world):
    s, nginx, _, root = world
    data = os.urandom(24 * MIB + 5)  # not a whole number of chunks or pieces
    write_source(root, "models/shard-0.safetensors", data)
    c = s.client()
    job_id = c.execute_command("TIER.PREHEAT", "shard", nginx.url("models/shard-0.safetensors"),
                               "CACHE", "yes", "DIGEST", "sha256:" + sha256(data))
    j = wait_job(c, job_id)
    assert j["state"] == "done", j
    assert (j["bytes_done"], j["bytes_total"], j["cached"]) == (len(data), len(data), 1), j
    assert j["pieces_done"] == j["pieces_total"] == 7, j  # 4 MiB pieces
    assert sha256(c.get("shard")) == sha256(data)
    stat = c.execute_command("TIER.STAT", "shard")
    stat = dict(zip(stat[::2], stat[1::2]))
    assert stat[b"state"] == b"clean", stat  # in memory, and on flash
    # CACHE no: on flash only, read back whole and by range.
    job_id = c.execute_command("TIER.PREHEAT", "cold", nginx.url("models/shard-0.safetensors"),
                               "CACHE", "no")
    assert wait_job(c, job_id)["state"] == "done"
    stat = c.execute_command("TIER.STAT", "cold")
    assert dict(zip(stat[::2], stat[1::2]))[b"state"] == b"flash"
    assert sha256(c.get("cold")) == sha256(data)
    assert c.getrange("cold", 5 * MIB - 3, 9 * MIB) == data[5 * MIB - 3:9 * MIB + 1]
    # Both survive a restart, byte for byte.
    s.restart()
    c = s.client()
    assert sha256(c.get("shard")) == sha256(c.get("cold")) == sha256(data)
    fields, titles = s.info("preheat")
    assert "Preheat" in titles and int(fields["preheat_jobs_done"]) == 0  # counters restart


def test_jobs_pages_like_scan(world):
    """TIER.JOBS cursor [COUNT n] pages through every job once, in id order,
    and ends at cursor 0; TIER.JOBS alone still gives them all; bad cursors
    and counts get errors."""
    s, _, _, root = world
    c = s.client()
    write_source(root, "page.bin", b"page")
    ids = [c.execute_command("TIER.PREHEAT", f"page{i}", f"file://{root}/page.bin")
           for i in range(7)]
    for job_id in ids:
        wait_job(c, job_id)
    seen, cursor, pages = [], b"0", 0
    while True:
        cursor, page = c.execute_command("TIER.JOBS", cursor, "COUNT", 3)
        assert len(page) <= 3
        seen += [job_id for job_id in (dict(zip(m[::2], m[1::2]))[b"id"] for m in page)]
        pages += 1
        if cursor == b"0":
            break
        assert pages < 10, "the cursor never ends"
    assert seen == sorted(seen) and set(ids) <= set(seen) and len(seen) == len(set(seen))
    assert len(c.execute_command("TIER.JOBS")) == len(seen)
    cursor, page = c.execute_command("TIER.JOBS", ids[-1])
    assert cursor == b"0" and len(page) == 1
    for args in (("x",), ("-1",), ("0", "COUNT", "0"), ("0", "COUNT"), ("0", "LIMIT", "1")):
        with pytest.raises(redis.ResponseError):
            c.execute_command("TIER.JOBS", *args)


def chunk_tiers(c, key):
    stat = c.execute_command("TIER.STAT", key)
    stat = dict(zip(stat[::2], stat[1::2]))
    tiers = []
    for chunk in stat[b"chunk_residency"]:
        chunk = dict(zip(chunk[::2], chunk[1::2]))
        tiers.append(chunk[b"residency"].decode())
    return stat, tiers


@pytest.mark.slow
def test_a_file_larger_than_memory_is_held_in_part_and_read_whole(world):
    """Memory is 64 MiB: with CACHE yes an 80 MiB file keeps its first
    chunks in memory (at most large-value-memory-fraction, 0.5, of it) and
    the rest on flash; reads take each chunk from the tier that holds it."""
    s, nginx, _, root = world
    data = os.urandom(80 * MIB + 17)
    write_source(root, "big.bin", data)
    c = s.client()
    job_id = c.execute_command("TIER.PREHEAT", "big", nginx.url("big.bin"), "CACHE", "yes")
    j = wait_job(c, job_id)
    assert j["state"] == "done" and j["cached"] == 1, j
    stat, tiers = chunk_tiers(c, "big")
    assert stat[b"state"] == b"clean", stat
    assert len(tiers) == 81
    held = tiers.count("both")
    assert 16 <= held <= 32, tiers
    assert tiers == ["both"] * held + ["flash"] * (81 - held), tiers  # the head is held
    fields, _ = s.info("preheat")
    assert int(fields["preheat_memory_bytes"]) == held * MIB, fields
    # Several whole reads: the chunk after the head comes from a flash thread
    # right after the head's last chunk came from the connection's own
    # thread, and must still be sent after it (a swap of the two was seen in
    # about one read in ten before the connection kept its callbacks in order).
    for _ in range(12):
        got = c.get("big")
        if got != data:
            bad = [i for i in range(81) if got[i * MIB:(i + 1) * MIB] != data[i * MIB:(i + 1) * MIB]]
            raise AssertionError(f"len {len(got)} vs {len(data)}; chunks differing: {bad}; "
                                 f"held {held}")
    edge = held * MIB
    for off, length in [(edge - 3, 7), (edge - MIB - 1, 2 * MIB + 2), (0, edge + 1),
                        (edge, MIB), (80 * MIB - 5, 100)]:
        got = c.getrange("big", off, off + length - 1)
        if got != data[off:off + length]:
            where = [(i, data.find(got[i:i + 64])) for i in range(0, len(got), MIB // 4)]
            raise AssertionError(f"range {off}+{length}: got {len(got)} bytes; 64-byte probes "
                                 f"(offset in reply, offset found in source): {where}")
    # A plain SET of another key evicts by chunk, never a whole clean object
    # at once while its chunks are still wanted; the value stays whole.
    for i in range(40):
        c.set(f"fill:{i}", os.urandom(MIB))
    assert sha256(c.get("big")) == sha256(data)
    s.restart()
    c = s.client()
    assert sha256(c.get("big")) == sha256(data)


def test_every_failure_leaves_the_previous_value(world):
    s, nginx, faulty, root = world
    data = os.urandom(9 * MIB)
    write_source(root, "f.bin", data)
    c = s.client()
    c.set("k", b"previous")
    failing = [
        (nginx.url("missing.bin"), (), "404"),
        (faulty.url("/dies"), (), ""),
        (faulty.url("/changes"), (), "source changed"),
        (nginx.url("f.bin"), ("DIGEST", "sha256:" + "0" * 64), "digest mismatch"),
    ]
    for url, options, why in failing:
        job_id = c.execute_command("TIER.PREHEAT", "k", url, *options)
        j = wait_job(c, job_id)
        assert j["state"] == "failed", (url, j)
        assert why in j["error"], (url, j)
        assert c.get("k") == b"previous", url
    # The dying server was retried before the job gave up.
    dies = [j for j in c.execute_command("TIER.JOBS") if faulty.url("/dies").encode() in j]
    assert dies and dict(zip(dies[0][::2], dies[0][1::2]))[b"retries"] >= 1
    # Outside the allowlist: refused at once, naming the key.
    for url in ("http://127.0.0.2:1/x", "file:///etc/passwd", f"file://{root}/../etc/passwd",
                nginx.url("../etc/passwd"), "gopher://127.0.0.1/x"):
        with pytest.raises(redis.ResponseError, match="not allowed.*'k'"):
            c.execute_command("TIER.PREHEAT", "k", url)
    assert c.get("k") == b"previous"
    fields, _ = s.info("preheat")
    assert int(fields["preheat_jobs_failed"]) == 4
    assert int(fields["preheat_source_errors"]) >= 4
    # Nothing partial comes back after a restart either.
    s.restart()
    assert s.client().get("k") == b"previous"


def test_a_file_larger_than_flash_fails_cleanly(flash_servers):
    root = tempfile.mkdtemp(prefix="tierkv-preheat-src-")
    try:
        path = write_source(root, "huge.bin", os.urandom(80 * MIB))
        s = flash_servers(memory="16mb", flash_size="64mb",
                          extra=("--region-size", "8mb", "--preheat-sources", f"file://{root}/"))
        s.start()
        c = s.client()
        c.set("k", b"previous")
        j = wait_job(c, c.execute_command("TIER.PREHEAT", "k", "file://" + path))
        assert j["state"] == "failed", j
        assert c.get("k") == b"previous"
        # The tier still works after it.
        c.set("after", b"x" * MIB)
        assert c.get("after") == b"x" * MIB
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_prefix_loads_a_folder_and_cancel_stops_a_job(world):
    s, _, _, root = world
    files = {"config.json": os.urandom(1000), "shards/a.bin": os.urandom(3 * MIB + 7),
             "shards/b.bin": os.urandom(MIB), "tokenizer/vocab.txt": b""}
    for name, data in files.items():
        write_source(root, "model/" + name, data)
    c = s.client()
    ids = c.execute_command("TIER.PREHEAT", "PREFIX", "m/", f"file://{root}/model/")
    assert len(ids) == len(files)
    for job_id in ids:
        assert wait_job(c, job_id)["state"] == "done"
    for name, data in files.items():
        assert c.get("m/" + name) == data, name
    # More files than preheat-max-files: refused, and nothing started.
    jobs_before = len(c.execute_command("TIER.JOBS"))
    c.config_set("preheat-max-files", "3")
    try:
        with pytest.raises(redis.ResponseError, match="preheat-max-files"):
            c.execute_command("TIER.PREHEAT", "PREFIX", "n/", f"file://{root}/model/")
    finally:
        c.config_set("preheat-max-files", "10000")
    assert len(c.execute_command("TIER.JOBS")) == jobs_before
    # Inside EXEC the walk runs in place; the reply is the same.
    p = c.pipeline(transaction=True)
    p.execute_command("TIER.PREHEAT", "PREFIX", "x/", f"file://{root}/model/shards/")
    (ids,) = p.execute()
    assert len(ids) == 2 and all(wait_job(c, j)["state"] == "done" for j in ids)
    assert c.get("x/a.bin") == files["shards/a.bin"]
    # A key named "prefix" is still a key (odd argument count).
    job_id = c.execute_command("TIER.PREHEAT", "prefix", f"file://{root}/model/config.json")
    assert wait_job(c, job_id)["state"] == "done"
    assert c.get("prefix") == files["config.json"]
    # Cancel a slow job: small pieces, one at a time.
    big = write_source(root, "big.bin", os.urandom(64 * MIB))
    c.set("big", b"previous")
    c.config_set("preheat-pieces-inflight", "1")
    job_id = c.execute_command("TIER.PREHEAT", "big", "file://" + big, "PIECE", "1mb")
    assert c.execute_command("TIER.JOB", "CANCEL", job_id) == b"OK"
    j = wait_job(c, job_id)
    assert j["state"] == "cancelled", j
    assert c.get("big") == b"previous"


def test_cancel_ends_a_job_that_a_stalled_server_holds_up(world):
    """A server that stops sending mid-piece holds a lane in its read; the
    cancel still ends the job at once (within a few seconds), not when
    curl's low-speed limit (20 s) gives up on the piece."""
    s, _, faulty, _ = world
    c = s.client()
    c.set("stalled", b"previous")
    job_id = c.execute_command("TIER.PREHEAT", "stalled", faulty.url("/stalls"), "PIECE", "1mb")
    deadline = time.time() + 10
    while job(c, job_id)["state"] == "queued" and time.time() < deadline:
        time.sleep(0.01)
    time.sleep(0.5)  # the lanes are inside their stalled reads
    assert job(c, job_id)["state"] == "running"
    t0 = time.time()
    assert c.execute_command("TIER.JOB", "CANCEL", job_id) == b"OK"
    j = wait_job(c, job_id, timeout=15)
    took = time.time() - t0
    assert j["state"] == "cancelled", j
    assert took < 5, f"cancel took {took:.1f} s"
    assert c.get("stalled") == b"previous"


def wait_running(c, job_id):
    deadline = time.time() + 10
    while job(c, job_id)["state"] == "queued" and time.time() < deadline:
        time.sleep(0.01)
    time.sleep(0.5)  # inside the source's open
    assert job(c, job_id)["state"] == "running"


def test_a_source_without_validators_is_fetched_in_one_request(world):
    """No ETag and no Last-Modified: pieces of two versions could not be
    told apart, so the object comes in one GET whatever PIECE says, and a
    preheat of one larger than preheat-buffer fails with a clear error."""
    s, _, faulty, _ = world
    c = s.client()
    job_id = c.execute_command("TIER.PREHEAT", "nv", faulty.url("/novalidator"), "PIECE", "1mb")
    j = wait_job(c, job_id)
    assert j["state"] == "done", j
    assert c.get("nv") == faulty.body
    assert faulty.gets["/novalidator"] == 1
    assert j["pieces_total"] == 1
    c.config_set("preheat-buffer", "4mb")
    try:
        j = wait_job(c, c.execute_command("TIER.PREHEAT", "nv2", faulty.url("/novalidator")))
    finally:
        c.config_set("preheat-buffer", "256mb")
    assert j["state"] == "failed", j
    assert "neither ETag nor Last-Modified" in j["error"] and "preheat-buffer" in j["error"], j
    assert not c.exists("nv2")


def test_a_range_reply_at_the_wrong_offset_fails_the_job(world):
    """A 206 whose Content-Range starts elsewhere than asked (the total
    right) would put bytes at the wrong offset: the job fails, and the
    previous value stays."""
    s, _, faulty, _ = world
    c = s.client()
    c.set("shifted", b"previous")
    j = wait_job(c, c.execute_command("TIER.PREHEAT", "shifted", faulty.url("/shifted"),
                                      "PIECE", "1mb"))
    assert j["state"] == "failed", j
    assert "source changed" in j["error"], j
    assert c.get("shifted") == b"previous"


def test_piece_buffers_wait_for_room_in_preheat_buffer(world):
    """preheat-buffer 1mb, 1 MiB pieces, 4 lanes: while the source holds its
    replies, one piece's buffer is charged and the other lanes wait for room
    (without a thread); released, the job completes and gives it all back."""
    s, _, faulty, _ = world
    c = s.client()
    c.config_set("preheat-buffer", "1mb")
    try:
        job_id = c.execute_command("TIER.PREHEAT", "held", faulty.url("/gated"), "PIECE", "1mb")
        assert wait_until(lambda: metric(s.metrics(), "tierkv_preheat_buffer_waits_total") >= 1,
                          10)
        assert metric(s.metrics(), "tierkv_preheat_buffer_used_bytes") == MIB
        faulty.gate.set()
        assert wait_job(c, job_id)["state"] == "done"
    finally:
        c.config_set("preheat-buffer", "256mb")
    assert c.get("held") == faulty.body
    assert metric(s.metrics(), "tierkv_preheat_buffer_used_bytes") == 0


def test_a_job_publishes_only_after_client_pause_write_ends(world):
    """A job whose pieces all landed during CLIENT PAUSE WRITE holds its
    publish (the key stays absent, reads still answer) until UNPAUSE, then
    publishes the whole object."""
    s, _, faulty, _ = world
    c = s.client()
    job_id = c.execute_command("TIER.PREHEAT", "paused", faulty.url("/gated"), "PIECE", "1mb")
    wait_running(c, job_id)
    assert c.execute_command("CLIENT", "PAUSE", 30000, "WRITE") == b"OK"
    try:
        faulty.gate.set()
        deadline = time.time() + 10
        while job(c, job_id)["pieces_done"] < job(c, job_id)["pieces_total"]:
            assert time.time() < deadline, job(c, job_id)
            time.sleep(0.01)
        time.sleep(0.5)  # room to publish, were it not held
        assert job(c, job_id)["state"] == "running"
        assert c.exists("paused") == 0, "published during CLIENT PAUSE WRITE"
    finally:
        c.execute_command("CLIENT", "UNPAUSE")
    assert wait_job(c, job_id, timeout=15)["state"] == "done"
    assert c.get("paused") == faulty.body


def test_stalled_preheats_leave_the_store_workers_free(world):
    """Two preheats whose source stalls mid-piece hold all 8 of their lanes
    (2 jobs x 4), more than the store's 4 promotion workers, until the source
    is released. Preheat runs on a pool of its own, so an EXEC whose INCR and
    APPEND must fetch flash-only values on those workers still answers,
    right and at once; before, it waited for a worker or answered -BUSY."""
    s, _, faulty, _ = world
    c = s.client()
    text = b"abc" * 100_000
    c.set("ctr", b"41")
    c.set("text", text)
    push_out(c, ["ctr", "text"], "workers")
    jobs = [c.execute_command("TIER.PREHEAT", f"stalled{i}", faulty.url("/stalls"), "PIECE", "1mb")
            for i in range(2)]
    for job_id in jobs:
        wait_running(c, job_id)
    t0 = time.time()
    p = c.pipeline(transaction=True)
    p.incr("ctr").append("text", b"!").get("text")
    assert p.execute() == [42, len(text) + 1, text + b"!"]
    took = time.time() - t0
    assert all(job(c, j)["state"] == "running" for j in jobs), "the sources were released early"
    assert took < 5, f"EXEC took {took:.1f} s behind the stalled preheats"
    for job_id in jobs:
        c.execute_command("TIER.JOB", "CANCEL", job_id)
        assert wait_job(c, job_id, timeout=15)["state"] == "cancelled"


def test_cancel_and_shutdown_end_a_job_whose_source_never_answers(world):
    """A source that never answers the HEAD holds the job in its open: CANCEL
    still ends it within seconds, and a SHUTDOWN with another such job
    running writes memory to flash and exits well within
    shutdown-timeout-ms; the keys are there after the restart."""
    s, _, faulty, _ = world
    c = s.client()
    job_id = c.execute_command("TIER.PREHEAT", "hung", faulty.url("/hangs"))
    wait_running(c, job_id)
    t0 = time.time()
    assert c.execute_command("TIER.JOB", "CANCEL", job_id) == b"OK"
    assert wait_job(c, job_id, timeout=15)["state"] == "cancelled"
    assert time.time() - t0 < 5
    wait_running(c, c.execute_command("TIER.PREHEAT", "hung2", faulty.url("/hangs")))
    c.set("kept", b"written before the shutdown")
    t0 = time.time()
    try:
        c.execute_command("SHUTDOWN")
    except redis.exceptions.ConnectionError:
        pass
    assert s.proc.wait(30) == 0
    assert time.time() - t0 < 10, "SHUTDOWN waited for the hung source"
    s.start()
    assert s.client().get("kept") == b"written before the shutdown"
    assert not s.client().exists("hung", "hung2")


def test_bad_arguments_get_errors(world, flash_servers):
    s, nginx, _, root = world
    c = s.client()
    url = nginx.url("x")
    cases = [
        (("TIER.PREHEAT", "k", url, "PIECE", "abc"), "PIECE"),
        (("TIER.PREHEAT", "k", url, "PIECE", "3000"), "multiple of chunk-size"),
        (("TIER.PREHEAT", "k", url, "CACHE", "maybe"), "CACHE"),
        (("TIER.PREHEAT", "k", url, "DIGEST", "md5:00"), "DIGEST"),
        (("TIER.PREHEAT", "k", url, "DIGEST", "sha256:xyz"), "DIGEST"),
        (("TIER.PREHEAT", "k", url, "TTL", "-1"), "invalid expire"),
        (("TIER.PREHEAT", "k", url, "BOGUS", "1"), "syntax error"),
        (("TIER.PREHEAT", "k", url, "CACHE"), "syntax error"),
        (("TIER.PREHEAT", "k"), "wrong number of arguments"),
        (("TIER.JOB", "999999"), "no such preheat job"),
        (("TIER.JOB", "abc"), "invalid job id"),
        (("TIER.JOB", "CANCEL", "999999"), "no such preheat job"),
        (("TIER.JOB",), "wrong number of arguments"),
    ]
    for args, why in cases:
        with pytest.raises(redis.ResponseError, match=why):
            c.execute_command(*args)
    # Without a flash tier there is nothing to preheat into.
    m = flash_servers(flash_size="0")
    m.start()
    with pytest.raises(redis.ResponseError, match="flash tier"):
        m.client().execute_command("TIER.PREHEAT", "k", url)


def tierkv_cli():
    from conftest import TIERKV_SERVER
    return os.environ.get("TIERKV_CLI") or os.path.normpath(
        os.path.join(os.path.dirname(TIERKV_SERVER), "..", "cli", "tierkv"))


def test_cli_preheat_reports_and_exits_as_promised(world):
    s, nginx, _, root = world
    data = os.urandom(5 * MIB + 1)
    write_source(root, "cli.bin", data)
    server = f"127.0.0.1:{s.port}"
    run = lambda *a: subprocess.run([tierkv_cli(), "preheat", *a], capture_output=True,  # noqa: E731
                                    text=True, timeout=120)
    ok = run(nginx.url("cli.bin"), "--key", "c", "--server", server, "--digest",
             "sha256:" + sha256(data))
    assert ok.returncode == 0, ok.stderr
    assert "preheated 'c'" in ok.stdout and "100.0%" in ok.stderr
    assert s.client().get("c") == data
    # A local path is made a file:// URL.
    local = run(os.path.join(root, "cli.bin"), "--key", "d", "--server", server, "--quiet",
                "--no-cache")
    assert local.returncode == 0, local.stderr
    assert s.client().get("d") == data
    # Failures: one line on stderr and a non-zero exit.
    for args, code, why in [
        ((nginx.url("cli.bin"), "--key", "c", "--server", server, "--digest", "sha256:" + "0" * 64),
         1, "digest mismatch"),
        (("file:///etc/passwd", "--key", "c", "--server", server), 1, "not allowed"),
        ((nginx.url("cli.bin"), "--key", "c", "--server", f"127.0.0.1:{free_port()}"), 2,
         "cannot connect"),
        ((nginx.url("cli.bin"),), 2, "--key"),
    ]:
        r = run(*args)
        assert r.returncode == code, (args, r.returncode, r.stderr)
        last = r.stderr.strip().splitlines()[-1]
        assert last.startswith("tierkv: ") and why in last, (args, r.stderr)
    assert s.client().get("c") == data


def test_a_preheat_lands_between_commands_never_inside_exec(flash_servers):
    """A preheat commits on a store worker; its key still appears between two
    commands: an EXEC that looks at the key at its start and at its end sees
    the same thing."""
    root = tempfile.mkdtemp(prefix="tierkv-preheat-src-")
    try:
        path = write_source(root, "v.bin", os.urandom(4 * MIB))
        s = flash_servers(memory="64mb", flash_size="512mb",
                          extra=("--region-size", "16mb", "--preheat-sources", f"file://{root}/"))
        s.start()
        c = s.client()

        def churn():
            for _ in range(40):
                j = wait_job(c, c.execute_command("TIER.PREHEAT", "k", "file://" + path))
                assert j["state"] == "done", j
                assert c.delete("k") == 1

        execs, torn = execs_torn_while(s, "k", churn, gets=1000)
        assert execs > 0
        assert not torn, f"{torn} of {execs} EXECs saw the key appear or vanish inside them"
    finally:
        shutil.rmtree(root, ignore_errors=True)
