"""LMCache's Redis key pattern against a server started with the configuration
block of docs/kv-cache.md (memory and flash scaled down to this machine).

The contract:
- every GET returns the value last SET for its key, and nothing for a key
  that was never written or was deleted;
- a probe (EXISTS <chunk>metadata) answers as EXISTS does;
- under the documented exists-prefetch-map rule, the probe of a chunk whose
  kv_bytes only flash holds brings kv_bytes into memory, where the GET that
  follows finds it. This holds for both key forms, <chunk>metadata and
  {<chunk>}:metadata.

The replay is seeded: rounds of requests, each probing its prefix chunk by
chunk until the first miss and then reading what it found, while a producer
stores new prefixes and deletes old ones, checked against a dict."""
import hashlib
import os
import random
import re
import tomllib

from flash_util import MIB, flash_servers, num, push_out, residencies, wait_until  # noqa: F401

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GUIDE = os.path.join(ROOT, "docs", "kv-cache.md")
KV = 2 * MIB
CHUNKS = 6


def documented_config():
    """The TOML block of docs/kv-cache.md that starts with its title comment."""
    text = open(GUIDE).read()
    blocks = re.findall(r"```toml\n(.*?)```", text, re.S)
    block = next(b for b in blocks if b.startswith("# tierkv.toml"))
    return block, tomllib.loads(block)


def chunk_keys(prefix, j, tagged):
    chunk = hashlib.sha256(b"%d:%d" % (prefix, j)).hexdigest()[:24]
    if tagged:
        return f"{{{chunk}}}:metadata", f"{{{chunk}}}:kv_bytes"
    return f"{chunk}metadata", f"{chunk}kv_bytes"


def kv_value(prefix, j, generation):
    return random.Random(prefix * 1000 + j * 10 + generation).randbytes(256) * (KV // 256)


def meta_value(prefix, j, generation):
    return b'{"shape":[2,32,256,8,128],"dtype":"bf16","p":%d,"c":%d,"g":%d}' % (prefix, j, generation)


def on_flash(c, key):
    return c.exists(key) and set(residencies(c, key)) == {"flash"}


def start(flash_servers):
    block, cfg = documented_config()
    server = flash_servers(memory="64mb", flash_size="512mb",
                           extra=("--region-size", "16mb", "--flash-preallocate", "no"))
    path = os.path.join(server.workdir, "tierkv.toml")
    with open(path, "w") as f:
        f.write(block)
    # The block's file comes first; the flags of FlashServer (port, memory,
    # flash path and size) override its production sizes.
    server.extra = ["--config", path] + server.extra
    server.start()
    return server, cfg


def test_documented_config_is_what_the_server_runs(flash_servers):
    server, cfg = start(flash_servers)
    c = server.client()
    assert cfg["exists-prefetch-map"] == "metadata=kv_bytes"
    assert c.config_get("exists-prefetch-map")["exists-prefetch-map"] == "metadata=kv_bytes"
    assert float(c.config_get("lease-max-fraction")["lease-max-fraction"]) == cfg["lease-max-fraction"]
    assert int(c.config_get("promotion-max-inflight-bytes")["promotion-max-inflight-bytes"]) == 512 * MIB
    assert int(c.config_get("maxmemory-clients")["maxmemory-clients"]) == 4 << 30


class Producer:
    """Stores prefixes of CHUNKS chunks in the LMCache layout; the model is
    the dict of what every key must hold (None: must be absent)."""

    def __init__(self, client):
        self.c = client
        self.model = {}
        self.generation = {}

    def store(self, prefix, tagged):
        g = self.generation.get(prefix, 0) + 1
        self.generation[prefix] = g
        for j in range(CHUNKS):
            meta, kv = chunk_keys(prefix, j, tagged)
            # LMCache writes the tensor bytes first, then the metadata that
            # makes the chunk visible to a probe.
            assert self.c.set(kv, kv_value(prefix, j, g))
            assert self.c.set(meta, meta_value(prefix, j, g))
            self.model[kv] = kv_value(prefix, j, g)
            self.model[meta] = meta_value(prefix, j, g)

    def drop_chunk(self, prefix, j, tagged):
        for key in chunk_keys(prefix, j, tagged):
            self.c.delete(key)
            self.model[key] = None


def request(c, model, prefix, tagged):
    """One request: probe chunk by chunk until the first miss, then read the
    hits. Returns the number of chunks it found."""
    found = 0
    for j in range(CHUNKS):
        meta, _ = chunk_keys(prefix, j, tagged)
        expected = 1 if model.get(meta) is not None else 0
        assert c.exists(meta) == expected, meta
        if not expected:
            break
        found += 1
    for j in range(found):
        for key in chunk_keys(prefix, j, tagged):
            assert c.get(key) == model[key], f"{key}: wrong value"
    return found


def test_probe_prefetches_kv_bytes_for_both_key_forms(flash_servers):
    server, _ = start(flash_servers)
    c = server.client()
    producer = Producer(c)
    producer.store(1, tagged=False)
    producer.store(2, tagged=True)
    kv_keys = [chunk_keys(p, j, t)[1] for p, t in ((1, False), (2, True)) for j in range(CHUNKS)]
    c.delete(*push_out(c, kv_keys, "filler", KV))
    # The filler's offloads hold their memory until they land: wait, so the
    # prefetches find the free room the test means them to have.
    assert wait_until(lambda: num(server.flash_info(), "offloads_inflight") == 0, 20)
    assert all(on_flash(c, k) for k in kv_keys)
    # Request by request, as an engine's queue runs them: the probes, then
    # the reads, which end the prefetch leases (6 chunks of 2 MiB fit the
    # documented lease cap of a quarter of this 64 MiB memory; 12 would not).
    for prefix, tagged in ((1, False), (2, True)):
        for j in range(CHUNKS):
            meta, kv = chunk_keys(prefix, j, tagged)
            assert c.exists(meta) == 1
        for j in range(CHUNKS):
            kv = chunk_keys(prefix, j, tagged)[1]
            assert wait_until(lambda: not on_flash(c, kv), 10), \
                f"{kv} was not prefetched: {server.info('prefetch')[0]}"
        assert request(c, producer.model, prefix, tagged) == CHUNKS
    fields = server.info("prefetch")[0]
    assert num(fields, "prefetch_promoted") >= 2 * CHUNKS, fields
    assert num(fields, "prefetch_reads_served") >= 2 * CHUNKS, fields


def test_seeded_replay_never_serves_a_stale_or_deleted_chunk(flash_servers):
    server, _ = start(flash_servers)
    c = server.client()
    rng = random.Random(20261204)
    producer = Producer(c)
    tagged = {p: p % 2 == 1 for p in range(12)}
    for p in range(6):
        producer.store(p, tagged[p])
    served = 0
    for _ in range(40):
        op = rng.random()
        p = rng.randrange(12)
        if op < 0.15:
            producer.store(p, tagged[p])  # a new prefix, or a new generation of one
        elif op < 0.25 and p in producer.generation:
            producer.drop_chunk(p, rng.randrange(CHUNKS), tagged[p])
        else:
            served += request(c, producer.model, p, tagged[p])
    assert served > 0
    # Every key holds exactly what the model says, wherever it lives now.
    for key, value in producer.model.items():
        assert c.get(key) == value, key
    fields = server.info("prefetch")[0]
    assert num(fields, "prefetch_requested") > 0, fields
