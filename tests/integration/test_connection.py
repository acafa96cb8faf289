"""Connection commands over the wire, side by side with redis-server 7.0."""
import re

import pytest

from conftest import RawClient


def test_ping_and_echo(pair):
    pair.same("PING")
    pair.same("PING", "hello")
    pair.same("PING", "a", "b")
    pair.same("ECHO", "x" * 1000)
    pair.same("ECHO", "")
    pair.same("ECHO")
    pair.same("ECHO", "a", "b")


def test_ping_and_echo_raw_bytes(raw_pair):
    ours, theirs = raw_pair
    for cmd in [("PING",), ("PING", "x"), ("ECHO", "bin\r\n\x00"), ("ping", "a", "b")]:
        assert ours.call(*cmd) == theirs.call(*cmd), cmd


def test_select(pair):
    pair.same("SELECT", "0")
    pair.same("SELECT", "abc")
    pair.same("SELECT", "-1")
    pair.same("SELECT", "99999")
    pair.same("SELECT")
    # redis-server has 16 databases; tierkv has one, and says so like Redis
    # does past its last database.
    ours, _ = pair.both("SELECT", "1")
    assert ours == ("error", "DB index is out of range")


def test_auth_without_password(pair):
    pair.same("AUTH", "x")
    pair.same("AUTH", "default", "anything")
    pair.same("AUTH", "someone", "x")
    pair.same("AUTH", "a", "b", "c")
    pair.same("AUTH")


def normalize_hello(frame):
    """HELLO differs only in the id (the version is redis-server's, 7.0.15);
    blank it out."""
    return re.sub(rb"(\$2\r\nid\r\n:)\d+", rb"\1N", frame)


def test_versions(raw_pair):
    """HELLO and INFO report the Redis version tierkv follows, which is the
    redis-server's it is tested against; INFO also has tierkv's own."""
    ours, theirs = raw_pair
    redis_info = theirs.call("INFO", "server").decode()
    ours_info = ours.call("INFO", "server").decode()
    version = re.search(r"\r\nredis_version:(\S+)\r\n", redis_info).group(1)
    assert f"\r\nredis_version:{version}\r\n" in ours_info
    assert re.search(r"\r\ntierkv_version:\d+\.\d+\.\d+\r\n", ours_info)
    hello = ours.call("HELLO", "3")
    assert b"$7\r\nversion\r\n$%d\r\n%s\r\n" % (len(version), version.encode()) in hello


@pytest.mark.parametrize("args", [
    ("HELLO",), ("HELLO", "2"), ("HELLO", "3"), ("HELLO", "3", "SETNAME", "me"),
    ("HELLO", "2", "AUTH", "default", "pw"),
])
def test_hello_raw_bytes(raw_pair, args):
    ours, theirs = raw_pair
    a, b = ours.call(*args), theirs.call(*args)
    assert normalize_hello(a) == normalize_hello(b)
    # After HELLO 3 the connection speaks RESP3: null is "_".
    a, b = ours.call("GET", "missing"), theirs.call("GET", "missing")
    assert a == b
    if "3" in args:
        assert a == b"_\r\n"


@pytest.mark.parametrize("args", [
    ("HELLO", "4"), ("HELLO", "1"), ("HELLO", "x"), ("HELLO", "3", "BOGUS"),
    ("HELLO", "3", "AUTH", "default"), ("HELLO", "3", "SETNAME", "a b"),
    ("HELLO", "3", "AUTH", "nobody", "pw"),
])
def test_hello_errors(raw_pair, args):
    ours, theirs = raw_pair
    assert ours.call(*args) == theirs.call(*args)


def test_resp3_reply_types_raw(raw_pair):
    ours, theirs = raw_pair
    for c in (ours, theirs):
        c.call("HELLO", "3")
    for cmd in [("CLIENT", "GETNAME"), ("CLIENT", "SETNAME", "n1"), ("CLIENT", "GETNAME"),
                ("PING",), ("ECHO", "e"), ("DBSIZE",), ("SET", "k", "v"), ("GET", "k"),
                ("EXISTS", "k", "nope"), ("FOO", "bar"), ("CONFIG", "GET", "nomatch*")]:
        assert ours.call(*cmd) == theirs.call(*cmd), cmd


def test_client_name_commands(pair):
    pair.same("CLIENT", "GETNAME")
    pair.same("CLIENT", "SETNAME", "worker-1")
    pair.same("CLIENT", "GETNAME")
    pair.same("CLIENT", "SETNAME", "has space")
    pair.same("CLIENT", "SETNAME", "new\nline")
    pair.same("CLIENT", "SETNAME", "")
    pair.same("CLIENT", "GETNAME")
    pair.same("CLIENT", "SETNAME")
    pair.same("CLIENT", "GETNAME", "extra")
    pair.same("CLIENT", "NOSUCH")
    pair.same("CLIENT", "ID", "x")
    pair.same("CLIENT")


def test_client_id_info_list(pair):
    cid = pair.ours.execute_command("CLIENT", "ID")
    assert isinstance(cid, int) and cid > 0
    pair.ours.execute_command("CLIENT", "SETNAME", "lister")
    info = pair.ours.execute_command("CLIENT", "INFO").decode()
    assert info.startswith(f"id={cid} ") and info.endswith("\n")
    assert " name=lister " in info and " addr=127.0.0.1:" in info
    other = pair.ours.connection_pool.make_connection()
    try:
        other.send_command("CLIENT", "ID")
        other_id = other.read_response()
        listing = pair.ours.execute_command("CLIENT", "LIST").decode()
        ids = [int(m) for m in re.findall(r"^id=(\d+) ", listing, re.M)]
        assert cid in ids and other_id in ids
        for line in listing.strip().split("\n"):
            for field in ("addr=", "laddr=", "fd=", "name=", "age=", "idle=", "cmd=", "resp="):
                assert f" {field}" in line or line.startswith(field), (field, line)
    finally:
        other.disconnect()


def test_client_setinfo(tierkv_server):
    c = tierkv_server.client()
    assert c.execute_command("CLIENT", "SETINFO", "LIB-NAME", "mylib") == b"OK"
    assert c.execute_command("CLIENT", "SETINFO", "lib-ver", "1.2.3") == b"OK"
    info = c.execute_command("CLIENT", "INFO").decode()
    assert "lib-name=mylib" in info and "lib-ver=1.2.3" in info
    with pytest.raises(Exception, match="Unrecognized option 'bogus'"):
        c.execute_command("CLIENT", "SETINFO", "bogus", "x")
    with pytest.raises(Exception, match="lib-name cannot contain spaces"):
        c.execute_command("CLIENT", "SETINFO", "lib-name", "a b")


def test_quit_replies_ok_and_closes(raw_pair):
    ours, theirs = raw_pair
    assert ours.call("QUIT") == theirs.call("QUIT") == b"+OK\r\n"
    assert ours.closed_by_server()
    assert theirs.closed_by_server()


def test_reset(raw_pair):
    ours, theirs = raw_pair
    for c in (ours, theirs):
        c.call("HELLO", "3")
        c.call("CLIENT", "SETNAME", "before")
    assert ours.call("RESET") == theirs.call("RESET") == b"+RESET\r\n"
    # Back to RESP2, name cleared.
    assert ours.call("GET", "missing") == theirs.call("GET", "missing") == b"$-1\r\n"
    assert ours.call("CLIENT", "GETNAME") == theirs.call("CLIENT", "GETNAME")


def test_requirepass_flow(make_tierkv, make_redis):
    ours_srv = make_tierkv("--requirepass", "s3cret")
    theirs_srv = make_redis("--requirepass", "s3cret")
    ours, theirs = RawClient(ours_srv.port), RawClient(theirs_srv.port)
    try:
        script = [
            ("PING",), ("GET", "k"), ("NOSUCHCMD",), ("GET",), ("HELLO", "3"),
            ("AUTH", "wrong"), ("AUTH", "default", "wrong"), ("AUTH", "nobody", "s3cret"),
            ("PING",), ("AUTH", "s3cret"), ("PING",), ("SET", "k", "v"), ("GET", "k"),
            ("RESET",), ("GET", "k"), ("HELLO", "2", "AUTH", "default", "bad"),
            ("AUTH", "default", "s3cret"), ("GET", "k"),
        ]
        for cmd in script:
            a, b = ours.call(*cmd), theirs.call(*cmd)
            assert a == b, (cmd, a, b)
        # HELLO with AUTH authenticates and switches protocol in one step.
        fresh_ours, fresh_theirs = RawClient(ours_srv.port), RawClient(theirs_srv.port)
        a = fresh_ours.call("HELLO", "3", "AUTH", "default", "s3cret")
        b = fresh_theirs.call("HELLO", "3", "AUTH", "default", "s3cret")
        assert a.startswith(b"%7\r\n") and b.startswith(b"%7\r\n")
        assert fresh_ours.call("GET", "k") == fresh_theirs.call("GET", "k") == b"$1\r\nv\r\n"
        fresh_ours.close()
        fresh_theirs.close()
    finally:
        ours.close()
        theirs.close()


def test_unauthenticated_clients_cannot_send_big_requests(make_tierkv, make_redis):
    servers = [make_tierkv("--requirepass", "pw"), make_redis("--requirepass", "pw")]
    replies = []
    for s in servers:
        c = RawClient(s.port)
        c.send(b"*20\r\n")
        replies.append(c.read_reply())
        assert c.closed_by_server()
        c.close()
    assert replies[0] == replies[1] == b"-ERR Protocol error: unauthenticated multibulk length\r\n"
