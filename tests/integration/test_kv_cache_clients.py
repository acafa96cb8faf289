"""The five ways KV-cache libraries talk to us, byte for byte, with
concurrent clients and values mostly on flash (issue 38, docs/kv-cache.md).

- `redis://` (LMCache RedisConnector, redis.asyncio, 150-connection pool,
  CLIENT SETINFO on each new connection): SET <k>kv_bytes then SET
  <k>metadata for all chunks at once; EXISTS <k>metadata chunk by chunk up
  to the first 0; then, for all hit chunks at once, GET <k>metadata and
  GET <k>kv_bytes on one pooled connection per chunk (DEL <k>metadata if
  kv_bytes is gone).
- `redis-cluster://`: the same keys, untagged, on a 3-node cluster.
- `resp://` (LMCache's native client): one key per chunk; 8 threads, each
  with one blocking connection and one command in flight; an EXISTS for
  every key of a request, the hits being the leading 1s; strict replies.
- `valkey://` (GLIDE): one key per chunk, 8 threads sharing one
  multiplexed connection.
- SGLang HiCache's valkey backend: hicache:<model>:<tp_rank>:<tp_size>:
  <hash> keys, batches as redis-py pipelines, that is MULTI/EXEC, and a
  batch larger than memory.

The contract, for each: no command gets an error reply, every value read is
the one written for its key (values are derived from keys), and a prefix
whose store completed is found whole by every later lookup (flash holds
all the data, so nothing may be lost). The data is about 2.5 times memory,
and a last pass reads every key back, so most of it comes off flash."""
import asyncio
import random
import threading
from concurrent.futures import ThreadPoolExecutor

import redis
import redis.asyncio

from cluster_moves import client_of, managed, settled  # noqa: F401
from cluster_util import wait_until as cluster_wait_until
from flash_util import flash_servers, num  # noqa: F401
from kv_clients import (MIB, MuxConnection, StrictConnection, chunk_hashes, lmcache_key,
                        metadata_of, value_of)

CHUNK = 2 * MIB
CHUNKS = 8  # per document
DOCUMENTS = 10  # 10 x 8 x 2 MiB = 160 MiB of kv_bytes
FLASH = ("--region-size", "16mb", "--flash-preallocate", "no")


class Prefixes:
    """What every lookup must find: the longest prefix of each document
    whose store completed."""

    def __init__(self):
        self.lock = threading.Lock()
        self.done = {}

    def floor(self, document, length):
        with self.lock:
            return min(self.done.get(document, 0), length)

    def stored(self, document, length):
        with self.lock:
            self.done[document] = max(self.done.get(document, 0), length)

    def keys(self):
        with self.lock:
            return [(d, n) for d, n in self.done.items()]


def requests(seed, count):
    rng = random.Random(seed)
    return [(rng.randrange(DOCUMENTS), rng.randint(1, CHUNKS)) for _ in range(count)]


def run_engines(engines, seed, per_engine, request):
    """`engines` threads each run `per_engine` seeded requests through
    `request(prefixes, document, length)`; then every stored prefix is read
    back once more. Returns the prefixes stored."""
    prefixes = Prefixes()

    def engine(i):
        for document, length in requests(seed + i, per_engine):
            request(prefixes, document, length)

    with ThreadPoolExecutor(engines) as pool:
        for f in [pool.submit(engine, i) for i in range(engines)]:
            f.result(timeout=300)
    for document, length in prefixes.keys():
        request(prefixes, document, length)
    return prefixes


def start_flash_server(flash_servers, *prefetch):
    return flash_servers(memory="64mb", flash_size="512mb", extra=FLASH + prefetch).start()


def read_from_flash(s, before):
    """Bytes read from flash since `before` (a flash_info())."""
    return num(s.flash_info(), "flash_read_bytes") - num(before, "flash_read_bytes")


# --- redis:// -------------------------------------------------------------

class Redis5Connection(redis.asyncio.Connection):
    """redis-py 5 names itself on every new connection."""

    async def on_connect(self):
        await super().on_connect()
        for field, value in (("LIB-NAME", "redis-py"), ("LIB-VER", "5.0.1")):
            await self.send_command("CLIENT", "SETINFO", field, value)
            assert await self.read_response() == b"OK"


async def lmcache_request(r, prefixes, document, length):
    keys = [lmcache_key(h) for h in chunk_hashes(document, length)]
    floor = prefixes.floor(document, length)
    hits = 0
    for k in keys:
        if not await r.exists(k + "metadata"):
            break
        hits += 1
    assert hits >= floor, (document, length, hits, floor)

    async def retrieve(k):
        async with r.client() as conn:
            meta = await conn.get(k + "metadata")
            kv = await conn.get(k + "kv_bytes")
        if kv is None:
            await r.delete(k + "metadata")
        assert meta == metadata_of(k), k
        assert kv == value_of(k, CHUNK), (k, None if kv is None else len(kv))

    await asyncio.gather(*(retrieve(k) for k in keys[:hits]))

    async def put(k):
        assert await r.set(k + "kv_bytes", value_of(k, CHUNK))
        assert await r.set(k + "metadata", metadata_of(k))

    await asyncio.gather(*(put(k) for k in keys[hits:]))
    prefixes.stored(document, length)


async def lmcache_fleet(port, engines, per_engine):
    pool = redis.asyncio.ConnectionPool(host="127.0.0.1", port=port, max_connections=150,
                                        connection_class=Redis5Connection)
    r = redis.asyncio.Redis(connection_pool=pool)
    prefixes = Prefixes()

    async def engine(i):
        for document, length in requests(i, per_engine):
            await lmcache_request(r, prefixes, document, length)

    await asyncio.gather(*(engine(i) for i in range(engines)))
    # Every stored chunk, read back at once.
    for document, length in prefixes.keys():
        await lmcache_request(r, prefixes, document, length)
    await pool.disconnect()


def test_redis_url_pattern(flash_servers):
    s = start_flash_server(flash_servers, "--exists-prefetch-map", "metadata=kv_bytes")
    before = s.flash_info()
    asyncio.run(asyncio.wait_for(lmcache_fleet(s.port, engines=4, per_engine=20), 300))
    assert read_from_flash(s, before) > 64 * MIB
    # Every pooled connection named itself: two CLIENT SETINFO each.
    setinfo = s.client().info("commandstats")["cmdstat_client"]["calls"]
    assert setinfo >= 2 and setinfo % 2 == 0, setinfo


# --- redis-cluster:// -----------------------------------------------------

def cluster_request(rc, prefixes, document, length):
    keys = [lmcache_key(h) for h in chunk_hashes(document, length)]
    floor = prefixes.floor(document, length)
    hits = 0
    for k in keys:
        if not rc.exists(k + "metadata"):
            break
        hits += 1
    assert hits >= floor, (document, length, hits, floor)
    for k in keys[:hits]:
        assert rc.get(k + "metadata") == metadata_of(k), k
        assert rc.get(k + "kv_bytes") == value_of(k, CHUNK), k
    for k in keys[hits:]:
        assert rc.set(k + "kv_bytes", value_of(k, CHUNK))
        assert rc.set(k + "metadata", metadata_of(k))
    prefixes.stored(document, length)


def test_redis_cluster_url_pattern_without_hash_tags(managed):
    etcd, start = managed
    nodes = [start("--memory", "24mb", "--flash-size", "256mb", "--exists-prefetch-map",
                   "metadata=kv_bytes", *FLASH) for _ in range(3)]
    cluster_wait_until(lambda: settled(nodes, lambda i, c: c > 5000), what="an even split")
    # A chunk's two keys are in different slots: that is the point.
    k = lmcache_key(chunk_hashes(0, 1)[0])
    c = nodes[0].client()
    assert c.cluster("keyslot", k + "metadata") != c.cluster("keyslot", k + "kv_bytes")
    clients = threading.local()

    def request(prefixes, document, length):
        if not hasattr(clients, "rc"):
            clients.rc = client_of(nodes)  # one per engine thread
        cluster_request(clients.rc, prefixes, document, length)

    run_engines(4, 100, 12, request)


# --- resp:// --------------------------------------------------------------

class NativeClient:
    """LMCache's resp:// client: a request's keys spread over 8 threads,
    each with its own blocking connection."""

    def __init__(self, port, threads=8):
        self.port = port
        self.local = threading.local()
        self.conns = []
        self.lock = threading.Lock()
        self.pool = ThreadPoolExecutor(threads)

    def _conn(self):
        conn = getattr(self.local, "conn", None)
        if conn is None:
            conn = self.local.conn = StrictConnection(self.port, CHUNK)
            with self.lock:
                self.conns.append(conn)
        return conn

    def each(self, fn, keys):
        return list(self.pool.map(lambda k: fn(self._conn(), k), keys, timeout=300))

    def close(self):
        self.pool.shutdown()
        for c in self.conns:
            c.close()


def native_request(client, prefixes, document, length):
    keys = [lmcache_key(h) for h in chunk_hashes(document, length)]
    floor = prefixes.floor(document, length)
    present = client.each(lambda c, k: c.exists(k), keys)
    hits = present.index(False) if False in present else len(present)
    assert hits >= floor, (document, length, hits, floor)
    values = client.each(lambda c, k: c.get(k), keys[:hits])
    for k, v in zip(keys, values):
        assert v == value_of(k, CHUNK), k
    client.each(lambda c, k: c.set(k, value_of(k, CHUNK)), keys[hits:])
    prefixes.stored(document, length)


def test_resp_url_pattern_with_strict_replies(flash_servers):
    s = start_flash_server(flash_servers, "--exists-prefetch", "yes")
    before = s.flash_info()
    client = NativeClient(s.port)
    try:
        # Two request streams at once share the client's 8 threads.
        run_engines(2, 200, 20, lambda p, d, n: native_request(client, p, d, n))
    finally:
        client.close()
    assert read_from_flash(s, before) > 64 * MIB


# --- valkey:// -------------------------------------------------------------

def glide_request(conn, prefixes, document, length):
    keys = [lmcache_key(h) for h in chunk_hashes(document, length)]
    floor = prefixes.floor(document, length)
    hits = 0
    for k in keys:
        if conn.call("EXISTS", k) != 1:
            break
        hits += 1
    assert hits >= floor, (document, length, hits, floor)
    for k in keys[:hits]:
        assert conn.call("GET", k) == value_of(k, CHUNK), k
    for k in keys[hits:]:
        assert conn.call("SET", k, value_of(k, CHUNK)) == b"OK"
    prefixes.stored(document, length)


def test_valkey_url_pattern_on_one_multiplexed_connection(flash_servers):
    s = start_flash_server(flash_servers, "--exists-prefetch", "yes")
    before = s.flash_info()
    conn = MuxConnection(s.port)
    try:
        run_engines(8, 300, 8, lambda p, d, n: glide_request(conn, p, d, n))
    finally:
        conn.close()
    assert read_from_flash(s, before) > 64 * MIB


# --- SGLang HiCache --------------------------------------------------------

def hicache_key(rank, h):
    return f"hicache:llama-8b:{rank}:2:{h}"


def hicache_rank(port, rank, batch):
    """One TP rank: batch_set, batch_exists and batch_get of `batch` pages,
    each batch one MULTI/EXEC, in two rounds over different pages."""
    r = redis.Redis(host="127.0.0.1", port=port, socket_timeout=120)
    try:
        for round_no in range(2):
            keys = [hicache_key(rank, h) for h in chunk_hashes(1000 + 10 * rank + round_no, batch)]
            p = r.pipeline()
            for k in keys:
                p.set(k, value_of(k, CHUNK))
            assert p.execute() == [True] * batch
            p = r.pipeline()
            for k in keys:
                p.exists(k)
            assert p.execute() == [1] * batch
            p = r.pipeline()
            for k in keys:
                p.get(k)
            got = p.execute()
            for k, v in zip(keys, got):
                assert v == value_of(k, CHUNK), (k, None if v is None else len(v))
    finally:
        r.close()


def test_sglang_hicache_pipelines_larger_than_memory(flash_servers):
    s = start_flash_server(flash_servers)
    before = s.flash_info()
    # 40 pages of 2 MiB: each batch is 80 MiB against 64 MiB of memory, so
    # each batch_get reads at least 16 MiB of it from flash.
    with ThreadPoolExecutor(2) as ranks:
        for f in [ranks.submit(hicache_rank, s.port, rank, 40) for rank in range(2)]:
            f.result(timeout=300)
    assert read_from_flash(s, before) >= 4 * 16 * MIB


# --- large chunks, many writers ---------------------------------------------

def test_concurrent_large_sets_go_to_flash_rather_than_wait_for_memory(flash_servers):
    """8 writers of 32 MiB chunks against 128 MiB of memory: the chunks in
    flight need twice the memory. A network thread that waited for room
    (up to offload-wait-ms, a minute here) would also stall the writers
    whose values make the room; instead a value memory cannot take now
    goes to flash as it arrives. Every SET answers +OK well within the
    client's 30 s timeout, and every byte reads back."""
    s = flash_servers(memory="128mb", flash_size="1gb",
                      extra=FLASH + ("--offload-wait-ms", "60000", "--max-object-size", "1gb"))
    s.start()
    keys = [lmcache_key(h) for h in chunk_hashes(7, 16)]

    def writer(i):
        c = redis.Redis(host="127.0.0.1", port=s.port, socket_timeout=30)
        for k in keys[i::8]:
            assert c.set(k, value_of(k, 32 * MIB))
        c.close()

    with ThreadPoolExecutor(8) as pool:
        for f in [pool.submit(writer, i) for i in range(8)]:
            f.result(timeout=120)
    c = s.client(socket_timeout=30)
    for k in keys:
        assert c.get(k) == value_of(k, 32 * MIB), k
