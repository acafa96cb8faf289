"""The KV-cache backend pattern (LMCache/vLLM style) on both servers.

A producer stores a large tensor blob under a data key and a small metadata
key; a consumer probes the metadata with EXISTS and then fetches the data.
"""
import hashlib
import os
import threading

import pytest

MIB = 1 << 20


def digest(b):
    return hashlib.sha256(b).hexdigest()


@pytest.mark.parametrize("round_no", range(3))
def test_store_probe_fetch(pair, round_no):
    blob = os.urandom(32 * MIB)
    data_key = f"kv:layer{round_no}:chunk:{digest(blob)[:16]}".encode() + b"\x00\xff"
    meta_key = data_key + b":meta"
    meta = f'{{"shape":[32,8,128],"dtype":"bf16","round":{round_no}}}'.encode()
    for client in (pair.ours, pair.theirs):
        assert client.set(data_key, blob)
        assert client.set(meta_key, meta)
    pair.same("EXISTS", meta_key)
    pair.same("EXISTS", meta_key, data_key)
    pair.same("STRLEN", data_key)
    ours = pair.ours.get(data_key)
    theirs = pair.theirs.get(data_key)
    assert len(ours) == len(blob)
    assert digest(ours) == digest(theirs) == digest(blob)
    pair.same("GET", meta_key)
    # Partial reads of the blob agree too.
    pair.same("GETRANGE", data_key, str(MIB - 10), str(MIB + 10))
    pair.same("GETRANGE", data_key, "-100", "-1")
    pair.same("DEL", data_key, meta_key)
    pair.same("EXISTS", meta_key)


def test_concurrent_incr_is_exact(tierkv_server, pair):
    threads, per_thread = 8, 500
    errors = []

    def worker():
        client = tierkv_server.client()
        try:
            for _ in range(per_thread):
                client.incr("counter")
        except Exception as e:  # reported below; an assert here would be lost
            errors.append(e)
        finally:
            client.close()

    workers = [threading.Thread(target=worker) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(60)
    assert not errors
    assert pair.ours.get("counter") == str(threads * per_thread).encode()


def test_concurrent_append_and_incrbyfloat_are_exact(tierkv_server, pair):
    threads, per_thread = 8, 200
    errors = []

    def worker(i):
        client = tierkv_server.client()
        try:
            for _ in range(per_thread):
                client.append("log", f"{i}")
                client.incrbyfloat("f", 0.5)
        except Exception as e:
            errors.append(e)
        finally:
            client.close()

    workers = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(60)
    assert not errors
    log = pair.ours.get("log").decode()
    assert len(log) == threads * per_thread
    for i in range(threads):
        assert log.count(str(i)) == per_thread
    assert float(pair.ours.get("f")) == threads * per_thread * 0.5


def test_concurrent_msetnx_is_all_or_nothing(tierkv_server, pair):
    """Racing MSETNX calls over overlapping keys: exactly one group wins whole."""
    threads = 8
    results = [None] * threads

    def worker(i):
        client = tierkv_server.client()
        try:
            results[i] = client.msetnx({"m:a": i, "m:b": i, "m:c": i, f"m:own{i}": i})
        finally:
            client.close()

    for _ in range(10):
        pair.ours.flushall()
        workers = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join(30)
        winners = [i for i, ok in enumerate(results) if ok]
        assert len(winners) <= 1
        values = pair.ours.mget("m:a", "m:b", "m:c")
        if winners:
            w = str(winners[0]).encode()
            assert values == [w, w, w]
            assert pair.ours.get(f"m:own{winners[0]}") == w
        else:
            assert values == [None, None, None]
        losers_own = [pair.ours.get(f"m:own{i}") for i in range(threads) if i not in winners]
        assert losers_own == [None] * len(losers_own)
