#!/usr/bin/python3
"""Preheat: TIER.PREHEAT of a model shard over HTTP against curl, and reads after it.

A deterministic 1.5 GiB file shard.bin (a random 64 MiB block repeated, each
MiB stamped with its file and index, so no two MiB are equal) and a folder
of 8 shards (192 MiB each) are generated in a temp dir, which nginx serves
on loopback (sendfile on, 2 workers). Then, per run, a fresh tierkv-server
(flash file in the temp dir, promotion-on-hit no so that flash reads stay
flash reads):

  curl       curl -s -o /dev/null of shard.bin, timed; once before and once
             after the preheat, the faster counts (the conservative side of
             the ratio). The source's pages are in the page cache for both.
  preheat    TIER.PREHEAT shard URL CACHE yes, timed from the command to
             TIER.JOB state done (polled every 10 ms); preheat_vs_curl is
             its GB/s over curl's.
  memory     full-file GET of that key over the wire with a raw socket reader
             (recv_into a preallocated buffer, data discarded, length
             checked); TIER.STAT must not say "flash". SHA-256 of the key is
             checked on a separate, untimed read.
  1mib-get   SET --get-keys keys of 1 MiB, then GET them pipelined
             --get-depth deep for --get-rounds rounds, same reader: the
             reference of mem_vs_1mib_get.
  flash      TIER.PREHEAT of another key with CACHE no (flash only; tierkv
             reads flash with O_DIRECT, no page cache), timed too, then
             full-file GETs; TIER.STAT must say "flash" before and after.
  source     the source file read directly: fsync, posix_fadvise DONTNEED
             of the whole file (its pages leave the page cache), then curl.
  folder     one TIER.PREHEAT per shard URL, all sent at once (CACHE yes),
             timed until every job is done: aggregate GB/s; and 8 parallel
             curls of the same shards as its baseline.

Full-file reads are repeated --reads times per run (median). CPU seconds of
the server, nginx's workers, curl and this client are taken per phase from
/proc and getrusage. fio's sequential O_DIRECT write and read of the temp
dir's disk (1 MiB, QD 16) are measured once as context (--no-fio skips).

    /usr/bin/python3 bench/preheat/run.py [--quick] [--runs N] [--size 1.5g]

Prints a table, writes bench/results/preheat.json and preheat.png (with
python3-matplotlib) and ends with a RESULT line. See
docs/benchmarks-preheat.md.
"""
import argparse
import hashlib
import os
import random
import resource
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchlib import (RunRecord, fio_sequential, free_port, parse_size, server_info,  # noqa: E402
                      wait_for_port, wait_loaded, write_json)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RESULTS = os.path.join(ROOT, "bench", "results")
MIB = 1 << 20
GIB = 1 << 30
BLOCK = 64 * MIB
NGINX = "/usr/sbin/nginx"
TICK = os.sysconf("SC_CLK_TCK")
POLL_S = 0.01

DEFAULTS = {"size": "1536m", "shards": 8, "shard_size": "192m"}
QUICK = {"size": "256m", "shards": 4, "shard_size": "64m"}


# --- a RESP2 client over a plain socket, with a reader that discards bulks -------

class RespError(Exception):
    pass


def encode(args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        if isinstance(a, str):
            a = a.encode()
        elif isinstance(a, int):
            a = b"%d" % a
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


class Conn:
    """One connection. Replies are parsed out of one preallocated buffer
    filled with recv_into; bulk strings that are not kept are skipped in
    place (optionally fed to a hasher), never copied into Python objects."""

    def __init__(self, port, timeout=300.0, bufsize=512 << 10):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = bytearray(bufsize)
        self.mv = memoryview(self.buf)
        self.start = self.end = 0

    def close(self):
        self.sock.close()

    def _recv(self):
        if self.start == self.end:
            self.start = self.end = 0
        elif self.end == len(self.buf):
            n = self.end - self.start
            self.buf[:n] = self.buf[self.start:self.end]
            self.start, self.end = 0, n
        got = self.sock.recv_into(self.mv[self.end:])
        if not got:
            raise ConnectionError("connection closed by the server")
        self.end += got

    def _line(self):
        while True:
            i = self.buf.find(b"\r\n", self.start, self.end)
            if i >= 0:
                line = bytes(self.buf[self.start:i])
                self.start = i + 2
                return line
            self._recv()

    def _skip(self, n, hasher=None):
        while n > 0:
            if self.start == self.end:
                self._recv()
            take = min(n, self.end - self.start)
            if hasher is not None:
                hasher.update(self.mv[self.start:self.start + take])
            self.start += take
            n -= take

    def _take(self, n):
        out = bytearray()
        while len(out) < n:
            if self.start == self.end:
                self._recv()
            take = min(n - len(out), self.end - self.start)
            out += self.mv[self.start:self.start + take]
            self.start += take
        return bytes(out)

    def read(self, keep=True, hasher=None):
        """One reply; errors come back as RespError. A bulk string is bytes
        with `keep`, else its length (-1 for nil), its data skipped."""
        line = self._line()
        kind, body = line[:1], line[1:]
        if kind == b"+":
            return body.decode()
        if kind == b"-":
            return RespError(body.decode())
        if kind == b":":
            return int(body)
        if kind == b"$":
            n = int(body)
            if n < 0:
                return None if keep else -1
            if keep:
                data = self._take(n)
                self._skip(2)
                return data
            self._skip(n, hasher)
            self._skip(2)
            return n
        if kind == b"*":
            n = int(body)
            return None if n < 0 else [self.read(keep) for _ in range(n)]
        raise RespError(f"unexpected reply {line[:80]!r}")

    def send(self, *commands):
        self.sock.sendall(b"".join(encode(c) for c in commands))

    def call(self, *args):
        self.send(args)
        reply = self.read()
        if isinstance(reply, RespError):
            raise reply
        return reply

    def get_len(self, key, hasher=None):
        """GET key with its value discarded (or hashed); returns its length."""
        self.sock.sendall(b"*2\r\n$3\r\nGET\r\n$%d\r\n%s\r\n" % (len(key), key))
        reply = self.read(keep=False, hasher=hasher)
        if isinstance(reply, RespError):
            raise reply
        return reply

    def set_big(self, key, value):
        self.sock.sendall(b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n" % (len(key), key, len(value)))
        self.sock.sendall(value)
        self.sock.sendall(b"\r\n")


def text(v):
    return v.decode() if isinstance(v, bytes) else v


def flat_map(reply):
    if isinstance(reply, RespError):
        raise reply
    return {text(k): text(v) for k, v in zip(reply[::2], reply[1::2])}


# --- data ---------------------------------------------------------------------

def generate(path, size, file_id, block):
    """Writes `size` bytes: the block repeated, each MiB's first 16 bytes
    replaced by (file id, MiB index, magic); returns its SHA-256 hex."""
    h = hashlib.sha256()
    with open(path, "wb") as f:
        for i in range((size + MIB - 1) // MIB):
            off = (i * MIB) % BLOCK
            n = min(MIB, size - i * MIB)
            piece = struct.pack("<QQ", file_id, i ^ 0x5A5A5A5A00000000) + block[off + 16:off + n]
            piece = piece[:n]
            h.update(piece)
            f.write(piece)
        f.flush()
        os.fsync(f.fileno())
    os.chmod(path, 0o644)
    return h.hexdigest()


def drop_cache(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


# --- CPU accounting ------------------------------------------------------------

def proc_cpu(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICK  # utime, stime
    except (OSError, IndexError, ValueError):
        return 0.0


def children_of(pid):
    kids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        kids.append(int(entry))
            except (OSError, IndexError, ValueError):
                pass
    return kids


def disk_of(path):
    """The /proc/diskstats name of the block device holding path."""
    dev = os.stat(path).st_dev
    want = f"{os.major(dev)}:{os.minor(dev)}"
    try:
        with open("/proc/diskstats") as f:
            for line in f:
                parts = line.split()
                if f"{parts[0]}:{parts[1]}" == want:
                    return parts[2]
    except OSError:
        pass
    return None


def disk_sample(name):
    """(sectors read, sectors written, ms the device was busy) of `name`."""
    if name:
        with open("/proc/diskstats") as f:
            for line in f:
                parts = line.split()
                if parts[2] == name:
                    return int(parts[5]), int(parts[9]), int(parts[12])
    return 0, 0, 0


def thread_cpu(pid):
    out = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        out[int(tid)] = proc_cpu(f"{pid}/task/{tid}")
    return out


class Meter:
    """Wall time and CPU seconds of the server (and of its busiest threads),
    nginx's workers, curl (finished children) and this process over one phase."""

    disk = None  # the diskstats name of the temp dir's device, set by main()

    def __init__(self, server_pid, nginx_pids):
        self.server_pid, self.nginx_pids = server_pid, nginx_pids

    def _sample(self):
        kids = resource.getrusage(resource.RUSAGE_CHILDREN)
        return (time.monotonic(), proc_cpu(self.server_pid),
                sum(proc_cpu(p) for p in self.nginx_pids), kids.ru_utime + kids.ru_stime,
                time.process_time())

    def __enter__(self):
        self.threads0 = thread_cpu(self.server_pid)
        self.disk0 = disk_sample(Meter.disk)
        self.t0 = self._sample()
        return self

    def __exit__(self, *exc):
        t1 = self._sample()
        threads1 = thread_cpu(self.server_pid)
        io = [b - a for a, b in zip(self.disk0, disk_sample(Meter.disk))]
        d = [b - a for a, b in zip(self.t0, t1)]
        self.wall = d[0]
        self.disk = {"read_bytes": io[0] * 512, "write_bytes": io[1] * 512,
                     "busy_pct": 100 * io[2] / 1000 / d[0] if d[0] > 0 else 0.0}
        self.cpu = {"server_s": d[1], "nginx_s": d[2], "curl_s": d[3], "client_s": d[4]}
        # tid - pid: 0 is the server's main thread, the others in start order
        busy = sorted(((v - self.threads0.get(t, 0.0), t - self.server_pid)
                       for t, v in threads1.items()), reverse=True)
        self.threads = [{"tid_offset": t, "cpu_s": round(v, 2)} for v, t in busy[:4] if v > 0]
        return False


# --- peers ---------------------------------------------------------------------

class Nginx:
    """nginx serving `root` on a loopback port (Range requests, ETags)."""

    def __init__(self, root, workdir, workers):
        self.dir = os.path.join(workdir, "nginx")
        os.makedirs(self.dir)
        self.port = free_port()
        conf = os.path.join(self.dir, "nginx.conf")
        with open(conf, "w") as f:
            f.write(f"""daemon off;
worker_processes {workers};
pid {self.dir}/nginx.pid;
error_log {self.dir}/error.log;
events {{ worker_connections 256; }}
http {{
  access_log off;
  sendfile on;
  tcp_nopush on;
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
        deadline = time.monotonic() + 5
        self.workers = children_of(self.proc.pid)
        while len(self.workers) < workers and time.monotonic() < deadline:
            time.sleep(0.05)
            self.workers = children_of(self.proc.pid)

    def url(self, path=""):
        return f"http://127.0.0.1:{self.port}/{path}"

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class Server:
    def __init__(self, args, workdir, sources):
        self.args, self.workdir, self.sources = args, workdir, sources
        self.flash_path = os.path.join(workdir, "flash.dat")
        self.log_path = os.path.join(workdir, "server.log")
        self.proc = None

    def start(self):
        self.port = free_port()
        a = self.args
        argv = [a.server, "--port", str(self.port), "--bind", "127.0.0.1", "--metrics-port", "0",
                "--memory", str(a.memory_bytes), "--flash-path", self.flash_path,
                "--flash-size", str(a.flash_bytes), "--flash-preallocate", "no",
                "--max-object-size", str(a.max_object), "--proto-max-bulk-len", str(a.max_object),
                "--chunk-size", a.chunk_size, "--promotion-on-hit", "no",
                "--preheat-sources", self.sources, "--log-level", "warn", *a.server_arg]
        self.argv = argv
        with open(self.log_path, "ab") as log:
            log.write(b"\n=== %s\n" % " ".join(argv).encode())
            log.flush()
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                         cwd=self.workdir)
        try:
            wait_for_port(self.port, self.proc, 60)
            wait_loaded(self.port, self.proc, 120)
        except RuntimeError as e:
            self.kill()
            raise RuntimeError(f"{e}\n--- server log ---\n{self.log_tail()}") from None

    def stop(self):
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(120)
        except subprocess.TimeoutExpired:
            self.kill()

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def log_tail(self, lines=20):
        try:
            with open(self.log_path, "rb") as f:
                return "\n".join(f.read().decode(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


# --- measurements --------------------------------------------------------------

def gbps(nbytes, seconds):
    return nbytes / seconds / 1e9 if seconds > 0 else 0.0


def curl(url, size, timeout):
    """Wall seconds of curl -s -o /dev/null URL; checks the bytes and status."""
    t = time.monotonic()
    out = subprocess.run(["curl", "-s", "-f", "-o", "/dev/null", "-w", "%{size_download}", url],
                         capture_output=True, text=True, timeout=timeout, check=False)
    seconds = time.monotonic() - t
    if out.returncode != 0 or int(float(out.stdout or 0)) != size:
        raise RuntimeError(f"curl {url}: exit {out.returncode}, {out.stdout!r} bytes")
    return seconds


def curl_many(urls, sizes, timeout):
    t = time.monotonic()
    procs = [subprocess.Popen(["curl", "-s", "-f", "-o", "/dev/null", "-w", "%{size_download}",
                               u], stdout=subprocess.PIPE, text=True) for u in urls]
    try:
        for p, u, n in zip(procs, urls, sizes):
            got, _ = p.communicate(timeout=timeout)
            if p.returncode != 0 or int(float(got or 0)) != n:
                raise RuntimeError(f"curl {u}: exit {p.returncode}, {got!r} bytes")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return time.monotonic() - t


def job_of(conn, job_id):
    return flat_map(conn.call("TIER.JOB", job_id))


def preheat(conn, keys_urls, cache, timeout):
    """Starts one job per (key, url) at once; polls TIER.JOB every 10 ms until
    all ended. Returns (wall seconds, [final job maps])."""
    t = time.monotonic()
    conn.send(*[("TIER.PREHEAT", k, u, "CACHE", "yes" if cache else "no") for k, u in keys_urls])
    ids = []
    for _ in keys_urls:
        r = conn.read()
        if isinstance(r, RespError):
            raise RuntimeError(f"TIER.PREHEAT: {r}")
        ids.append(r)
    final = {}
    deadline = t + timeout
    while len(final) < len(ids):
        pending = [i for i in ids if i not in final]
        conn.send(*[("TIER.JOB", i) for i in pending])
        for i in pending:
            j = flat_map(conn.read())
            if j["state"] not in ("queued", "running"):
                final[i] = j
        if len(final) == len(ids):
            break
        if time.monotonic() >= deadline:
            raise RuntimeError(f"preheat jobs not done after {timeout} s")
        time.sleep(POLL_S)
    seconds = time.monotonic() - t
    jobs = [final[i] for i in ids]
    bad = [j for j in jobs if j["state"] != "done"]
    if bad:
        raise RuntimeError(f"preheat failed: {bad[0]}")
    return seconds, jobs


def stat(conn, key):
    """TIER.STAT's state and how many chunks sit in memory/flash/both."""
    reply = conn.call("TIER.STAT", key)
    fields = {text(k): v for k, v in zip(reply[::2], reply[1::2])}
    counts = {"memory": 0, "flash": 0, "both": 0}
    for chunk in fields.get("chunk_residency") or []:
        c = {text(k): v for k, v in zip(chunk[::2], chunk[1::2])}
        r = text(c.get("residency", "?"))
        counts[r] = counts.get(r, 0) + 1
    return {"state": text(fields["state"]), "size": int(fields["size"]),
            "chunks": int(fields["chunks"]), "residency": counts}


def verify(conn, key, size, digest):
    h = hashlib.sha256()
    n = conn.get_len(key, hasher=h)
    if n != size or h.hexdigest() != digest:
        raise RuntimeError(f"GET {key!r}: {n} bytes, sha256 {h.hexdigest()[:16]}..., "
                           f"expected {size} bytes, {digest[:16]}...")


def timed_gets(conn, key, size, reads):
    out = []
    for _ in range(reads):
        t = time.monotonic()
        n = conn.get_len(key)
        seconds = time.monotonic() - t
        if n != size:
            raise RuntimeError(f"GET {key!r}: {n} bytes, expected {size}")
        out.append(seconds)
    return out


def small_gets(conn, n_keys, depth, rounds, block):
    """SET n_keys keys of 1 MiB (distinct), then GET them `depth` deep for
    `rounds` rounds; returns (bytes, seconds of the GETs)."""
    keys = [b"get1m:%d" % i for i in range(n_keys)]
    for start in range(0, n_keys, depth):
        batch = keys[start:start + depth]
        for i, k in enumerate(batch):
            off = ((start + i) * 7919 * 4096) % (BLOCK - MIB)
            conn.set_big(k, struct.pack("<Q", start + i) + block[off + 8:off + MIB])
        for _ in batch:
            r = conn.read()
            if r != "OK":
                raise RuntimeError(f"SET of a 1 MiB key: {r}")
    total = 0
    t = time.monotonic()
    for _ in range(rounds):
        for start in range(0, n_keys, depth):
            batch = keys[start:start + depth]
            conn.sock.sendall(b"".join(b"*2\r\n$3\r\nGET\r\n$%d\r\n%s\r\n" % (len(k), k)
                                       for k in batch))
            for _ in batch:
                n = conn.read(keep=False)
                if n != MIB:
                    raise RuntimeError(f"GET of a 1 MiB key: {n}")
                total += n
    return total, time.monotonic() - t


def record_phase(r, name, nbytes, m, extra=None):
    """Stores one measured phase (a finished Meter) in the run's dict."""
    r["phases"][name] = {"bytes": nbytes, "seconds": m.wall, "gbps": gbps(nbytes, m.wall),
                         "cpu": m.cpu, "server_threads": m.threads, "disk": m.disk,
                         **(extra or {})}
    print(f"  {name:<14} {m.wall:7.2f} s {gbps(nbytes, m.wall):6.2f} GB/s   cpu s: "
          + " ".join(f"{k[:-2]} {v:.2f}" for k, v in m.cpu.items()), flush=True)
    return r["phases"][name]


def part_run(args, nginx, workdir, shard, r):
    """A second server whose memory is 2/3 of the shard: CACHE yes keeps the
    file's head in memory (up to large-value-memory-fraction, 0.5, of it)
    and reads take each chunk from the tier that holds it."""
    part_args = argparse.Namespace(**vars(args))
    part_args.memory_bytes = round_up(args.size_bytes * 2 // 3, MIB)
    part_dir = os.path.join(workdir, "part")
    os.makedirs(part_dir, exist_ok=True)
    server = Server(part_args, part_dir, nginx.url())
    size = shard["size"]
    try:
        server.start()
        conn = Conn(server.port, timeout=args.timeout, bufsize=parse_size(args.recv_buffer))
        with Meter(server.proc.pid, nginx.workers) as m:
            preheat(conn, [(b"part", nginx.url("shard.bin"))], True, args.timeout)
        record_phase(r, "preheat_part", size, m)
        r["stat_part"] = stat(conn, b"part")
        verify(conn, b"part", size, shard["sha256"])
        for i in range(args.reads):
            with Meter(server.proc.pid, nginx.workers) as m:
                timed_gets(conn, b"part", size, 1)
            record_phase(r, f"read_part_{i}", size, m)
        r["stat_part_after"] = stat(conn, b"part")
        conn.close()
        server.stop()
    except Exception:
        print(server.log_tail(), file=sys.stderr)
        raise
    finally:
        server.kill()
        shutil.rmtree(part_dir, ignore_errors=True)


def one_run(args, nginx, workdir, files, block):
    """One fresh server; every phase. Returns the run's dict."""
    shard, shards = files["shard"], files["shards"]
    sources = nginx.url()
    server = Server(args, workdir, sources)
    r = {"phases": {}}
    try:
        server.start()
        conn = Conn(server.port, timeout=args.timeout, bufsize=parse_size(args.recv_buffer))
        meter = lambda: Meter(server.proc.pid, nginx.workers)  # noqa: E731
        size = shard["size"]

        def phase(name, nbytes, fn):
            with meter() as m:
                extra = fn()
            return record_phase(r, name, nbytes, m, extra)

        phase("curl_before", size, lambda: {"curl_s": curl(nginx.url("shard.bin"), size,
                                                             args.timeout)})

        def do_preheat(key, cache):
            seconds, jobs = preheat(conn, [(key, nginx.url("shard.bin"))], cache, args.timeout)
            j = jobs[0]
            return {"job": j, "poll_seconds": seconds,
                    "server_seconds": (int(j["finished_ms"]) - int(j["started_ms"])) / 1e3}

        phase("preheat_mem", size, lambda: do_preheat(b"shard", True))
        phase("curl_after", size, lambda: {"curl_s": curl(nginx.url("shard.bin"), size,
                                                            args.timeout)})
        r["stat_mem"] = stat(conn, b"shard")
        verify(conn, b"shard", size, shard["sha256"])
        for i in range(args.reads):
            phase(f"read_mem_{i}", size, lambda: {"_": timed_gets(conn, b"shard", size, 1)})
        r["stat_mem_after"] = stat(conn, b"shard")

        def do_small():
            nbytes, seconds = small_gets(conn, args.get_keys, args.get_depth, args.get_rounds,
                                         block)
            return {"get_bytes": nbytes, "get_seconds": seconds,
                    "get_gbps": gbps(nbytes, seconds)}

        p = phase("get_1mib_set_and_get", args.get_keys * MIB * (1 + args.get_rounds), do_small)
        r["get_1mib_gbps"] = p["get_gbps"]

        # CACHE no is judged against min(cold source read, fio write): it
        # reads the source cold too.
        drop_cache(shard["path"])
        phase("preheat_flash", size, lambda: do_preheat(b"shard-cold", False))
        r["stat_flash"] = stat(conn, b"shard-cold")
        verify(conn, b"shard-cold", size, shard["sha256"])
        for i in range(args.reads):
            phase(f"read_flash_{i}", size, lambda: {"_": timed_gets(conn, b"shard-cold", size, 1)})
        r["stat_flash_after"] = stat(conn, b"shard-cold")

        for i in range(args.reads):
            drop_cache(shard["path"])
            phase(f"read_source_{i}", size, lambda: {"curl_s": curl(nginx.url("shard.bin"), size,
                                                                      args.timeout)})

        folder_bytes = sum(s["size"] for s in shards)
        keys_urls = [(b"model/" + s["name"].encode(), nginx.url("model/" + s["name"]))
                     for s in shards]

        def do_folder():
            seconds, jobs = preheat(conn, keys_urls, True, args.timeout)
            return {"jobs": jobs, "poll_seconds": seconds}

        phase("preheat_folder", folder_bytes, do_folder)
        for (k, _), s in zip(keys_urls, shards):
            verify(conn, k, s["size"], s["sha256"])
        phase("curl_folder", folder_bytes,
              lambda: {"_": curl_many([u for _, u in keys_urls], [s["size"] for s in shards],
                                      args.timeout)})
        r["info_preheat"] = server_info(server.port, "preheat")
        conn.close()
        server.stop()
    except Exception:
        print(server.log_tail(), file=sys.stderr)
        raise
    finally:
        server.kill()
        try:
            os.unlink(server.flash_path)
        except OSError:
            pass
    part_run(args, nginx, workdir, shard, r)
    ph = r["phases"]
    med = lambda prefix: statistics.median(  # noqa: E731
        v["gbps"] for k, v in ph.items() if k.startswith(prefix))
    curl_gbps = max(ph["curl_before"]["gbps"], ph["curl_after"]["gbps"])
    r["summary"] = s = {
        "preheat_gbps": ph["preheat_mem"]["gbps"],
        "curl_gbps": curl_gbps,
        "preheat_flash_gbps": ph["preheat_flash"]["gbps"],
        "mem_read_gbps": med("read_mem_"),
        "flash_read_gbps": med("read_flash_"),
        "source_read_gbps": med("read_source_"),
        "get_1mib_gbps": r["get_1mib_gbps"],
        "folder_gbps": ph["preheat_folder"]["gbps"],
        "folder_curl_gbps": ph["curl_folder"]["gbps"],
        "part_read_gbps": med("read_part_"),
        "part_held": r["stat_part"]["residency"]["both"] / r["stat_part"]["chunks"],
    }
    s["part_vs_flash"] = s["part_read_gbps"] / s["flash_read_gbps"]
    s["preheat_vs_curl"] = s["preheat_gbps"] / curl_gbps
    s["mem_vs_source"] = s["mem_read_gbps"] / s["source_read_gbps"]
    s["mem_vs_1mib_get"] = s["mem_read_gbps"] / s["get_1mib_gbps"]
    s["folder_vs_curl"] = s["folder_gbps"] / s["folder_curl_gbps"]
    per_gib = lambda p, *who: sum(p["cpu"][w] for w in who) / (p["bytes"] / GIB)  # noqa: E731
    s["cpu_s_per_gib"] = {
        "preheat_mem_server": per_gib(ph["preheat_mem"], "server_s"),
        "preheat_flash_server": per_gib(ph["preheat_flash"], "server_s"),
        "preheat_mem_nginx": per_gib(ph["preheat_mem"], "nginx_s"),
        "curl_curl_plus_nginx": min(per_gib(ph[k], "curl_s", "nginx_s")
                                    for k in ("curl_before", "curl_after")),
        "read_mem_server": per_gib(ph["read_mem_0"], "server_s"),
        "read_mem_client": per_gib(ph["read_mem_0"], "client_s"),
        "read_flash_server": per_gib(ph["read_flash_0"], "server_s"),
    }
    s["mem_state"] = r["stat_mem"]["state"]
    s["flash_state"] = r["stat_flash"]["state"]
    s["flash_state_after"] = r["stat_flash_after"]["state"]
    return r


# --- output --------------------------------------------------------------------

SUMMARY_KEYS = ("preheat_gbps", "curl_gbps", "preheat_vs_curl", "mem_read_gbps",
                "flash_read_gbps", "source_read_gbps", "mem_vs_source", "get_1mib_gbps",
                "mem_vs_1mib_get", "folder_gbps", "folder_curl_gbps", "folder_vs_curl",
                "preheat_flash_gbps", "part_read_gbps", "part_held", "part_vs_flash")


def cpu_pct(p, who):
    return 100 * p["cpu"][who] / p["seconds"] if p["seconds"] > 0 else 0.0


def print_table(run, size, folder_bytes):
    ph = run["phases"]
    print(f"\n{'phase':<22} {'GiB':>5} {'s':>7} {'GB/s':>6} {'srv%':>5} {'ngx%':>5} "
          f"{'curl%':>5} {'cli%':>5} {'disk r GB/s':>11} {'w GB/s':>6} {'busy%':>5}")
    for name, p in ph.items():
        dk = p["disk"]
        print(f"{name:<22} {p['bytes'] / GIB:>5.2f} {p['seconds']:>7.3f} {p['gbps']:>6.2f} "
              f"{cpu_pct(p, 'server_s'):>5.0f} {cpu_pct(p, 'nginx_s'):>5.0f} "
              f"{cpu_pct(p, 'curl_s'):>5.0f} {cpu_pct(p, 'client_s'):>5.0f} "
              f"{gbps(dk['read_bytes'], p['seconds']):>11.2f} "
              f"{gbps(dk['write_bytes'], p['seconds']):>6.2f} {dk['busy_pct']:>5.0f}")
    s = run["summary"]
    print(f"\n{'figure':<34} {'value':>8}  goal")
    rows = (("preheat GB/s (CACHE yes)", "preheat_gbps", ""),
            ("curl GB/s (best of 2)", "curl_gbps", ""),
            ("preheat / curl", "preheat_vs_curl", ">= 0.8"),
            ("preheat GB/s (CACHE no)", "preheat_flash_gbps", ""),
            ("memory full read GB/s", "mem_read_gbps", ""),
            ("flash full read GB/s", "flash_read_gbps", ""),
            ("source read GB/s (cache dropped)", "source_read_gbps", ""),
            ("1 MiB GET GB/s (16 deep)", "get_1mib_gbps", ""),
            ("memory / source", "mem_vs_source", ">= 5"),
            ("memory / 1 MiB GET", "mem_vs_1mib_get", ">= 0.8"),
            (f"folder preheat GB/s ({folder_bytes / GIB:.2f} GiB)", "folder_gbps", ""),
            ("folder curl GB/s (parallel)", "folder_curl_gbps", ""),
            ("folder preheat / curl", "folder_vs_curl", ""),
            ("larger than memory: share held", "part_held", ""),
            ("larger than memory: read GB/s", "part_read_gbps", ""),
            ("larger than memory / flash read", "part_vs_flash", ""))
    for label, key, goal in rows:
        print(f"{label:<34} {s[key]:>8.3f}  {goal}")
    print("CPU s per GiB: " + ", ".join(f"{k} {v:.2f}" for k, v in s["cpu_s_per_gib"].items()))
    for name in ("preheat_mem", "preheat_flash", "read_mem_0"):
        print(f"busiest server threads in {name} (tid - pid: cpu s): " + ", ".join(
            f"{t['tid_offset']}: {t['cpu_s']:.2f}" for t in ph[name]["server_threads"]))
    print(f"TIER.STAT after CACHE yes: {run['stat_mem']['state']} {run['stat_mem']['residency']}; "
          f"after CACHE no: {run['stat_flash']['state']} {run['stat_flash']['residency']}, "
          f"after its reads: {run['stat_flash_after']['state']}; larger than memory: "
          f"{run['stat_part']['state']} {run['stat_part']['residency']}")


def plot(png, summary):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
    names = ["curl", "preheat\nCACHE yes", "preheat\nCACHE no", "folder\ncurl x8",
             "folder\npreheat x8"]
    vals = [summary[k] for k in ("curl_gbps", "preheat_gbps", "preheat_flash_gbps",
                                 "folder_curl_gbps", "folder_gbps")]
    a.bar(names, vals, color=["grey", "tab:blue", "tab:cyan", "grey", "tab:blue"])
    a.set_ylabel("GB/s")
    a.set_title(f"load from nginx (preheat/curl {summary['preheat_vs_curl']:.2f})", fontsize=10)
    names = ["memory\n(CACHE yes)", f"{summary['part_held']:.0%} memory\n+ flash",
             "flash\n(CACHE no)", "source\n(cache dropped)", "1 MiB GET\nreference"]
    vals = [summary[k] for k in ("mem_read_gbps", "part_read_gbps", "flash_read_gbps",
                                 "source_read_gbps", "get_1mib_gbps")]
    b.bar(names, vals, color=["tab:green", "tab:purple", "tab:orange", "grey", "tab:olive"])
    b.set_ylabel("GB/s")
    b.set_title(f"full-file read (mem/source {summary['mem_vs_source']:.1f}x, "
                f"mem/1MiB GET {summary['mem_vs_1mib_get']:.2f})", fontsize=10)
    for ax in (a, b):
        ax.grid(axis="y", alpha=0.3)
        ax.tick_params(axis="x", labelsize=8)
    fig.tight_layout()
    fig.savefig(png)
    return png


def round_up(n, unit):
    return (n + unit - 1) // unit * unit


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--server", default=os.environ.get(
        "TIERKV_SERVER", os.path.join(ROOT, "build", "src", "server", "tierkv-server")))
    ap.add_argument("--quick", action="store_true", help="256 MiB file, 4 shards of 64 MiB")
    ap.add_argument("--runs", type=int, default=1, help="runs, each on a fresh server")
    ap.add_argument("--size", help="bytes of shard.bin (default 1536m; quick 256m)")
    ap.add_argument("--shards", type=int, help="files in the folder (default 8; quick 4)")
    ap.add_argument("--shard-size", help="bytes of each (default 192m; quick 64m)")
    ap.add_argument("--reads", type=int, default=3, help="full-file reads per path and run")
    ap.add_argument("--get-keys", type=int, default=256)
    ap.add_argument("--get-depth", type=int, default=16)
    ap.add_argument("--get-rounds", type=int, default=4)
    ap.add_argument("--memory", help="server memory (default 4gb, more if the data needs it)")
    ap.add_argument("--flash-size", help="server flash (default: 2 x size + folder + "
                                         "1 MiB keys + 1.25 GiB)")
    ap.add_argument("--chunk-size", default="1mb")
    ap.add_argument("--recv-buffer", default="512k",
                    help="the reader's recv_into buffer (512 KiB beat 1-4 MiB here: it stays "
                         "in cache)")
    ap.add_argument("--nginx-workers", type=int, default=2)
    ap.add_argument("--no-fio", action="store_true", help="skip fio's disk context")
    ap.add_argument("--dir", default=RESULTS, help="where the temp dir goes (a real disk)")
    ap.add_argument("--out", default=os.path.join(RESULTS, "preheat.json"))
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per job or read")
    ap.add_argument("--server-arg", action="append", default=[],
                    help="extra server flag, e.g. --server-arg=--preheat-max-jobs=8")
    args = ap.parse_args()
    for name, value in (QUICK if args.quick else DEFAULTS).items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    args.server = os.path.abspath(args.server)
    args.size_bytes = parse_size(args.size)
    args.shard_bytes = parse_size(args.shard_size)
    folder = args.shards * args.shard_bytes
    get_bytes = args.get_keys * MIB
    in_memory = args.size_bytes + folder + get_bytes
    args.memory_bytes = (parse_size(args.memory) if args.memory
                         else max(4 * GIB, round_up(int(1.25 * in_memory), 256 * MIB)))
    args.flash_bytes = (parse_size(args.flash_size) if args.flash_size else
                        round_up(2 * args.size_bytes + folder + get_bytes + 5 * GIB // 4, 256 * MIB))
    args.max_object = max(2 * GIB, round_up(max(args.size_bytes, args.shard_bytes), GIB))
    if args.runs < 1 or args.reads < 1:
        ap.error("--runs and --reads must be at least 1")
    return args


def bounds(summary, disk):
    """Figures against what this machine allows, measured in the same run:
    CACHE no (source to flash) against the slower of reading the source with
    a cold page cache and fio writing the disk; full reads from memory and
    from flash against fio reading the disk."""
    out = {}
    if disk:
        out["cache_no_bound_gbps"] = min(summary["source_read_gbps"], disk["fio_write_gbps"])
        out["cache_no_vs_bound"] = summary["preheat_flash_gbps"] / out["cache_no_bound_gbps"]
        out["flash_read_vs_fio"] = summary["flash_read_gbps"] / disk["fio_read_gbps"]
        out["mem_read_vs_fio"] = summary["mem_read_gbps"] / disk["fio_read_gbps"]
    return out


def main():
    args = parse_args()
    run = RunRecord("preheat")
    started = time.monotonic()
    for tool in (args.server, NGINX, shutil.which("curl") or "/nonexistent"):
        if not os.access(tool, os.X_OK):
            raise SystemExit(f"missing {tool}")
    os.makedirs(args.dir, exist_ok=True)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    folder_bytes = args.shards * args.shard_bytes
    need = args.size_bytes + folder_bytes + args.flash_bytes + GIB
    if need > shutil.disk_usage(args.dir).free:
        raise SystemExit(f"not enough disk in {args.dir}: {need / GIB:.1f} GiB needed")
    workdir = tempfile.mkdtemp(prefix="tmp-preheat-", dir=args.dir)
    Meter.disk = disk_of(workdir)
    os.chmod(workdir, 0o755)  # nginx's workers run as www-data
    print(f"shard {args.size_bytes / GIB:.2f} GiB, folder {args.shards} x "
          f"{args.shard_bytes / MIB:.0f} MiB; server memory {args.memory_bytes / GIB:.2f} GiB, "
          f"flash {args.flash_bytes / GIB:.2f} GiB; {args.runs} run(s), {args.reads} reads per "
          f"path; temp dir {workdir}", flush=True)
    nginx, runs, disk = None, [], {}
    try:
        src = os.path.join(workdir, "src")
        os.makedirs(os.path.join(src, "model"))
        for d in (src, os.path.join(src, "model")):
            os.chmod(d, 0o755)
        block = random.Random(11).randbytes(BLOCK)
        t = time.monotonic()
        path = os.path.join(src, "shard.bin")
        files = {"shard": {"path": path, "size": args.size_bytes,
                           "sha256": generate(path, args.size_bytes, 0, block)}, "shards": []}
        for i in range(args.shards):
            name = f"model-{i + 1:05d}-of-{args.shards:05d}.safetensors"
            p = os.path.join(src, "model", name)
            files["shards"].append({"name": name, "path": p, "size": args.shard_bytes,
                                    "sha256": generate(p, args.shard_bytes, i + 1, block)})
        print(f"generated {(args.size_bytes + folder_bytes) / GIB:.2f} GiB in "
              f"{time.monotonic() - t:.1f} s", flush=True)
        if not args.no_fio and shutil.which("fio"):
            n = min(GIB, args.size_bytes)
            disk = {"fio_write_gbps": fio_sequential(workdir, n, "write"),
                    "fio_read_gbps": fio_sequential(workdir, n, "read")}
            os.unlink(os.path.join(workdir, "fio.dat"))
            print(f"disk (fio, O_DIRECT, 1 MiB QD16): write {disk['fio_write_gbps']:.2f} GB/s, "
                  f"read {disk['fio_read_gbps']:.2f} GB/s", flush=True)
        nginx = Nginx(src, workdir, args.nginx_workers)
        for i in range(args.runs):
            print(f"run {i + 1}/{args.runs}:", flush=True)
            runs.append(one_run(args, nginx, workdir, files, block))
    finally:
        if nginx is not None:
            nginx.stop()
        shutil.rmtree(workdir, ignore_errors=True)

    summary = {k: statistics.median(r["summary"][k] for r in runs) for k in SUMMARY_KEYS}
    spread = {k: [min(r["summary"][k] for r in runs), max(r["summary"][k] for r in runs)]
              for k in SUMMARY_KEYS}
    print_table(runs[-1], args.size_bytes, folder_bytes)
    if len(runs) > 1:
        print(f"\nmedian (min-max) over {len(runs)} runs:")
        for k in SUMMARY_KEYS:
            print(f"  {k:<20} {summary[k]:.3f} ({spread[k][0]:.3f}-{spread[k][1]:.3f})")
    seconds = time.monotonic() - started
    against = bounds(summary, disk)
    for k, v in against.items():
        print(f"  {k:<20} {v:.3f}")
    config = dict(vars(args))  # write_json prints what JSON has no type for
    write_json(args.out, {"config": config, "disk": disk, "summary": summary, "spread": spread,
                          "bounds": against, "runs": runs}, run)
    out = os.path.relpath(args.out, ROOT)
    try:
        png = plot(args.out.removesuffix(".json") + ".png", summary)
        note = f"wrote {out} and {os.path.relpath(png, ROOT)}"
    except ImportError:
        note = f"wrote {out}; no plot: python3-matplotlib is not installed"
    print(note)
    s = summary
    figures = {"ratio": f"{against['cache_no_vs_bound']:.3f}",
               "cache_no_gbps": f"{s['preheat_flash_gbps']:.3f}",
               "cache_no_bound_gbps": f"{against['cache_no_bound_gbps']:.3f}",
               "flash_read_vs_fio": f"{against['flash_read_vs_fio']:.3f}",
               "mem_read_vs_fio": f"{against['mem_read_vs_fio']:.3f}"} if against else {}
    figures.update({k: f"{s[k]:.3f}" for k in (
        "preheat_gbps", "curl_gbps", "preheat_vs_curl", "mem_read_gbps", "flash_read_gbps",
        "source_read_gbps", "mem_vs_source", "mem_vs_1mib_get", "folder_gbps", "part_held",
        "part_read_gbps", "part_vs_flash")})
    figures.update({"runs": len(runs), "size": args.size_bytes, "seconds": f"{seconds:.0f}"})
    print(run.result_line(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
