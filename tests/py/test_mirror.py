"""Port mirrors against real receivers: SPAN to a namespace VM running
tcpdump, added and removed at run time; RSPAN to a VLAN, received tagged
by a host on a trunk uplink; ERSPAN type II and III read by tshark's
ERSPAN dissector in another namespace (this kernel has no GRE device, so
its own `erspan` cannot receive them). The original frames arrive as
before, byte-exact, while copies are made."""

import json
import os
import re
import subprocess

import pytest

import hvlab
from hvnet_lab.fabrics import OvsDaemons
from test_capture import Tcpdump, frames, icmp_type
from test_switch_e2e import transfer

pytestmark = pytest.mark.root

A, B, MON = "198.18.47.1", "198.18.47.2", "198.18.47.9"


def mirrors(t):
    return {m["name"]: m for m in json.loads(t.hv("mirror", "--json").stdout)}


def ovs_erspan_receiver(ovs, wire):
    """Open vSwitch userspace on the collector: the underlay address on a
    netdev bridge over `wire`, and on another an ERSPAN type II port for
    session 5 and a type III port for session 6, each with flows that
    count (and drop) what it brings in."""
    ovs.start()
    ovs.sh(f"ip addr flush dev {wire} && ip link set {wire} up")
    ovs.vsctl("add-br", "br-phy", "--", "set", "bridge", "br-phy", "datapath_type=netdev")
    ovs.vsctl("add-port", "br-phy", wire)
    ovs.sh("ip addr add 198.18.49.2/24 dev br-phy && ip link set br-phy up")
    ovs.vsctl("add-br", "br-mon", "--", "set", "bridge", "br-mon", "datapath_type=netdev")
    for name, ver, key in (("er2", 1, 5), ("er3", 2, 6)):
        ovs.vsctl("add-port", "br-mon", name, "--", "set", "interface", name, "type=erspan",
                  "options:remote_ip=198.18.49.1", f"options:key={key}", f"options:erspan_ver={ver}")
        # The echo requests and replies mirrored (b's ARP and IPv6
        # chatter may be mirrored too; the lower flow takes those).
        ovs.run("ovs-ofctl", "add-flow", "br-mon", f"priority=100,in_port={name},icmp,actions=drop")
        ovs.run("ovs-ofctl", "add-flow", "br-mon", f"priority=50,in_port={name},actions=drop")


def ovs_received(ovs):
    """ICMP frames each ERSPAN port brought in (its flow's n_packets)."""
    got = {}
    for name in ("er2", "er3"):
        out = ovs.run("ovs-ofctl", "dump-flows", "br-mon", f"in_port={name},icmp").stdout
        got[name] = sum(int(n) for n in re.findall(r"n_packets=(\d+)", out))
    return got


def test_span_to_a_monitor_vm_added_and_removed_at_run_time(tmp_path):
    """A mirror of what a sends and receives, to `mon`: mon's tcpdump sees
    each echo request and reply once, the requests byte for byte as b's
    kernel got them; mon's own frames go nowhere while it is the mirror's
    output; a 16 MiB transfer a -> b arrives intact meanwhile. A mirror to
    itself is refused with its line, and the one running stays; removed,
    mon is a VM like the others again."""
    vms = [dict(name="a", ipv4=A + "/24"), dict(name="b", ipv4=B + "/24"), dict(name="mon", ipv4=MON + "/24")]
    with hvlab.Topology(tmp_path, vms, prefix="ms") as t:
        t.sh("a", f"ping -c 1 -W 5 {B}")
        span = dict(name="span-a", select_src_port=["a"], select_dst_port=["a"], output_port="mon")
        r = t.apply(check=False, mirror=[span])
        assert r.returncode == 0, r.stderr
        assert "; mirrors changed" in r.stdout, r.stdout
        assert mirrors(t)["span-a"]["output"] == {"port": "mon"}

        at_mon = Tcpdump(t, "mon", tmp_path / "mon.pcap", "icmp")
        at_b = Tcpdump(t, "b", tmp_path / "b.pcap", "icmp")
        t.sh("a", f"ping -c 3 -i 0.2 -W 5 {B}")
        for d in (at_mon, at_b):
            d.stop()
        seen = frames(tmp_path / "mon.pcap")
        assert [icmp_type(f) for f in seen] == [8, 0] * 3, seen
        assert [f for f in seen if icmp_type(f) == 8] == [f for f in frames(tmp_path / "b.pcap") if icmp_type(f) == 8]
        m = mirrors(t)["span-a"]
        assert m["copies"] >= 6 and m["lost"] == 0, m

        # The output port is the mirror's: what mon sends is dropped.
        assert t.sh("mon", f"ping -c 1 -W 1 {B}", check=False).returncode != 0
        assert t.stats("/ports/mon/tx_summary")["drop_mirror_port"] > 0

        data = tmp_path / "data.bin"
        data.write_bytes(os.urandom(16 << 20))
        import hashlib
        assert transfer(t, "a", "b", B, data) == (hashlib.sha256(data.read_bytes()).hexdigest(), 16 << 20)
        assert mirrors(t)["span-a"]["bytes"] > 16 << 20

        # A mirror that selects its own output: refused by line, nothing changed.
        bad = dict(span, name="loop", select_src_port=["mon"])
        r = t.apply(check=False, mirror=[span, bad])
        assert r.returncode != 0 and ".toml:" in r.stderr and "to itself" in r.stderr, r.stderr
        assert list(mirrors(t)) == ["span-a"]

        r = t.apply(check=False, mirror=[])
        assert r.returncode == 0, r.stderr
        assert mirrors(t) == {}
        t.sh("mon", f"ping -c 1 -W 5 {B}")


def test_rspan_to_a_vlan_on_the_wire_and_erspan_to_tshark(tmp_path):
    """RSPAN: what a sends, tagged with VLAN 999, out of a trunk uplink to
    the host on the wire (its tcpdump reads the tag and the frame a sent).
    ERSPAN: what is sent to b (type II, session 5) and what b sends (type
    III, session 6) over GRE to a collector namespace, where tshark's
    dissector reads the session, the direction and the inner frames; then
    Open vSwitch userspace's ERSPAN ports (type II and III) receive them."""
    coll = hvlab.Netns("mc")
    with coll:
        host_end, coll_end = hvlab.unique("hme"), "eth0"
        hvlab.run(["ip", "link", "add", host_end, "type", "veth", "peer", "name", coll_end, "netns", coll.name])
        try:
            hvlab.run(f"ip addr add 198.18.49.1/24 dev {host_end} && ip link set {host_end} up")
            coll.sh(f"ip addr add 198.18.49.2/24 dev {coll_end} && ip link set {coll_end} up")
            vms = [dict(name="a", ipv4=A + "/24"), dict(name="b", ipv4=B + "/24")]
            with hvlab.Topology(tmp_path, vms, prefix="mr",
                                uplinks=[dict(name="up0", device="", vlan_mode="trunk", vlans=[999])],
                                hosts=[dict(name="ext", uplink="up0", ipv4="198.18.48.100/24")]) as t:
                t.sh("a", f"ping -c 1 -W 5 {B}")
                r = t.apply(check=False, mirror=[
                    dict(name="rspan", select_src_port=["a"], output_vlan=999),
                    dict(name="er2", select_dst_port=["b"], erspan=dict(remote="198.18.49.2", type=2, session=5)),
                    dict(name="er3", select_src_port=["b"], erspan=dict(remote="198.18.49.2", type=3, session=6)),
                ])
                assert r.returncode == 0, r.stderr
                wire = Tcpdump(t, "ext", tmp_path / "wire.pcap", "vlan 999 and icmp")
                gre = coll.popen(f"tcpdump -i {coll_end} --immediate-mode -U -w {tmp_path}/gre.pcap ip proto 47",
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                hvlab.wait_for_line(gre.stderr, "listening on")
                t.sh("a", f"ping -c 3 -i 0.2 -W 5 {B}")
                wire.stop()
                hvlab.eventually(lambda: mirrors(t)["er3"]["copies"] >= 3)
                gre.send_signal(2)
                gre.wait(timeout=30)

                # RSPAN: a's frames, tagged 999 on the wire, inner bytes as sent.
                tagged = frames(tmp_path / "wire.pcap")
                assert len(tagged) == 3, tagged
                for f in tagged:
                    assert f[12:14] == b"\x81\x00" and int.from_bytes(f[14:16], "big") & 0xfff == 999
                    assert icmp_type(f[:12] + f[16:]) == 8

                out = hvlab.run(["tshark", "-r", f"{tmp_path}/gre.pcap", "-T", "fields", "-E", "separator=|",
                                 "-e", "erspan.version", "-e", "erspan.spanid", "-e", "erspan.direction",
                                 "-e", "icmp.type"]).stdout
                rows = [line.split("|") for line in out.splitlines()]
                type2 = [r for r in rows if r[1] == "5"]
                type3 = [r for r in rows if r[1] == "6"]
                # Version 1 is type II, 2 is type III; type III says the
                # direction (0: as it came in from b).
                assert len(type2) == 3 and {(r[0], r[3]) for r in type2} == {("1", "8")}, rows
                assert len(type3) == 3 and {(r[0], r[3]) for r in type3} == {("2", "0")}, rows
                assert {r[2] for r in type3} <= {"0", "False"}, rows
                assert mirrors(t)["er2"]["lost"] == 0

                # Open vSwitch userspace's ERSPAN ports take the same
                # sessions in: a flow on each counts what arrived.
                ovs = OvsDaemons(coll.name)
                try:
                    ovs_erspan_receiver(ovs, coll_end)
                    # The collector's address moved to Open vSwitch's
                    # bridge: this host resolves it again before sending.
                    hvlab.run(["ip", "neigh", "flush", "dev", host_end])
                    hvlab.run(["ping", "-c", "1", "-W", "5", "198.18.49.2"])
                    t.sh("a", f"ping -c 3 -i 0.2 -W 5 {B}")
                    got = hvlab.eventually(lambda: ovs_received(ovs) == {"er2": 3, "er3": 3}, timeout=10)
                    assert got, ovs_received(ovs)
                finally:
                    ovs.stop()
        finally:
            hvlab.run(["ip", "link", "del", host_end], check=False)
