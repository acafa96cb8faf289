"""EXEC streams the values its GETs read from flash (docs/commands.md,
MULTI/EXEC).

The contract: EXEC answers every queued GET (and TIER.GET, TIER.READ) as of
the moment EXEC ran, even though a value only flash holds is read later, in
its reply's turn, one after another; so a batch larger than memory is
answered whole and in order, without -OOM or -BUSY, and writes made after
EXEC (by the transaction itself or by other clients) never show in it. A
client that closes mid-reply leaves no read buffer or pin behind."""
import socket

from conftest import encode_command
from flash_util import MIB, flash_servers, make_value, num, push_out, residencies, wait_until  # noqa: F401
from kv_clients import read_reply

FLASH = ("--region-size", "16mb", "--flash-preallocate", "no")
SIZE = 2 * MIB


def flash_keys(s, n, prefix="k"):
    c = s.client()
    keys = [f"{prefix}{i}" for i in range(n)]
    for k in keys:
        c.set(k, make_value(k, 1, SIZE))
    filler = push_out(c, keys, "fill", MIB, limit=1024)
    c.delete(*filler)
    return c, keys


def exec_of(sock, *commands):
    sock.sendall(encode_command("MULTI") + b"".join(encode_command(*c) for c in commands) +
                 encode_command("EXEC"))


def last_command(c, name):
    for client in c.client_list():
        if client["name"] == name:
            return client["cmd"]
    return None


def test_exec_answers_flash_values_as_of_exec(flash_servers):
    s = flash_servers(memory="64mb", flash_size="512mb", extra=FLASH).start()
    c, keys = flash_keys(s, 3)
    assert all(set(residencies(c, k)) == {"flash"} for k in keys)
    p = c.pipeline()
    p.get("k0")
    p.set("k0", b"new")
    p.get("k0")
    p.get("k1")
    p.delete("k1")
    p.get("k1")
    p.execute_command("TIER.READ", "k2", str(MIB - 5), "10")
    p.execute_command("TIER.GET", "k2")
    p.get("absent")
    old = [make_value(k, 1, SIZE) for k in keys]
    assert p.execute() == [old[0], True, b"new", old[1], 1, None, old[2][MIB - 5:MIB + 5], old[2],
                           None]


def test_writes_after_exec_never_show_in_its_streamed_reply(flash_servers):
    s = flash_servers(memory="64mb", flash_size="512mb", extra=FLASH).start()
    c, keys = flash_keys(s, 40)  # 80 MiB: more than memory
    reader = socket.create_connection(("127.0.0.1", s.port), timeout=120)
    reader.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    reader.sendall(encode_command("CLIENT", "SETNAME", "reader"))
    exec_of(reader, *[("GET", k) for k in keys])
    reader.sendall(encode_command("PING"))
    # EXEC ran (it or the PING after it is the reader's last command)
    # before anything below.
    assert wait_until(lambda: last_command(c, "reader") in ("exec", "ping"), 30), c.client_list()
    for i, k in enumerate(keys):
        if i % 2:
            c.delete(k)
        else:
            c.set(k, b"overwritten")
    f = reader.makefile("rb", buffering=1 << 16)
    assert read_reply(f) == b"OK"  # SETNAME
    assert read_reply(f) == b"OK"  # MULTI
    assert [read_reply(f) for _ in keys] == [b"QUEUED"] * len(keys)
    got = read_reply(f)
    assert len(got) == len(keys)
    for k, v in zip(keys, got):
        assert v == make_value(k, 1, SIZE), (k, None if v is None else len(v))
    assert read_reply(f) == b"PONG"
    f.close()
    reader.close()


def test_a_client_that_closes_mid_reply_leaves_nothing_held(flash_servers):
    s = flash_servers(memory="64mb", flash_size="512mb", extra=FLASH).start()
    c, keys = flash_keys(s, 40)
    for _ in range(3):
        sock = socket.create_connection(("127.0.0.1", s.port), timeout=120)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        exec_of(sock, *[("GET", k) for k in keys])
        got = 0
        while got < 5 * MIB:
            got += len(sock.recv(1 << 16))
        sock.close()
    assert wait_until(lambda: num(s.flash_info(), "flash_read_buffer_used") == 0, 30)
    # The pins went too: the keys can be overwritten and read as usual.
    for k in keys:
        c.set(k, b"v")
    assert c.mget(keys) == [b"v"] * len(keys)
