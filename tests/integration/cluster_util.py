"""Cluster-mode helpers: a single-member etcd in a temporary folder, its v3
JSON gateway, and slot maps in the form tierkv reads (src/cluster/slot_map.h).
etcd comes from Debian's etcd-server (scripts/install-deps.sh installs it)."""
import base64
import binascii
import json
import os
import shutil
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

import redis

from conftest import free_ports

SLOTS = 16384


class Etcd:
    """With `certs` (tls_util.Certs), etcd serves https with the server
    certificate and, with `client_cert_auth`, takes only clients whose
    certificate the CA signed; `extra` goes to etcd as is. The helper's own
    calls use the client certificate, and once auth is on (enable_auth),
    root's token."""

    def __init__(self, certs=None, client_cert_auth=False, extra=()):
        self.dir = tempfile.mkdtemp(prefix="etcd-")
        self.client_port, self.peer_port = free_ports(2)
        self.certs, self.client_cert_auth, self.extra = certs, client_cert_auth, list(extra)
        scheme = "https" if certs else "http"
        self.endpoint = f"{scheme}://127.0.0.1:{self.client_port}"
        self.token = None
        self.auth_on = False
        self.proc = None
        self.start()

    def start(self):
        peer = f"http://127.0.0.1:{self.peer_port}"
        etcd = shutil.which("etcd")
        assert etcd, "etcd is not installed (Debian's etcd-server; scripts/install-deps.sh)"
        self.log = open(os.path.join(self.dir, "etcd.log"), "ab")
        self.proc = subprocess.Popen(
            [etcd, "--name", "default", "--data-dir", os.path.join(self.dir, "data"),
             "--listen-client-urls", self.endpoint, "--advertise-client-urls", self.endpoint,
             "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
             "--initial-cluster", f"default={peer}", *self._tls_args(), *self.extra],
            stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 20
        while time.time() < deadline:
            try:
                if self.auth_on:  # a restart forgets tokens: log in again
                    self.log_in("root", "rootpw")
                self.get("ready?")
                return
            except OSError:
                assert self.proc.poll() is None, "etcd exited; see " + self.dir
                time.sleep(0.1)
        raise AssertionError("etcd did not start; see " + self.dir)

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.log.close()

    def close(self):
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def _tls_args(self):
        if not self.certs:
            return []
        args = ["--cert-file", self.certs.path("server.crt"), "--key-file",
                self.certs.path("server.key"), "--trusted-ca-file", self.certs.path("ca.crt")]
        return args + (["--client-cert-auth"] if self.client_cert_auth else [])

    def _call(self, path, body):
        try:
            return self._call_once(path, body)
        except urllib.error.HTTPError as e:
            if e.code != 401 or not self.auth_on:
                raise
            self.log_in("root", "rootpw")  # root's token expired
            return self._call_once(path, body)

    def _call_once(self, path, body):
        req = urllib.request.Request(self.endpoint + path, data=json.dumps(body).encode(),
                                     method="POST")
        if self.token:
            req.add_header("Authorization", self.token)
        context = None
        if self.certs:
            context = ssl.create_default_context(cafile=self.certs.path("ca.crt"))
            context.load_cert_chain(self.certs.path("client.crt"), self.certs.path("client.key"))
        with urllib.request.urlopen(req, timeout=5, context=context) as r:
            return json.loads(r.read())

    def enable_auth(self, user, password, prefix="/tierkv/"):
        """etcd's auth on, with root (password "rootpw") and `user`, who may
        read and write the keys under `prefix` only."""
        self._call("/v3/auth/user/add", {"name": "root", "password": "rootpw"})
        self._call("/v3/auth/user/grant", {"user": "root", "role": "root"})
        self._call("/v3/auth/role/add", {"name": "tierkv"})
        end = prefix[:-1] + chr(ord(prefix[-1]) + 1)
        self._call("/v3/auth/role/grant", {"name": "tierkv", "perm": {
            "key": b64(prefix), "range_end": b64(end), "permType": "READWRITE"}})
        self._call("/v3/auth/user/add", {"name": user, "password": password})
        self._call("/v3/auth/user/grant", {"user": user, "role": "tierkv"})
        self._call("/v3/auth/enable", {})
        self.auth_on = True
        self.log_in("root", "rootpw")

    def log_in(self, user, password):
        self.token = None
        self.token = self._call_once("/v3/auth/authenticate",
                                {"name": user, "password": password})["token"]

    def put(self, key, value):
        self._call("/v3/kv/put", {"key": b64(key), "value": b64(value)})

    def get(self, key):
        kvs = self._call("/v3/kv/range", {"key": b64(key)}).get("kvs", [])
        return base64.b64decode(kvs[0]["value"]).decode() if kvs else None

    def delete(self, key):
        self._call("/v3/kv/deleterange", {"key": b64(key)})

    def delete_prefix(self, prefix):
        end = prefix[:-1] + chr(ord(prefix[-1]) + 1)
        self._call("/v3/kv/deleterange", {"key": b64(prefix), "range_end": b64(end)})


def b64(text):
    return base64.b64encode(text.encode()).decode()


def slot_map(version, nodes, owners):
    """The JSON slot map: `nodes` as (id, host, port), `owners` one node index per slot."""
    ranges = []
    for slot, owner in enumerate(owners):
        if ranges and ranges[-1][2] == owner and ranges[-1][1] == slot - 1:
            ranges[-1][1] = slot
        else:
            ranges.append([slot, slot, owner])
    return json.dumps({
        "version": version,
        "nodes": [{"id": i, "host": h, "port": p, "weight": 1} for i, h, p in nodes],
        "slots": [[a, b, nodes[o][0]] for a, b, o in ranges],
        "moving": [],
    })


def even_owners(n):
    """Slots split into n contiguous, even ranges."""
    return [min(slot * n // SLOTS, n - 1) for slot in range(SLOTS)]


def wait_until(cond, timeout=15.0, what="condition"):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if cond():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def key_slot(key):
    """Redis Cluster's slot of `key` (CRC16/XMODEM of its hash tag)."""
    k = key.encode() if isinstance(key, str) else key
    start = k.find(b"{")
    if start >= 0:
        end = k.find(b"}", start + 1)
        if end > start + 1:
            k = k[start + 1:end]
    return binascii.crc_hqx(k, 0) % SLOTS


def send(conn, asking, *args):
    """Runs a command on `conn`, after ASKING if `asking`; an error reply
    raises ResponseError."""
    if not asking:
        return conn.execute_command(*args)
    pipe = conn.pipeline(transaction=False)
    pipe.execute_command("ASKING")
    pipe.execute_command(*args)
    reply = pipe.execute(raise_on_error=False)[1]
    if isinstance(reply, Exception):
        raise reply
    return reply


class SlotClient:
    """A minimal cluster client that follows the protocol to the letter:
    a slot table from CLUSTER SLOTS, -MOVED updates it, -ASK sends ASKING
    and the command once to the node named, -TRYAGAIN waits and retries,
    and so does -CLUSTERDOWN (as redis-py's cluster client does): a node
    answers it, and runs nothing, while it cannot confirm its lease or the
    map within the lease TTL, which a loaded machine's etcd can cause.
    Unlike redis-py 4.x (redis-py#2432), it follows -ASK to a node that owns
    no slot yet: a node that just joined. A call that gets no answer within
    `deadline_s` fails the test."""

    def __init__(self, port, deadline_s=30.0):
        self.conns = {}
        self.slots = [None] * SLOTS
        self.deadline_s = deadline_s
        # The most -MOVED/-ASK a call followed in a row without being told
        # to wait: two nodes that send a client to each other drive it up.
        self.max_hops = 0
        self.refresh(("127.0.0.1", port))

    def conn(self, addr):
        if addr not in self.conns:
            self.conns[addr] = redis.Redis(host=addr[0], port=addr[1])
        return self.conns[addr]

    def refresh(self, addr):
        for first, last, primary, *_ in self.conn(addr).execute_command("CLUSTER", "SLOTS"):
            owner = (primary[0].decode(), primary[1])
            for s in range(first, last + 1):
                self.slots[s] = owner

    def call(self, key, *args):
        slot = key_slot(key)
        addr, asking = self.slots[slot], False
        deadline, hops = time.monotonic() + self.deadline_s, 0
        while time.monotonic() < deadline:
            try:
                return send(self.conn(addr), asking, *args)
            except redis.exceptions.ResponseError as e:
                kind, *rest = str(e).split(" ")
                if kind in ("MOVED", "ASK"):
                    hops += 1
                    self.max_hops = max(self.max_hops, hops)
                    host, port = rest[1].rsplit(":", 1)
                    addr, asking = (host, int(port)), kind == "ASK"
                    if kind == "MOVED":
                        self.refresh(addr)
                elif kind in ("TRYAGAIN", "CLUSTERDOWN"):
                    hops = 0
                    addr, asking = self.slots[slot], False
                    time.sleep(0.01 if kind == "TRYAGAIN" else 0.05)
                else:
                    raise
        raise AssertionError(f"{args} kept being redirected for {self.deadline_s} s")

    def close(self):
        for c in self.conns.values():
            c.close()
