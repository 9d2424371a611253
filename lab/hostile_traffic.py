"""A hostile guest, run inside a VM's namespace: floods its eth0 with
what a misbehaving or malicious guest can send.

    hostile_traffic.py tiny-segments SRC_MAC DST_MAC SRC_IP DST_IP COUNT
        in-order 1-byte TCP segments of one flow, valid checksums (each one
        would be held for coalescing into an LRO receiver)
    hostile_traffic.py random-macs DST_MAC COUNT
        frames from random source MAC addresses (fills the FDB)
    hostile_traffic.py tiny-gso SRC_MAC DST_MAC SRC_IP DST_IP COUNT
        60 KB TSO frames with gso_size 16 (4000 segments each), through a
        packet socket with PACKET_VNET_HDR, so the guest kernel hands them
        to the vNIC as a guest driver would
"""

import os
import socket
import struct
import sys

SOL_PACKET, PACKET_VNET_HDR = 263, 15


def mac(s):
    return bytes.fromhex(s.replace(":", ""))


def csum(data):
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return s


def ipv4(src, dst, payload_len, ident=0):
    h = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + payload_len, ident, 0x4000, 64, 6, 0,
                    socket.inet_aton(src), socket.inet_aton(dst))
    c = 0xFFFF - csum(h)
    return h[:10] + struct.pack("!H", c) + h[12:]


def tcp(src, dst, seq, payload, partial=False):
    hdr = struct.pack("!HHIIBBHHH", 40000, 9, seq, 1, 5 << 4, 0x10, 65535, 0, 0)
    pseudo = socket.inet_aton(src) + socket.inet_aton(dst) + struct.pack("!BBH", 0, 6, len(hdr) + len(payload))
    if partial:
        c = csum(pseudo)  # the pseudo-header sum, as NEEDS_CSUM wants it
    else:
        c = 0xFFFF - csum(pseudo + hdr + payload)
    return hdr[:16] + struct.pack("!H", c) + hdr[18:] + payload


def open_socket(vnet=False):
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
    if vnet:
        s.setsockopt(SOL_PACKET, PACKET_VNET_HDR, 1)
    s.bind(("eth0", 0))
    return s


def tiny_segments(smac, dmac, sip, dip, count):
    s = open_socket()
    eth = mac(dmac) + mac(smac) + b"\x08\x00"
    for i in range(int(count)):
        t = tcp(sip, dip, 1000 + i, b"x")
        s.send(eth + ipv4(sip, dip, len(t), ident=i & 0xFFFF) + t)


def random_macs(dmac, count):
    s = open_socket()
    for _ in range(int(count)):
        src = bytearray(os.urandom(6))
        src[0] = (src[0] & 0xFE) | 0x02  # unicast, locally administered
        s.send(mac(dmac) + bytes(src) + b"\x88\xb5" + b"hostile".ljust(46, b"\0"))


def tiny_gso(smac, dmac, sip, dip, count):
    s = open_socket(vnet=True)
    payload = b"g" * 60000
    t = tcp(sip, dip, 5000, payload, partial=True)
    frame = mac(dmac) + mac(smac) + b"\x08\x00" + ipv4(sip, dip, len(t)) + t
    # struct virtio_net_hdr: NEEDS_CSUM, TCPV4, hdr_len 54, gso_size 16,
    # csum_start 34, csum_offset 16.
    vnet = struct.pack("<BBHHHH", 1, 1, 54, 16, 34, 16)
    sent = 0
    for _ in range(int(count)):
        try:
            s.send(vnet + frame)
            sent += 1
        except OSError:
            pass
    print(sent)


if __name__ == "__main__":
    {"tiny-segments": tiny_segments, "random-macs": random_macs, "tiny-gso": tiny_gso}[sys.argv[1]](*sys.argv[2:])
