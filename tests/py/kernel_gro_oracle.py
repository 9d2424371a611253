"""Runs frames through this machine's kernel GRO and records what it
delivers: the oracle for hvnet's GRO engine.

Run inside a network namespace holding a veth pair TX <-> RX:

    kernel_gro_oracle.py TX RX IN.pcap OUT.pcap

Frames from IN.pcap are sent on TX in one burst from an AF_PACKET socket;
the veth peer runs GRO on them (TSO is off on TX, GRO on RX, and
gro_flush_timeout keeps runs open between frames); an AF_PACKET socket on
RX reads what the kernel delivered, after GRO, into OUT.pcap.
"""

import socket
import sys
import time

from scapy.utils import RawPcapReader, wrpcap
from scapy.layers.l2 import Ether

PACKET_OUTGOING = 4
ETH_P_ALL = 3


def main():
    tx_if, rx_if, inp, out = sys.argv[1:5]
    frames = [bytes(data) for data, _meta in RawPcapReader(inp)]
    tx = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
    tx.bind((tx_if, 0))
    rx = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    rx.bind((rx_if, 0))
    rx.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 20)
    rx.settimeout(0.05)
    # Drain anything already queued.
    try:
        while True:
            rx.recv(1 << 17)
    except socket.timeout:
        pass
    # Start right after a clock tick so that the burst fits in one jiffy.
    t0 = time.monotonic_ns()
    while time.monotonic_ns() // 4_000_000 == t0 // 4_000_000:
        pass
    for f in frames:
        tx.send(f)
    got = []
    deadline = time.monotonic() + 1.0
    rx.settimeout(0.1)
    while time.monotonic() < deadline:
        try:
            data, addr = rx.recvfrom(1 << 17)
        except socket.timeout:
            break
        if addr[2] != PACKET_OUTGOING:
            got.append(Ether(data))
    wrpcap(out, got, linktype=1)


if __name__ == "__main__":
    main()
