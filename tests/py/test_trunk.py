"""802.1Q trunk ports end to end: namespace VMs (TAP) sending and
receiving tagged frames with AF_PACKET raw sockets (vlan_probe.py; this
kernel has no 8021q module), through hvnet's trunk and access ports, checked
from the receivers' side and against hvnet's counters and views.

Every VM has one queue, so that the frames one VM sends are switched and
delivered in the order it sent them: each round ends with an "end" frame
from the same sender, and a receiver that got it has got everything sent
before it (what it did not get was not delivered, not late)."""

import json
import os
import subprocess
import uuid
from pathlib import Path

import pytest

import hvlab
import helpers

pytestmark = pytest.mark.root

PROBE = Path(__file__).with_name("vlan_probe.py")
BCAST = "ff:ff:ff:ff:ff:ff"


def vm(name, ip, **kw):
    return helpers.vm(name, f"198.18.70.{ip}", queues=1, **kw)


# t1: a trunk of 10, 20 and 100-199, native VLAN 5; t2: a trunk of every
# VLAN, no native VLAN; a10, a5: access ports of VLANs 10 and 5.
VMS = [
    vm("t1", 1, vlan_mode="trunk", vlans=[10, 20, "100-199"], native_vlan=5),
    vm("t2", 2, vlan_mode="trunk"),
    vm("a10", 3, vlan=10),
    vm("a5", 4, vlan=5),
]


class Trunks:
    """The topology, with its VMs quiet (no IPv6 of their own, so that
    every frame the ports count is one the test sent)."""

    def __init__(self, t, names=None):
        self.t = t
        for v in names or [v["name"] for v in VMS]:
            t.sh(v, "sysctl -qw net.ipv6.conf.all.disable_ipv6=1")
        self.macs = {p["client"]: p["mac"] for p in json.loads(t.hv("ports", "--json").stdout)}

    def probe(self, receivers, sends):
        """Starts a receiver in each VM of `receivers`, then runs `sends`,
        each `(vm, dst, vlan, labels)` (`vlan` None: untagged; `dst` a VM's
        name or a MAC), in order. Returns what each receiver got before its
        "end": {vm: [(label, vlan)]}."""
        token = uuid.uuid4().hex[:8]
        procs = {}
        for r in receivers:
            p = self.t.popen(r, f"{os.sys.executable} {PROBE} recv eth0 {token}", stdout=subprocess.PIPE, text=True)
            procs[r] = p
            assert p.stdout.readline().strip() == "ready", r
        for sender, dst, vlan, labels in sends:
            dst = self.macs.get(dst, dst)
            tag = "-" if vlan is None else str(vlan)
            self.t.sh(sender, f"{os.sys.executable} {PROBE} send eth0 {dst} {tag} {token} {' '.join(labels)}")
        got = {}
        for r, p in procs.items():
            out, _ = p.communicate(timeout=90)
            assert p.returncode == 0, (r, out)
            got[r] = [(f["label"], f["vlan"]) for f in json.loads(out.strip().splitlines()[-1])]
        return got

    def drops(self, v):
        return self.t.stats(f"/ports/{v}/tx_summary")["drop_vlan_not_allowed"]


def test_tags_between_trunks_and_access_ports_and_the_native_vlan(tmp_path):
    with hvlab.Topology(tmp_path, VMS, prefix="tr") as t:
        n = Trunks(t)
        # From trunk t1: VLAN 10 tagged, and untagged (its native VLAN 5).
        got = n.probe(
            ["t2", "a10", "a5"],
            [
                ("t1", BCAST, 10, ["b10"]),
                ("t1", BCAST, None, ["n5"]),
                ("t1", BCAST, 10, ["end"]),
                ("t1", BCAST, None, ["end"]),
            ],
        )
        # The other trunk gets both tagged, VLAN 5 too; each access port
        # its own VLAN's frame, untagged.
        assert got == {"t2": [("b10", 10), ("n5", 5)], "a10": [("b10", None)], "a5": [("n5", None)]}
        # From access port a10: unicast to t1 (learned in VLAN 10 above)
        # and a broadcast reach the trunks tagged 10.
        got = n.probe(["t1", "t2"], [("a10", "t1", None, ["u10"]), ("a10", BCAST, None, ["b10", "end"])])
        assert got == {"t1": [("u10", 10), ("b10", 10)], "t2": [("b10", 10)]}
        # From access port a5: t1 gets it untagged (native), t2 tagged 5.
        got = n.probe(["t1", "t2"], [("a5", BCAST, None, ["b5", "end"])])
        assert got == {"t1": [("b5", None)], "t2": [("b5", 5)]}
        # Trunk to trunk: tags kept (VLAN 20, one of t1's range), and a
        # frame tagged with t1's native VLAN arrives at t1 untagged.
        got = n.probe(["t1"], [("t2", BCAST, 20, ["x20"]), ("t2", "t1", 150, ["y150"]), ("t2", BCAST, 5, ["z5", "end"])])
        assert got == {"t1": [("x20", 20), ("y150", 150), ("z5", None)]}
        assert n.drops("t1") == n.drops("t2") == 0


def test_vlans_a_port_does_not_carry_are_dropped_and_counted(tmp_path):
    with hvlab.Topology(tmp_path, VMS, prefix="tr") as t:
        n = Trunks(t)
        before = {v: n.drops(v) for v in ("t1", "t2", "a10")}
        got = n.probe(
            ["t2", "a10", "a5"],
            [
                # t1 allows 10, 20 and 100-199 (and its native 5).
                ("t1", BCAST, 30, ["d30"]),
                ("t1", BCAST, 200, ["d200"]),
                # A tagged frame at an access port.
                ("a10", BCAST, 10, ["tagged"]),
                # Untagged at a trunk without a native VLAN.
                ("t2", BCAST, None, ["untagged"]),
                ("t1", BCAST, 10, ["end"]),
                ("t1", BCAST, None, ["end"]),
            ],
        )
        assert got == {"t2": [], "a10": [], "a5": []}
        after = {v: n.drops(v) for v in ("t1", "t2", "a10")}
        assert {v: after[v] - before[v] for v in after} == {"t1": 2, "t2": 1, "a10": 1}
        # The reason is the port's, named in hvnet port's view too.
        port = json.loads(t.hv("port", "t1", "--json").stdout)
        assert (port["vlan_mode"], port["vlans"], port["native_vlan"]) == ("trunk", "10,20,100-199", 5)
        acc = t.stats("/ports/t1/accounting")
        assert acc["ingress"]["balanced"], acc


def test_a_run_time_change_of_vlans_takes_effect(tmp_path):
    with hvlab.Topology(tmp_path, VMS, prefix="tr") as t:
        n = Trunks(t)
        assert "T:10,20,100-199/n5" in t.hv("ports").stdout
        # t1 sends in VLAN 20: learned there.
        got = n.probe(["t2"], [("t1", BCAST, 20, ["x20", "end"])])
        assert got == {"t2": [("x20", 20)]}
        fdb = json.loads(t.hv("fdb", "--json").stdout)
        assert any(r["port_name"] == "t1" and r["vlan"] == 20 for r in fdb), fdb
        bad = t.hv("port", "t1", "set", "vlans=10,5000", check=False)
        assert bad.returncode != 0 and "vlan 5000 is outside 1..4094" in bad.stderr, bad.stderr
        s = json.loads(t.hv("port", "t1", "set", "vlans=10,30", "native_vlan=none", "--json").stdout)
        assert (s["vlan_mode"], s["vlans"], s["native_vlan"]) == ("trunk", "10,30", None)
        # What t1 learned in VLAN 20 went with it.
        fdb = json.loads(t.hv("fdb", "--json").stdout)
        assert not any(r["port_name"] == "t1" and r["vlan"] == 20 for r in fdb), fdb
        before = n.drops("t1")
        # VLAN 30 passes now, 20 does not, nor an untagged frame (no native
        # VLAN any more).
        got = n.probe(
            ["t2"],
            [
                ("t1", BCAST, 30, ["x30"]),
                ("t1", BCAST, 20, ["x20"]),
                ("t1", BCAST, None, ["untagged"]),
                ("t1", BCAST, 30, ["end"]),
            ],
        )
        assert got == {"t2": [("x30", 30)]}
        assert n.drops("t1") - before == 2
        # And back to access (its VLAN 0, the untagged domain): a tagged
        # frame is dropped, as at any access port.
        t.hv("port", "t1", "set", "vlan_mode=access")
        assert json.loads(t.hv("port", "t1", "--json").stdout)["vlan_mode"] == "access"
        before = n.drops("t1")
        t.sh("t1", f"{os.sys.executable} {PROBE} send eth0 {BCAST} 10 x tagged")
        assert hvlab.eventually(lambda: n.drops("t1") - before == 1), n.drops("t1") - before


def test_a_trunk_uplink_carries_the_vlans_to_the_wire_tagged(tmp_path):
    """An uplink in trunk mode (VLANs 10 and 20, native VLAN 5): frames
    of those VLANs leave on the wire tagged, the native VLAN's untagged;
    tagged frames from the wire enter their VLAN (Linux takes a received
    frame's tag off before a packet socket sees it: the uplink puts it
    back from PACKET_AUXDATA), an untagged one the native VLAN, one of a
    VLAN the uplink does not carry is dropped and counted."""
    vms = [vm("a10", 3, vlan=10), vm("a5", 4, vlan=5), vm("t1", 1, vlan_mode="trunk", vlans=[20])]
    uplinks = [dict(name="up0", device="", queues=1, vlan_mode="trunk", vlans=[10, 20], native_vlan=5)]
    hosts = [dict(name="ext", uplink="up0", ipv4="198.18.70.9/24")]
    with hvlab.Topology(tmp_path, vms, prefix="tu", uplinks=uplinks, hosts=hosts) as t:
        n = Trunks(t, ["a10", "a5", "t1", "ext"])
        # To the wire: VLAN 10 from an access port, 20 from a trunk, tagged;
        # the native VLAN's untagged.
        got = n.probe(["ext"], [("a10", BCAST, None, ["b10"]), ("t1", BCAST, 20, ["b20"]),
                                ("a5", BCAST, None, ["b5"]), ("a5", BCAST, None, ["end"])])
        assert got == {"ext": [("b10", 10), ("b20", 20), ("b5", None)]}
        drops = lambda: t.stats("/uplinks/up0/tx_summary")["drop_vlan_not_allowed"]  # noqa: E731
        before = drops()
        # From the wire: each frame to its VLAN; VLAN 30 dropped.
        got = n.probe(["a10", "a5", "t1"], [("ext", BCAST, 10, ["w10"]), ("ext", BCAST, 30, ["w30"]),
                                            ("ext", BCAST, 20, ["w20"]), ("ext", BCAST, None, ["w5"]),
                                            ("ext", BCAST, 10, ["end"]), ("ext", BCAST, 20, ["end"]),
                                            ("ext", BCAST, None, ["end"])])
        assert got == {"a10": [("w10", None)], "t1": [("w20", 20)], "a5": [("w5", None)]}
        assert drops() - before == 1
