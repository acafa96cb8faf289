"""SCAN and KEYS over a key space that lives on flash only (after a clean
restart memory is empty): every key exactly once, pages of about COUNT keys
like Redis's, the same key set as redis-server holds."""
import redis

from flash_util import flash_servers  # noqa: F401

KEYS = 20000


def load(client, n):
    p = client.pipeline(transaction=False)
    for i in range(n):
        p.set(f"key:{i}", b"v")
        if i % 1000 == 999:
            p.execute()
    p.execute()


def full_scan(client, count):
    seen, pages, biggest = [], 0, 0
    cursor = 0
    while True:
        cursor, keys = client.scan(cursor, count=count)
        seen.extend(keys)
        biggest = max(biggest, len(keys))
        pages += 1
        assert pages < 10 * KEYS, "SCAN does not end"
        if cursor == 0:
            return seen, pages, biggest


def test_scan_and_keys_over_flash_only_keys(flash_servers, make_redis):
    s = flash_servers(memory="64mb", flash_size="256mb").start()
    load(s.client(), KEYS)
    s.restart()  # a clean shutdown wrote every key to flash; memory starts empty
    c = s.client()
    info = s.info("memory")[0]
    assert int(info["memory_objects"]) == 0, info
    r = make_redis()
    theirs = redis.Redis(host="127.0.0.1", port=r.port)
    load(theirs, KEYS)
    expected = set(theirs.keys("*"))
    assert len(expected) == KEYS
    for count in (10, 100, 1000):
        seen, pages, biggest = full_scan(c, count)
        assert len(seen) == KEYS and set(seen) == expected, count
        # Redis's COUNT is a hint: pages of about COUNT keys.
        assert biggest <= 2 * count, (count, biggest)
        assert pages >= KEYS // (2 * count), (count, pages)
        _, their_pages, their_biggest = full_scan(theirs, count)
        print(f"COUNT {count}: tierkv {pages} pages (largest {biggest}), "
              f"redis {their_pages} pages (largest {their_biggest})")
    matched = c.keys("key:1*")
    assert set(matched) == {k for k in expected if k.startswith(b"key:1")}
    assert len(c.keys("*")) == KEYS
    assert c.dbsize() == KEYS


def test_key_walks_off_the_network_thread_answer_in_order(flash_servers):
    """Where flash holds keys only on the device (compact index entries),
    SCAN, KEYS and RANDOMKEY run on a store worker and their replies follow
    (docs/flash-tier.md). What a client sees does not change: pipelined with
    other commands, every reply comes in order and holds what the in-place
    walk (inside MULTI/EXEC) holds."""
    s = flash_servers(memory="64mb", flash_size="256mb").start()
    n = 3000
    load(s.client(), n)
    s.restart()
    c = s.client()
    assert int(s.info("flash")[0]["flash_compact_objects"]) == n
    expected = {f"key:{i}".encode() for i in range(n)}
    for _ in range(3):
        p = c.pipeline(transaction=False)
        p.keys("*")
        p.ping()
        p.scan(0, count=100000)
        p.set("fresh", b"x")
        p.randomkey()
        p.keys("*")
        p.get("fresh")
        keys, pong, (cursor, page), ok, random, after, fresh = p.execute()
        assert set(keys) == expected
        assert pong is True and ok is True and fresh == b"x"
        assert cursor == 0 and set(page) == expected
        assert random in expected | {b"fresh"}
        assert set(after) == expected | {b"fresh"}, "a walk sees the writes before it"
        c.delete("fresh")
    t = c.pipeline(transaction=True)
    t.keys("*")
    t.scan(0, count=100000)
    t.randomkey()
    keys, (cursor, page), random = t.execute()
    assert set(keys) == expected and cursor == 0 and set(page) == expected
    assert random in expected
