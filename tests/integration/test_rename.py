"""RENAME, RENAMENX and COPY side by side with redis-server: replies, error
texts and the TTL rules (the destination takes the source's TTL or none)."""
import random

import pytest

from test_transactions import raw  # noqa: F401 - the fixture

SEED = 4242


def ttl_close(pair, key):
    """PTTL on both, compared to the second (the clocks ran apart a little)."""
    a = int(pair.ours.call("PTTL", key)[1:-2])
    b = int(pair.theirs.call("PTTL", key)[1:-2])
    assert (a < 0) == (b < 0) and abs(a - b) < 1000, (key, a, b)
    return a


def test_rename_replies_and_ttl(raw):  # noqa: F811
    a, _ = raw
    a.same("RENAME", "missing", "x")
    a.same("RENAME", "missing", "missing")
    a.same("RENAMENX", "missing", "x")
    a.same("SET", "src", "v", "EX", "100")
    a.same("SET", "dst", "old", "EX", "5000")
    a.same("RENAME", "src", "dst")
    a.same("GET", "dst")
    assert 99_000 < ttl_close(a, "dst") <= 100_000
    a.same("EXISTS", "src")
    a.same("SET", "plain", "p")
    a.same("RENAME", "plain", "dst")  # the TTL dst had goes with its old value
    a.same("TTL", "dst")
    a.same("RENAME", "dst", "dst")
    a.same("RENAMENX", "dst", "dst")
    a.same("SET", "other", "o")
    a.same("RENAMENX", "dst", "other")
    a.same("RENAMENX", "dst", "fresh")
    a.same("GET", "fresh")
    a.same("RENAME", "fresh")


def test_copy_replies_and_ttl(raw):  # noqa: F811
    a, _ = raw
    a.same("SET", "s", "value", "PX", "100000")
    a.same("COPY", "s", "s")
    a.same("COPY", "missing", "d")
    a.same("COPY", "s", "d", "DB", "16")
    a.same("COPY", "s", "d", "DB", "-1")
    a.same("COPY", "s", "d", "DB", "notanumber")
    a.same("COPY", "s", "d", "DB", "99999999999")
    a.same("COPY", "s", "d", "DB")
    a.same("COPY", "s", "d", "REPLACE", "EXTRA")
    a.same("COPY", "s", "d", "DB", "0")
    assert 99_000 < ttl_close(a, "d") <= 100_000
    a.same("COPY", "s", "d")
    a.same("SET", "s", "new")
    a.same("COPY", "s", "d", "replace")
    a.same("GET", "d")
    a.same("TTL", "d")
    a.same("GET", "s")
    a.same("COPY", "s")


def test_rename_inside_transaction(raw):  # noqa: F811
    a, _ = raw
    a.same("SET", "tmp", "payload")
    a.same("MULTI")
    a.same("RENAME", "tmp", "published")
    a.same("RENAME", "tmp", "again")
    a.same("COPY", "published", "backup")
    a.same("EXEC")
    a.same("MGET", "tmp", "published", "backup")


def random_renames(a, steps, seed=SEED):
    """Seeded random RENAME / RENAMENX / COPY / SET / DEL / EXPIRE on a few
    keys through `a.same`: every reply and the final contents equal
    redis-server's."""
    rng = random.Random(seed)
    keys = ["k0", "k1", "k2", "k3"]
    for step in range(steps):
        x, y = rng.choice(keys), rng.choice(keys)
        op = rng.randrange(8)
        if op == 0:
            a.same("SET", x, f"v{step}")
        elif op == 1:
            a.same("RENAME", x, y)
        elif op == 2:
            a.same("RENAMENX", x, y)
        elif op == 3:
            a.same("COPY", x, y, *(["REPLACE"] if rng.random() < 0.5 else []))
        elif op == 4:
            a.same("DEL", x)
        elif op == 5:
            a.same("EXPIRE", x, str(rng.randrange(100, 1000)))
        elif op == 6:
            a.same("GET", x)
        else:
            a.same("PERSIST", x)
    for k in keys:
        a.same("GET", k)
        a.same("TTL", k)


def test_random_renames_match_redis(raw):  # noqa: F811
    a, _ = raw
    random_renames(a, 400)


@pytest.mark.parametrize("db", ["1", "15"])
def test_copy_to_another_db_is_out_of_range(tierkv_server, db):
    """tierkv has one database: where Redis would copy to DB 1..15 we answer
    Redis's out-of-range error (docs/commands.md)."""
    c = tierkv_server.client()
    c.set("s", "v")
    with pytest.raises(Exception, match="DB index is out of range"):
        c.execute_command("COPY", "s", "d", "DB", db)
    assert not c.exists("d")
