"""Bit commands and EXPIRETIME/PEXPIRETIME, side by side with redis-server,
plus seeded random operations checked against redis and a Python model."""
import random
import shutil
import tempfile

import pytest
import redis

from conftest import RawClient, start_tierkv

from flash_util import flash_servers, make_value, residencies  # noqa: F401
from test_bounded_reads import push_to_flash


def test_expiretime(pair):
    pair.same("EXPIRETIME", "missing")
    pair.same("PEXPIRETIME", "missing")
    pair.same("SET", "k", "v")
    pair.same("EXPIRETIME", "k")
    pair.same("PEXPIRETIME", "k")
    pair.same("PEXPIREAT", "k", "33177117420123")
    pair.same("PEXPIRETIME", "k")
    pair.same("EXPIRETIME", "k")
    pair.same("PEXPIREAT", "k", "33177117420623")
    pair.same("EXPIRETIME", "k")
    pair.same("EXPIRETIME")
    pair.same("PEXPIRETIME", "a", "b")


def test_getbit_setbit(pair):
    pair.same("GETBIT", "k", "0")
    pair.same("SETBIT", "k", "7", "1")
    pair.same("GET", "k")
    pair.same("SETBIT", "k", "7", "1")
    pair.same("SETBIT", "k", "100", "1")
    pair.same("GET", "k")
    pair.same("GETBIT", "k", "100")
    pair.same("GETBIT", "k", "101")
    pair.same("GETBIT", "k", "100000")
    pair.same("SETBIT", "k", "100", "0")
    pair.same("SETBIT", "z", "20", "0")
    pair.same("GET", "z")
    pair.same("SET", "t", "v")
    pair.same("EXPIRE", "t", "100")
    pair.same("SETBIT", "t", "3", "1")
    pair.same("TTL", "t")


@pytest.mark.parametrize("args", [
    ("k", "-1", "1"), ("k", "x", "1"), ("k", "4294967296", "1"), ("k", "4294967295", "2"),
    ("k", "0", "x"), ("k", "0", "-1"), ("k", "1.5", "1"), ("k", "0"), ("k", "0", "1", "1"),
])
def test_setbit_errors(pair, args):
    pair.same("SETBIT", *args)
    pair.same("EXISTS", "k")


@pytest.mark.parametrize("args", [("k", "-1"), ("k", "x"), ("k", "4294967296"), ("k",)])
def test_getbit_errors(pair, args):
    pair.same("SET", "k", "abc")
    pair.same("GETBIT", *args)


def test_setbit_past_object_limit():
    """With max-object-size below Redis's 512 MiB, SETBIT and BITFIELD answer
    like SETRANGE."""
    d = tempfile.mkdtemp(prefix="tierkv-bits-")
    s = start_tierkv(d, ["--max-object-size", "1mb"])
    try:
        c = s.client()
        limit = 1024 * 1024
        assert c.setbit("big", limit * 8 - 1, 1) == 0
        assert c.strlen("big") == limit
        for args in [("SETBIT", "big2", limit * 8, 1), ("BITFIELD", "big2", "SET", "u8", limit * 8, 1)]:
            with pytest.raises(redis.exceptions.ResponseError,
                               match="string exceeds maximum allowed size"):
                c.execute_command(*args)
        assert c.exists("big2") == 0
        assert c.execute_command("BITFIELD", "big2", "GET", "u8", limit * 8) == [0]
    finally:
        s.stop()
        shutil.rmtree(d, ignore_errors=True)


def test_bitcount(pair):
    pair.same("BITCOUNT", "missing")
    pair.same("BITCOUNT", "missing", "x", "y")
    pair.same("SET", "k", "foobar")
    pair.same("BITCOUNT", "k")
    for a in [("0", "0"), ("1", "1"), ("1", "-2"), ("-3", "-1"), ("-1", "-3"), ("5", "2"),
              ("0", "100"), ("-100", "-50"), ("5", "30", "BIT"), ("5", "30", "byte"),
              ("-7", "-1", "bit"), ("0", "-1", "BIT"), ("9", "9", "BIT"), ("1", "0", "bit")]:
        pair.same("BITCOUNT", "k", *a)
    for a in [("0",), ("a", "1"), ("0", "b"), ("0", "1", "nib"), ("0", "1", "BIT", "x")]:
        pair.same("BITCOUNT", "k", *a)
    pair.same("SET", "e", "")
    pair.same("BITCOUNT", "e")
    pair.same("BITCOUNT", "e", "0", "-1")


def test_bitpos(pair):
    pair.same("BITPOS", "missing", "1")
    pair.same("BITPOS", "missing", "0")
    pair.same("BITPOS", "missing", "2")
    pair.same("BITPOS", "missing", "x")
    pair.same("SET", "k", b"\xff\xf0\x00")
    for a in [("1",), ("0",), ("0", "0"), ("0", "2"), ("1", "2"), ("0", "0", "1"), ("1", "1", "-1"),
              ("0", "0", "0"), ("1", "7", "15", "BIT"), ("0", "7", "15", "BIT"), ("0", "0", "10", "bit"),
              ("0", "0", "-1", "byte"), ("1", "-2", "-1", "BIT"), ("0", "2", "1"), ("1", "5", "-1")]:
        pair.same("BITPOS", "k", *a)
    pair.same("SET", "f", b"\xff\xff")
    for a in [("0",), ("0", "0"), ("0", "0", "-1"), ("0", "0", "15", "BIT"), ("0", "3", "BIT")]:
        pair.same("BITPOS", "f", *a)
    for a in [("2",), ("1", "x"), ("1", "0", "y"), ("1", "0", "1", "nib"), ("1", "0", "1", "bit", "z")]:
        pair.same("BITPOS", "k", *a)
    pair.same("SET", "e", "")
    pair.same("BITPOS", "e", "0")
    pair.same("BITPOS", "e", "1")


def test_bitop(pair):
    pair.same("SET", "a", b"\x0f\xf0abc")
    pair.same("SET", "b", b"\xff")
    for op in ["AND", "or", "Xor"]:
        pair.same("BITOP", op, "d", "a", "b", "missing")
        pair.same("GET", "d")
    pair.same("BITOP", "NOT", "d", "a")
    pair.same("GET", "d")
    pair.same("SET", "d", "x", "EX", "100")
    pair.same("BITOP", "AND", "d", "a")
    pair.same("TTL", "d")
    pair.same("BITOP", "NOT", "d", "a", "b")
    pair.same("BITOP", "NAND", "d", "a")
    pair.same("BITOP", "AND", "d")
    pair.same("BITOP", "OR", "d", "missing", "missing2")
    pair.same("EXISTS", "d")
    pair.same("SET", "e", "")
    pair.same("BITOP", "OR", "d", "e")
    pair.same("EXISTS", "d")


def raw_same(redis_server, tierkv_server, commands):
    """Every command answers byte for byte alike in RESP2 and in RESP3."""
    for proto in ("2", "3"):
        ours, theirs = RawClient(tierkv_server.port), RawClient(redis_server.port)
        try:
            for c in (ours, theirs):
                c.call("HELLO", proto)
                c.call("FLUSHALL")
            for args in commands:
                assert ours.call(*args) == theirs.call(*args), (proto, args)
        finally:
            ours.close()
            theirs.close()


def test_bits_resp2_resp3(redis_server, tierkv_server):
    raw_same(redis_server, tierkv_server, [
        ("SETBIT", "k", "9", "1"), ("GETBIT", "k", "9"), ("BITCOUNT", "k"), ("BITPOS", "k", "1"),
        ("BITOP", "NOT", "d", "k"), ("GET", "d"), ("EXPIRETIME", "k"), ("PEXPIRETIME", "k"),
        ("BITFIELD", "k", "OVERFLOW", "FAIL", "INCRBY", "u2", "0", "9", "GET", "u4", "0"),
        ("BITFIELD_RO", "k", "GET", "i8", "#1"), ("BITFIELD", "k")])


class Model:
    """Strings as bytearrays, Redis's bit semantics."""

    def __init__(self):
        self.v = {}

    def setbit(self, k, off, bit):
        b = self.v.setdefault(k, bytearray())
        if len(b) <= off >> 3:
            b.extend(bytes((off >> 3) + 1 - len(b)))
        old = (b[off >> 3] >> (7 - (off & 7))) & 1
        if bit:
            b[off >> 3] |= 1 << (7 - (off & 7))
        else:
            b[off >> 3] &= ~(1 << (7 - (off & 7))) & 0xff
        return old

    def bits(self, k):
        b = self.v.get(k, bytearray())
        return [(b[i >> 3] >> (7 - (i & 7))) & 1 for i in range(len(b) * 8)]

    def bitcount(self, k):
        return sum(self.bits(k))

    def bitop(self, op, dest, srcs):
        vals = [self.v.get(s, bytearray()) for s in srcs]
        n = max(len(v) for v in vals)
        if n == 0:
            self.v.pop(dest, None)
            return 0
        out = bytearray(n)
        for i in range(n):
            xs = [v[i] if i < len(v) else 0 for v in vals]
            acc = xs[0] if op != "NOT" else (~xs[0]) & 0xff
            for x in xs[1:]:
                acc = acc & x if op == "AND" else acc | x if op == "OR" else acc ^ x
            out[i] = acc
        self.v[dest] = out
        return n


def test_random_bit_ops_against_redis_and_model(pair):
    rng = random.Random(1207)
    keys = ["r0", "r1", "r2", "r3"]
    m = Model()
    for _ in range(300):
        k = rng.choice(keys)
        kind = rng.randrange(6)
        if kind == 0:
            off, bit = rng.randrange(200), rng.randrange(2)
            assert pair.same("SETBIT", k, off, bit) == m.setbit(k, off, bit)
        elif kind == 1:
            off = rng.randrange(220)
            bits = m.bits(k)
            assert pair.same("GETBIT", k, off) == (bits[off] if off < len(bits) else 0)
        elif kind == 2:
            assert pair.same("BITCOUNT", k) == m.bitcount(k)
            a, b = rng.randrange(-30, 30), rng.randrange(-30, 30)
            pair.same("BITCOUNT", k, a, b)
            pair.same("BITCOUNT", k, a * 7, b * 7, rng.choice(["BIT", "BYTE"]))
        elif kind == 3:
            bit = rng.randrange(2)
            pair.same("BITPOS", k, bit)
            pair.same("BITPOS", k, bit, rng.randrange(-30, 30))
            pair.same("BITPOS", k, bit, rng.randrange(-30, 30), rng.randrange(-30, 30))
            pair.same("BITPOS", k, bit, rng.randrange(-200, 200), rng.randrange(-200, 200), "BIT")
        elif kind == 4:
            op = rng.choice(["AND", "OR", "XOR", "NOT"])
            srcs = [rng.choice(keys + ["none"])] if op == "NOT" else rng.sample(keys + ["none"], rng.randrange(1, 4))
            dest = rng.choice(keys)
            assert pair.same("BITOP", op, dest, *srcs) == m.bitop(op, dest, srcs)
        else:
            assert (pair.same("GET", k) or b"") == bytes(m.v.get(k, b""))
    for k in keys:
        assert (pair.same("GET", k) or b"") == bytes(m.v.get(k, b""))


def test_bits_on_flash_only_key(flash_servers):
    s = flash_servers(memory="96mb", flash_size="512mb",
                      extra=["--eviction-policy", "lru", "--promotion-threshold", "255"]).start()
    c = s.client()
    push_to_flash(c, "bits", 2 * 1024 * 1024)
    assert set(residencies(c, "bits")) == {"flash"}
    value = make_value("bits", 1, 2 * 1024 * 1024)
    expect = sum(bin(x).count("1") for x in value)
    assert c.bitcount("bits") == expect
    first = (value[0] >> 7) & 1
    assert c.getbit("bits", 0) == first
    assert c.setbit("bits", 0, 1 - first) == first
    assert c.getbit("bits", 0) == 1 - first
    assert c.bitcount("bits") == expect + (1 if first == 0 else -1)
    assert c.strlen("bits") == len(value)
    # Every other value-reading bit command on a flash-only key.
    value = bytearray(value)
    value[0] ^= 0x80
    push_to_flash(c, "bits2", 2 * 1024 * 1024)
    other = make_value("bits2", 1, 2 * 1024 * 1024)
    for i in range(512):  # the filler pushes the first key out again
        c.set(f"more:{i}", b"m" * 1024 * 1024)
        if set(residencies(c, "bits")) == {"flash"}:
            break
    assert set(residencies(c, "bits")) == {"flash"} == set(residencies(c, "bits2"))
    first_one = next(i * 8 + 7 - (x.bit_length() - 1) for i, x in enumerate(value) if x)
    assert c.bitpos("bits", 1) == first_one
    assert c.execute_command("BITFIELD_RO", "bits2", "GET", "u16", "0") == [other[0] << 8 | other[1]]
    assert c.execute_command("BITFIELD", "bits2", "INCRBY", "u8", "8", "1") == [(other[1] + 1) % 256]
    assert c.bitop("AND", "both", "bits", "bits2") == len(value)
    assert c.getrange("both", 0, 15) == bytes(a & b for a, b in zip(value[:16], other[:16]))
    with pytest.raises(redis.exceptions.ResponseError, match="exceeds proto-max-bulk-len"):
        c.execute_command("LCS", "bits", "bits2", "LEN")  # 2 MiB x 2 MiB: Redis's table limit


def test_lcs(pair):
    pair.same("MSET", "a", "ohmytext", "b", "mynewtext")
    pair.same("LCS", "a", "b")
    pair.same("LCS", "a", "b", "LEN")
    pair.same("LCS", "a", "b", "IDX")
    pair.same("LCS", "a", "b", "IDX", "MINMATCHLEN", "4")
    pair.same("LCS", "a", "b", "IDX", "MINMATCHLEN", "4", "WITHMATCHLEN")
    pair.same("LCS", "a", "b", "idx", "withmatchlen", "minmatchlen", "-3")
    pair.same("LCS", "a", "missing")
    pair.same("LCS", "missing", "missing2", "IDX")
    pair.same("LCS", "a", "b", "IDX", "LEN")
    pair.same("LCS", "a", "b", "MINMATCHLEN")
    pair.same("LCS", "a", "b", "MINMATCHLEN", "x")
    pair.same("LCS", "a", "b", "FOO")
    pair.same("LCS", "a")


def test_lcs_random(pair):
    rng = random.Random(99)
    for _ in range(60):
        a = "".join(rng.choice("abcd") for _ in range(rng.randrange(0, 40)))
        b = "".join(rng.choice("abcd") for _ in range(rng.randrange(0, 40)))
        pair.same("MSET", "a", a, "b", b)
        pair.same("LCS", "a", "b")
        pair.same("LCS", "a", "b", "LEN")
        pair.same("LCS", "a", "b", "IDX", "WITHMATCHLEN", "MINMATCHLEN", rng.randrange(0, 4))


def test_lcs_resp2_resp3(redis_server, tierkv_server):
    raw_same(redis_server, tierkv_server, [
        ("MSET", "a", "ohmytext", "b", "mynewtext"), ("LCS", "a", "b", "IDX", "WITHMATCHLEN"),
        ("LCS", "a", "b", "IDX"), ("LCS", "a", "b"), ("LCS", "a", "b", "LEN"), ("LCS", "x", "y", "IDX")])


@pytest.mark.parametrize("name", ["setbit", "getbit", "bitcount", "bitpos", "bitop", "lcs",
                                  "expiretime", "pexpiretime", "bitfield", "bitfield_ro"])
def test_command_info_matches_redis(pair, name):
    o = pair.ours.execute_command("COMMAND", "INFO", name)[name]
    t = pair.theirs.execute_command("COMMAND", "INFO", name)[name]
    for field in ("arity", "first_key_pos", "last_key_pos", "step_count"):
        assert o[field] == t[field], (name, field)


def test_bitfield(pair):
    pair.same("BITFIELD", "k")
    pair.same("EXISTS", "k")
    pair.same("BITFIELD", "k", "SET", "i8", "0", "-100", "GET", "u4", "0", "INCRBY", "u2", "100", "1")
    pair.same("GET", "k")
    pair.same("BITFIELD", "k", "SET", "u8", "#1", "255", "GET", "u8", "#1", "GET", "i8", "8")
    pair.same("BITFIELD", "k", "INCRBY", "u2", "102", "1", "OVERFLOW", "SAT", "INCRBY", "u2", "102", "5")
    pair.same("BITFIELD", "k", "OVERFLOW", "FAIL", "INCRBY", "i8", "0", "200", "GET", "i8", "0")
    pair.same("BITFIELD", "k", "OVERFLOW", "wrap", "INCRBY", "i8", "0", "200", "GET", "i8", "0")
    pair.same("BITFIELD", "k", "SET", "i64", "0", "-9223372036854775808", "GET", "i64", "0",
              "GET", "u63", "1", "INCRBY", "i64", "0", "-1")
    pair.same("BITFIELD", "k", "OVERFLOW", "SAT", "SET", "u8", "0", "-1", "SET", "i8", "0", "1000",
              "INCRBY", "i64", "0", "-9223372036854775808", "INCRBY", "u63", "0", "9223372036854775807")
    pair.same("BITFIELD", "f", "OVERFLOW", "FAIL", "SET", "u2", "100", "7")
    pair.same("GET", "f")
    pair.same("BITFIELD_RO", "k", "GET", "u8", "0", "GET", "i3", "#5")
    pair.same("BITFIELD_RO", "missing", "GET", "u8", "0")
    pair.same("SET", "t", "x", "EX", "100")
    pair.same("BITFIELD", "t", "SET", "u8", "0", "65")
    pair.same("TTL", "t")
    pair.same("GET", "t")


@pytest.mark.parametrize("args", [
    ("GET", "u64", "0"), ("GET", "i65", "0"), ("GET", "i0", "0"), ("GET", "x8", "0"), ("GET", "I8", "0"),
    ("GET", "u8", "-1"), ("GET", "u8", "#-1"), ("GET", "u8", "4294967296"), ("GET", "u8", "#"),
    ("GET", "u8", "#536870912"), ("GET", "u8"), ("SET", "u8", "0"), ("SET", "u8", "0", "x"),
    ("INCRBY", "u8", "0", "1.5"), ("OVERFLOW", "nope"), ("OVERFLOW",), ("FOO", "u8", "0"),
    ("SET", "u8", "0", "1", "GET"), ("GET", "u8", "x"),
])
def test_bitfield_errors(pair, args):
    pair.same("BITFIELD", "k", *args)
    pair.same("EXISTS", "k")


def test_bitfield_ro_errors(pair):
    pair.same("BITFIELD_RO", "k", "SET", "u8", "0", "1")
    pair.same("BITFIELD_RO", "k", "INCRBY", "u8", "0", "1")
    pair.same("BITFIELD_RO", "k", "OVERFLOW", "SAT", "GET", "u8", "0")
    pair.same("BITFIELD_RO", "k", "GET", "u64", "0")
    pair.same("BITFIELD_RO", "k")


def model_bitfield(m, k, ops):
    """ops: (op, sign, bits, offset, value, overflow); Redis's results."""
    b = m.v.get(k)
    top = max([off + bits - 1 for op, _, bits, off, _, _ in ops if op != "GET"], default=-1)
    if top >= 0:
        b = m.v.setdefault(k, bytearray())
        if len(b) <= top >> 3:
            b.extend(bytes((top >> 3) + 1 - len(b)))
    b = b or bytearray()
    out = []
    for op, sign, bits, off, value, ow in ops:
        u = 0
        for i in range(bits):
            p = off + i
            u = (u << 1) | ((b[p >> 3] >> (7 - (p & 7))) & 1 if (p >> 3) < len(b) else 0)
        old = u - (1 << bits) if sign and u >> (bits - 1) else u
        if op == "GET":
            out.append(old)
            continue
        lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if sign else (0, (1 << bits) - 1)
        target = old + value if op == "INCRBY" else (value if sign else value % (1 << 64))
        new = target
        if not lo <= target <= hi:
            if ow == "FAIL":
                out.append(None)
                continue
            if ow == "SAT":
                new = hi if target > hi else lo
            else:
                new = target % (1 << bits)
                if sign and new > hi:
                    new -= 1 << bits
        out.append(new if op == "INCRBY" else old)
        w = new % (1 << bits)
        for i in range(bits):
            p = off + i
            bit = (w >> (bits - 1 - i)) & 1
            if bit:
                b[p >> 3] |= 1 << (7 - (p & 7))
            else:
                b[p >> 3] &= ~(1 << (7 - (p & 7))) & 0xff
    return out


def random_bitfield_ops(rng):
    ops, args, ow = [], [], "WRAP"
    for _ in range(rng.randrange(1, 5)):
        if rng.random() < 0.2:
            ow = rng.choice(["WRAP", "SAT", "FAIL"])
            args += ["OVERFLOW", ow]
        sign = rng.random() < 0.5
        bits = rng.randrange(1, 65 if sign else 64)
        op = rng.choice(["GET", "SET", "INCRBY"])
        off = rng.randrange(0, 160)
        value = rng.choice([rng.randrange(-300, 300), rng.randrange(-(1 << 63), 1 << 63)])
        args += [op, ("i" if sign else "u") + str(bits), str(off)]
        if op != "GET":
            args.append(str(value))
        ops.append((op, sign, bits, off, value, ow))
    return ops, args


def test_random_bitfield_against_redis_and_model(pair):
    rng = random.Random(4242)
    m = Model()
    for _ in range(300):
        k = rng.choice(["f0", "f1"])
        if rng.random() < 0.2:
            off, bit = rng.randrange(200), rng.randrange(2)
            assert pair.same("SETBIT", k, off, bit) == m.setbit(k, off, bit)
            continue
        ops, args = random_bitfield_ops(rng)
        assert pair.same("BITFIELD", k, *args) == model_bitfield(m, k, ops), args
    for k in ["f0", "f1"]:
        assert (pair.same("GET", k) or b"") == bytes(m.v.get(k, b""))


def test_bitcount_bitpos_on_a_value_of_many_chunks(pair):
    rng = random.Random(7)
    n = 2 * 1024 * 1024 + 300 * 1024  # past the 1 MiB chunks
    value = bytearray(rng.randbytes(n))
    value[1000:1500000] = b"\xff" * 1499000
    pair.same("SET", "big", bytes(value))
    pair.same("BITCOUNT", "big")
    pair.same("BITPOS", "big", 0, 1000)
    pair.same("BITPOS", "big", 0, 1000, 1499999)
    for _ in range(40):
        a, b = rng.randrange(-n * 8, n * 8), rng.randrange(-n * 8, n * 8)
        pair.same("BITCOUNT", "big", a // 8, b // 8)
        pair.same("BITCOUNT", "big", a, b, "BIT")
        pair.same("BITPOS", "big", rng.randrange(2), a // 8, b // 8)
        pair.same("BITPOS", "big", rng.randrange(2), a, b, "BIT")


# --- reference model of BITCOUNT / BITPOS ranges and BITFIELD_RO ------------

def bit_at(b, i):
    return (b[i >> 3] >> (7 - (i & 7))) & 1


def model_range(n, start, end, isbit):
    """Redis 7.0's clamping of a start/end range over a string of n bytes,
    in bits or bytes: (start, end) inclusive, empty when start > end."""
    total = n * 8 if isbit else n
    if start < 0:
        start += total
    if end < 0:
        end += total
    start, end = max(start, 0), max(end, 0)
    return start, min(end, total - 1)


def model_bitcount(b, start=None, end=None, unit=None):
    """BITCOUNT of the string b (None: a missing key), with or without a
    range, unit None, "BIT" or "BYTE" (any case)."""
    if b is None:
        return 0
    isbit = unit is not None and unit.upper() == "BIT"
    if start is None:
        lo, hi = 0, len(b) * 8 - 1
    else:
        if start < 0 and end < 0 and start > end:
            return 0  # before the clamping, which could make it non-empty
        lo, hi = model_range(len(b), start, end, isbit)
        if lo > hi:
            return 0
        if not isbit:
            lo, hi = lo * 8, hi * 8 + 7
    return sum(bit_at(b, i) for i in range(lo, hi + 1))


def model_bitpos(b, bit, start=None, end=None, unit=None):
    """BITPOS of the string b (None: a missing key). Looking for a 0 with
    no end given, the string counts as padded with zeros on the right."""
    if b is None:
        return -1 if bit else 0
    isbit = unit is not None and unit.upper() == "BIT"
    end_given = end is not None
    if start is None:
        start = 0
    if end is None:
        end = len(b) * 8 - 1 if isbit else len(b) - 1
    lo, hi = model_range(len(b), start, end, isbit)
    if lo > hi:
        return -1
    if not isbit:
        lo, hi = lo * 8, hi * 8 + 7
    for i in range(lo, hi + 1):
        if bit_at(b, i) == bit:
            return i
    return -1 if bit or end_given else hi + 1


def random_bit_string(rng):
    n = rng.choice([0, 1, 1, 2, 3, 4, 7, 8, 16, rng.randrange(0, 40)])
    kind = rng.randrange(5)
    if kind == 0:
        return bytes(rng.randrange(256) for _ in range(n))
    if kind == 1:  # all zeros but a few bits
        b = bytearray(n)
    else:  # all ones but a few bits (kind 2), or runs of both
        b = bytearray(b"\xff" * n) if kind == 2 else bytearray(rng.choice([0, 255]) for _ in range(n))
    for _ in range(rng.randrange(0, 3) if n else 0):
        i = rng.randrange(n * 8)
        b[i >> 3] ^= 1 << (7 - (i & 7))
    return bytes(b)


def random_range(rng, n, isbit):
    total = n * 8 if isbit else n
    span = total + 3
    return rng.randrange(-span - 2, span + 2), rng.randrange(-span - 2, span + 2)


def test_bitcount_bitpos_ranges_against_redis_and_model(pair):
    """Seeded random strings (runs of zeros and ones with a few flipped bits,
    and random bytes) and random ranges, in BYTE and BIT units: every reply
    of BITCOUNT and BITPOS equals redis-server's and the Python model's."""
    rng = random.Random(5150)
    checked = 0
    for round_ in range(120):
        k = rng.choice(["b0", "b1", "none"])
        b = None
        if k != "none":
            b = random_bit_string(rng)
            pair.same("SET", k, b)
        n = len(b) if b is not None else rng.randrange(4)
        assert pair.same("BITCOUNT", k) == model_bitcount(b), (b, k)
        for _ in range(8):
            unit = rng.choice([None, "BYTE", "BIT", "bit", "byte", "Bit"])
            isbit = unit is not None and unit.upper() == "BIT"
            start, end = random_range(rng, n, isbit)
            tail = [unit] if unit else []
            got = pair.same("BITCOUNT", k, start, end, *tail)
            assert got == model_bitcount(b, start, end, unit), (b, start, end, unit)
            bit = rng.randrange(2)
            assert pair.same("BITPOS", k, bit) == model_bitpos(b, bit), (b, bit)
            if not isbit:  # a start alone is in bytes
                got = pair.same("BITPOS", k, bit, start)
                assert got == model_bitpos(b, bit, start), (b, bit, start)
            got = pair.same("BITPOS", k, bit, start, end, *tail)
            assert got == model_bitpos(b, bit, start, end, unit), (b, bit, start, end, unit)
            checked += 1
    assert checked == 960


def random_bitfield_gets(rng):
    """BITFIELD_RO arguments: 1..4 GETs, some with #index offsets."""
    ops, args = [], []
    for _ in range(rng.randrange(1, 5)):
        sign = rng.random() < 0.5
        bits = rng.randrange(1, 65 if sign else 64)
        if rng.random() < 0.3:
            index = rng.randrange(0, 6)
            off, spec = index * bits, f"#{index}"
        else:
            off = rng.randrange(0, 200)
            spec = str(off)
        args += ["GET", ("i" if sign else "u") + str(bits), spec]
        ops.append(("GET", sign, bits, off, 0, "WRAP"))
    return ops, args


def test_random_bitfield_ro_against_redis_and_model(pair):
    """BITFIELD_RO GETs (signed and unsigned, 1..64 bits, plain and #index
    offsets, reaching past the end) on seeded random strings and on a
    missing key: replies equal redis-server's and the model's, and the
    string is left as it was."""
    rng = random.Random(6160)
    m = Model()
    for _ in range(150):
        k = rng.choice(["r0", "r1", "none"])
        if k != "none" and rng.random() < 0.3:
            b = random_bit_string(rng)
            pair.same("SET", k, b)
            m.v[k] = bytearray(b)
        ops, args = random_bitfield_gets(rng)
        assert pair.same("BITFIELD_RO", k, *args) == model_bitfield(m, k, ops), (k, args)
        assert pair.same("BITFIELD", k, *args) == model_bitfield(m, k, ops), (k, args)
    for k in ["r0", "r1", "none"]:
        assert (pair.same("GET", k) or b"") == bytes(m.v.get(k, b""))
    assert pair.same("EXISTS", "none") == 0


def test_bit_models_on_known_cases():
    """The models themselves, on cases worked out from Redis's documentation
    (and the 7.0 code: an all-negative reversed range is empty before clamping)."""
    v = b"\xff\xf0\x00"
    assert model_bitpos(v, 0) == 12 and model_bitpos(v, 1, 2) == -1 and model_bitpos(v, 0, 2) == 16
    assert model_bitpos(b"\xff\xff", 0) == 16 and model_bitpos(b"\xff\xff", 0, 0, -1) == -1
    assert model_bitpos(b"\x00\xff\xf0", 1, 7, 15, "BIT") == 8
    assert model_bitpos(b"", 0) == -1 and model_bitpos(None, 0) == 0 and model_bitpos(None, 1) == -1
    assert model_bitcount(b"foobar") == 26 and model_bitcount(b"foobar", 1, 1) == 6
    assert model_bitcount(b"foobar", 5, 30, "BIT") == 17
    assert model_bitcount(b"foobar", -1, -3) == 0 and model_bitcount(b"foobar", -100, -50) == 4
    assert model_bitcount(b"foobar", -50, -100) == 0  # clamped, this would be byte 0 again
