"""ACL users, side by side with redis-server 7 over the subset we share.

The contract (docs/security.md): ACL SETUSER/GETUSER/DELUSER/USERS/LIST/
WHOAMI/CAT/LOG/SAVE/LOAD, AUTH user pass and HELLO AUTH, with Redis 7's
rules (on/off, passwords, command categories, commands and subcommands,
key patterns with %R~ and %W~) and its error texts, -NOPERM included. A
user is checked on every command it sends, with the rules in force then;
a deleted user's connections are closed. The default user follows
requirepass. Without selectors (Redis 7's "(...)" rules)."""
import os
import subprocess

import pytest
import redis

from conftest import TIERKV_SERVER, reply_of

# Categories only we have: ACL CAT lists them after Redis's.
OURS_ONLY = {"tier", "preheat", "cluster"}


def without_commands(getuser):
    """ACL GETUSER's reply without its "commands" field."""
    if getuser is None:
        return None
    return [v for i, v in enumerate(getuser) if i not in (4, 5)]


def is_error(reply):
    return isinstance(reply, tuple) and reply[:1] == ("error",)


def log_of(client):
    """ACL LOG's entries, without their age and client details."""
    keep = ("count", "reason", "context", "object", "username")
    return [{k: e[k] for k in keep} for e in client.acl_log()]


def both(ours, theirs, *args):
    got = reply_of(ours, *args), reply_of(theirs, *args)
    assert got[0] == got[1], (args, got)
    return got[0]


@pytest.fixture
def servers(make_tierkv, make_redis):
    return make_tierkv("--flash-size", "0"), make_redis()


def client_as(server, user, password, **kw):
    return redis.Redis(port=server.port, username=user, password=password, **kw)


def test_setuser_getuser_and_their_errors_like_redis(servers):
    ours, theirs = (s.client() for s in servers)
    both(ours, theirs, "ACL", "SETUSER", "alice", "on", ">pw", "~k*", "%R~r*", "+@read",
         "+@write", "-@dangerous")
    both(ours, theirs, "ACL", "SETUSER", "bob", "on", "nopass", "allkeys", "+@all", "-@dangerous")
    both(ours, theirs, "ACL", "SETUSER", "carol", "on", ">a", ">b", "<a", "~x", "+get", "+set",
         "-get")
    # The command rules read back as given here, where Redis recomputes
    # them over its own command set: compared apart.
    for name in ("alice", "bob", "carol", "default", "nosuch"):
        got = [reply_of(c, "ACL", "GETUSER", name) for c in (ours, theirs)]
        assert without_commands(got[0]) == without_commands(got[1]), (name, got)
    assert reply_of(ours, "ACL", "GETUSER", "alice")[5] == b"-@all +@read +@write -@dangerous"
    assert reply_of(ours, "ACL", "GETUSER", "carol")[5] == b"-@all +set -get"
    lists = [[b" ".join(w for w in line.split() if w[:1] not in (b"+", b"-"))
              for line in reply_of(c, "ACL", "LIST")] for c in (ours, theirs)]
    assert lists[0] == lists[1]
    both(ours, theirs, "ACL", "USERS")
    both(ours, theirs, "ACL", "WHOAMI")
    for bad in (["bogus"], ["+nosuch"], ["+@nosuch"], ["#ABC"], ["<neverset"], ["%X~k"],
                ["allkeys", "~more"]):
        both(ours, theirs, "ACL", "SETUSER", "dave", *bad)
    both(ours, theirs, "ACL", "DELUSER", "default")
    both(ours, theirs, "ACL", "DELUSER", "carol", "nosuch")
    both(ours, theirs, "ACL", "USERS")
    both(ours, theirs, "ACL", "CAT", "nosuch")
    both(ours, theirs, "ACL", "NOPE")
    both(ours, theirs, "ACL", "LOAD")
    both(ours, theirs, "ACL", "SAVE")
    cats_ours, cats_theirs = reply_of(ours, "ACL", "CAT"), reply_of(theirs, "ACL", "CAT")
    assert [c for c in cats_ours if c.decode() not in OURS_ONLY] == cats_theirs
    # A category's commands: ours are those we have, each as Redis files it.
    string_ours = set(reply_of(ours, "ACL", "CAT", "string"))
    string_theirs = set(reply_of(theirs, "ACL", "CAT", "string"))
    assert {c for c in string_ours if not c.startswith(b"tier.")} <= string_theirs
    assert {b"get", b"set", b"append", b"getrange"} <= string_ours


def test_what_a_user_may_run_and_touch_like_redis(servers):
    ours, theirs = servers
    for s in servers:
        s.client().execute_command("ACL", "SETUSER", "alice", "on", ">pw", "~k*", "%R~r*",
                                   "%W~w*", "+@all", "-@dangerous", "-flushdb")
        s.client().mset({"r1": "1", "k1": "1"})
    a, b = client_as(ours, "alice", "pw"), client_as(theirs, "alice", "pw")
    calls = [
        ("GET", "k1"), ("SET", "k2", "v"), ("GET", "other"), ("SET", "other", "v"),
        ("GET", "r1"), ("SET", "r1", "v"), ("SET", "w1", "5"), ("GET", "w1"),
        ("APPEND", "w1", "x"), ("INCR", "w1"), ("SET", "w1", "v", "GET"),
        ("EXISTS", "w1"), ("EXISTS", "nope"), ("COPY", "r1", "w2"), ("COPY", "w1", "r2"),
        ("MGET", "k1", "r1"), ("MGET", "k1", "w1"), ("MSET", "k3", "1", "w3", "1"),
        ("MSET", "k3", "1", "r3", "1"), ("DEL", "r1"), ("DEL", "k3"),
        ("CONFIG", "SET", "timeout", "0"), ("CONFIG", "GET", "timeout"), ("CONFIG", "HELP"),
        ("KEYS", "*"), ("FLUSHDB",), ("FLUSHALL",), ("INFO", "server"), ("ACL", "WHOAMI"),
        ("ACL", "SETUSER", "x"), ("PING",), ("DBSIZE",), ("SCAN", "0"),
    ]
    for call in calls:
        got = reply_of(a, *call), reply_of(b, *call)
        if call[0] == "SCAN" or call[-1] == "HELP":  # allowed on both; the bodies differ
            assert not any(is_error(g) for g in got), (call, got)
            continue
        assert got[0] == got[1], (call, got)
    # Refusals are logged, as Redis logs them.
    shapes = [log_of(s.client()) for s in servers]
    assert shapes[0] == shapes[1]
    assert shapes[0] and all(e["username"] == "alice" for e in shapes[0])


def test_auth_hello_and_the_log_of_failures(servers):
    for s in servers:
        c = s.client()
        c.execute_command("ACL", "SETUSER", "alice", "on", ">pw", "+@all", "~*")
        c.execute_command("ACL", "SETUSER", "off-user", "off", ">pw", "+@all", "~*")
    ours, theirs = (s.client() for s in servers)
    both(ours, theirs, "AUTH", "alice", "wrong")
    both(ours, theirs, "AUTH", "off-user", "pw")
    both(ours, theirs, "AUTH", "nobody", "pw")
    both(ours, theirs, "AUTH", "pw")  # default has no password
    both(ours, theirs, "AUTH", "alice", "pw")
    both(ours, theirs, "ACL", "WHOAMI")
    both(ours, theirs, "HELLO", "2", "AUTH", "alice", "nope")
    got = [reply_of(c, "HELLO", "2", "AUTH", "default", "x") for c in (ours, theirs)]
    assert not any(is_error(g) for g in got), got  # default is nopass: any password
    both(ours, theirs, "ACL", "WHOAMI")
    logs = [log_of(c) for c in (ours, theirs)]
    assert logs[0] == logs[1]
    assert len(logs[0]) == 4
    both(ours, theirs, "ACL", "LOG", "RESET")
    both(ours, theirs, "ACL", "LOG")
    both(ours, theirs, "AUTH", "alice", "wrong")
    both(ours, theirs, "ACL", "LOG", "-1")
    both(ours, theirs, "ACL", "LOG", "x")
    # redis-py's URL form logs in with AUTH user pass.
    for s in servers:
        url = redis.Redis.from_url(f"redis://alice:pw@127.0.0.1:{s.port}/0")
        assert url.execute_command("ACL", "WHOAMI") == b"alice"


def test_requirepass_is_the_default_users_password(servers):
    for s in servers:
        s.client().config_set("requirepass", "s3cret")
    fresh = [redis.Redis(port=s.port, single_connection_client=True) for s in servers]
    for c in fresh:
        with pytest.raises(redis.exceptions.AuthenticationError):
            c.get("k")
    both(*fresh, "AUTH", "default", "s3cret")
    both(*fresh, "ACL", "GETUSER", "default")
    both(*fresh, "ACL", "SETUSER", "default", "nopass")
    again = [redis.Redis(port=s.port) for s in servers]
    both(*again, "GET", "k")  # served: default needs no password now


def test_rules_change_under_a_live_connection_and_deluser_closes_it(servers):
    for s in servers:
        s.client().execute_command("ACL", "SETUSER", "alice", "on", ">pw", "+get", "~*")
    conns = [client_as(s, "alice", "pw", single_connection_client=True) for s in servers]
    both(*conns, "GET", "k")
    both(*conns, "SET", "k", "v")
    for s in servers:
        s.client().execute_command("ACL", "SETUSER", "alice", "+set", "-get")
    both(*conns, "SET", "k", "v")
    both(*conns, "GET", "k")
    # CLIENT LIST names the user.
    ours_list = servers[0].client().client_list()
    assert any(c["user"] == "alice" for c in ours_list), ours_list
    for s in servers:
        assert s.client().execute_command("ACL", "DELUSER", "alice") == 1
    for c in conns:
        with pytest.raises(redis.exceptions.ConnectionError):
            c.get("k")


def test_client_kill_user(servers):
    for s in servers:
        s.client().execute_command("ACL", "SETUSER", "alice", "on", ">pw", "+@all", "~*")
    conns = [client_as(s, "alice", "pw", single_connection_client=True) for s in servers]
    for c in conns:
        c.ping()
    both(*(s.client() for s in servers), "CLIENT", "KILL", "USER", "nosuch")
    both(*(s.client() for s in servers), "CLIENT", "KILL", "USER", "alice")


def test_aclfile_at_start_save_and_load(make_tierkv, tmp_path):
    path = tmp_path / "users.acl"
    path.write_text("user default on nopass ~* &* +@all\n"
                    "user reader on >pw %R~* resetchannels -@all +@read\n")
    server = make_tierkv("--flash-size", "0", "--aclfile", str(path))
    c = server.client()
    assert c.execute_command("ACL", "USERS") == [b"default", b"reader"]
    r = client_as(server, "reader", "pw")
    assert reply_of(r, "SET", "k", "v")[0] == "error"
    assert r.get("k") is None
    c.execute_command("ACL", "SETUSER", "writer", "on", ">w", "~*", "+@write")
    assert c.execute_command("ACL", "SAVE") == b"OK"
    assert "user writer on" in path.read_text()
    # A bad file changes nothing.
    good = path.read_text()
    path.write_text(good + "user broken on +nosuch\n")
    err = reply_of(c, "ACL", "LOAD")
    assert err[0] == "error" and ":4:" in err[1], err
    assert c.execute_command("ACL", "USERS") == [b"default", b"reader", b"writer"]
    # A good one replaces every user; one it drops loses its rights at once.
    path.write_text("user default on nopass ~* &* +@all\n")
    assert c.execute_command("ACL", "LOAD") == b"OK"
    assert c.execute_command("ACL", "USERS") == [b"default"]
    assert reply_of(r, "GET", "k")[0] == "error"


def test_a_bad_aclfile_stops_the_start_with_one_line(tmp_path):
    path = tmp_path / "users.acl"
    path.write_text("user x on +nosuch\n")
    r = subprocess.run([TIERKV_SERVER, "--port", "0", "--flash-size", "0", "--aclfile",
                        str(path)], capture_output=True, text=True, timeout=30)
    assert r.returncode != 0
    assert "Unknown command or category name in ACL" in r.stdout + r.stderr, r
    missing = subprocess.run([TIERKV_SERVER, "--port", "0", "--flash-size", "0", "--aclfile",
                              os.path.join(tmp_path, "none.acl")],
                             capture_output=True, text=True, timeout=30)
    assert missing.returncode != 0 and "none.acl" in missing.stdout + missing.stderr, missing


def categories(server, name):
    """COMMAND INFO's ACL categories (redis-py's parser drops them)."""
    conn = server.client(decode_responses=True).connection_pool.get_connection("_")
    conn.send_command("COMMAND", "INFO", name)
    return conn.read_response()[0][6]


def test_command_info_shows_redis_categories(servers):
    ours, theirs = servers
    for name in ("get", "set", "config", "del", "keys", "ping", "multi", "copy", "acl"):
        assert categories(ours, name) == categories(theirs, name), name
    assert {"@preheat", "@tier"} <= set(categories(ours, "tier.preheat"))


def test_exec_checks_queued_commands_again_like_redis(servers):
    for s in servers:
        s.client().execute_command("ACL", "SETUSER", "alice", "on", ">pw", "+@all", "~*")
    conns = [client_as(s, "alice", "pw", single_connection_client=True) for s in servers]
    both(*conns, "MULTI")
    both(*conns, "SET", "k", "v")
    both(*conns, "GET", "k")
    for s in servers:
        s.client().execute_command("ACL", "SETUSER", "alice", "-get")
    got = [c.execute_command("EXEC") for c in conns]
    assert got[0][0] == got[1][0] == b"OK"
    assert [str(g[1]) for g in got][0] == [str(g[1]) for g in got][1], got
    assert "no longer allowed" in str(got[0][1])
    logs = [log_of(s.client()) for s in servers]
    assert logs[0] == logs[1] and logs[0][0]["context"] == "multi"
    # A key taken away meanwhile.
    for s in servers:
        s.client().execute_command("ACL", "SETUSER", "alice", "+get")
    both(*conns, "MULTI")
    both(*conns, "GET", "k")
    for s in servers:
        s.client().execute_command("ACL", "SETUSER", "alice", "resetkeys", "~other*")
    got = [str(c.execute_command("EXEC")[0]) for c in conns]
    assert got[0] == got[1] and "no longer allowed" in got[0], got
