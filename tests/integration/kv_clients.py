"""The KV-cache libraries' clients as they talk on the wire (issue 38,
docs/kv-cache.md), for test_kv_cache_clients.py.

- `StrictConnection`: LMCache's native `resp://` client. One blocking
  socket, one command in flight, and replies parsed byte for byte: exactly
  `+OK\\r\\n`, `:0\\r\\n` or `:1\\r\\n`, and `$<chunk size>\\r\\n` before a
  value. Anything else raises `OutOfStep`: the real client would stay out
  of step on that connection for good.
- `MuxConnection`: the GLIDE client of `valkey://`. One socket that many
  threads share, commands pipelined and replies matched in order.

Values are derived from their keys, so any reader can check every byte of
what it got without a shared model."""
import hashlib
import queue
import random
import socket
import threading

MIB = 1 << 20


class OutOfStep(AssertionError):
    """A reply the strict client cannot parse: a test failure."""


def encode(*args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


def value_of(key, size):
    """`size` bytes that only `key` has: seeded by the key's hash."""
    seed = int.from_bytes(hashlib.blake2b(key.encode()).digest()[:8], "little")
    return random.Random(seed).randbytes(size)


def lmcache_key(chunk_hash, model="llama-8b", world=4, worker=1, dtype="bfloat16"):
    """LMCache's CacheEngineKey string, before its kv_bytes / metadata suffix."""
    return f"{model}@{world}@{worker}@{chunk_hash}@{dtype}"


def chunk_hashes(document, length):
    """The chained prefix hashes of a document's first `length` chunks, as
    LMCache computes them: chunk i's hash covers chunks 0..i."""
    out, h = [], hashlib.sha256(b"doc%d" % document)
    for i in range(length):
        h = h.copy()
        h.update(b"chunk%d" % i)
        out.append(h.hexdigest()[:16])
    return out


def metadata_of(key):
    """LMCache's 28-byte metadata value."""
    return hashlib.blake2b(key.encode(), digest_size=28).digest()


class StrictConnection:
    """LMCache's native resp:// client: one command in flight, strict replies."""

    def __init__(self, port, chunk_size):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=120)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.file = self.sock.makefile("rb", buffering=1 << 16)
        self.chunk_size = chunk_size

    def _expect(self, exact):
        got = self.file.readline()
        if got != exact:
            raise OutOfStep(f"expected {exact!r}, got {got!r}")

    def set(self, key, value):
        self.sock.sendall(encode("SET", key, value))
        self._expect(b"+OK\r\n")

    def exists(self, key):
        self.sock.sendall(encode("EXISTS", key))
        got = self.file.readline()
        if got not in (b":0\r\n", b":1\r\n"):
            raise OutOfStep(f"EXISTS {key}: {got!r}")
        return got == b":1\r\n"

    def get(self, key):
        self.sock.sendall(encode("GET", key))
        self._expect(b"$%d\r\n" % self.chunk_size)
        data = self.file.read(self.chunk_size + 2)
        if len(data) != self.chunk_size + 2 or data[-2:] != b"\r\n":
            raise OutOfStep(f"GET {key}: a short or unterminated value")
        return data[:-2]

    def close(self):
        self.file.close()
        self.sock.close()


def read_reply(f):
    """One RESP2 reply from a buffered socket file; errors come back as
    ValueError instances (the caller decides they fail)."""
    line = f.readline()
    if not line.endswith(b"\r\n"):
        raise OutOfStep(f"connection closed mid-reply: {line!r}")
    kind, body = line[:1], line[1:-2]
    if kind == b"+":
        return body
    if kind == b"-":
        return ValueError(body.decode(errors="replace"))
    if kind == b":":
        return int(body)
    if kind == b"$":
        n = int(body)
        if n < 0:
            return None
        data = f.read(n + 2)
        return data[:-2]
    if kind == b"*":
        n = int(body)
        return None if n < 0 else [read_reply(f) for _ in range(n)]
    raise OutOfStep(f"not RESP: {line!r}")


class MuxConnection:
    """GLIDE's multiplexed connection: callers on any thread send on one
    socket; a reader thread hands each reply to the caller that waits for
    it, in the order the commands went out."""

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=120)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.file = self.sock.makefile("rb", buffering=1 << 16)
        self.send_lock = threading.Lock()
        self.waiting = queue.Queue()
        self.reader = threading.Thread(target=self._read_loop, daemon=True)
        self.reader.start()

    def _read_loop(self):
        try:
            while True:
                slot = self.waiting.get()
                if slot is None:
                    return
                slot.put(read_reply(self.file))
        except Exception as e:  # noqa: BLE001 - every waiter sees it
            while True:
                try:
                    slot = self.waiting.get_nowait()
                except queue.Empty:
                    break
                if slot is not None:
                    slot.put(e)
            if slot is not None:
                slot.put(e)

    def call(self, *args):
        slot = queue.Queue(maxsize=1)
        with self.send_lock:
            # Queued before the bytes go out, so the reader pairs them in order.
            self.waiting.put(slot)
            self.sock.sendall(encode(*args))
        reply = slot.get(timeout=120)
        if isinstance(reply, Exception):
            raise reply if isinstance(reply, OutOfStep) else OutOfStep(f"{args[0]}: {reply}")
        return reply

    def close(self):
        self.waiting.put(None)
        self.sock.shutdown(socket.SHUT_RDWR)
        self.reader.join(30)
        self.file.close()
        self.sock.close()
