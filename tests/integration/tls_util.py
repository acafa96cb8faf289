"""Test certificates, made with the openssl CLI: a CA, a server and a
client certificate it signed (for 127.0.0.1 and localhost), and a client
certificate of another CA (which the server must refuse)."""
import os
import subprocess


def _run(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def _ca(cwd, name):
    _run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out",
         f"{name}.crt", "-days", "2", "-subj", f"/CN={name}", cwd=cwd)


def _signed(cwd, name, ca, cn):
    with open(os.path.join(cwd, "san.cnf"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    _run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
         "-subj", f"/CN={cn}", cwd=cwd)
    _run("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.crt", "-CAkey", f"{ca}.key",
         "-CAcreateserial", "-out", f"{name}.crt", "-days", "2", "-extfile", "san.cnf", cwd=cwd)


class Certs:
    def __init__(self, folder):
        self.dir = str(folder)
        _ca(self.dir, "ca")
        _ca(self.dir, "other-ca")
        _signed(self.dir, "server", "ca", "server-one")
        _signed(self.dir, "server2", "ca", "server-two")
        _signed(self.dir, "client", "ca", "client")
        _signed(self.dir, "stranger", "other-ca", "stranger")

    def path(self, name):
        return os.path.join(self.dir, name)

    def server_args(self, cert="server"):
        return ["--tls-cert-file", self.path(f"{cert}.crt"), "--tls-key-file",
                self.path(f"{cert}.key"), "--tls-ca-cert-file", self.path("ca.crt")]
