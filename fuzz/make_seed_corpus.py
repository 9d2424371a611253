#!/usr/bin/env python3
"""Seeds the fuzz corpora with real frames: a capture of iperf3 traffic
between two namespaces on this machine, its GRO output, and VXLAN-wrapped
copies. Run as root from the repository root after `cargo build --release`,
with the lab's and the system tests' helpers on the path:

    PYTHONPATH=lab:tests/py python3 fuzz/make_seed_corpus.py
"""

import hashlib
import struct
import subprocess
import tempfile
from pathlib import Path

import capture_lab
import hvlab
from scapy.utils import RawPcapReader

CORPUS = Path(__file__).resolve().parent / "corpus"


def frames(path):
    return [bytes(d) for d, _ in RawPcapReader(str(path))]


def put(target, data):
    d = CORPUS / target
    d.mkdir(parents=True, exist_ok=True)
    (d / hashlib.sha1(data).hexdigest()[:16]).write_bytes(data)


def main():
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        cap = capture_lab.capture_iperf(tmp / "cap.pcap", nbytes="512K")
        gro = tmp / "gro.pcap"
        hvlab.hvnet("pcap", "gro", cap, gro)
        vx = tmp / "vx.pcap"
        hvlab.hvnet("pcap", "vxlan", "encap", cap, vx, "--vni", 7, "--udp-csum")
        wire = frames(cap)
        big = [f for f in frames(gro) if len(f) > 3000]
        vxf = frames(vx)
    picks = wire[:6] + wire[len(wire) // 2 : len(wire) // 2 + 4] + wire[-4:]
    for f in picks + vxf[:4]:
        put("wire_layers", f)
        put("rss_vxlan", f)
    for f in big[:3]:
        # A TCPv4 GSO frame as a guest sends it: NEEDS_CSUM at the TCP
        # checksum, gso_size 1448.
        tcp_off = 14 + (f[14] & 0xF) * 4
        hdr_len = tcp_off + (f[tcp_off + 12] >> 4) * 4
        vnet = struct.pack("<BBHHHHH", 1, 1, hdr_len, 1448, tcp_off, 16, 1)
        put("vnet_hdr", vnet + f)
        put("gso_segment", bytes([0]) + struct.pack("<H", 1448) + f)
        put("gso_segment", bytes([0]) + struct.pack("<H", 536) + f)
    for f in picks[:4]:
        put("vnet_hdr", bytes(12) + f)
    # GRO call sequences: a run of consecutive data segments, then flushes.
    data = [f for f in wire if len(f) > 1000][:12]
    for n in (2, 6, 12):
        seq = b"".join(b"\x00" + struct.pack("<H", len(f)) + f for f in data[:n]) + b"\x06\x03"
        put("gro_table", seq)
    # Switch sequences: guests send runs of real data segments (MACs set to
    # the ports', op bit 0x10) and GSO frames, with steps and a settings
    # change between them.
    vnet_frames = [bytes(12) + f for f in data] + [
        struct.pack("<BBHHHHH", 1, 1, 54, 1448, 34, 16, 1) + f for f in big[:2]
    ]
    # The second byte picks each port's backend (bit set: a replay port).
    for shape, kinds, n in ((0x00, 0x00, 4), (0x1F, 0x05, 8), (0xA5, 0x07, 14)):
        ops = bytes([shape, kinds])
        for i, vf in enumerate(vnet_frames[:n]):
            ops += bytes([0x10, i % 3]) + struct.pack("<H", len(vf)) + vf
            if i % 4 == 3:
                ops += b"\x05"
        ops += b"\x07\x31" + b"\x05"
        put("switch_ops", ops)
    # Ports added (0x17 and a settings byte), removed (0x37, 0x77) and
    # queues moved (0x1f, 0x3f) between frames, before steps.
    ops = bytes([0x00, 0x00])
    for i, vf in enumerate(vnet_frames[:8]):
        ops += bytes([0x10, i % 3]) + struct.pack("<H", len(vf)) + vf
        ops += [b"\x17\x00", b"\x1f", b"\x05", b"\x37", b"\x17\x31", b"\x3f", b"\x77", b"\x06"][i]
    put("switch_ops", ops + b"\x05")
    put("switch_ops", routed_ops())
    print("corpus:", {d.name: len(list(d.iterdir())) for d in CORPUS.iterdir()})


def ip_checksum(b):
    s = sum(struct.unpack(f"!{len(b) // 2}H", b))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return (~s) & 0xFFFF


def routed_ops():
    """A switch sequence through a tenant's gateway (second byte's top
    bit): port 0 in VLAN 1, port 1 in VLAN 2; ARP for the gateway, a ping
    routed to a neighbour not yet known (the gateway asks), the
    neighbour's ARP reply to the gateway, the ping again (routed), one
    with TTL 1 (time exceeded). Made by hand: no capture needed."""
    gw = bytes([2, 0x68, 0x76, 0, 0, 1])
    p0, p1 = bytes([2, 0, 0, 0, 0, 1]), bytes([2, 0, 0, 0, 0, 2])
    a, b = bytes([198, 19, 1, 5]), bytes([198, 19, 2, 7])

    def arp(op, smac, sip, tmac, tip, dst):
        return dst + smac + b"\x08\x06" + struct.pack("!HHBBH", 1, 0x0800, 6, 4, op) + smac + sip + tmac + tip

    def ping(ttl):
        icmp = struct.pack("!BBHHH", 8, 0, 0, 1, 1) + b"hvnet"
        icmp = icmp[:2] + struct.pack("!H", ip_checksum(icmp + b"\x00")) + icmp[4:]
        ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(icmp), 1, 0x4000, ttl, 1, 0, a, b)
        ip = ip[:10] + struct.pack("!H", ip_checksum(ip)) + ip[12:]
        return gw + p0 + b"\x08\x00" + ip + icmp

    frames = [
        (0x00, 0, arp(1, p0, a, bytes(6), bytes([198, 19, 1, 254]), b"\xff" * 6)),
        (0x08, 0, ping(64)),
        (0x08, 1, arp(2, p1, b, gw, bytes([198, 19, 2, 254]), gw)),
        (0x08, 0, ping(64)),
        (0x08, 0, ping(1)),
    ]
    ops = bytes([0x08, 0x83])
    for op, port, f in frames:
        vf = bytes(12) + f
        ops += bytes([op, port]) + struct.pack("<H", len(vf)) + vf + b"\x05"
    return ops


if __name__ == "__main__":
    main()
