"""Fixtures for over-the-wire tests: a real redis-server next to tierkv-server.

Both servers bind to 127.0.0.1 on free ports and are stopped after the session.
`pair` gives two redis-py clients; `same(...)` runs one command on both and
asserts identical replies (error texts included).

Set TIERKV_SERVER to the tierkv-server binary (the test script does); the
default is build/src/server/tierkv-server relative to the repository root.
"""
import os
import shutil
import socket
import subprocess
import tempfile
import time

import pytest
import redis

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TIERKV_SERVER = os.environ.get(
    "TIERKV_SERVER", os.path.join(ROOT, "build", "src", "server", "tierkv-server"))
REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"

# ./scripts/test.sh torture sets TIERKV_TORTURE=1: the big tests then run at
# full size (1 GiB fills, 10 kill rounds, a 300 MiB value). Their CI sizes
# still cross every boundary the tests exist for: memory smaller than the
# data, more than one flash region wrap, a value larger than memory, and at
# least 2 kill rounds.
TORTURE = os.environ.get("TIERKV_TORTURE") == "1"


def by_tier(ci, torture):
    """`torture` under ./scripts/test.sh torture, `ci` otherwise."""
    return torture if TORTURE else ci


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_ports(n):
    """n distinct free ports: the sockets stay bound until all are chosen, so
    the kernel cannot hand out the same port twice."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def wait_for_port(port, proc, timeout=15.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with code {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"server did not listen on {port}")


def is_loading(port):
    """True while the server at port still loads its data (INFO persistence
    says loading:1). A server that wants AUTH first cannot say: False."""
    c = RawClient(port)
    try:
        reply = c.call("INFO", "persistence")
        # QUIT, and wait for the server's close: then this client is no
        # longer counted (tests of maxclients start right after).
        c.call("QUIT")
        c.closed_by_server()
    finally:
        c.close()
    return reply.startswith(b"$") and b"\r\nloading:1\r\n" in reply


def wait_loaded(port, proc, timeout=60.0):
    """Returns once the server at port has loaded its data: tierkv-server
    accepts connections at once and answers -LOADING to data commands while
    its flash index loads."""
    deadline = time.time() + timeout
    while is_loading(port):
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with code {proc.returncode}")
        if time.time() >= deadline:
            raise RuntimeError(f"server on {port} still loading after {timeout}s")
        time.sleep(0.02)


# The logs of the servers the running test started: a failed test's report
# ends with the last lines of each, so that a failure seen once in CI (a
# hang, a crash) can be read afterwards. Cleared before every test.
SERVER_LOGS = []
LOG_LINES_ON_FAILURE = 60


def note_server_log(path):
    """Puts `path` in the failure report of the running test."""
    if path not in SERVER_LOGS:
        SERVER_LOGS.append(path)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    SERVER_LOGS.clear()  # before this test's fixtures start their servers


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if not rep.failed or rep.when == "teardown":
        return
    for path in SERVER_LOGS:  # the workdirs are removed only at teardown
        try:
            with open(path, "rb") as f:
                lines = f.read().decode(errors="replace").splitlines()
        except OSError:
            continue
        rep.sections.append((f"server log {path} (last {LOG_LINES_ON_FAILURE} lines)",
                             "\n".join(lines[-LOG_LINES_ON_FAILURE:])))


class ServerProcess:
    def __init__(self, argv, port, workdir, loaded=False):
        """Starts argv; returns once it listens on port and, with `loaded`,
        once it has loaded its data."""
        self.argv = argv
        self.port = port
        self.workdir = workdir
        self.log_path = os.path.join(workdir, "server.log")
        note_server_log(self.log_path)
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT, cwd=workdir)
        wait_for_port(port, self.proc)
        if loaded:
            wait_loaded(port, self.proc)

    def restart(self, kill=False, loaded=True):
        """Stops the server (SIGTERM, or SIGKILL with `kill`) and starts it
        again with the same flags, ports and files."""
        if self.proc.poll() is None:
            if kill:
                self.proc.kill()
            else:
                self.proc.terminate()
            self.proc.wait(60)
        self.log.write(b"\n=== restart\n")
        self.log.flush()
        self.proc = subprocess.Popen(self.argv, stdout=self.log, stderr=subprocess.STDOUT,
                                     cwd=self.workdir)
        wait_for_port(self.port, self.proc)
        if loaded:
            wait_loaded(self.port, self.proc)

    def client(self, **kw):
        return redis.Redis(host="127.0.0.1", port=self.port, **kw)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def start_redis(workdir, extra=()):
    port = free_port()
    argv = [REDIS_SERVER, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
            "--appendonly", "no", "--dir", workdir, *extra]
    return ServerProcess(argv, port, workdir)


def start_tierkv(workdir, extra=()):
    """A tierkv-server in `workdir`; its flash file (256 MiB unless `extra`
    names --flash-size) lives there too."""
    port, metrics_port = free_ports(2)
    flash = [] if "--flash-size" in extra else ["--flash-size", "256mb"]
    argv = [TIERKV_SERVER, "--port", str(port), "--bind", "127.0.0.1",
            "--metrics-port", str(metrics_port), "--memory", "512mb",
            "--flash-path", os.path.join(workdir, "flash.dat"), *flash, *extra]
    # Without flash the store opens before the server listens: no need to wait.
    args = list(extra)
    no_flash = "--flash-size" in args and args[args.index("--flash-size") + 1] in ("0", "0mb")
    return ServerProcess(argv, port, workdir, loaded=not no_flash)


@pytest.fixture(scope="session")
def redis_server():
    d = tempfile.mkdtemp(prefix="redis-")
    s = start_redis(d)
    yield s
    s.stop()
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="session")
def tierkv_server():
    d = tempfile.mkdtemp(prefix="tierkv-")
    s = start_tierkv(d)
    yield s
    s.stop()
    shutil.rmtree(d, ignore_errors=True)


def reply_of(client, *args):
    """The reply to one command, or ('error', text) for an error reply."""
    try:
        return client.execute_command(*args)
    except redis.exceptions.ResponseError as e:
        return ("error", str(e))


class Pair:
    def __init__(self, ours, theirs):
        self.ours = ours
        self.theirs = theirs

    def both(self, *args):
        return reply_of(self.ours, *args), reply_of(self.theirs, *args)

    def same(self, *args):
        a, b = self.both(*args)
        assert a == b, f"{args!r}: tierkv={a!r} redis={b!r}"
        return a


@pytest.fixture
def pair(redis_server, tierkv_server):
    ours = tierkv_server.client()
    theirs = redis_server.client()
    ours.flushall()
    theirs.flushall()
    yield Pair(ours, theirs)
    ours.close()
    theirs.close()


# --- raw RESP access -------------------------------------------------------

def metric(body, name):
    """The value of the unlabelled series `name` in a /metrics body."""
    for line in body.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not in /metrics")


def encode_command(*args):
    """A command as a RESP multibulk request."""
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        if isinstance(a, str):
            a = a.encode()
        elif isinstance(a, int):
            a = str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


class RawClient:
    """A socket that sends commands and reads exactly one reply frame at a
    time, returning its raw bytes (RESP2 or RESP3), so replies can be compared
    byte for byte with redis-server's."""

    def __init__(self, port, timeout=10.0):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.buf = b""

    def close(self):
        self.sock.close()

    def send(self, data):
        self.sock.sendall(data)

    def _fill(self):
        chunk = self.sock.recv(1 << 16)
        if not chunk:
            raise ConnectionError("connection closed by server")
        self.buf += chunk

    def _line(self, pos):
        while True:
            end = self.buf.find(b"\r\n", pos)
            if end >= 0:
                return end
            self._fill()

    def _frame_end(self, pos):
        """Offset just past the frame that starts at pos."""
        while len(self.buf) <= pos:
            self._fill()
        end = self._line(pos)
        kind = self.buf[pos:pos + 1]
        head = self.buf[pos + 1:end]
        pos = end + 2
        if kind in (b"$", b"=", b"!"):
            n = int(head)
            if n < 0:
                return pos
            while len(self.buf) < pos + n + 2:
                self._fill()
            return pos + n + 2
        if kind in (b"*", b"~", b">", b"%", b"|"):
            n = int(head)
            if kind in (b"%", b"|"):
                n *= 2
            for _ in range(max(n, 0)):
                pos = self._frame_end(pos)
            if kind == b"|":  # attributes precede the real reply
                pos = self._frame_end(pos)
            return pos
        return pos  # + - : _ , # (

    def read_reply(self):
        end = self._frame_end(0)
        frame, self.buf = self.buf[:end], self.buf[end:]
        return frame

    def call(self, *args):
        self.send(encode_command(*args))
        return self.read_reply()

    def closed_by_server(self, timeout=5.0):
        """True if the server closes the connection (EOF) within timeout."""
        self.sock.settimeout(timeout)
        try:
            while True:
                chunk = self.sock.recv(1 << 16)
                if not chunk:
                    return True
                self.buf += chunk
        except (ConnectionResetError, BrokenPipeError):
            return True
        except socket.timeout:
            return False


@pytest.fixture
def raw_pair(redis_server, tierkv_server):
    ours = RawClient(tierkv_server.port)
    theirs = RawClient(redis_server.port)
    ours.call("FLUSHALL")
    theirs.call("FLUSHALL")
    yield ours, theirs
    ours.close()
    theirs.close()


def server_factory(start_fn, prefix):
    """A fixture body that starts extra servers with their own flags and stops them afterwards."""
    started = []

    def start(*extra):
        d = tempfile.mkdtemp(prefix=prefix)
        s = start_fn(d, extra)
        started.append((s, d))
        return s

    yield start
    for s, d in started:
        s.stop()
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def make_tierkv():
    """Starts extra tierkv-servers with their own flags; stopped afterwards."""
    yield from server_factory(start_tierkv, "tierkv-")


@pytest.fixture
def make_redis():
    """Starts extra redis-servers with their own flags; stopped afterwards."""
    yield from server_factory(start_redis, "redis-")


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def pytest_terminal_summary(terminalreporter):
    """Says clearly which tests did not run for want of an external data set
    (skips whose reason starts with "traces folder missing")."""
    reasons = {}
    for rep in terminalreporter.stats.get("skipped", []):
        longrepr = getattr(rep, "longrepr", None)
        if isinstance(longrepr, tuple) and len(longrepr) == 3 and \
                "traces folder missing" in str(longrepr[2]):
            reason = str(longrepr[2]).removeprefix("Skipped: ")
            reasons[reason] = reasons.get(reason, 0) + 1
    for reason, n in reasons.items():
        terminalreporter.write_line(f"NOT RUN: {n} tests: {reason}", yellow=True, bold=True)
