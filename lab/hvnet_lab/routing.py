"""Routing at the edge measured (no study, no verdict): VM to VM between
two subnets routed by hvnet's gateway, beside the same VMs bridged in one
subnet through hvnet, and beside Linux routing between two bridges (its
own forwarding between two interfaces, the VMs behind veth pairs), all up
at once and run interleaved: throughput and Gbit/s per busy core, 1 and 4
streams."""

import contextlib
from pathlib import Path

import hvlab

from .fabrics import Bridge, Hvnet
from .figures import measured, vm_note
from .runners import interleaved, iperf
from .verdict import median

ROUTED_A, ROUTED_B = "10.98.0.1", "10.98.1.2"
GW_A, GW_B = "10.98.0.254", "10.98.1.254"


class HvnetRouted(Hvnet):
    """hvnet with a in VLAN 10 and b in VLAN 20, a tenant's gateway on each
    (the VMs' default routes)."""

    name = "hvnet-routed"
    a_ip, b_ip = ROUTED_A, ROUTED_B

    def __init__(self, tmp, mtu, **_):
        vms = [dict(name="a", ipv4=ROUTED_A + "/24", mtu=mtu, vlan=10),
               dict(name="b", ipv4=ROUTED_B + "/24", mtu=mtu, vlan=20)]
        tenant = dict(name="lab", gateways={"10": GW_A + "/24", "20": GW_B + "/24"})
        self.t = hvlab.Topology(Path(tmp), vms, prefix="rh", tables=dict(tenant=[tenant]))


class BridgeRouted(Bridge):
    """Linux routing between two bridges in a namespace of its own, each
    with the gateway's address, a VM's veth on each. (Two bridges where a
    VLAN-aware bridge would have two VLAN interfaces: this kernel has no
    VLAN devices; the forwarding between them is the same IP forwarding.)"""

    name = "bridge-routed"
    a_ip, b_ip = ROUTED_A, ROUTED_B

    def _up(self):
        for n in self.nss.values():
            n.__enter__()
        sw = self.nss["sw"]
        sw.sh("sysctl -qw net.ipv4.ip_forward=1")
        for vm, ip, gw, br in (("a", ROUTED_A, GW_A, "br10"), ("b", ROUTED_B, GW_B, "br20")):
            sw.sh(f"ip link add {br} type bridge && ip link set {br} mtu {self.mtu} up && ip addr add {gw}/24 dev {br}")
            hvlab.run(["ip", "link", "add", "eth0", "netns", self.nss[vm].name, "type", "veth",
                       "peer", "name", f"p{vm}", "netns", sw.name])
            sw.sh(f"ip link set p{vm} mtu {self.mtu} master {br} up")
            self.nss[vm].sh(f"ip link set eth0 mtu {self.mtu} up && ip addr add {ip}/24 dev eth0"
                            f" && ip route add default via {gw}")
        return self


def ratio(runs, ours, other, key, streams):
    mine = [r[key] for c, rs in runs.items() if c == (ours, streams) for r in rs]
    theirs = [r[key] for c, rs in runs.items() if c == (other, streams) for r in rs]
    return median(mine) / median(theirs) if mine and theirs and median(theirs) > 0 else float("nan")


def routing(tmp, quick, reps, log):
    secs = 2 if quick else 3
    chosen = [Hvnet, HvnetRouted, Bridge, BridgeRouted]
    with contextlib.ExitStack() as stack:
        up = {F.name: stack.enter_context(F(tmp, 1500)) for F in chosen}
        configs = [(name, streams) for streams in (1, 4) for name in up]
        runs = interleaved(configs, reps, lambda c: iperf(up[c[0]], c[1], "64K", secs, None, log))
    note = (vm_note() + " hvnet's VMs are TAP ports with virtio-net headers (TSO on); routed: VLANs 10 and 20, a "
            "tenant's gateway on each, the VMs' default routes through it. Linux: veth pairs into a bridge each, "
            "routed by the namespace's own IP forwarding between the bridges' addresses (this kernel has no VLAN "
            "devices for a VLAN-aware bridge's interfaces). 64 KiB writes, MTU 1500.")

    def said(key):
        return "; ".join(
            f"{s} stream{'s' if s > 1 else ''}: routed / bridged through hvnet "
            f"{ratio(runs, 'hvnet-routed', 'hvnet', key, s):.2f}, hvnet routed / Linux routed "
            f"{ratio(runs, 'hvnet-routed', 'bridge-routed', key, s):.2f}" for s in (1, 4))
    place = lambda c: (c[0], f"{c[1]} stream{'s' if c[1] > 1 else ''}")  # noqa: E731
    figs = [
        measured("routing-throughput", "VM to VM between two subnets: routed at the edge", "streams", "Gbit/s",
                 runs, "gbps", place,
                 "what does routing between two subnets in the switch cost against bridging, and against Linux "
                 "routing between two bridges?", said("gbps"), note),
        measured("routing-efficiency", "Routed VM to VM: Gbit/s per busy core", "streams", "Gbit/s per busy core",
                 runs, "gbps_per_core", place, "how much CPU does the routed path spend for the same traffic?",
                 said("gbps_per_core"), note),
    ]
    return figs, {f"{c[0]} {c[1]}": rs for c, rs in runs.items()}
