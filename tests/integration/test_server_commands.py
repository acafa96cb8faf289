"""Server commands over the wire: COMMAND CONFIG INFO DBSIZE FLUSH* TIME
SHUTDOWN, dispatch errors, and the /metrics endpoint."""
import re
import time
import urllib.request

import pytest
import redis

from conftest import RawClient


def info_text(server, *sections):
    """INFO's text, read raw: redis-py would parse it into a dict."""
    raw = RawClient(server.port)
    try:
        frame = raw.call("INFO", *sections)
    finally:
        raw.close()
    assert frame.startswith(b"$")
    return frame.split(b"\r\n", 1)[1][:-2].decode()


def parse_info(text):
    if isinstance(text, bytes):
        text = text.decode()
    out = {}
    for line in text.split("\r\n"):
        if line and not line.startswith("#"):
            k, _, v = line.partition(":")
            out[k] = v
    return out


def test_unknown_command_and_arity_errors(pair):
    pair.same("NOSUCH")
    pair.same("NOSUCH", "a", "b c", "")
    pair.same("nosuch", "x" * 300)
    pair.same("nosuch", *["y" * 50] * 5)
    pair.same("GET")
    pair.same("GET", "a", "b")
    pair.same("DBSIZE", "x")
    pair.same("TIME", "x")
    pair.same("PING", "a", "b")


def test_dbsize_and_flush(pair):
    pair.same("DBSIZE")
    for i in range(10):
        pair.same("SET", f"k{i}", "v")
    pair.same("DBSIZE")
    pair.same("FLUSHDB")
    pair.same("DBSIZE")
    pair.same("SET", "a", "1")
    pair.same("FLUSHALL", "ASYNC")
    pair.same("DBSIZE")
    pair.same("FLUSHALL", "SYNC")
    pair.same("FLUSHALL", "BOGUS")
    pair.same("FLUSHDB", "ASYNC", "SYNC")


def test_time(tierkv_server):
    c = tierkv_server.client()
    secs, usecs = c.execute_command("TIME")
    assert abs(int(secs) - time.time()) < 5
    assert 0 <= int(usecs) < 1_000_000


def test_command_count_info_docs(tierkv_server):
    raw = RawClient(tierkv_server.port)
    try:
        count = int(raw.call("COMMAND", "COUNT")[1:-2])
        listing = raw.call("COMMAND", "LIST").decode()
        names = listing.split("\r\n")[2::2]
        assert count == len(names) and count >= 20
        for expected in ("get", "set", "ping", "hello", "client", "config", "info", "command"):
            assert expected in names
        info = raw.call("COMMAND", "INFO", "get", "nosuch")
        assert info.startswith(b"*2\r\n*10\r\n$3\r\nget\r\n:2\r\n")
        assert info.endswith(b"*-1\r\n")
        docs = raw.call("COMMAND", "DOCS", "get")
        assert b"summary" in docs and docs.startswith(b"*2\r\n$3\r\nget\r\n")
        everything = raw.call("COMMAND")
        assert everything.startswith(b"*%d\r\n" % count)
    finally:
        raw.close()


def test_command_errors(pair):
    pair.same("COMMAND", "NOSUCH")
    pair.same("COMMAND", "COUNT", "x")


def test_command_info_shape_matches_redis(pair):
    ours = pair.ours.execute_command("COMMAND", "INFO", "get")
    theirs = pair.theirs.execute_command("COMMAND", "INFO", "get")
    # redis-py parses COMMAND INFO into a dict keyed by name.
    o, t = ours["get"], theirs["get"]
    assert o["arity"] == t["arity"] == 2
    assert (o["first_key_pos"], o["last_key_pos"], o["step_count"]) == (1, 1, 1)


def test_config_get_set(pair, tierkv_server):
    c = pair.ours
    assert c.config_get("maxclients") == {"maxclients": "10000"}
    got = c.config_get("max-*")
    assert set(got) >= {"max-key-size", "max-object-size", "max-multibulk-args", "max-inline-len"}
    assert c.execute_command("CONFIG", "GET", "nomatch*") == []
    assert c.config_set("timeout", "7")
    assert c.config_get("timeout") == {"timeout": "7"}
    assert c.config_set("timeout", "0")
    # Several keys at once, and the Redis name of the memory budget.
    assert c.execute_command("CONFIG", "SET", "maxclients", "500", "memory", "256mb") == b"OK"
    assert c.config_get("maxclients") == {"maxclients": "500"}
    assert c.config_get("maxmemory") == {"maxmemory": str(256 << 20)}
    info = parse_info(info_text(tierkv_server, "memory"))
    assert info["maxmemory"] == str(256 << 20)
    assert c.execute_command("CONFIG", "SET", "maxmemory", "512mb") == b"OK"
    assert parse_info(info_text(tierkv_server, "memory"))["maxmemory"] == str(512 << 20)
    c.config_set("maxclients", "10000")


def test_config_errors(pair):
    pair.same("CONFIG", "SET", "no-such-key", "1")
    pair.same("CONFIG", "SET", "maxclients")
    pair.same("CONFIG", "GET")
    pair.same("CONFIG", "BOGUS")
    c = pair.ours
    with pytest.raises(redis.ResponseError,
                       match=r"^CONFIG SET failed \(possibly related to argument 'port'\) - "
                             r"can't set immutable config$"):
        c.config_set("port", "1")
    with pytest.raises(redis.ResponseError,
                       match=r"^CONFIG SET failed \(possibly related to argument 'maxclients'\)"):
        c.config_set("maxclients", "abc")
    # A failed CONFIG SET changes nothing.
    with pytest.raises(redis.ResponseError, match="Unknown option"):
        c.execute_command("CONFIG", "SET", "timeout", "5", "bogus-key", "1")
    assert c.config_get("timeout") == {"timeout": "0"}


def test_info_sections(tierkv_server):
    c = tierkv_server.client()
    c.flushall()
    c.set("a", "1")
    c.get("a")
    c.get("missing")
    default = info_text(tierkv_server)
    for section in ("# Server", "# Clients", "# Memory", "# Stats", "# Keyspace"):
        assert section in default
    assert "# Commandstats" not in default
    info = parse_info(default)
    assert int(info["connected_clients"]) >= 1
    assert int(info["keyspace_hits"]) >= 1 and int(info["keyspace_misses"]) >= 1
    assert info["db0"] == "keys=1,expires=0,avg_ttl=0"
    assert int(info["used_memory"]) > 0 and int(info["maxmemory"]) == 512 << 20
    assert int(info["total_commands_processed"]) >= 3

    stats = info_text(tierkv_server, "commandstats")
    m = re.search(r"cmdstat_get:calls=(\d+),usec=(\d+),usec_per_call=[\d.]+,"
                  r"rejected_calls=(\d+),failed_calls=(\d+)", stats)
    assert m and int(m.group(1)) >= 2
    lat = info_text(tierkv_server, "latencystats")
    assert re.search(r"latency_percentiles_usec_get:p50=[\d.]+,p99=[\d.]+,p99\.9=[\d.]+", lat)
    everything = info_text(tierkv_server, "everything")
    assert "# Commandstats" in everything and "# Latencystats" in everything
    assert info_text(tierkv_server, "nosuchsection") == ""
    multi = info_text(tierkv_server, "server", "clients")
    assert "# Server" in multi and "# Clients" in multi and "# Memory" not in multi


def test_rejected_and_failed_calls_are_counted(tierkv_server):
    c = tierkv_server.client()
    c.config_resetstat()
    with pytest.raises(redis.ResponseError):
        c.execute_command("GET")
    c.set("str", "notanumber")
    with pytest.raises(redis.ResponseError):
        c.execute_command("INCR", "str")
    stats = info_text(tierkv_server, "commandstats")
    assert re.search(r"cmdstat_get:calls=0,.*rejected_calls=1,failed_calls=0", stats)
    assert re.search(r"cmdstat_incr:calls=1,.*failed_calls=1", stats)


def test_config_resetstat(tierkv_server):
    c = tierkv_server.client()
    c.ping()
    assert c.config_resetstat()
    stats = info_text(tierkv_server, "commandstats")
    assert "cmdstat_ping" not in stats


def test_metrics_endpoint(make_tierkv):
    s = make_tierkv()
    c = s.client()
    c.set("k", "v" * 100)
    c.get("k")
    info = parse_info(info_text(s))
    port = int(info["metrics_port"])
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    assert 'tierkv_command_calls_total{cmd="get"} 1' in body
    assert 'tierkv_command_latency_seconds_count{cmd="get"} 1' in body
    assert "tierkv_memory_budget_bytes %d" % (512 << 20) in body
    assert "tierkv_memory_objects 1" in body
    used = int(re.search(r"^tierkv_memory_used_bytes (\d+)$", body, re.M).group(1))
    assert used > 0
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/other", timeout=5)
    assert e.value.code == 404


def test_shutdown_stops_the_server(make_tierkv):
    s = make_tierkv()
    c = RawClient(s.port)
    c.send(b"*1\r\n$8\r\nSHUTDOWN\r\n")
    assert c.closed_by_server()
    s.proc.wait(10)
    assert s.proc.returncode == 0


def test_sigterm_stops_the_server(make_tierkv):
    s = make_tierkv()
    s.client().set("k", "v")
    s.proc.terminate()
    s.proc.wait(10)
    assert s.proc.returncode == 0
