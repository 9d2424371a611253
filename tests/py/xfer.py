"""A file over TCP, for the switch tests: `xfer.py serve ADDR PORT` prints
the SHA-256 of what one client sent; `xfer.py send ADDR PORT FILE` sends it."""

import hashlib
import socket
import sys


def serve(addr, port):
    fam = socket.AF_INET6 if ":" in addr else socket.AF_INET
    s = socket.socket(fam, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((addr, int(port)))
    s.listen(1)
    s.settimeout(30)
    c, _ = s.accept()
    h = hashlib.sha256()
    n = 0
    while True:
        b = c.recv(1 << 20)
        if not b:
            break
        h.update(b)
        n += len(b)
    print(h.hexdigest(), n, flush=True)


def send(addr, port, path):
    fam = socket.AF_INET6 if ":" in addr else socket.AF_INET
    c = socket.create_connection((addr, int(port)), timeout=30) if fam == socket.AF_INET else socket.create_connection((addr, int(port), 0, 0), timeout=30)
    with open(path, "rb") as f:
        c.sendfile(f)
    c.shutdown(socket.SHUT_WR)
    c.recv(1)
    c.close()


if __name__ == "__main__":
    {"serve": serve, "send": send}[sys.argv[1]](*sys.argv[2:])
