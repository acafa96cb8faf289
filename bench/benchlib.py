"""Helpers the benchmark drivers share: loopback ports, waiting for a peer
to listen, size parsing, commands and INFO over a plain socket (no client
library), a one-member etcd for cluster runs, and the run record every
benchmark writes into its JSON and onto its RESULT line.

Drivers import it with bench/ on sys.path:
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import benchlib
"""
import base64
import csv
import io
import json
import os
import shutil
import socket
import subprocess
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# A run that started with a 1-minute load average above this (on 2 cores)
# shared the machine with something heavy: its RESULT line says so, and
# bench/run-all marks its row. Only the load before counts: the load after
# includes the benchmark's own (up to 2 on 2 cores), so it is recorded, not
# judged.
LOADED_ABOVE = 1.5


REDIS_BENCHMARK = shutil.which("redis-benchmark") or "/usr/bin/redis-benchmark"


def redis_benchmark(port, tests, size, clients, pipeline, requests, extra=()):
    """One redis-benchmark run on loopback: its CSV rows, one per test, each
    a dict of its columns (test, rps, p50_latency_ms, ...)."""
    cmd = [REDIS_BENCHMARK, "-h", "127.0.0.1", "-p", str(port), "-t", tests, "-d", str(size),
           "-c", str(clients), "-P", str(pipeline), "-n", str(requests), "--csv", *extra]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=True)
    return list(csv.DictReader(io.StringIO(out.stdout)))


def resp(*args):
    """One command in the Redis protocol (arguments as bytes, or anything
    str() makes one)."""
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


def read_reply(f):
    line = f.readline()
    kind, rest = line[:1], line[1:-2]
    if kind in (b"+", b":"):
        return rest
    if kind == b"-":
        raise RuntimeError(rest.decode())
    if kind == b"$":
        n = int(rest)
        return None if n < 0 else f.read(n + 2)[:-2]
    if kind == b"*":
        return [read_reply(f) for _ in range(int(rest))]
    raise RuntimeError(f"bad reply {line!r}")


def resp_call(port, *args):
    with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
        s.sendall(resp(*args))
        return read_reply(s.makefile("rb"))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port, proc, timeout=30.0):
    """Returns once something listens on 127.0.0.1:port; raises if `proc`
    exits first or the timeout passes."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with code {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"server did not listen on {port}")


def is_loading(port):
    """True while a Redis-protocol server still loads its data (INFO
    persistence: loading:1). tierkv-server accepts connections at once and
    answers -LOADING to data commands until its flash index is loaded."""
    return server_info(port, "persistence").get("loading") == "1"


def wait_loaded(port, proc, timeout=600.0):
    """Returns once the server at port has loaded its data; raises if `proc`
    exits first or the timeout passes."""
    deadline = time.monotonic() + timeout
    while is_loading(port):
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with code {proc.returncode}")
        if time.monotonic() >= deadline:
            raise RuntimeError(f"server on {port} still loading after {timeout}s")
        time.sleep(0.02)


def parse_size(text):
    """"64k", "1MiB", "2gb", "4096" -> bytes."""
    text = text.strip().lower().removesuffix("b").removesuffix("i")
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    if text and text[-1] in units:
        return int(float(text[:-1]) * units[text[-1]])
    return int(text)


def server_info(port, section=None):
    """INFO's fields (of one section, if given) as a dict; empty if the
    server answers an error."""
    request = b"*1\r\n$4\r\nINFO\r\n"
    if section:
        request = b"*2\r\n$4\r\nINFO\r\n$%d\r\n%s\r\n" % (len(section), section.encode())
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(request)
        data = b""
        while b"\r\n" not in data:
            chunk = s.recv(65536)
            if not chunk:
                raise ConnectionError("connection closed by server")
            data += chunk
        head, rest = data.split(b"\r\n", 1)
        if not head.startswith(b"$"):
            return {}
        length = int(head[1:])
        while len(rest) < length:
            rest += s.recv(65536)
    fields = {}
    for line in rest[:length].decode().splitlines():
        if ":" in line and not line.startswith("#"):
            key, value = line.split(":", 1)
            fields[key] = value
    return fields


def pyplot():
    """matplotlib.pyplot on the Agg backend, or None (with a note) if
    matplotlib is missing: the drivers then write no PNG."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib missing: no plot")
        return None
    return plt


def load_average():
    """The 1-minute load average."""
    return round(os.getloadavg()[0], 2)


def git_commit():
    try:
        out = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True, check=False).stdout.strip()
    except OSError:
        return "unknown"
    return out or "unknown"


class RunRecord:
    """When a benchmark ran, at which commit, for how long, and how loaded the
    machine was before and after. Make one first thing in main(); finish()
    gives the JSON's "run" object, result_line() the last line to print."""

    def __init__(self, name):
        self.name = name
        self.started = time.time()
        self.load_before = load_average()
        self.load_after = None

    def finish(self):
        self.load_after = load_average()
        return {"name": self.name,
                "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.started)),
                "commit": git_commit(), "seconds": round(time.time() - self.started, 1),
                "load_before": self.load_before, "load_after": self.load_after,
                "loaded": self.loaded()}

    def loaded(self):
        return self.load_before > LOADED_ABOVE

    def result_line(self, figures):
        """`RESULT name=... k=v ... load_before=.. load_after=..`, with
        `loaded=yes` when the machine was busy (the figures are noise)."""
        if self.load_after is None:
            self.finish()
        parts = [f"name={self.name}"] + [f"{k}={v}" for k, v in figures.items()]
        parts += [f"load_before={self.load_before}", f"load_after={self.load_after}"]
        if self.loaded():
            parts.append(f"loaded=yes(load average over {LOADED_ABOVE} at the start: noisy)")
        return "RESULT " + " ".join(parts)


def write_json(path, data, run):
    """Writes `data` with the run record under "run" to `path`."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump({**data, "run": run.finish()}, f, indent=2, default=str)
        f.write("\n")
    print(f"wrote {path}")


def parse_args_with_quick(ap, quick):
    """ap.parse_args() with a --quick flag: a smoke run of at most 90 s that
    sets the options in `quick` (option dest -> value) the command line left
    at their defaults."""
    ap.add_argument("--quick", action="store_true",
                    help="a short run (at most 90 s): " +
                    ", ".join(f"{k.replace('_', '-')} {v}" for k, v in quick.items()))
    args = ap.parse_args()
    if args.quick:
        for name, value in quick.items():
            if getattr(args, name) == ap.get_default(name):
                setattr(args, name, value)
    return args


def plot_bars(path, title, bars, ylabel):
    """A bar chart of {label: value} to `path` (PNG), for benchmarks whose
    figures are a handful of numbers. Returns the path, or None without
    matplotlib."""
    plt = pyplot()
    if plt is None:
        return None
    fig, ax = plt.subplots(figsize=(1.2 * len(bars) + 3, 3.5))
    ax.bar(range(len(bars)), list(bars.values()))
    ax.set_xticks(range(len(bars)), list(bars), rotation=20, ha="right")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def report_ratio_rows(run, out, meta, rows, base, arm, title, ylabel, extra=None):
    """The ending of an A/B cost benchmark: `rows` are dicts with "row",
    "ratio" and the ops/s of both arms under base[0] and arm[0] (base[1],
    arm[1]: their column headers). Prints the table, writes the JSON (meta
    and the rows) and a bar chart of the ratios, and prints the RESULT line
    with the worst row's ratio and `extra` figures."""
    print(f"{'row':<16} {base[1]:>19} {arm[1]:>19} {'ratio':>7}")
    for r in rows:
        print(f"{r['row']:<16} {r[base[0]]:>19,.0f} {r[arm[0]]:>19,.0f} {r['ratio']:>7.3f}")
    write_json(out, {**meta, "rows": rows}, run)
    plot_bars(os.path.splitext(out)[0] + ".png", title, {r["row"]: r["ratio"] for r in rows},
              ylabel)
    worst = min(rows, key=lambda r: r["ratio"])
    print(run.result_line({"ratio": f"{worst['ratio']:.3f}", "worst_row": f"\"{worst['row']}\"",
                           **(extra or {})}))


def fio_sequential(directory, size, rw):
    """fio's sequential O_DIRECT `rw` ("read" or "write") of a `size`-byte
    file in `directory` (1 MiB blocks, QD 16, io_uring): GB/s."""
    path = os.path.join(directory, "fio.dat")
    args = ["fio", "--name=sequential", f"--filename={path}", f"--rw={rw}", "--direct=1",
            "--ioengine=io_uring", "--bs=1m", "--iodepth=16", f"--size={size}",
            "--output-format=json"]
    out = subprocess.run(args, capture_output=True, text=True, check=False, timeout=300)
    if out.returncode != 0:
        raise RuntimeError(f"fio failed ({out.returncode}): {out.stderr.strip()[:200]}")
    job = json.loads(out.stdout[out.stdout.index("{"):])["jobs"][0]
    return job["write" if rw == "write" else "read"]["bw_bytes"] / 1e9


class Etcd:
    """A single-member etcd in `workdir`, for one cluster."""

    def __init__(self, workdir):
        os.makedirs(workdir, exist_ok=True)
        self.port, peer_port = free_port(), free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        peer = f"http://127.0.0.1:{peer_port}"
        self.log = open(os.path.join(workdir, "etcd.log"), "wb")
        self.proc = subprocess.Popen(
            ["etcd", "--name", "b", "--data-dir", os.path.join(workdir, "etcd"),
             "--listen-client-urls", self.endpoint, "--advertise-client-urls", self.endpoint,
             "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
             "--initial-cluster", f"b={peer}"], stdout=self.log, stderr=subprocess.STDOUT)
        wait_for_port(self.port, self.proc)

    def call(self, path, body):
        req = urllib.request.Request(self.endpoint + path, data=json.dumps(body).encode(),
                                     method="POST")
        with urllib.request.urlopen(req, timeout=5) as r:
            return json.loads(r.read())

    def put(self, key, value=""):
        self.call("/v3/kv/put", {"key": b64(key), "value": b64(value)})

    def delete(self, key):
        self.call("/v3/kv/deleterange", {"key": b64(key)})

    def stop(self):
        self.proc.kill()
        self.proc.wait()
        self.log.close()


def b64(text):
    return base64.b64encode(text.encode()).decode()
