"""Lies a VM tells about its addresses, built with scapy, and a receiver
that reports which of them reached it (test_guards.py runs both inside VM
namespaces).

    guard_probe.py lie IFACE KIND COUNT key=value...
        sends COUNT frames of one lie: arp-reply, nd-advert, dhcp-offer,
        dhcpv6-advertise, ra, spoof-udp, dhcp-discover
    guard_probe.py mark IFACE DST_MAC SRC_IP DST_IP TOKEN
        one honest UDP datagram carrying TOKEN (sent after the lies: the
        switch keeps a queue's order, so once it arrives, every lie before
        it has arrived or been dropped)
    guard_probe.py sniff IFACE TOKEN LIAR_MAC
        prints READY once capturing, then, when TOKEN arrives, one JSON
        list of the lies seen from LIAR_MAC (their KIND names)

Commands joined by "+" run in order in one process (scapy loads once: a
guest under TCG takes many seconds to import it).
"""

import json
import sys

from scapy.all import conf, sendp, sniff  # noqa: F401 (conf: quiet)
from scapy.layers.dhcp import BOOTP, DHCP
from scapy.layers.dhcp6 import DHCP6_Advertise
from scapy.layers.inet import IP, UDP
from scapy.layers.inet6 import (ICMPv6ND_NA, ICMPv6ND_RA, ICMPv6NDOptDstLLAddr, ICMPv6NDOptPrefixInfo,
                                ICMPv6NDOptSrcLLAddr, IPv6)
from scapy.layers.l2 import ARP, Ether

conf.verb = 0


def mac_of(iface):
    return open(f"/sys/class/net/{iface}/address").read().strip()


def lie(iface, kind, a):
    me = mac_of(iface)
    dst = a.get("dst_mac", "ff:ff:ff:ff:ff:ff")
    if kind == "arp-reply":
        # "victim's address is at my MAC", to the one who asks for it.
        return Ether(src=me, dst=dst) / ARP(op=2, hwsrc=me, psrc=a["claim"], hwdst=dst, pdst=a["to"])
    if kind == "nd-advert":
        return (Ether(src=me, dst=dst) / IPv6(src=a["src"], dst=a["to"], hlim=255)
                / ICMPv6ND_NA(tgt=a["claim"], R=0, S=0, O=1) / ICMPv6NDOptDstLLAddr(lladdr=me))
    if kind == "dhcp-offer":
        chaddr = bytes.fromhex(a["client_mac"].replace(":", ""))
        return (Ether(src=me, dst="ff:ff:ff:ff:ff:ff") / IP(src=a["src"], dst="255.255.255.255")
                / UDP(sport=67, dport=68)
                / BOOTP(op=2, yiaddr=a["offer"], siaddr=a["src"], chaddr=chaddr, xid=0x1234)
                / DHCP(options=[("message-type", "offer"), ("server_id", a["src"]), ("router", a["src"]),
                                ("lease_time", 3600), "end"]))
    if kind == "dhcpv6-advertise":
        return (Ether(src=me, dst=dst) / IPv6(src=a["src"], dst=a["to"]) / UDP(sport=547, dport=546)
                / DHCP6_Advertise(trid=0x42))
    if kind == "ra":
        return (Ether(src=me, dst="33:33:00:00:00:01") / IPv6(src=a["src"], dst="ff02::1", hlim=255)
                / ICMPv6ND_RA(routerlifetime=1800)
                / ICMPv6NDOptPrefixInfo(prefix=a["prefix"], prefixlen=64, L=1, A=1)
                / ICMPv6NDOptSrcLLAddr(lladdr=me))
    if kind == "spoof-udp":
        return Ether(src=me, dst=dst) / IP(src=a["src"], dst=a["to"]) / UDP(sport=4000, dport=9) / b"spoofed"
    if kind == "dhcp-discover":
        return (Ether(src=me, dst="ff:ff:ff:ff:ff:ff") / IP(src="0.0.0.0", dst="255.255.255.255")
                / UDP(sport=68, dport=67)
                / BOOTP(op=1, chaddr=bytes.fromhex(me.replace(":", "")), xid=0x99)
                / DHCP(options=[("message-type", "discover"), "end"]))
    raise SystemExit(f"no lie named {kind}")


def seen(p):
    """The lie a captured frame is, if it is one."""
    if ARP in p and p[ARP].op == 2:
        return "arp-reply"
    if ICMPv6ND_NA in p:
        return "nd-advert"
    if ICMPv6ND_RA in p:
        return "ra"
    if UDP in p and p[UDP].sport == 67:
        return "dhcp-offer"
    if UDP in p and p[UDP].sport == 547:
        return "dhcpv6-advertise"
    if UDP in p and p[UDP].sport == 68:
        return "dhcp-discover"
    if UDP in p and bytes(p[UDP].payload) == b"spoofed":
        return "spoof-udp"
    return None


def main():
    args = sys.argv[1:]
    while "+" in args:
        i = args.index("+")
        run(args[:i])
        args = args[i + 1:]
    run(args)


def run(argv):
    if len(argv) < 2:
        raise SystemExit(__doc__)
    cmd, iface = argv[0], argv[1]
    if cmd == "lie":
        kind, count = argv[2], int(argv[3])
        a = dict(kv.split("=", 1) for kv in argv[4:])
        sendp(lie(iface, kind, a), iface=iface, count=count)
    elif cmd == "mark":
        dst_mac, src, dst, token = argv[2:6]
        sendp(Ether(src=mac_of(iface), dst=dst_mac) / IP(src=src, dst=dst) / UDP(sport=4001, dport=9)
              / token.encode(), iface=iface)
    elif cmd == "sniff":
        token, liar = argv[2].encode(), argv[3].lower()
        got = []

        def stop(p):
            k = seen(p) if Ether in p and p[Ether].src.lower() == liar else None
            if k:
                got.append(k)
            return UDP in p and bytes(p[UDP].payload) == token

        sniff(iface=iface, stop_filter=stop, timeout=600, store=False,
              started_callback=lambda: print("READY", flush=True))
        print(json.dumps(got), flush=True)
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main()
