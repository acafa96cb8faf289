"""A TCP proxy on loopback that can drop traffic silently, as a broken
network path or a stale NAT entry does: the connections stay open, no RST
is sent, and bytes simply stop arriving. Used between tierkv nodes and
etcd to hang a watch or a lease renewal (tests/integration/test_cluster*.py).

    proxy = TcpProxy(("127.0.0.1", etcd.client_port))
    proxy.drop_existing()   # what is open now goes silent; new connections work
    proxy.drop_all(True)    # everything goes silent, new connections too
    proxy.drop_all(False)   # new connections work again
    proxy.close()
"""
import socket
import threading


class _Pair:
    def __init__(self, client, upstream):
        self.client = client
        self.upstream = upstream
        self.silent = False

    def close(self):
        for s in (self.client, self.upstream):
            try:
                s.close()
            except OSError:
                pass


class TcpProxy:
    def __init__(self, upstream):
        self.upstream = upstream
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(128)
        self.port = self.listener.getsockname()[1]
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.lock = threading.Lock()
        self.pairs = []
        self.silent_all = False
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def drop_existing(self):
        """Every connection open now stops carrying bytes, for good."""
        with self.lock:
            for p in self.pairs:
                p.silent = True

    def drop_all(self, on):
        """With `on`, every connection, open or new, carries nothing."""
        with self.lock:
            self.silent_all = on
            for p in self.pairs:
                p.silent = p.silent or on

    def close(self):
        self.closed = True
        self.listener.close()
        with self.lock:
            for p in self.pairs:
                p.close()

    def _accept(self):
        while not self.closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.upstream, timeout=5)
                upstream.settimeout(None)
            except OSError:
                client.close()  # as a refused connection would look
                continue
            pair = _Pair(client, upstream)
            with self.lock:
                pair.silent = self.silent_all
                self.pairs = [p for p in self.pairs if p.client.fileno() >= 0] + [pair]
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(pair, src, dst), daemon=True).start()

    def _pump(self, pair, src, dst):
        while True:
            try:
                data = src.recv(65536)
            except OSError:
                break
            if not data:
                break
            if pair.silent:
                continue  # read and dropped: the sender sees nothing wrong
            try:
                dst.sendall(data)
            except OSError:
                break
        pair.close()
