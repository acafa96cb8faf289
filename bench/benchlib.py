"""Helpers the benchmark drivers share: loopback ports, waiting for a peer
to listen, size parsing, and INFO over a plain socket (no client library).

Drivers import it with bench/ on sys.path:
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import benchlib
"""
import socket
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port, proc, timeout=30.0):
    """Returns once something listens on 127.0.0.1:port; raises if `proc`
    exits first or the timeout passes."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with code {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"server did not listen on {port}")


def is_loading(port):
    """True while a Redis-protocol server still loads its data (INFO
    persistence: loading:1). tierkv-server accepts connections at once and
    answers -LOADING to data commands until its flash index is loaded."""
    return server_info(port, "persistence").get("loading") == "1"


def wait_loaded(port, proc, timeout=600.0):
    """Returns once the server at port has loaded its data; raises if `proc`
    exits first or the timeout passes."""
    deadline = time.monotonic() + timeout
    while is_loading(port):
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with code {proc.returncode}")
        if time.monotonic() >= deadline:
            raise RuntimeError(f"server on {port} still loading after {timeout}s")
        time.sleep(0.02)


def parse_size(text):
    """"64k", "1MiB", "2gb", "4096" -> bytes."""
    text = text.strip().lower().removesuffix("b").removesuffix("i")
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    if text and text[-1] in units:
        return int(float(text[:-1]) * units[text[-1]])
    return int(text)


def server_info(port, section=None):
    """INFO's fields (of one section, if given) as a dict; empty if the
    server answers an error."""
    request = b"*1\r\n$4\r\nINFO\r\n"
    if section:
        request = b"*2\r\n$4\r\nINFO\r\n$%d\r\n%s\r\n" % (len(section), section.encode())
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(request)
        data = b""
        while b"\r\n" not in data:
            chunk = s.recv(65536)
            if not chunk:
                raise ConnectionError("connection closed by server")
            data += chunk
        head, rest = data.split(b"\r\n", 1)
        if not head.startswith(b"$"):
            return {}
        length = int(head[1:])
        while len(rest) < length:
            rest += s.recv(65536)
    fields = {}
    for line in rest[:length].decode().splitlines():
        if ":" in line and not line.startswith("#"):
            key, value = line.split(":", 1)
            fields[key] = value
    return fields


def pyplot():
    """matplotlib.pyplot on the Agg backend, or None (with a note) if
    matplotlib is missing: the drivers then write no PNG."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib missing: no plot")
        return None
    return plt
