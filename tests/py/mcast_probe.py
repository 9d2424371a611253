"""Multicast probes for the snooping test, run inside a namespace VM.

  recv GROUP PORT COUNT   joins GROUP on eth0 through the kernel (its own
                          IGMP or MLD report), prints "joined", then "got N"
                          once COUNT datagrams came; holds the membership
                          until stdin closes (then the kernel leaves)
  send GROUP PORT COUNT   COUNT datagrams to GROUP out of eth0
  sniff TOKEN MAC...      prints "ready", counts the frames to any of the
                          MACs until a frame holding TOKEN comes, prints
                          the count
  mark IP PORT TOKEN      one UDP datagram holding TOKEN to IP
  igmp-query              an IGMPv2 general query, answers due within 1 s
  igmp-bad                an IGMPv2 report of 239.3.3.3 with its checksum wrong
  igmp-flood N            IGMPv3 reports joining N groups (239.4.x.y), 150 a report
"""

import ipaddress
import socket
import struct
import sys

ETH_P_ALL = 3


def ifindex():
    return socket.if_nametoindex("eth0")


def local_v4():
    import fcntl

    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    req = struct.pack("256s", b"eth0")
    return socket.inet_ntoa(fcntl.ioctl(s.fileno(), 0x8915, req)[20:24])  # SIOCGIFADDR


def group_socket(group, port, join):
    v6 = ipaddress.ip_address(group).version == 6
    s = socket.socket(socket.AF_INET6 if v6 else socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if v6:
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_MULTICAST_IF, ifindex())
        if join:
            s.bind(("::", port))
            mreq = socket.inet_pton(socket.AF_INET6, group) + struct.pack("@I", ifindex())
            s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_JOIN_GROUP, mreq)
    else:
        s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton(local_v4()))
        if join:
            s.bind(("0.0.0.0", port))
            mreq = socket.inet_aton(group) + socket.inet_aton("0.0.0.0") + struct.pack("@i", ifindex())
            s.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, mreq)
    return s


def recv(group, port, count):
    s = group_socket(group, int(port), join=True)
    print("joined", flush=True)
    n = 0
    while n < int(count):
        s.recv(2048)
        n += 1
    print(f"got {n}", flush=True)
    sys.stdin.read()
    s.close()


def send(group, port, count):
    s = group_socket(group, int(port), join=False)
    for i in range(int(count)):
        s.sendto(b"%d" % i + b"." * 200, (group, int(port)))


def sniff(token, *macs):
    want = {bytes.fromhex(m.replace(":", "")) for m in macs}
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    s.bind(("eth0", 0))
    print("ready", flush=True)
    n = 0
    tok = token.encode()
    while True:
        f, addr = s.recvfrom(65535)
        if addr[2] == socket.PACKET_OUTGOING:
            continue
        if f[:6] in want:
            n += 1
        if tok in f:
            break
    print(n, flush=True)


def mark(ip, port, token):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.sendto(token.encode(), (ip, int(port)))


def checksum(b):
    if len(b) % 2:
        b += b"\0"
    s = sum(struct.unpack(f"!{len(b) // 2}H", b))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def igmp_socket():
    s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_IGMP)
    s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton(local_v4()))
    return s


def igmp_bad():
    m = struct.pack("!BBH4s", 0x16, 0, 0, socket.inet_aton("239.3.3.3"))
    m = m[:2] + struct.pack("!H", checksum(m) ^ 0x1234) + m[4:]
    igmp_socket().sendto(m, ("239.3.3.3", 0))


def igmp_query():
    m = struct.pack("!BBH4s", 0x11, 10, 0, bytes(4))
    m = m[:2] + struct.pack("!H", checksum(m)) + m[4:]
    igmp_socket().sendto(m, ("224.0.0.1", 0))


def igmp_flood(n):
    s = igmp_socket()
    groups = [f"239.4.{i >> 8}.{i & 255}" for i in range(int(n))]
    for at in range(0, len(groups), 150):
        chunk = groups[at:at + 150]
        recs = b"".join(struct.pack("!BBH4s", 4, 0, 0, socket.inet_aton(g)) for g in chunk)
        m = struct.pack("!BBHHH", 0x22, 0, 0, 0, len(chunk)) + recs
        m = m[:2] + struct.pack("!H", checksum(m)) + m[4:]
        s.sendto(m, ("224.0.0.22", 0))


if __name__ == "__main__":
    {"recv": recv, "send": send, "sniff": sniff, "mark": mark, "igmp-bad": igmp_bad, "igmp-query": igmp_query,
     "igmp-flood": igmp_flood}[sys.argv[1]](*sys.argv[2:])
