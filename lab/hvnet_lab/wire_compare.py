"""hvnet's physical side beside Linux's and Open vSwitch's, same workload,
same run: a measurement (no study, no verdict). An external host (a
namespace on the far end of a veth "wire"; the near end's GRO on, the
NIC's "hardware LRO") and a VM:
- hvnet-uplink: the VM behind hvnet, the wire on an hvnet uplink;
- bridge-uplink: the VM on a Linux bridge whose port is the same wire;
- hvnet-vxlan: hvnet's VXLAN tunnel endpoint on the uplink, the host
  running Linux's vxlan device;
- linux-vxlan: a Linux bridge with a kernel vxlan device over the wire;
- ovs-vxlan: Open vSwitch's userspace datapath as the endpoint.
iperf3 with 64 KiB writes, 1 and 4 streams: host to VM with the host's
NIC sending wire-sized frames (TSO off) or left at its defaults (TSO on:
a veth then hands over whole GSO frames, tunnelled ones too), and VM to
host; all fabrics up at once, runs interleaved."""

import contextlib

from .fabric_compare import ratio_range
from .fabrics import A_IP, B_IP
from .figures import measured
from .runners import interleaved, iperf
from .wire_fabrics import (BridgeUplink, HvnetUplink, HvnetVxlan, HvnetVxlan6, HvnetVxlanSoftwareGso, LinuxVxlan,
                           LinuxVxlan6Default, LinuxVxlanDefault, OvsVxlan)

FABRICS = (HvnetUplink, BridgeUplink, HvnetVxlan, LinuxVxlan, OvsVxlan)
PAIRS = [("hvnet-uplink", "bridge-uplink"), ("hvnet-vxlan", "linux-vxlan"), ("hvnet-vxlan", "ovs-vxlan")]
NOTE = ("The external host and the VM are network namespaces, the wire a veth pair; hosts, VMs and the switches "
        "share this machine's 2 cores.")


def compare(tmp, fabrics, points, reps, secs, log):
    """Every fabric up at once, each point run `reps` times on each,
    interleaved: (runs by configuration, fabrics that could not start and
    why)."""
    failed = {}
    with contextlib.ExitStack() as stack:
        up = {}
        for F in fabrics:
            try:
                up[F.name] = stack.enter_context(F(tmp, 1500))
            except Exception as e:  # a reference that cannot run is reported, not hidden
                failed[F.name] = str(e)
        configs = [(name, *pt) for pt in points for name in up]
        runs = interleaved(configs, reps, lambda c: run_one(up[c[0]], *c[1:], secs, log))
    return runs, failed


def run_one(f, peer, direction, streams, secs, log):
    f.sh("a", f"ethtool -K eth0 tso {'off' if peer == 'wire-sized' else 'on'} >/dev/null")
    reverse = direction == "vm->host"
    src, ip = ("b", A_IP) if reverse else ("a", B_IP)
    f.sh(src, f"ping -c 1 -W 2 {ip} >/dev/null", check=False)
    return iperf(f, streams, "64K", secs, log=log, reverse=reverse)


def uplinks(tmp, quick, reps, log):
    secs = 2 if quick else 3
    # The host's TSO matters where it sends: host to VM with and without
    # it, VM to host as the host is left.
    pairs = [("default offloads", "host->vm")] if quick else \
        [("wire-sized", "host->vm"), ("default offloads", "host->vm"), ("default offloads", "vm->host")]
    points = [(p, d, s) for p, d in pairs for s in (1, 4)]
    runs, failed = compare(tmp, FABRICS, points, reps, secs, log)
    place = lambda c: (c[0], f"{c[1]}, {c[2]}, {c[3]} stream{'s' if c[3] > 1 else ''}")  # noqa: E731
    note = NOTE + "".join(f" {n} could not run: {e}" for n, e in failed.items())
    said = lambda key: "; ".join(f"{h} / {o} {ratio_range(runs, h, o, key)}" for h, o in PAIRS) \
        + " over the points"  # noqa: E731
    figs = [
        measured("uplinks-throughput", "Host to VM and back through an uplink, plain and over VXLAN",
                 "peer's offloads, direction, streams", "Gbit/s", runs, "gbps", place,
                 "how does hvnet's uplink and VXLAN endpoint compare with Linux's bridge, Linux's vxlan device and "
                 "Open vSwitch on the same wire?", said("gbps"), note),
        measured("uplinks-efficiency", "CPU efficiency through an uplink: Gbit/s per busy core",
                 "peer's offloads, direction, streams", "Gbit/s per busy core", runs, "gbps_per_core", place,
                 "how much CPU does each spend for the same traffic?", said("gbps_per_core"), note),
    ]
    return figs, {" ".join(map(str, c)): rs for c, rs in runs.items()}


TUNNEL_FABRICS = (HvnetVxlan, HvnetVxlanSoftwareGso, LinuxVxlanDefault, LinuxVxlan, HvnetVxlan6, LinuxVxlan6Default)
TUNNEL_PAIRS = [("hvnet-vxlan", "linux-vxlan-default"), ("hvnet-vxlan6", "linux-vxlan6-default"),
                ("hvnet-vxlan6", "hvnet-vxlan"), ("hvnet-vxlan", "hvnet-vxlan-swgso")]


def tunnel(tmp, quick, reps, log):
    """The tunnel both ways with a Linux peer at its default offloads:
    hvnet's endpoint handing the kernel tunnelled GSO frames, and
    segmenting them itself, beside Linux's own path (bridge and vxlan
    device) with the switch's end of the wire at its defaults and without
    VXLAN segmentation offload."""
    secs = 2 if quick else 3
    points = [("default offloads", d, s) for d in ("vm->host", "host->vm") for s in ((1,) if quick else (1, 4))]
    runs, failed = compare(tmp, TUNNEL_FABRICS, points, reps, secs, log)
    place = lambda c: (c[0], f"{c[2]}, {c[3]} stream{'s' if c[3] > 1 else ''}")  # noqa: E731
    note = NOTE + " Host a's NIC at its default offloads (TSO on)." \
        + "".join(f" {n} could not run: {e}" for n, e in failed.items())
    said = lambda key: "; ".join(f"{h} / {o} {ratio_range(runs, h, o, key)}" for h, o in TUNNEL_PAIRS) \
        + " over the points"  # noqa: E731
    figs = [
        measured("tunnel-throughput", "VXLAN both ways with a Linux peer at its default offloads",
                 "direction, streams", "Gbit/s", runs, "gbps", place,
                 "does hvnet's VXLAN endpoint send and receive as fast as Linux's own path?", said("gbps"), note),
        measured("tunnel-efficiency", "VXLAN both ways: Gbit/s per busy core",
                 "direction, streams", "Gbit/s per busy core", runs, "gbps_per_core", place,
                 "how much CPU does each spend for the same traffic?", said("gbps_per_core"), note),
    ]
    return figs, {" ".join(map(str, c)): rs for c, rs in runs.items()}
