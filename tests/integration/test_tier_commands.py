"""TIER.* extensions (tierkv only; redis-server has no counterpart)."""
import time

import pytest
import redis

MIB = 1 << 20


def as_dict(flat):
    """A RESP2 map (flat key/value list) as a dict with str keys."""
    return {flat[i].decode(): flat[i + 1] for i in range(0, len(flat), 2)}


@pytest.fixture
def ours(pair):
    return pair.ours


def tier_stat(client, key):
    reply = client.execute_command("TIER.STAT", key)
    if reply is None:
        return None
    stat = as_dict(reply)
    stat["chunk_residency"] = [as_dict(c) for c in stat["chunk_residency"]]
    return stat


def test_stat_missing_key_is_null(ours):
    assert ours.execute_command("TIER.STAT", "missing") is None


def test_stat_small_value(ours):
    ours.set("k", "hello")
    stat = tier_stat(ours, "k")
    assert stat["size"] == 5
    assert stat["chunks"] == 1
    assert stat["ttl_ms"] == -1
    assert stat["version"] > 0
    [chunk] = stat["chunk_residency"]
    assert chunk == {"index": 0, "bytes": 5, "residency": b"memory", "dirty": 1, "pins": 0,
                     "leased": 0, "use_once": 0}
    assert stat["state"] == b"dirty"


def test_stat_chunks_of_large_value(ours):
    ours.set("big", b"x" * (2 * MIB + MIB // 2))
    stat = tier_stat(ours, "big")
    assert stat["size"] == 2 * MIB + MIB // 2
    assert stat["chunks"] == 3
    assert [c["index"] for c in stat["chunk_residency"]] == [0, 1, 2]
    assert [c["bytes"] for c in stat["chunk_residency"]] == [MIB, MIB, MIB // 2]
    assert all(c["residency"] == b"memory" for c in stat["chunk_residency"])


def test_stat_version_changes_on_write(ours):
    ours.set("k", "1")
    v1 = tier_stat(ours, "k")["version"]
    ours.incr("k")
    v2 = tier_stat(ours, "k")["version"]
    assert v2 > v1
    ours.expire("k", 100)  # expiry is metadata: the version stays
    stat = tier_stat(ours, "k")
    assert stat["version"] == v2
    assert 99000 < stat["ttl_ms"] <= 100000


def test_stat_expired_key_is_null(ours):
    ours.set("k", "v", px=50)
    time.sleep(0.1)
    assert tier_stat(ours, "k") is None


def test_stat_wrong_arity(ours):
    with pytest.raises(redis.ResponseError, match="wrong number of arguments for 'tier.stat'"):
        ours.execute_command("TIER.STAT")
    with pytest.raises(redis.ResponseError, match="wrong number of arguments"):
        ours.execute_command("TIER.STAT", "a", "b")


def test_exists_counts_like_exists(ours):
    ours.mset({"a": "1", "b": "2"})
    for args in (("a",), ("a", "a", "b", "c"), ("c",), ("a", "PREFETCH"),
                 ("a", "b", "missing", "prefetch")):
        plain = [a for a in args if a.lower() != "prefetch"]
        assert ours.execute_command("TIER.EXISTS", *args) == ours.exists(*plain), args


def test_exists_lone_prefetch_is_a_key(ours):
    assert ours.execute_command("TIER.EXISTS", "PREFETCH") == 0
    ours.set("PREFETCH", "v")
    assert ours.execute_command("TIER.EXISTS", "PREFETCH") == 1
    assert ours.execute_command("TIER.EXISTS", "PREFETCH", "PREFETCH") == 1


def test_exists_wrong_arity(ours):
    with pytest.raises(redis.ResponseError, match="wrong number of arguments for 'tier.exists'"):
        ours.execute_command("TIER.EXISTS")
