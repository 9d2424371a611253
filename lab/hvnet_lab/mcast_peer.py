"""The multicast experiment's programs inside a namespace VM (run as a
script: `python3 mcast_peer.py MODE ...`). Each prints "ready" once set
up, then, for every line it reads on stdin, its counters so far as one
line of JSON; it ends when stdin closes.

  send GROUP PORT MBITS LEN   UDP datagrams of LEN payload bytes to GROUP
                              out of eth0, paced to MBITS Mbit/s of
                              payload (as iperf 2's -u -b): {"sent": N}
  member GROUP PORT           joins GROUP on eth0 (the kernel reports) and
                              reads its datagrams: {"l2": N, "app": M}
  watch GROUP PORT            joins nothing: {"l2": N}

"l2" counts the group's UDP frames to PORT that reached eth0, whether
anything listens or not: a packet socket with a classic BPF filter that
accepts them and is never read, its kernel counters (PACKET_STATISTICS:
frames that passed the filter, queued or dropped) summed, so that
counting costs the VM a filter run per frame and no copy."""

import ctypes
import ipaddress
import json
import socket
import struct
import sys
import threading
import time

ETH_P_ALL, SOL_PACKET, PACKET_STATISTICS, SO_ATTACH_FILTER = 3, 263, 6, 26


def group_mac(group):
    """The Ethernet address an IPv4 group's frames are sent to (01:00:5e
    and the group's low 23 bits)."""
    low = int(ipaddress.IPv4Address(group)) & 0x7FFFFF
    return bytes([0x01, 0x00, 0x5E, low >> 16, (low >> 8) & 0xFF, low & 0xFF])


def bpf_program(group, port):
    """Classic BPF (struct sock_filter's code, jt, jf, k) accepting the
    first 64 bytes of an IPv4 UDP frame to `group`'s MAC and address and
    UDP `port` (an IP header without options), and nothing else."""
    mac = group_mac(group)
    ld_w, ld_h, ld_b, jeq, ret = 0x20, 0x28, 0x30, 0x15, 0x06
    checks = [(ld_w, 0, int.from_bytes(mac[:4], "big")), (ld_h, 4, int.from_bytes(mac[4:], "big")),
              (ld_h, 12, 0x0800), (ld_b, 23, 17), (ld_w, 30, int(ipaddress.IPv4Address(group))),
              (ld_h, 36, int(port))]
    prog = []
    for i, (ld, off, want) in enumerate(checks):
        # On a mismatch, jump to the last instruction (return 0).
        left = 2 * (len(checks) - i - 1)
        prog += [(ld, 0, 0, off), (jeq, 0, left + 1, want)]
    return prog + [(ret, 0, 0, 64), (ret, 0, 0, 0)]


def counting_socket(group, port):
    """A packet socket on eth0 whose filter takes only the group's frames:
    opened for no protocol, filtered, then bound, so that nothing comes
    before the filter."""
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
    prog = b"".join(struct.pack("HBBI", *ins) for ins in bpf_program(group, port))
    arr = ctypes.create_string_buffer(prog)
    buf = struct.pack("HL", len(prog) // 8, ctypes.addressof(arr))
    s.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, buf)
    # A small queue: past it every frame is a drop, counted and not kept.
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.bind(("eth0", ETH_P_ALL))  # (Python puts it in network order)
    return s


class L2Count:
    def __init__(self, group, port):
        self.s = counting_socket(group, port)
        self.n = 0

    def __call__(self):
        # Reading the statistics resets them; tp_packets includes drops.
        packets, _ = struct.unpack("II", self.s.getsockopt(SOL_PACKET, PACKET_STATISTICS, 8))
        self.n += packets
        return self.n


def local_v4():
    import fcntl

    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    return socket.inet_ntoa(fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", b"eth0"))[20:24])  # SIOCGIFADDR


def serve(counters):
    print("ready", flush=True)
    for _ in sys.stdin:
        print(json.dumps({k: f() for k, f in counters.items()}), flush=True)


def send(group, port, mbits, length):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton(local_v4()))
    s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_LOOP, 0)
    length = int(length)
    per_s = float(mbits) * 1e6 / 8 / length
    payload = b"\0" * length
    sent = [0]

    def pace():
        t0 = time.monotonic()
        while True:
            due = int((time.monotonic() - t0) * per_s)
            while sent[0] < due:
                try:
                    s.sendto(payload, (group, int(port)))
                except OSError:
                    pass  # a full queue: that datagram is not sent (nor counted)
                else:
                    sent[0] += 1
                due = int((time.monotonic() - t0) * per_s)
            time.sleep(0.0005)

    threading.Thread(target=pace, daemon=True).start()
    serve({"sent": lambda: sent[0]})


def member(group, port):
    count = L2Count(group, port)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
    s.bind((group, int(port)))
    mreq = socket.inet_aton(group) + socket.inet_aton("0.0.0.0") + struct.pack("@i", socket.if_nametoindex("eth0"))
    s.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, mreq)
    got = [0]

    def drain():
        buf = bytearray(65536)
        while True:
            s.recv_into(buf)
            got[0] += 1

    threading.Thread(target=drain, daemon=True).start()
    serve({"l2": count, "app": lambda: got[0]})


def watch(group, port):
    serve({"l2": L2Count(group, port)})


if __name__ == "__main__":
    {"send": send, "member": member, "watch": watch}[sys.argv[1]](*sys.argv[2:])
