"""A file over TCP, for the switch tests: `xfer.py serve ADDR PORT` prints
the SHA-256 of what one client sent; `xfer.py send ADDR PORT FILE` sends it;
`xfer.py paced ADDR PORT FILE RATE` sends it at RATE bytes a second,
connecting again until the receiver listens (for up to 5 minutes)."""

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


def paced(addr, port, path, rate):
    import time

    end = time.monotonic() + 300
    while True:
        try:
            c = socket.create_connection((addr, int(port)), timeout=5)
            break
        except OSError:
            if time.monotonic() > end:
                raise
            time.sleep(0.2)
    c.settimeout(120)
    chunk, start, sent = 16 << 10, time.monotonic(), 0
    with open(path, "rb") as f:
        while b := f.read(chunk):
            c.sendall(b)
            sent += len(b)
            ahead = sent / float(rate) - (time.monotonic() - start)
            if ahead > 0:
                time.sleep(ahead)
    c.shutdown(socket.SHUT_WR)
    c.recv(1)
    c.close()


if __name__ == "__main__":
    {"serve": serve, "send": send, "paced": paced}[sys.argv[1]](*sys.argv[2:])
