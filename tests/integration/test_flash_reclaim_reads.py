"""A GET streaming a value from flash finishes whole although the log wraps
under it.

Contract: once the first bytes of a value are on the wire, the rest follow
unchanged; a flash region that the read still needs is reclaimed (its
objects leave the index, new GETs miss) but not rewritten until the read is
done (INFO flash_regions_draining counts such regions). Before region pins a
slow reader of the oldest data lost its connection half-way through the
value when writers wrapped the log.
"""
import socket
import time

from flash_util import MIB, flash_servers, make_value, num  # noqa: F401


def read_exactly(sock, n, deadline):
    parts, got = [], 0
    while got < n:
        sock.settimeout(max(0.1, deadline - time.time()))
        part = sock.recv(min(n - got, 1 << 20))
        assert part, f"connection closed after {got} of {n} bytes"
        parts.append(part)
        got += len(part)
    return b"".join(parts)


def test_a_slow_get_survives_the_log_wrapping_under_it(flash_servers):
    # 64 MiB of flash in 4 MiB regions; 8 MiB of memory, so the 12 MiB value
    # is written through to flash and every GET of it streams from there.
    s = flash_servers(memory="8mb", flash_size="64mb",
                      extra=("--region-size", "4mb", "--flash-read-buffer", "2mb",
                             "--client-output-buffer-limit", "64mb"),
                      reclaim_ok=True).start()  # the log wraps: that is the test
    c = s.client(socket_timeout=30)
    size = 12 * MIB
    value = make_value("big", 1, size)
    assert c.set("big", value) is True

    reader = socket.create_connection(("127.0.0.1", s.port))
    reader.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    reader.sendall(b"*2\r\n$3\r\nGET\r\n$3\r\nbig\r\n")
    deadline = time.time() + 60
    header = b""
    while not header.endswith(b"\r\n"):
        header += read_exactly(reader, 1, deadline)
    assert header == b"$%d\r\n" % size
    first = read_exactly(reader, 256 * 1024, deadline)  # then it stops reading

    # Twice the flash in new values: every region is reclaimed at least once.
    reclaims_before = num(s.flash_info(), "flash_reclaims")
    for i in range(64):
        assert c.set(f"filler{i}", make_value(f"filler{i}", 2, 2 * MIB)) is True
    info = s.flash_info()
    assert num(info, "flash_reclaims") - reclaims_before >= 16, info
    assert num(info, "flash_regions_draining") >= 1, info
    assert c.get("big") is None, "a reclaimed value must leave the index"

    rest = read_exactly(reader, size - len(first) + 2, deadline)
    got = first + rest
    assert got[-2:] == b"\r\n"
    assert got[:-2] == value, "the streamed value changed under the read"
    reader.close()

    # Its regions are writable again, and the server writes on.
    def drained():
        return num(s.flash_info(), "flash_regions_draining") == 0
    deadline = time.time() + 10
    while not drained() and time.time() < deadline:
        time.sleep(0.05)
    assert drained(), s.flash_info()
    for i in range(64, 96):
        assert c.set(f"filler{i}", make_value(f"filler{i}", 2, 2 * MIB)) is True
    assert c.get("filler95") == make_value("filler95", 2, 2 * MIB)
    assert s.alive()
