"""Sends and receives 802.1Q-tagged Ethernet frames on an interface with
AF_PACKET raw sockets (no 8021q module, no VLAN device needed), run inside
a VM's namespace by test_trunk.py.

    vlan_probe.py send IFACE DST_MAC VLAN|- TOKEN LABEL...
        one frame per LABEL, EtherType 0x88b5 (local experimental), tagged
        with VLAN (or untagged for "-"), payload "TOKEN:LABEL"
    vlan_probe.py recv IFACE TOKEN
        prints "ready" once bound, then collects the frames whose payload
        starts with "TOKEN:" until one says "TOKEN:end", and prints them as
        one JSON list of {"label", "vlan"} (vlan null when untagged)

The kernel takes a received frame's VLAN tag off the frame into the
packet's metadata (skb_vlan_untag, whether or not 8021q is loaded), so the
receiver reads it back from PACKET_AUXDATA (tp_vlan_tci with
TP_STATUS_VLAN_VALID); a tag still in the frame is read from the frame.
"""

import json
import socket
import struct
import sys

ETH_P_ALL = 0x0003
EXPERIMENTAL = 0x88B5
SOL_PACKET = 263
PACKET_AUXDATA = 8
TP_STATUS_VLAN_VALID = 1 << 4
PACKET_OUTGOING = 4


def send(iface, dst, vlan, token, labels):
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
    s.bind((iface, 0))
    src = bytes.fromhex(open(f"/sys/class/net/{iface}/address").read().strip().replace(":", ""))
    tag = b"" if vlan == "-" else struct.pack("!HH", 0x8100, int(vlan))
    for label in labels:
        payload = f"{token}:{label}".encode().ljust(46, b"\0")
        s.send(bytes.fromhex(dst.replace(":", "")) + src + tag + struct.pack("!H", EXPERIMENTAL) + payload)


def recv(iface, token):
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    s.setsockopt(SOL_PACKET, PACKET_AUXDATA, 1)
    s.bind((iface, 0))
    # Nothing arriving at all is a failure the test sees, not a hang.
    s.settimeout(60)
    print("ready", flush=True)
    prefix = f"{token}:".encode()
    got = []
    while True:
        data, anc, _, addr = s.recvmsg(65536, socket.CMSG_SPACE(32))
        if addr[2] == PACKET_OUTGOING:
            continue
        vlan = None
        for level, kind, cdata in anc:
            if level == SOL_PACKET and kind == PACKET_AUXDATA:
                status, _, _, _, _, tci, _ = struct.unpack("IIIHHHH", cdata[:20])
                if status & TP_STATUS_VLAN_VALID:
                    vlan = tci & 0x0FFF
        ethertype, at = struct.unpack("!H", data[12:14])[0], 14
        if ethertype == 0x8100 and vlan is None:
            vlan = struct.unpack("!H", data[14:16])[0] & 0x0FFF
            ethertype, at = struct.unpack("!H", data[16:18])[0], 18
        if ethertype != EXPERIMENTAL or not data[at:].startswith(prefix):
            continue
        label = data[at + len(prefix) :].rstrip(b"\0").decode()
        if label == "end":
            break
        got.append({"label": label, "vlan": vlan})
    print(json.dumps(got), flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "send":
        send(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6:])
    else:
        recv(sys.argv[2], sys.argv[3])
