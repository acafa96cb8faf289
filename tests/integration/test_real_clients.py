"""Real clients, each running one scripted session against tierkv-server and
redis-server side by side, with the same output required: hiredis (a C
program built here from tests/clients/hiredis_session.c against Debian's
libhiredis-dev), redis-cli (RESP2 and RESP3), redis-benchmark (the key space
it leaves behind) and redis-py's asyncio client. redis-py's sync client,
with default (transactional) pipelines, is in test_transactions.py."""
import asyncio
import os
import shutil
import subprocess

import pytest
import redis.asyncio

from conftest import ROOT

HIREDIS_SOURCE = os.path.join(ROOT, "tests", "clients", "hiredis_session.c")
REDIS_CLI = shutil.which("redis-cli") or "/usr/bin/redis-cli"
BENCHMARK = shutil.which("redis-benchmark") or "/usr/bin/redis-benchmark"


@pytest.fixture(scope="module")
def hiredis_session(tmp_path_factory):
    """The hiredis test program, compiled with the project's warning flags."""
    out = str(tmp_path_factory.mktemp("hiredis") / "hiredis_session")
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "hiredis"], capture_output=True,
                           text=True, check=True).stdout.split()
    subprocess.run(["cc", "-std=c11", "-Wall", "-Wextra", "-Werror", "-O2", "-o", out,
                    HIREDIS_SOURCE, *flags], check=True)
    return out


def test_hiredis_session(hiredis_session, redis_server, tierkv_server):
    outputs = []
    for port in (tierkv_server.port, redis_server.port):
        p = subprocess.run([hiredis_session, str(port)], capture_output=True, text=True,
                           timeout=60)
        assert p.returncode == 0, p.stderr
        outputs.append(p.stdout)
    ours, theirs = outputs
    assert "exec: array(3)" in theirs and "pipelined: integer 2" in theirs
    assert ours == theirs


CLI_SCRIPT = """\
FLUSHALL
SET greeting "hello world"
GET greeting
APPEND greeting !
GETRANGE greeting 0 4
SET n 10
INCRBYFLOAT n 0.5
MSET a 1 b 2 c 3
MGET a b missing c
EXISTS a b missing
DEL a b
TTL c
EXPIRE c 100
TTL c
SETBIT bits 7 1
BITCOUNT bits
GET missing
INCR greeting
NOSUCHCOMMAND
MULTI
SET t 1
INCR t
EXEC
CLIENT SETNAME cli-session
CLIENT GETNAME
SLOWLOG GET 0
OBJECT ENCODING n
DBSIZE
"""


@pytest.mark.parametrize("proto", ["-2", "-3"])
def test_redis_cli_session(redis_server, tierkv_server, proto):
    outputs = []
    for port in (tierkv_server.port, redis_server.port):
        p = subprocess.run([REDIS_CLI, proto, "-h", "127.0.0.1", "-p", str(port)],
                           input=CLI_SCRIPT, capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stderr
        outputs.append(p.stdout)
    ours, theirs = outputs
    assert "hello world\n12\nhello\n" in theirs and "cli-session" in theirs
    assert ours == theirs


def keyspace(port):
    """Every key with its value, through redis-cli."""
    def cli(*args):
        return subprocess.run([REDIS_CLI, "-h", "127.0.0.1", "-p", str(port), *args],
                              capture_output=True, text=True, timeout=60, check=True).stdout
    keys = sorted(cli("--scan").split())
    return {k: cli("GET", k) for k in keys}


def test_redis_benchmark_leaves_the_same_keyspace(redis_server, tierkv_server):
    """Without -r, redis-benchmark's SET, INCR and MSET write fixed keys: both
    servers must end with the same keys, the same counter and values of the
    same length."""
    states = []
    for port in (tierkv_server.port, redis_server.port):
        subprocess.run([REDIS_CLI, "-h", "127.0.0.1", "-p", str(port), "FLUSHALL"], check=True,
                       capture_output=True, timeout=60)
        p = subprocess.run([BENCHMARK, "-h", "127.0.0.1", "-p", str(port), "-t",
                            "set,get,incr,mset", "-n", "3000", "-c", "10", "-d", "100", "-q"],
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr
        for name in ("SET", "GET", "INCR", "MSET"):
            assert name in p.stdout, p.stdout
        states.append(keyspace(port))
    ours, theirs = states
    assert theirs["counter:__rand_int__"].strip() == "3000"
    assert sorted(theirs) == ["counter:__rand_int__", "key:__rand_int__"]  # MSET: key x 10
    # The SET/MSET payload is random per run: compare its length.
    assert {k: len(v) for k, v in ours.items()} == {k: len(v) for k, v in theirs.items()}
    assert ours["counter:__rand_int__"] == theirs["counter:__rand_int__"]


async def asyncio_session(port):
    c = redis.asyncio.Redis(host="127.0.0.1", port=port)
    try:
        await c.flushall()
        out = [await c.set("k", "v"), await c.get("k"), await c.incr("n"), await c.incr("n")]
        # Default pipeline: MULTI/EXEC.
        async with c.pipeline() as pipe:
            pipe.set("a", "1").incr("a").get("a").mget("a", "missing")
            out.append(await pipe.execute())
        async with c.pipeline(transaction=False) as pipe:
            for i in range(50):
                pipe.set(f"p{i}", i)
            pipe.dbsize()
            out.append((await pipe.execute())[-1])
        # WATCH: a change by another client aborts the transaction.
        other = redis.asyncio.Redis(host="127.0.0.1", port=port)
        async with c.pipeline() as pipe:
            await pipe.watch("a")
            await other.set("a", "changed")
            pipe.multi()
            pipe.set("a", "mine")
            try:
                await pipe.execute()
                out.append("executed")
            except redis.WatchError:
                out.append("watch-error")
        await other.close()
        out.append(await c.get("a"))
        # Many concurrent commands on one connection pool.
        out.append(sorted(await asyncio.gather(*(c.incr("shared") for _ in range(100))))[-1])
        try:
            await c.incr("k")
        except redis.ResponseError as e:
            out.append(str(e))
        return out
    finally:
        await c.close()


def test_redis_py_asyncio_session(redis_server, tierkv_server):
    ours = asyncio.run(asyncio_session(tierkv_server.port))
    theirs = asyncio.run(asyncio_session(redis_server.port))
    assert "watch-error" in theirs and theirs[-2] == 100
    assert ours == theirs
