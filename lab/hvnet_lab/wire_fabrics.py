"""The fabrics of the physical side: an external host on a wire (a
namespace on the far end of a veth pair) and a VM behind it, through an
hvnet uplink (its LRO in the device, in hvnet, or off), through hvnet's
VXLAN tunnel endpoint, through a Linux bridge on the wire, through
Linux's own vxlan device and bridge, or through Open vSwitch's userspace
VXLAN endpoint."""

import time
from pathlib import Path

import hvlab

from .fabrics import A_IP, B_IP, VNI, Bridge, Fabric, Hvnet, OvsDaemons

# The physical side. In these fabrics "a" is an external host on a wire
# (a namespace behind a veth pair whose near end is the switch's uplink;
# its NIC has TSO off, so wire-sized frames cross, and the near end's GRO
# is the NIC's "hardware LRO") and "b" is a VM behind the switch.

UNDERLAY_A, UNDERLAY_SW = "198.18.1.2", "198.18.1.1"
# The same wire with an IPv6 underlay (the documentation prefix).
UNDERLAY6_A, UNDERLAY6_SW = "2001:db8:1::2", "2001:db8:1::1"


def underlay(ipv6):
    """(host a's address, the switch's, prefix length, VXLAN's overhead)."""
    return (UNDERLAY6_A, UNDERLAY6_SW, 64, 70) if ipv6 else (UNDERLAY_A, UNDERLAY_SW, 24, 50)


def linux_vxlan(sh, local, remote, ip, dev="eth0"):
    """Linux's own VXLAN device in a namespace (`sh` runs a command there),
    at its defaults (over IPv4 without outer UDP checksums; over IPv6 with
    them, as Linux requires by default)."""
    csum = "" if ":" in local else " noudpcsum"
    sh(f"ip link add vx{VNI} type vxlan id {VNI} local {local} remote {remote} dstport 4789 dev {dev}{csum}"
       f" && ip link set vx{VNI} up" + (f" && ip addr add {ip}/24 dev vx{VNI}" if ip else ""))


def vxlan_host_on_a_wire(a, sw, mtu, offloads="", ipv6=False):
    """Host a on a veth wire into namespace `sw` (whose end is `pa`): its
    eth0 with the underlay address (IPv4, or `ipv6`) and room for VXLAN,
    TSO off (wire-sized frames, as a physical NIC sends) and `offloads`
    also off, and Linux's vxlan device with the overlay address. Returns
    the underlay MTU."""
    host, switch, plen, overhead = underlay(ipv6)
    under = mtu + overhead
    hvlab.run(["ip", "link", "add", "eth0", "netns", a.name, "type", "veth", "peer", "name", "pa", "netns", sw.name])
    nodad = " nodad" if ipv6 else ""
    a.sh(f"ip link set eth0 mtu {under} up && ip addr add {host}/{plen} dev eth0{nodad} "
         f"&& ethtool -K eth0 tso off {offloads} >/dev/null")
    linux_vxlan(a.sh, host, switch, A_IP)
    return under


class HvnetUplink(Hvnet):
    """hvnet with an uplink: VM b behind it, external host a on the wire."""

    name = "hvnet-uplink"

    def __init__(self, tmp, mtu, **_):
        self.t = hvlab.Topology(
            Path(tmp), [dict(name="b", ipv4=B_IP + "/24", mtu=mtu)], prefix="bu",
            uplinks=[dict(name="up0", device="", mtu=mtu, lro="hardware", tso="hardware")],
            hosts=[dict(name="a", uplink="up0", ipv4=A_IP + "/24")])


class HvnetUplinkSoftwareLro(HvnetUplink):
    """As hvnet-uplink, with the near end's GRO off and hvnet's own GRO at
    the uplink (`lro = "software"`): a hypervisor's software LRO."""

    name = "hvnet-uplink-swlro"
    lro = "software"

    def __init__(self, tmp, mtu, **_):
        self.t = hvlab.Topology(
            Path(tmp), [dict(name="b", ipv4=B_IP + "/24", mtu=mtu)], prefix="bs",
            uplinks=[dict(name="up0", device="", mtu=mtu, lro=self.lro, tso="hardware")],
            hosts=[dict(name="a", uplink="up0", ipv4=A_IP + "/24")])


class HvnetUplinkNoLro(HvnetUplinkSoftwareLro):
    """As hvnet-uplink with no LRO at the uplink (`lro = "off"`): the wire's
    frames are switched one by one, then coalesced for the VM by its own
    LRO on delivery."""

    name = "hvnet-uplink-nolro"
    lro = "off"


class HvnetVxlan(Hvnet):
    """hvnet's VXLAN tunnel endpoint on its uplink; host a runs Linux's
    vxlan device over the wire (underlay MTU 1550, overlay 1500)."""

    name = "hvnet-vxlan"
    # Who segments the VM's TSO frames: the kernel (one tunnelled GSO frame
    # per write into the endpoint's TAP) or hvnet.
    gso = "kernel"
    prefix = "bv"
    ipv6 = False

    def __init__(self, tmp, mtu, **_):
        host, switch, plen, overhead = underlay(self.ipv6)
        self.t = hvlab.Topology(
            Path(tmp), [dict(name="b", ipv4=B_IP + "/24", mtu=mtu)], prefix=self.prefix,
            uplinks=[dict(name="up0", device="", mtu=mtu + overhead, lro="hardware", tso="hardware",
                          vxlan=dict(vni=VNI, local=f"{switch}/{plen}", remotes=[host], gso=self.gso))],
            hosts=[dict(name="a", uplink="up0", **{"ipv6" if self.ipv6 else "ipv4": f"{host}/{plen}"})])

    def __enter__(self):
        super().__enter__()
        try:
            host, switch, _, _ = underlay(self.ipv6)
            linux_vxlan(lambda c: self.sh("a", c), host, switch, A_IP)
            # An IPv6 underlay answers once duplicate address detection
            # is over.
            hvlab.eventually(lambda: self.sh("a", f"ping -c 1 -W 1 {B_IP}", check=False).returncode == 0,
                             timeout=20)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self


class HvnetVxlan6(HvnetVxlan):
    """As hvnet-vxlan over an IPv6 underlay (host a's vxlan device over
    IPv6 too)."""

    name = "hvnet-vxlan6"
    prefix = "b6"
    ipv6 = True


class HvnetVxlanSoftwareGso(HvnetVxlan):
    """As hvnet-vxlan, the endpoint segmenting the VM's TSO frames itself
    (`gso = "software"`: how it sent before Linux 6.17's tunnel header)."""

    name = "hvnet-vxlan-swgso"
    gso = "software"
    prefix = "bs"


class BridgeUplink(Bridge):
    """The Linux bridge with the same wire as its uplink: host a's NIC sends
    wire-sized frames, the bridge's end of the wire runs GRO."""

    name = "bridge-uplink"

    def _up(self):
        super()._up()
        self.nss["a"].sh("ethtool -K eth0 tso off >/dev/null")
        self.nss["sw"].sh("ethtool -K pa gro on >/dev/null")
        return self




class OvsVxlan(Fabric):
    """Open vSwitch's userspace datapath as the VXLAN endpoint: its daemons
    in the switch's namespace, a physical bridge over the wire, VM b on a
    tap port of the integration bridge; host a runs Linux's vxlan device.
    Host a's NIC completes checksums itself (tx checksumming off): a veth
    would hand Open vSwitch's AF_PACKET port partial checksums it takes as
    they are."""

    name = "ovs-vxlan"

    def __init__(self, tmp, mtu, **_):
        self.mtu = mtu
        self.nss = {k: hvlab.Netns("ov") for k in ("a", "b", "sw")}
        self.daemons = None

    def _up(self):
        for n in self.nss.values():
            n.__enter__()
        a, b, sw = self.nss["a"], self.nss["b"], self.nss["sw"]
        under = vxlan_host_on_a_wire(a, sw, self.mtu, "tx off")
        sw.sh(f"ip link set pa mtu {under} up && ethtool -K pa gro on >/dev/null")
        self.daemons = OvsDaemons(sw.name)
        self.daemons.start()
        self.daemons.vxlan_endpoint("pa", UNDERLAY_SW, UNDERLAY_A, None, self.mtu)
        tap = "otb"
        self.daemons.vsctl("add-port", "br-int", tap, "--", "set", "Interface", tap, "type=tap",
                           f"mtu_request={self.mtu}")
        for _ in range(50):
            if sw.sh(f"ip link show {tap}", check=False).returncode == 0:
                break
            time.sleep(0.1)
        sw.sh(f"ip link set {tap} netns {b.name}")
        b.sh(f"ip link set {tap} name eth0 && ip link set eth0 mtu {self.mtu} up && ip addr add {B_IP}/24 dev eth0")
        return self

    def __exit__(self, *e):
        if self.daemons:
            self.daemons.stop()
        for n in self.nss.values():
            n.__exit__(*e)

    def ns(self, vm):
        return self.nss[vm].name


class LinuxVxlan(Bridge):
    """Linux's own path: a bridge joining VM b's veth and a kernel vxlan
    device over the wire to host a, which runs one too."""

    name = "linux-vxlan"
    # The switch's end of the wire at its default offloads (tunnelled GSO
    # frames cross it whole), or without VXLAN segmentation offload.
    tunnel_gso = False
    ipv6 = False

    def _up(self):
        for n in self.nss.values():
            n.__enter__()
        a, b, sw = self.nss["a"], self.nss["b"], self.nss["sw"]
        under = vxlan_host_on_a_wire(a, sw, self.mtu, ipv6=self.ipv6)
        host, switch, plen, _ = underlay(self.ipv6)
        # The switch's end of the wire: by default a NIC without VXLAN
        # segmentation offload (wire-sized frames to the host, as hvnet
        # sent before the kernel took tunnelled GSO frames from it).
        offloads = "" if self.tunnel_gso else \
            "tso off tx-udp_tnl-segmentation off tx-udp_tnl-csum-segmentation off"
        nodad = " nodad" if self.ipv6 else ""
        sw.sh(f"ip link set pa mtu {under} up && ip addr add {switch}/{plen} dev pa{nodad} && ethtool -K pa gro on "
              f"{offloads} >/dev/null")
        sw.sh("ip link add br0 type bridge && ip link set br0 up")
        linux_vxlan(sw.sh, switch, host, None, dev="pa")
        sw.sh(f"ip link set vx{VNI} master br0")
        hvlab.run(["ip", "link", "add", "eth0", "netns", b.name, "type", "veth", "peer", "name", "pb", "netns", sw.name])
        sw.sh(f"ip link set pb mtu {self.mtu} master br0 up")
        b.sh(f"ip link set eth0 mtu {self.mtu} up && ip addr add {B_IP}/24 dev eth0")
        return self


class LinuxVxlanDefault(LinuxVxlan):
    """As linux-vxlan, the switch's end of the wire left at its default
    offloads, as users leave them: the VM's TSO frames leave its vxlan
    device as tunnelled GSO frames and cross the wire whole."""

    name = "linux-vxlan-default"
    tunnel_gso = True


class LinuxVxlan6Default(LinuxVxlanDefault):
    """As linux-vxlan-default over an IPv6 underlay."""

    name = "linux-vxlan6-default"
    ipv6 = True
