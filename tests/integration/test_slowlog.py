"""SLOWLOG side by side with redis-server: which commands are logged and how
(arguments cut and redacted as Redis does, client names), the config keys,
the length cap, and every error text, in RESP2 and RESP3. Ids, timestamps,
durations and client ports differ between two servers, so replies are
compared after those numbers are masked."""
import re

import pytest

from test_transactions import raw  # noqa: F401 - the fixture

ADDR = re.compile(rb"\$\d+\r\n127\.0\.0\.1:\d+\r\n")
NUMBER = re.compile(rb":\d+\r\n")


def masked(reply):
    """A SLOWLOG GET reply without what must differ between two servers."""
    return NUMBER.sub(b":N\r\n", ADDR.sub(b"$A\r\nADDR\r\n", reply))


def same_log(a, *args):
    ours, theirs = a.ours.call(*args), a.theirs.call(*args)
    assert masked(ours) == masked(theirs), f"{args!r}: tierkv={ours!r} redis={theirs!r}"
    return ours


def both(a, *args):
    """Sends a command to both servers; the replies may differ."""
    a.ours.call(*args)
    a.theirs.call(*args)


@pytest.fixture
def log_all(raw):  # noqa: F811
    """Every command logged, the log empty; the defaults restored after."""
    a, b = raw
    a.same("CONFIG", "SET", "slowlog-log-slower-than", "0")
    a.same("SLOWLOG", "RESET")
    yield a, b
    a.same("CONFIG", "SET", "slowlog-log-slower-than", "10000", "slowlog-max-len", "128")
    a.same("SLOWLOG", "RESET")


def test_config_keys_and_defaults(raw):  # noqa: F811
    a, _ = raw
    a.same("CONFIG", "GET", "slowlog-log-slower-than")
    a.same("CONFIG", "GET", "slowlog-max-len")
    a.same("CONFIG", "SET", "slowlog-max-len", "5")
    a.same("CONFIG", "GET", "slowlog-max-len")
    a.same("CONFIG", "SET", "slowlog-log-slower-than", "-1")
    a.same("CONFIG", "GET", "slowlog-log-slower-than")
    for key, bad in (("slowlog-log-slower-than", "-2"), ("slowlog-max-len", "-1"),
                     ("slowlog-max-len", "x")):
        for side in (a.ours, a.theirs):
            assert side.call("CONFIG", "SET", key, bad).startswith(
                b"-ERR CONFIG SET failed (possibly related to argument '%s')" % key.encode())
    a.same("CONFIG", "SET", "slowlog-log-slower-than", "10000", "slowlog-max-len", "128")


@pytest.mark.parametrize("proto", ["2", "3"])
def test_entries_match_redis(log_all, proto):
    a, _ = log_all
    both(a, "HELLO", proto)  # its id and version differ (test_connection.py)
    a.same("SET", "k", "v")
    a.same("GET", "k")
    a.same("CLIENT", "SETNAME", "logger")
    a.same("INCR", "k")  # an error reply is logged too
    a.same("SET", "long", "x" * 200)
    a.same("DEL", *[f"key{i}" for i in range(40)])
    a.same("SLOWLOG", "LEN")
    same_log(a, "SLOWLOG", "GET")  # the default count: 10
    same_log(a, "SLOWLOG", "GET", "-1")
    same_log(a, "SLOWLOG", "GET", "2")
    same_log(a, "SLOWLOG", "GET", "0")
    a.same("CLIENT", "SETNAME", "")


def test_entry_shape(log_all):
    a, _ = log_all
    a.same("SET", "k", "v" * 129)
    ours = a.ours.call("SLOWLOG", "GET", "1")
    head = rb"\*1\r\n\*6\r\n:(\d+)\r\n:(\d+)\r\n:(\d+)\r\n\*3\r\n\$3\r\nSET\r\n\$1\r\nk\r\n"
    m = re.match(head + rb"\$146\r\n(v{128})\.\.\. \(1 more bytes\)\r\n", ours)
    assert m, ours
    assert abs(int(m.group(2)) - int(a.ours.call("TIME")[4:].split(b"\r\n")[1])) <= 2


def test_passwords_are_redacted(log_all):
    a, _ = log_all
    a.same("AUTH", "secret")  # no password set: an error, logged redacted
    a.same("AUTH", "default", "secret")
    both(a, "HELLO", "2", "AUTH", "default", "secret", "SETNAME", "n1")
    a.same("CONFIG", "SET", "requirepass", "")
    same_log(a, "SLOWLOG", "GET")
    for reply in (a.ours.call("SLOWLOG", "GET"), a.theirs.call("SLOWLOG", "GET")):
        assert b"secret" not in reply


def test_transactions_log_what_exec_ran(log_all):
    a, _ = log_all
    a.same("MULTI")
    a.same("SET", "k", "1")
    a.same("INCR", "k")
    a.same("EXEC")
    same_log(a, "SLOWLOG", "GET", "-1")


def test_length_cap_reset_and_disabled(log_all):
    a, _ = log_all
    a.same("CONFIG", "SET", "slowlog-max-len", "3")
    for i in range(10):
        a.same("SET", f"k{i}", "v")
    a.same("SLOWLOG", "LEN")
    same_log(a, "SLOWLOG", "GET")
    a.same("CONFIG", "SET", "slowlog-max-len", "1")  # drops the oldest at once
    same_log(a, "SLOWLOG", "GET")
    a.same("SLOWLOG", "RESET")
    a.same("CONFIG", "SET", "slowlog-log-slower-than", "-1")
    a.same("SET", "k", "v")
    a.same("SLOWLOG", "LEN")
    a.same("CONFIG", "SET", "slowlog-log-slower-than", "1000000000")  # 1000 s: nothing is that slow
    a.same("SET", "k", "v")
    a.same("SLOWLOG", "LEN")


def test_ids_go_on_after_reset(log_all):
    a, _ = log_all
    for side in (a.ours, a.theirs):
        first = side.call("SLOWLOG", "GET", "1")
        side.call("SLOWLOG", "RESET")
        side.call("PING")
        second = side.call("SLOWLOG", "GET", "1")
        id1 = int(first.split(b"\r\n")[2][1:])
        id2 = int(second.split(b"\r\n")[2][1:])
        assert id2 == id1 + 3, (first, second)  # this GET, the RESET, the PING


def test_errors_and_help(raw):  # noqa: F811
    a, _ = raw
    for args in (("SLOWLOG",), ("SLOWLOG", "GET", "-2"), ("SLOWLOG", "GET", "x"),
                 ("SLOWLOG", "GET", "1", "2"), ("SLOWLOG", "LEN", "x"), ("SLOWLOG", "RESET", "x"),
                 ("SLOWLOG", "HELP", "x"), ("SLOWLOG", "NOSUCH"), ("SLOWLOG", "HELP"),
                 ("slowlog", "help"), ("SLOWLOG", "GET", "99999999999999999999")):
        a.same(*args)
