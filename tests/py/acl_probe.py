"""Real sockets for the security group tests, run inside a VM's namespace:

    acl_probe.py serve-tcp IP PORT      echo every line back, to any number of clients
    acl_probe.py connect IP PORT        one connection, one line echoed: prints ok, timeout or refused
    acl_probe.py udp-echo IP PORT       answer every datagram
    acl_probe.py udp-ask IP PORT        one datagram on a connected socket: prints reply, refused
                                        (an ICMP port unreachable came back) or timeout
    acl_probe.py stream IP PORT FILE    one connection, a line echoed every 20 ms, the count
                                        written to FILE; prints stalled when an echo does not
                                        come within 3 s, or closed/refused
    acl_probe.py connect-back IP PORT LPORT
                                        FTP's active mode: listen on LPORT, ask the server
                                        (serve-tcp) on PORT to connect back to it; prints
                                        data-ok or data-timeout
    acl_probe.py spoof IP PORT SPORT    one TCP segment (ACK, 100 bytes) from this host's
                                        SPORT to IP:PORT with a sequence number far from any
                                        window (a raw socket; IPv4): prints sent
"""

import socket
import sys
import threading
import time


def family(ip):
    return socket.AF_INET6 if ":" in ip else socket.AF_INET


def serve_tcp(ip, port):
    s = socket.socket(family(ip), socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((ip, port))
    s.listen(64)

    def echo(c):
        f = c.makefile("rwb", buffering=0)
        for line in f:
            if line.startswith(b"PORT "):
                # Connect back to the client (FTP's active data connection).
                peer = c.getpeername()[0]
                try:
                    d = socket.create_connection((peer, int(line.split()[1])), timeout=3)
                    d.sendall(b"data\n")
                    d.close()
                except OSError:
                    pass
            f.write(line)
        c.close()

    while True:
        c, _ = s.accept()
        threading.Thread(target=echo, args=(c,), daemon=True).start()


def connect(ip, port):
    try:
        c = socket.create_connection((ip, port), timeout=3)
        c.sendall(b"hello\n")
        got = c.makefile("rb").readline()
        print("ok" if got == b"hello\n" else f"bad {got!r}")
    except socket.timeout:
        print("timeout")
    except ConnectionRefusedError:
        print("refused")


def udp_echo(ip, port):
    s = socket.socket(family(ip), socket.SOCK_DGRAM)
    s.bind((ip, port))
    while True:
        data, peer = s.recvfrom(2048)
        s.sendto(data, peer)


def udp_ask(ip, port):
    s = socket.socket(family(ip), socket.SOCK_DGRAM)
    s.settimeout(3)
    s.connect((ip, port))
    s.send(b"question")
    try:
        s.recv(2048)
        print("reply")
    except ConnectionRefusedError:
        print("refused")
    except socket.timeout:
        print("timeout")


def stream(ip, port, path):
    c = socket.create_connection((ip, port), timeout=3)
    f = c.makefile("rb")
    n = 0
    while True:
        try:
            c.sendall(b"tick\n")
            if f.readline() != b"tick\n":
                print("closed")
                return
        except socket.timeout:
            print("stalled")
            return
        except OSError:
            print("refused")
            return
        n += 1
        with open(path + ".tmp", "w") as out:
            out.write(str(n))
        import os

        os.replace(path + ".tmp", path)
        time.sleep(0.02)


def connect_back(ip, port, lport):
    lst = socket.socket(family(ip), socket.SOCK_STREAM)
    lst.bind(("", lport))
    lst.listen(1)
    lst.settimeout(6)
    c = socket.create_connection((ip, port), timeout=3)
    c.sendall(f"PORT {lport}\n".encode())
    try:
        d, _ = lst.accept()
        d.settimeout(3)
        print("data-ok" if d.makefile("rb").readline() == b"data\n" else "data-bad")
    except socket.timeout:
        print("data-timeout")


def spoof(ip, port, sport):
    import struct

    src = socket.inet_aton(sock_addr_towards(ip))
    dst = socket.inet_aton(ip)
    payload = b"x" * 100
    seq, ack = 0x5A5A5A5A, 0x12345678

    def tcp(csum):
        return struct.pack("!HHIIBBHHH", sport, port, seq, ack, 5 << 4, 0x18, 502, csum, 0) + payload

    seg = tcp(0)
    pseudo = src + dst + struct.pack("!BBH", 0, socket.IPPROTO_TCP, len(seg))
    data = pseudo + seg + b"\0" * (len(seg) % 2)
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_TCP)
    s.sendto(tcp(~total & 0xFFFF), (ip, 0))
    print("sent")


def sock_addr_towards(ip):
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    u.connect((ip, 9))
    return u.getsockname()[0]


def main():
    cmd, ip, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if cmd == "serve-tcp":
        serve_tcp(ip, port)
    elif cmd == "connect":
        connect(ip, port)
    elif cmd == "udp-echo":
        udp_echo(ip, port)
    elif cmd == "udp-ask":
        udp_ask(ip, port)
    elif cmd == "stream":
        stream(ip, port, sys.argv[4])
    elif cmd == "connect-back":
        connect_back(ip, port, int(sys.argv[4]))
    elif cmd == "spoof":
        spoof(ip, port, int(sys.argv[4]))
    else:
        sys.exit(f"unknown command {cmd}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
