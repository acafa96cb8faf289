"""The wire protocol: pipelining, inline commands, RESP3, split reads,
large values, and malformed input, compared byte for byte with redis-server."""
import os
import socket
import time

import pytest

from conftest import RawClient, encode_command


def read_n(client, n):
    return [client.read_reply() for _ in range(n)]


def test_pipeline_of_1000_commands_in_one_write(raw_pair):
    ours, theirs = raw_pair
    cmds = []
    for i in range(1000):
        kind = i % 7
        if kind == 0:
            cmds.append(("SET", f"key:{i % 50}", f"value-{i}"))
        elif kind == 1:
            cmds.append(("GET", f"key:{(i * 7) % 50}"))
        elif kind == 2:
            cmds.append(("PING",))
        elif kind == 3:
            cmds.append(("ECHO", "e" * (i % 40)))
        elif kind == 4:
            cmds.append(("INCR", f"counter:{i % 3}"))
        elif kind == 5:
            cmds.append(("NOSUCH", str(i)))
        else:
            cmds.append(("EXISTS", f"key:{i % 60}", "nope"))
    payload = b"".join(encode_command(*c) for c in cmds)
    ours.send(payload)
    theirs.send(payload)
    a, b = read_n(ours, 1000), read_n(theirs, 1000)
    for i, (x, y) in enumerate(zip(a, b)):
        assert x == y, (i, cmds[i], x, y)


def test_inline_commands(raw_pair):
    ours, theirs = raw_pair
    lines = (b"PING\r\n" b"ECHO hello\n" b"SET k \"a b\\x41\"\r\n" b"GET k\r\n"
             b"   \r\n" b"\r\n" b"set q 'it\\'s'\r\n" b"GET q\r\n" b"nosuch  x   y\r\n")
    ours.send(lines)
    theirs.send(lines)
    assert read_n(ours, 7) == read_n(theirs, 7)


def test_inline_and_multibulk_mixed_in_one_read(raw_pair):
    ours, theirs = raw_pair
    data = b"PING\r\n" + encode_command("ECHO", "x") + b"ECHO y\r\n" + encode_command("PING")
    ours.send(data)
    theirs.send(data)
    assert read_n(ours, 4) == read_n(theirs, 4)


def test_commands_split_across_many_small_writes(tierkv_server):
    c = RawClient(tierkv_server.port)
    c.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        payload = encode_command("SET", "split", "v" * 100) + encode_command("GET", "split")
        for i in range(0, len(payload), 3):
            c.send(payload[i:i + 3])
            time.sleep(0.0005)
        assert c.read_reply() == b"+OK\r\n"
        assert c.read_reply() == b"$100\r\n" + b"v" * 100 + b"\r\n"
    finally:
        c.close()


def test_resp3_after_hello_raw(raw_pair):
    ours, theirs = raw_pair
    for c in (ours, theirs):
        c.call("HELLO", "3")
    for cmd in [("SET", "n", "10"), ("INCR", "n"), ("GET", "n"), ("GET", "nope"),
                ("MGET", "n", "nope"), ("CLIENT", "GETNAME"), ("TTL", "n"),
                ("PING",), ("DEL", "n")]:
        assert ours.call(*cmd) == theirs.call(*cmd), cmd


@pytest.mark.parametrize("size", [64 * 1024, 300 * 1024 + 5, 5 * 1024 * 1024 + 1])
def test_large_values_round_trip(tierkv_server, size):
    value = os.urandom(size)
    c = RawClient(tierkv_server.port)
    try:
        assert c.call("SET", "big", value, "EX", "1000") == b"+OK\r\n"
        reply = c.call("GET", "big")
        assert reply == b"$%d\r\n" % size + value + b"\r\n"
        ttl = c.call("TTL", "big")
        assert 990 <= int(ttl[1:-2]) <= 1000
        # A pipeline around a streamed value keeps its order.
        c.send(encode_command("PING") + encode_command("SET", "big2", value) +
               encode_command("STRLEN", "big2"))
        assert read_n(c, 3) == [b"+PONG\r\n", b"+OK\r\n", b":%d\r\n" % size]
    finally:
        c.close()


def test_large_value_with_syntax_error_is_not_stored(raw_pair):
    ours, theirs = raw_pair
    value = b"z" * (200 * 1024)
    for c in (ours, theirs):
        c.call("DEL", "k")
    assert ours.call("SET", "k", value, "BOGUS") == theirs.call("SET", "k", value, "BOGUS")
    assert ours.call("EXISTS", "k") == theirs.call("EXISTS", "k") == b":0\r\n"
    assert ours.call("SET", "k", value, "NX") == theirs.call("SET", "k", value, "NX")
    assert ours.call("SET", "k", value, "NX") == theirs.call("SET", "k", value, "NX")


MALFORMED = [
    b"*abc\r\n",
    b"*1\r\n$-5\r\n",
    b"*1\r\n$abc\r\n",
    b"*1\r\nfoo\r\n",
    b"*2\r\n$3\r\nGET\r\n:12\r\n",
    b"SET k \"unbalanced\r\n",
    b"SET k 'a'b\r\n",
    b"*3000000000\r\n",
]


@pytest.mark.parametrize("data", MALFORMED)
def test_malformed_input_gets_redis_error_then_close(redis_server, tierkv_server, data):
    replies = []
    for port in (tierkv_server.port, redis_server.port):
        c = RawClient(port)
        try:
            c.send(data)
            replies.append(c.read_reply())
            assert c.closed_by_server(), data
        finally:
            c.close()
    assert replies[0] == replies[1], data
    assert replies[0].startswith(b"-ERR Protocol error: ")


def test_commands_before_a_protocol_error_are_answered(raw_pair):
    ours, theirs = raw_pair
    data = encode_command("PING") + encode_command("ECHO", "x") + b"*1\r\n!bad\r\n"
    ours.send(data)
    theirs.send(data)
    assert read_n(ours, 3) == read_n(theirs, 3)


def test_too_big_inline_request(redis_server, tierkv_server):
    replies = []
    for port in (tierkv_server.port, redis_server.port):
        c = RawClient(port)
        try:
            c.send(b"A" * (70 * 1024))
            replies.append(c.read_reply())
            assert c.closed_by_server()
        finally:
            c.close()
    assert replies[0] == replies[1] == b"-ERR Protocol error: too big inline request\r\n"


def test_empty_multibulk_is_ignored(raw_pair):
    ours, theirs = raw_pair
    data = b"*0\r\n*-1\r\n" + encode_command("PING")
    ours.send(data)
    theirs.send(data)
    assert ours.read_reply() == theirs.read_reply() == b"+PONG\r\n"


def test_unix_socket(make_tierkv, tmp_path):
    path = str(tmp_path / "tierkv.sock")
    s = make_tierkv("--unixsocket", path)
    deadline = time.time() + 5
    while not os.path.exists(path) and time.time() < deadline:
        time.sleep(0.05)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(5)
    sock.connect(path)
    try:
        sock.sendall(encode_command("SET", "u", "1") + encode_command("GET", "u"))
        data = b""
        while data.count(b"\r\n") < 3:
            data += sock.recv(1024)
        assert data == b"+OK\r\n$1\r\n1\r\n"
    finally:
        sock.close()
    assert s.proc.poll() is None
