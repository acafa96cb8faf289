"""Protected configs, as Redis 7 has them (enable-protected-configs).

The contract (docs/security.md): a key that names files, sources or hosts
(preheat-sources, flash-path, unixsocket, cluster-etcd, ...) can be set by
CONFIG SET only as enable-protected-configs allows: never (no, the
default), from any client (yes), or from loopback and Unix socket clients
(local). A refusal has Redis's text, and enable-protected-configs itself
can be set only at start. Side by side with redis-server, whose `dir` is
such a key."""
import subprocess

from conftest import TIERKV_SERVER, encode_command, reply_of
from test_hardening import connect_from, non_loopback_address

GUARDED_OURS = "preheat-sources"
GUARDED_THEIRS = "dir"


def refusal(key):
    return ("error", f"CONFIG SET failed (possibly related to argument '{key}') - "
                     "can't set protected config")


def test_a_guarded_key_is_refused_by_default_with_redis_text(make_tierkv, make_redis):
    ours, theirs = make_tierkv("--flash-size", "0"), make_redis()
    got = reply_of(ours.client(), "CONFIG", "SET", GUARDED_OURS, "file:///")
    want = reply_of(theirs.client(), "CONFIG", "SET", GUARDED_THEIRS, "/")
    assert want == refusal(GUARDED_THEIRS)
    assert got == refusal(GUARDED_OURS)
    assert ours.client().config_get(GUARDED_OURS)[GUARDED_OURS] == ""
    # All or nothing, argument by argument, as Redis: a settable key
    # before it is not set either.
    assert reply_of(ours.client(), "CONFIG", "SET", "slowlog-max-len", "7", GUARDED_OURS,
                    "file:///") == refusal(GUARDED_OURS)
    assert ours.client().config_get("slowlog-max-len")["slowlog-max-len"] == "128"
    # The setting itself: immutable, on both.
    for server in (ours, theirs):
        assert reply_of(server.client(), "CONFIG", "SET", "enable-protected-configs", "yes") == (
            "error", "CONFIG SET failed (possibly related to argument 'enable-protected-configs')"
                     " - can't set immutable config")
        assert server.client().config_get("enable-protected-configs") == {
            "enable-protected-configs": "no"}


def test_the_file_read_of_the_issue_is_refused(make_tierkv):
    """CONFIG SET preheat-sources file:///, TIER.PREHEAT of /etc/shadow, GET:
    the first step is refused, so no job starts and the key stays missing."""
    server = make_tierkv("--flash-size", "0")
    c = server.client()
    assert reply_of(c, "CONFIG", "SET", "preheat-sources", "file:///") == refusal(
        "preheat-sources")
    got = reply_of(c, "TIER.PREHEAT", "k", "file:///etc/passwd")
    assert isinstance(got, tuple) and got[0] == "error", got
    assert c.get("k") is None


def test_yes_lets_any_client_set_them(make_tierkv, make_redis, tmp_path):
    ours = make_tierkv("--flash-size", "0", "--enable-protected-configs", "yes")
    theirs = make_redis("--enable-protected-configs", "yes")
    assert ours.client().config_set(GUARDED_OURS, f"file://{tmp_path}/") is True
    assert theirs.client().config_set(GUARDED_THEIRS, str(tmp_path)) is True
    assert ours.client().config_get(GUARDED_OURS)[GUARDED_OURS] == f"file://{tmp_path}/"


def test_local_lets_loopback_clients_only(make_tierkv, make_redis, tmp_path):
    remote = non_loopback_address()
    for server, key, value in (
            (make_tierkv("--flash-size", "0", "--enable-protected-configs", "local",
                         "--requirepass", "pw"), GUARDED_OURS, f"file://{tmp_path}/"),
            (make_redis("--enable-protected-configs", "local", "--requirepass", "pw"),
             GUARDED_THEIRS, str(tmp_path))):
        s = connect_from(remote, server.port)
        try:
            s.sendall(encode_command("AUTH", "pw") + encode_command("CONFIG", "SET", key, value))
            assert read_lines(s, 2) == [b"+OK", ("-ERR " + refusal(key)[1]).encode()]
        finally:
            s.close()
        assert server.client(password="pw").config_set(key, value) is True


def test_a_bad_value_at_start_is_a_one_line_error():
    r = subprocess.run([TIERKV_SERVER, "--enable-protected-configs", "maybe"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode != 0
    assert "enable-protected-configs" in r.stderr and "no, yes, local" in r.stderr, r.stderr


def read_lines(s, n, timeout=5.0):
    s.settimeout(timeout)
    data = b""
    while data.count(b"\r\n") < n:
        chunk = s.recv(4096)
        if not chunk:
            break
        data += chunk
    return data.split(b"\r\n")[:n]

