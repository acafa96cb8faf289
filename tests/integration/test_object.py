"""OBJECT, MEMORY USAGE and WAIT side by side with redis-server where
tierkv has the same facts; the documented differences checked on their own."""
import pytest

from test_transactions import raw  # noqa: F401 - the fixture


@pytest.mark.parametrize("value", [
    "0", "100", "9999", "10000", "-5", "0123", "+1", "12345678901234567890", "9223372036854775807",
    "-9223372036854775808", "abc", "", " 1", "x" * 44, "x" * 45, "1" * 21, "1.5"])
def test_object_encoding_and_refcount_of_set_values(raw, value):  # noqa: F811
    a, _ = raw
    a.same("SET", "k", value)
    a.same("OBJECT", "ENCODING", "k")
    a.same("OBJECT", "REFCOUNT", "k")


def test_object_errors_and_missing_keys(raw):  # noqa: F811
    a, _ = raw
    a.same("SET", "k", "v")
    for sub in ("ENCODING", "REFCOUNT", "FREQ", "IDLETIME"):
        a.same("OBJECT", sub, "missing")
        a.same("OBJECT", sub)
        a.same("OBJECT", sub, "k", "extra")
    a.same("OBJECT", "FREQ", "k")
    # Idle seconds: redis-server counts them on a clock that ticks once a
    # second, so a key set just before a tick reads 1 at once; both stay
    # within one second of the time since SET.
    ours, theirs = (int(p.call("OBJECT", "IDLETIME", "k")[1:-2]) for p in (a.ours, a.theirs))
    assert 0 <= ours <= 1 and 0 <= theirs <= 1, (ours, theirs)
    a.same("OBJECT", "HELP")
    a.same("OBJECT", "help", "extra")
    a.same("OBJECT", "nosuch", "k")
    a.same("OBJECT")
    a.same("object", "encoding", "k")


def test_counters_are_int_encoded(raw):  # noqa: F811
    a, _ = raw
    a.same("INCR", "n")
    a.same("OBJECT", "ENCODING", "n")
    a.same("INCRBY", "n", "20000")
    a.same("OBJECT", "REFCOUNT", "n")


def test_values_edited_in_place_are_raw(raw):  # noqa: F811
    """Redis's own unit "SETRANGE against integer-encoded key": a value
    edited in place is raw whatever it holds; APPEND to a missing key and a
    later SET encode as SET does."""
    a, _ = raw
    a.same("SET", "k", "1234")
    a.same("OBJECT", "ENCODING", "k")
    a.same("SETRANGE", "k", "0", "2")
    a.same("OBJECT", "ENCODING", "k")
    a.same("GET", "k")
    a.same("SET", "k", "1234")
    a.same("APPEND", "k", "5")
    a.same("OBJECT", "ENCODING", "k")
    a.same("APPEND", "fresh", "42")
    a.same("OBJECT", "ENCODING", "fresh")
    a.same("SETRANGE", "new", "0", "7")
    a.same("OBJECT", "ENCODING", "new")
    a.same("SET", "b", "1")
    a.same("SETBIT", "b", "0", "1")
    a.same("OBJECT", "ENCODING", "b")
    a.same("SET", "f", "12")
    a.same("BITFIELD", "f", "SET", "u8", "0", "49")
    a.same("OBJECT", "ENCODING", "f")
    a.same("SET", "k", "1234")
    a.same("OBJECT", "ENCODING", "k")
    a.same("INCR", "k")
    a.same("OBJECT", "ENCODING", "k")


def test_memory_usage(raw):  # noqa: F811
    a, _ = raw
    a.same("MEMORY", "USAGE", "missing")
    a.same("MEMORY", "USAGE")
    a.same("MEMORY", "USAGE", "k", "SAMPLES")
    a.same("MEMORY", "USAGE", "missing", "SAMPLES", "x")
    a.same("MEMORY", "USAGE", "missing", "BOGUS", "1")
    a.same("MEMORY", "NOSUCH")
    a.same("SET", "small", "v")
    a.same("SET", "large", "x" * 100_000)
    # The figures are estimates that differ; both grow with the value.
    for side in (a.ours, a.theirs):
        small = int(side.call("MEMORY", "USAGE", "small")[1:-2])
        large = int(side.call("MEMORY", "USAGE", "large", "SAMPLES", "0")[1:-2])
        assert 0 < small < 200 and 100_000 <= large < 120_000


def test_wait_without_replicas(raw):  # noqa: F811
    a, _ = raw
    a.same("WAIT", "0", "0")
    a.same("WAIT", "0", "10")
    a.same("WAIT", "x", "0")
    a.same("WAIT", "0", "-1")
    a.same("WAIT", "0", "x")
    a.same("WAIT", "0")
    a.same("MULTI")
    a.same("WAIT", "1", "0")  # inside a transaction Redis does not wait either
    a.same("EXEC")


def test_wait_for_replicas_answers_at_once(tierkv_server):
    """Redis would block until the timeout for a replica it does not have;
    tierkv has none and answers 0 at once (docs/commands.md)."""
    c = tierkv_server.client()
    assert c.execute_command("WAIT", "1", "0") == 0


def test_select_out_of_range(raw):  # noqa: F811
    a, _ = raw
    for db in ("0", "16", "-1", "abc", "99999999999", "1.5"):
        a.same("SELECT", db)
    a.same("SELECT")
