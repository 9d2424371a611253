"""The guards (docs/guide/guards.md) against a VM that lies about its
addresses: scapy-built ARP replies and neighbor advertisements for another
VM's address, DHCP offers, router advertisements and spoofed sources from a
namespace VM, each dropped under its own name while honest traffic flows;
the victim's neighbour table and routes as they were. The same lie with its
guard off gets through, so the test sees what the guard stops. Bad settings
are refused with the line and the reason, and nothing is half-applied.

Order, not time, says a lie did not arrive: after the lies the liar sends
one honest marker datagram from the same queue, and the receiver reports
what reached it before the marker."""

import json
import os
import re
import shutil
import subprocess
import tempfile
import uuid
from pathlib import Path

import pytest

import hvlab
import helpers

pytestmark = pytest.mark.root

PROBE = Path(__file__).with_name("guard_probe.py")
PY = os.sys.executable
NET = "198.18.90"
NET6 = "fd00:90::"


def vm(name, i, **kw):
    return helpers.vm(name, f"{NET}.{i}", f"{NET6}{i}", queues=1, **kw)


class Lab:
    """Three VMs: `a` lies, `b` is the victim whose addresses it claims,
    `c` is who it lies to."""

    def __init__(self, t, probe=PROBE, vms=("a", "b", "c")):
        self.t, self.probe = t, probe
        self.macs = {p["client"]: p["mac"] for p in json.loads(t.hv("ports", "--json").stdout)}
        # Every VM's IPv6 addresses ready (DAD done), and c has met b.
        for v in vms:
            assert hvlab.eventually(lambda: "tentative" not in t.sh(v, "ip -6 addr show dev eth0").stdout,
                                    timeout=20)
        if "b" in vms:
            t.sh("c", f"ping -c 1 -W 2 {NET}.2 && ping -6 -c 1 -W 2 {NET6}2")

    def lies_reaching(self, to, lies, liar="a", liar_ip=None):
        """Sends each `(kind, count, args)` of `lies` from `liar`, then the
        marker to `to`; returns the kinds `to` received before the marker."""
        t, token = self.t, uuid.uuid4().hex
        p = t.popen(to, f"{PY} {PROBE} sniff eth0 {token} {self.macs[liar]}", stdout=subprocess.PIPE, text=True)
        for line in p.stdout:
            if "READY" in line:
                break
        # The lies and then the marker, from one process.
        steps = []
        for kind, count, args in lies:
            kv = " ".join(f"{k}={v}" for k, v in args.items())
            steps.append(f"lie eth0 {kind} {count} {kv}")
        i = {"a": 1, "b": 2, "c": 3, "d": 4}
        src = liar_ip or f"{NET}.{i[liar]}"
        steps.append(f"mark eth0 {self.macs[to]} {src} {NET}.{i[to]} {token}")
        t.sh(liar, f"{PY} {self.probe} " + " + ".join(steps), timeout=300)
        out, _ = p.communicate(timeout=300)
        # Only the kinds sent: the liar's kernel answers c's own ARP and ND.
        sent = {kind for kind, _, _ in lies}
        return [k for k in json.loads(out.strip().splitlines()[-1]) if k in sent]

    def drops(self, vm_, reason, at_least):
        """The port's `drop_REASON` once it reaches `at_least`."""
        key = f"drop_{reason}"
        hvlab.eventually(lambda: self.t.stats(f"/ports/{vm_}/tx_summary")[key] >= at_least)
        return self.t.stats(f"/ports/{vm_}/tx_summary")[key]

    def neigh(self, vm_, ip):
        """The MAC `vm_`'s kernel has for `ip`."""
        fam = "-6" if ":" in ip else "-4"
        rows = json.loads(self.t.sh(vm_, f"ip {fam} -j neigh show {ip} dev eth0").stdout or "[]")
        return rows[0].get("lladdr") if rows else None


def test_arp_and_nd_lies_for_another_vms_address_are_dropped(tmp_path):
    with hvlab.Topology(tmp_path, [vm("a", 1), vm("b", 2), vm("c", 3)], prefix="gd") as t:
        lab = Lab(t)
        b_mac, c_mac = lab.macs["b"], lab.macs["c"]
        assert lab.neigh("c", f"{NET}.2") == b_mac and lab.neigh("c", f"{NET6}2") == b_mac
        arp = ("arp-reply", 3, dict(dst_mac=c_mac, claim=f"{NET}.2", to=f"{NET}.3"))
        na = ("nd-advert", 3, dict(dst_mac=c_mac, src=f"{NET6}1", to=f"{NET6}3", claim=f"{NET6}2"))
        assert lab.lies_reaching("c", [arp, na]) == []
        assert lab.drops("a", "arp_guard", 3) == 3
        assert lab.drops("a", "nd_guard", 3) == 3
        assert lab.neigh("c", f"{NET}.2") == b_mac and lab.neigh("c", f"{NET6}2") == b_mac
        # Honest traffic flows, the liar's own ARP and ND included.
        t.sh("a", f"ping -c 2 -i 0.2 -W 2 {NET}.2 && ping -6 -c 2 -i 0.2 -W 2 {NET6}2")
        t.sh("c", f"ping -c 2 -i 0.2 -W 2 {NET}.2 && ping -6 -c 2 -i 0.2 -W 2 {NET6}2")
        own = ("arp-reply", 1, dict(dst_mac=c_mac, claim=f"{NET}.1", to=f"{NET}.3"))
        assert lab.lies_reaching("c", [own]) == ["arp-reply"], "a VM's ARP for its own address passes"
        # The same lies with the guards off reach c, and its kernel believes them.
        t.hv("port", "a", "set", "arp_guard=off", "nd_guard=off")
        assert sorted(lab.lies_reaching("c", [arp, na])) == ["arp-reply"] * 3 + ["nd-advert"] * 3
        assert lab.drops("a", "arp_guard", 3) == 3
        assert hvlab.eventually(lambda: lab.neigh("c", f"{NET6}2") == lab.macs["a"]), lab.neigh("c", f"{NET6}2")


def test_rogue_dhcp_servers_and_router_advertisements_are_dropped(tmp_path):
    with hvlab.Topology(tmp_path, [vm("a", 1), vm("b", 2), vm("c", 3)], prefix="gd") as t:
        lab = Lab(t)
        a_ll = re.search(r"inet6 (fe80::[0-9a-f:]+)/", t.sh("a", "ip -6 -o addr show dev eth0 scope link").stdout)[1]
        c_mac = lab.macs["c"]
        offer = ("dhcp-offer", 2, dict(src=f"{NET}.1", client_mac=c_mac, offer=f"{NET}.99"))
        adv = ("dhcpv6-advertise", 2, dict(dst_mac=c_mac, src=a_ll, to=f"{NET6}3"))
        ra = ("ra", 2, dict(src=a_ll, prefix="fd00:bad::"))
        discover = ("dhcp-discover", 1, {})
        assert lab.lies_reaching("c", [offer, adv, ra, discover]) == ["dhcp-discover"], \
            "a client's discover (from 0.0.0.0) passes"
        assert lab.drops("a", "dhcp_guard", 4) == 4
        assert lab.drops("a", "ra_guard", 2) == 2
        routes = t.sh("c", "ip -6 route show").stdout
        assert "default" not in routes and "fd00:bad" not in routes, routes
        # A router VM's port: its advertisements reach c, which takes the route.
        t.hv("port", "a", "set", "ra_guard=off")
        assert lab.lies_reaching("c", [ra]) == ["ra", "ra"]
        assert hvlab.eventually(lambda: "default" in t.sh("c", "ip -6 route show").stdout)


def test_ip_source_guard_drops_spoofed_sources_and_takes_new_addresses(tmp_path):
    vms = [vm("a", 1), vm("b", 2), vm("c", 3), dict(name="d", queues=1)]
    with hvlab.Topology(tmp_path, vms, prefix="gd") as t:
        lab = Lab(t)
        c_mac = lab.macs["c"]
        spoof = ("spoof-udp", 3, dict(dst_mac=c_mac, src=f"{NET}.2", to=f"{NET}.3"))
        assert lab.lies_reaching("c", [spoof]) == []
        assert lab.drops("a", "source_guard", 3) == 3
        # A second address, given at run time, is a's own from then on.
        t.hv("port", "a", "set", f"addresses={NET}.1,{NET}.50")
        extra = ("spoof-udp", 1, dict(dst_mac=c_mac, src=f"{NET}.50", to=f"{NET}.3"))
        assert lab.lies_reaching("c", [extra, spoof]) == ["spoof-udp"]
        assert lab.drops("a", "source_guard", 6) == 6
        # d has no addresses the switch knows: it is not source-guarded,
        # but it may not claim b's address either.
        t.sh("d", f"ip addr add {NET}.4/24 dev eth0")
        lab.macs["d"] = next(p["mac"] for p in json.loads(t.hv("ports", "--json").stdout) if p["client"] == "d")
        free = ("spoof-udp", 1, dict(dst_mac=c_mac, src=f"{NET}.77", to=f"{NET}.3"))
        claim = ("arp-reply", 1, dict(dst_mac=c_mac, claim=f"{NET}.2", to=f"{NET}.3"))
        assert lab.lies_reaching("c", [free, claim], liar="d") == ["spoof-udp"]
        assert lab.drops("d", "arp_guard", 1) == 1
        t.sh("d", f"ping -c 1 -W 2 {NET}.3")


def test_settings_that_cannot_apply_are_refused_whole(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text(f'name = "{hvlab.unique("gdb")[:12]}"\n\n[[vm]]\nname = "a"\nipv4 = "{NET}.1/24"\n'
                   f'addresses = ["{NET}.0/24", "{NET}.7/24"]\n')
    r = hvlab.hvnet("up", bad, check=False)
    assert r.returncode != 0
    assert re.search(rf"{re.escape(str(bad))}:\d+: .*has host bits set", r.stderr), r.stderr
    keys = ["addresses", "source_guard", "arp_guard", "nd_guard", "dhcp_guard", "ra_guard", "lro", "mtu"]
    with hvlab.Topology(tmp_path, [vm("a", 1), vm("b", 2)], prefix="gd") as t:
        settings = lambda: {k: v for k, v in json.loads(t.hv("port", "a", "--json").stdout).items() if k in keys}  # noqa: E731
        before = settings()
        assert before["addresses"] == [f"{NET}.1", f"{NET6}1"] and before["ra_guard"] is True, before
        r = t.hv("port", "a", "set", "ra_guard=off", "addresses=198.18.90.1,nonsense", check=False)
        assert r.returncode != 0 and "nonsense" in r.stderr and "addresses" in r.stderr, r.stderr
        r = t.hv("port", "a", "set", "ra_guard=off", "source_guard=maybe", check=False)
        assert r.returncode != 0 and "on or off" in r.stderr, r.stderr
        assert settings() == before, "nothing half-applied"
        t.sh("a", f"ping -c 1 -W 2 {NET}.2")


UDHCPD = """start {net}.100
end {net}.110
interface eth0
lease_file {dir}/leases
pidfile {dir}/udhcpd.pid
option subnet 255.255.255.0
option lease 600
"""

# udhcpc's script: the address it was given, on eth0.
UDHCPC = """#!/bin/sh
[ "$1" = bound ] && ip addr add "$ip/$mask" dev "$interface"
exit 0
"""


def test_dhcp_snooping_makes_a_leased_address_the_clients_own(tmp_path):
    """A DHCP server VM (busybox udhcpd, its port's dhcp_guard off) leases
    an address to a client VM the switch knows no address of (busybox
    udhcpc): from the ACK on, the client's IPv4 is guarded to its lease.
    Before it, the client was not source-guarded at all."""
    vms = [vm("a", 1, dhcp_guard=False), dict(name="cl", queues=1), vm("c", 3)]
    with hvlab.Topology(tmp_path, vms, prefix="gd") as t:
        lab = Lab(t, vms=("a", "c"))
        c_mac = lab.macs["c"]
        # Any source passes from a port of no known address...
        t.sh("cl", f"ip addr add {NET}.77/24 dev eth0")
        free = ("spoof-udp", 1, dict(dst_mac=c_mac, src=f"{NET}.66", to=f"{NET}.3"))
        assert lab.lies_reaching("c", [free], liar="cl", liar_ip=f"{NET}.77") == ["spoof-udp"]
        t.sh("cl", f"ip addr del {NET}.77/24 dev eth0")
        conf, script = tmp_path / "udhcpd.conf", tmp_path / "udhcpc.sh"
        conf.write_text(UDHCPD.format(net=NET, dir=tmp_path))
        script.write_text(UDHCPC)
        script.chmod(0o755)
        t.popen("a", f"busybox udhcpd -f {conf}", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        t.sh("cl", f"busybox udhcpc -i eth0 -n -q -t 10 -T 1 -s {script}", timeout=60)
        leased = re.search(rf"inet ({re.escape(NET)}\.1\d\d)/24", t.sh("cl", "ip -4 addr show dev eth0").stdout)[1]
        show = json.loads(t.hv("port", "cl", "--json").stdout)
        assert [x["address"] for x in show["dhcp_leases"]] == [leased], show["dhcp_leases"]
        assert 0 < show["dhcp_leases"][0]["secs_left"] <= 600
        # ...and from the lease on, only the leased one.
        t.sh("cl", f"ping -c 2 -i 0.2 -W 2 {NET}.3")
        before = t.stats("/ports/cl/tx_summary")["drop_source_guard"]
        assert lab.lies_reaching("c", [free], liar="cl", liar_ip=leased) == []
        assert lab.drops("cl", "source_guard", before + 1) == before + 1
        # `hvnet port` shows the port's drops by reason, as stats does.
        drops = json.loads(t.hv("port", "cl", "--json").stdout)["drops"]
        assert drops["from_port"]["source_guard"] == before + 1, drops
        assert "source_guard:" in t.hv("port", "cl").stdout
        # A rogue server's ACK is never learned: its guard drops it first.
        assert t.stats("/ports/a/tx_summary")["drop_dhcp_guard"] == 0


@pytest.mark.skipif(not shutil.which("qemu-system-x86_64"), reason="needs qemu-system-x86 (scripts/install-deps.sh)")
def test_a_qemu_guests_lies_are_dropped_at_its_vhost_user_port(tmp_path):
    """The same ARP and ND lies from a QEMU guest (its own kernel and
    virtio-net driver, TCG here): its vhost-user port drops them by name.
    `hvnet capture` at its port (which no kernel device shows) sees each
    lie at `drop` with its guard's name, the honest pings at `in` and
    their replies at `out` — as many as the guest's ping counted."""
    from test_capture import Capture, fields
    shared = Path(tempfile.mkdtemp(prefix="hvnet-gd-", dir="/var/tmp"))
    try:
        probe = shutil.copy(PROBE, shared)
        vms = [vm("a", 1, kind="qemu"), vm("b", 2), vm("c", 3)]
        with hvlab.Topology(tmp_path, vms, prefix="gq") as t:
            lab = Lab(t, probe=probe)
            c_mac = lab.macs["c"]
            arp = ("arp-reply", 3, dict(dst_mac=c_mac, claim=f"{NET}.2", to=f"{NET}.3"))
            na = ("nd-advert", 3, dict(dst_mac=c_mac, src=f"{NET6}1", to=f"{NET6}3", claim=f"{NET6}2"))
            cap = Capture(t, "a", tmp_path / "a.pcapng", "--point", "in,out,drop", "arp or icmp or icmp6")
            assert lab.lies_reaching("c", [arp, na]) == []
            assert lab.drops("a", "arp_guard", 3) == 3
            assert lab.drops("a", "nd_guard", 3) == 3
            assert lab.neigh("c", f"{NET}.2") == lab.macs["b"] and lab.neigh("c", f"{NET6}2") == lab.macs["b"]
            out = t.sh("a", f"ping -c 2 -i 0.2 -W 5 {NET}.2 && ping -6 -c 2 -i 0.2 -W 5 {NET6}2").stdout
            cap.stop()
            seen = fields(tmp_path / "a.pcapng", "frame.comment", "_ws.col.Info")
            dropped = [c.split()[1] for c, _ in seen if c.startswith("point=drop")]
            assert sorted(dropped) == ["reason=arp_guard"] * 3 + ["reason=nd_guard"] * 3, seen
            received = sum(int(n) for n in re.findall(r"(\d+) received", out))
            assert received == 4, out
            replies = [i for c, i in seen if c.startswith("point=out") and "reply" in i]
            requests = [i for c, i in seen if c.startswith("point=in") and "request" in i]
            assert len(replies) == received and len(requests) >= received, seen
    finally:
        shutil.rmtree(shared, ignore_errors=True)
