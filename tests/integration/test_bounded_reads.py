"""Flash reads are pulled by the client's socket: clients that GET a large
flash-resident value and do not read hold a few chunks each, not the value
(flash-read-window), and all of them together at most flash-read-buffer."""
import socket

from conftest import encode_command, rss_kib
from flash_util import MIB, flash_servers, make_value, num, push_out, residencies, wait_until  # noqa: F401

VALUE = 64 * MIB
CLIENTS = 8
WINDOW = 4
CHUNK_CHARGE = MIB + 4096  # what one chunk buffer is charged


def push_to_flash(client, key, size):
    """Writes `key`, then enough other data that memory evicts it to flash."""
    client.set(key, make_value(key, 1, size))
    push_out(client, key, "fill", MIB, limit=512)


def read_bulk(sock, size):
    """Reads one bulk reply of `size` bytes into a preallocated buffer."""
    header = b""
    while not header.endswith(b"\r\n"):
        b = sock.recv(1)
        assert b, "connection closed before the reply"
        header += b
    assert header == b"$%d\r\n" % size, header
    buf = bytearray(size + 2)
    view = memoryview(buf)
    got = 0
    while got < len(buf):
        n = sock.recv_into(view[got:], len(buf) - got)
        assert n > 0, f"connection closed after {got} bytes"
        got += n
    assert buf[size:] == b"\r\n"
    return bytes(buf[:size])


def test_flash_gets_never_read_keep_rss_bounded(flash_servers):
    s = flash_servers(memory="96mb", flash_size="512mb",
                      extra=["--eviction-policy", "lru", "--flash-read-window", str(WINDOW), "--promotion-threshold", "255",
                             "--max-object-size", "128mb",
                             # The 64 MiB value's offload must fit the write
                             # queue beside other evictions in flight (with the
                             # default 64 MiB queue it is accepted only when the
                             # queue happens to be empty).
                             "--flash-write-queue", "256mb"]).start()
    c = s.client()
    push_to_flash(c, "big", VALUE)
    fields = s.flash_info()
    assert num(fields, "flash_read_buffer_used") == 0
    assert num(fields, "flash_read_buffer_limit") == 256 * MIB
    rss_before = rss_kib(s.proc.pid)

    lazy = []
    for _ in range(CLIENTS):
        sock = socket.create_connection(("127.0.0.1", s.port), timeout=60)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        sock.sendall(encode_command("GET", "big"))
        lazy.append(sock)
    # Every client's read stops with its window held: the socket is full.
    held = CLIENTS * WINDOW * CHUNK_CHARGE
    assert wait_until(lambda: num(s.flash_info(), "flash_read_buffer_used") == held, 30), \
        s.flash_info()
    rss_grown_kib = rss_kib(s.proc.pid) - rss_before
    print(f"RSS grew {rss_grown_kib / 1024:.1f} MiB with {CLIENTS} stalled GETs of "
          f"{VALUE // MIB} MiB (unbounded: {CLIENTS * VALUE // MIB} MiB)")
    assert rss_grown_kib * 1024 < VALUE, f"RSS grew {rss_grown_kib} KiB"
    assert "tierkv_flash_read_buffer_used_bytes" in s.metrics()

    expected = make_value("big", 1, VALUE)
    for sock in lazy:
        assert read_bulk(sock, VALUE) == expected
        sock.close()
    assert wait_until(lambda: num(s.flash_info(), "flash_read_buffer_used") == 0, 10)
    assert c.ping()


def test_read_buffer_cap_queues_reads_until_room(flash_servers):
    """With room for 3 chunk buffers, 4 stalled readers hold 3 chunks in all;
    the fourth waits and is served once the others drain."""
    cap = 3 * CHUNK_CHARGE
    s = flash_servers(memory="96mb", flash_size="512mb",
                      extra=["--eviction-policy", "lru", "--flash-read-window", "2", "--flash-read-buffer", str(cap),
                             "--promotion-threshold", "255"]).start()
    c = s.client()
    size = 16 * MIB
    push_to_flash(c, "v", size)
    socks = []
    for _ in range(4):
        sock = socket.create_connection(("127.0.0.1", s.port), timeout=60)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        sock.sendall(encode_command("GET", "v"))
        socks.append(sock)
    assert wait_until(lambda: num(s.flash_info(), "flash_read_buffer_used") == cap, 30)
    assert num(s.flash_info(), "flash_read_buffer_waits") > 0
    # Other commands are not held up by the stalled reads.
    assert c.set("small", b"x") and c.get("small") == b"x"
    expected = make_value("v", 1, size)
    for sock in socks:
        assert read_bulk(sock, size) == expected
        sock.close()
    assert wait_until(lambda: num(s.flash_info(), "flash_read_buffer_used") == 0, 10)


def test_client_gone_mid_stream_cancels_the_read(flash_servers):
    s = flash_servers(memory="96mb", flash_size="512mb",
                      extra=["--eviction-policy", "lru", "--promotion-threshold", "255"]).start()
    c = s.client()
    push_to_flash(c, "v", 32 * MIB)
    sock = socket.create_connection(("127.0.0.1", s.port), timeout=60)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    sock.sendall(encode_command("GET", "v"))
    assert wait_until(lambda: num(s.flash_info(), "flash_read_buffer_used") > 0, 30)
    reads_before = num(s.flash_info(), "flash_reads")
    sock.close()
    assert wait_until(lambda: num(s.flash_info(), "flash_read_buffer_used") == 0, 10)
    # The rest of the value was never read (32 chunks; at most a window more).
    assert num(s.flash_info(), "flash_reads") - reads_before <= 8
    assert c.get("v") == make_value("v", 1, 32 * MIB)


def test_getrange_of_a_flash_value_reads_only_its_chunks(flash_servers):
    s = flash_servers(memory="96mb", flash_size="512mb",
                      extra=["--eviction-policy", "lru", "--promotion-threshold", "255"]).start()
    c = s.client()
    size = 32 * MIB
    push_to_flash(c, "v", size)
    value = make_value("v", 1, size)
    used_before = num(s.info("memory")[0], "used_memory")
    reads_before = num(s.flash_info(), "flash_reads")
    start = 5 * MIB + 1000
    assert c.getrange("v", start, start + 99) == value[start:start + 100]
    assert c.getrange("v", 2 * MIB - 10, 2 * MIB + 9) == value[2 * MIB - 10:2 * MIB + 10]
    assert c.getrange("v", size - 5, size + 1000) == value[size - 5:]
    assert c.getrange("v", size + 5, size + 1000) == b""
    assert c.getrange("missing", 0, 10) == b""
    # 1 + 2 + 1 chunks: the ranges, not the value, and nothing loaded into memory.
    assert num(s.flash_info(), "flash_reads") - reads_before == 4
    assert num(s.info("memory")[0], "used_memory") <= used_before
    # Negative indexes need the length: the value is fetched, then read.
    assert c.getrange("v", -10, -1) == value[-10:]
