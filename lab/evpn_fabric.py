"""A BGP EVPN fabric on one machine: hvnet hosts and Linux VTEPs, each
host a network namespace of its own on one underlay (a bridge in a fabric
namespace), BGP through FRR on every host, no static peer lists anywhere.

An hvnet host runs its switch inside its namespace (`netns` in the
topology) with `[frr]`, so `hvnet up` starts its FRR. A Linux VTEP is
FRR's documented EVPN set-up: a bridge with a `vxlan` device (no remote,
no learning) and a VM namespace on a veth, its zebra and bgpd started here.
Used by the tests and the lab; everything made is removed, even on failure.
"""

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import hvlab

VNI = 42
ASN = 65000
UNDERLAY = "198.18.60"
OVERLAY = "198.19.60"
OVERLAY_SCALE = "198.19"  # the injector's advertised IPs: 198.19.(100 + VTEP).MAC, apart from OVERLAY
FRR = Path("/usr/lib/frr")


def have_frr() -> bool:
    return (FRR / "zebra").exists() and hvlab.have("vtysh")


def sh(ns, cmd, check=True, timeout=60):
    return hvlab.run(["ip", "netns", "exec", ns, "sh", "-c", cmd], check=check, timeout=timeout)


def vxlan_fdb(ns, prefix):
    """The remote entries of namespace `ns`'s vxlan devices named PREFIX
    and their VNI, in one dump: {(VNI, MAC, VTEP)} (the flood list's under
    MAC 00:00:00:00:00:00)."""
    out = sh(ns, "bridge -j fdb show").stdout
    return {(int(e["ifname"][len(prefix):]), e["mac"], e["dst"]) for e in json.loads(out or "[]")
            if e.get("dst") and e.get("ifname", "").startswith(prefix)}


def frr_pids(pathspace):
    """The process IDs of the zebra and bgpd running in FRR pathspace
    `pathspace`."""
    run = Path("/var/run/frr") / pathspace
    return [int((run / f"{d}.pid").read_text()) for d in ("zebra", "bgpd")]


class LinuxVtep:
    """Linux's own VTEP with FRR, in namespace `ns`: per VNI a bridge
    (brVNI) with a vxlan device (vxVNI) and one VM. By default one VNI,
    `VNI`, its VM `vm_ns` at `vm_ip`; `vnis` gives more ({VNI: (IP, MAC)},
    their VMs' namespaces from `vm_ns_of`; {VNI: None}: a segment with no
    VM)."""

    def __init__(self, fabric, ns, index, vnis=None, irb=None):
        self.fabric, self.ns, self.index = fabric, ns, index
        # Symmetric IRB as FRR documents it, in the default VRF (this
        # kernel has no VRF devices): {"l3_vni": N, "mac": anycast MAC,
        # "gateways": {VNI: "IP/prefix"}}.
        self.irb = irb
        self.ip = f"{UNDERLAY}.{20 + index}"
        self.vtep = self.ip
        self.vm_ns = f"{ns}-vm"
        self.vm_ip = f"{OVERLAY}.{20 + index}"
        self.vm_mac = f"02:42:00:00:{index:02x}:0a"
        self.vnis = vnis or {VNI: (self.vm_ip, self.vm_mac)}
        self.dir = fabric.tmp / ns

    def vm_ns_of(self, vni):
        """The namespace of the VM in `vni`."""
        return self.vm_ns if vni == next(iter(self.vnis)) else f"{self.ns}-v{vni}"

    def build(self):
        f = self.fabric
        for i, (vni, vm) in enumerate(self.vnis.items()):
            ip, mac = vm or (None, None)
            sh(self.ns, f"ip link add br{vni} type bridge && ip link set br{vni} up"
                        f" && ip link add vx{vni} type vxlan id {vni} local {self.ip} dstport 4789 nolearning"
                        f" && ip link set vx{vni} mtu 1500 master br{vni} up"
                        f" && bridge link set dev vx{vni} learning off")
            if ip is None:
                continue
            vm_ns = self.vm_ns_of(vni)
            hvlab.run(["ip", "netns", "add", vm_ns])
            f.namespaces.append(vm_ns)
            hvlab.run(["ip", "-n", self.ns, "link", "add", f"v{i}", "type", "veth", "peer", "name", "eth0",
                       "netns", vm_ns])
            sh(self.ns, f"ip link set v{i} master br{vni} up")
            sh(vm_ns, "sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1"
                      f" && ip link set lo up && ip link set eth0 address {mac} mtu 1500"
                      f" && ip addr add {ip}/24 dev eth0 && ip link set eth0 up")
        if self.irb:
            l3 = self.irb["l3_vni"]
            sh(self.ns, f"sysctl -qw net.ipv4.ip_forward=1 && ip link add br{l3} type bridge && ip link set br{l3} up"
                        f" && ip link add vx{l3} type vxlan id {l3} local {self.ip} dstport 4789 nolearning"
                        f" && ip link set vx{l3} mtu 1500 master br{l3} up && bridge link set dev vx{l3} learning off")
            for vni, gw in ((v, g) for v, g in self.irb["gateways"].items() if v in self.vnis):
                sh(self.ns, f"ip link set br{vni} address {self.irb['mac']} && ip addr add {gw} dev br{vni}")
                sh(self.vm_ns_of(vni), f"ip route add default via {gw.split('/')[0]}")

    def start_frr(self, neighbors):
        run = Path("/var/run/frr") / self.ns
        for d in (run, self.dir):
            d.mkdir(parents=True, exist_ok=True)
        (self.dir / "empty.conf").write_text("")
        (self.dir / "vtysh.conf").write_text("")
        conf = [f"hostname {self.ns}", "!", f"router bgp {ASN}", f" bgp router-id {self.ip}",
                " no bgp default ipv4-unicast", " timers bgp 3 9"]
        for n in neighbors:
            conf += [f" neighbor {n} remote-as {ASN}", f" neighbor {n} timers connect 2"]
        if self.irb:
            conf[1:1] = [f"vni {self.irb['l3_vni']}", "!"]
            conf += [" !", " address-family ipv4 unicast", "  redistribute connected", " exit-address-family"]
        conf += [" !", " address-family l2vpn evpn"] + [f"  neighbor {n} activate" for n in neighbors]
        conf += ["  advertise-all-vni"] + (["  advertise ipv4 unicast"] if self.irb else [])
        conf += [" exit-address-family", "!"]
        (self.dir / "frr.conf").write_text("\n".join(conf) + "\n")
        hvlab.run(["chown", "-R", "frr:frr", str(run), str(self.dir)])
        os.chmod(self.dir, 0o755)
        for daemon in ("zebra", "bgpd"):
            sh(self.ns, f"{FRR}/{daemon} -d -N {self.ns} -P 0 -f {self.dir}/empty.conf"
                        f" --log file:{self.dir}/{daemon}.log")
            assert hvlab.eventually(lambda d=daemon: (run / f"{d}.vty").exists(), timeout=20), daemon
        self.vtysh("-f", str(self.dir / "frr.conf"))

    def vtysh(self, *args):
        return hvlab.run(["vtysh", "-N", self.ns, "--config_dir", str(self.dir), *args]).stdout

    def fdb(self, vni=VNI):
        """The vxlan device's remote entries: {MAC: VTEP}."""
        out = sh(self.ns, f"bridge -j fdb show dev vx{vni}").stdout
        return {e["mac"]: e.get("dst") for e in json.loads(out or "[]") if e.get("dst")}

    def fdb_all(self):
        """Every vxlan device's remote entries, in one dump (`vxlan_fdb`)."""
        return vxlan_fdb(self.ns, "vx")

    def frr_pids(self):
        """Its zebra's and bgpd's process IDs."""
        return frr_pids(self.ns)

    def stop_frr(self):
        run = Path("/var/run/frr") / self.ns
        for daemon in ("bgpd", "zebra"):
            try:
                pid = int((run / f"{daemon}.pid").read_text())
                os.kill(pid, signal.SIGTERM)
                hvlab.eventually(lambda p=pid: not Path(f"/proc/{p}").exists(), timeout=10)
            except (OSError, ValueError):
                pass
        subprocess.run(["rm", "-rf", str(run)], check=False)


class HvnetHost:
    """An hvnet host: its switch (and FRR) inside namespace `ns`."""

    def __init__(self, fabric, ns, index, vms, team=False):
        self.fabric, self.ns, self.index = fabric, ns, index
        self.ip = f"{UNDERLAY}.{10 + index}"
        self.vtep = f"{UNDERLAY}.{index}"
        self.vms = vms
        self.topo = None
        # On a team: two members into the underlay, the tunnel's traffic
        # by `u1` (active-backup, `u0` the backup), BGP from the host's own
        # address on `u0`.
        self.team = team

    def uplink(self, vxlan):
        if self.team:
            return dict(name="up0", devices=["u0", "u1"], teaming="active-backup", order=["u1", "u0"],
                        mtu=1550, vxlan=vxlan)
        return dict(name="up0", device="u0", mtu=1550, vxlan=vxlan)

    def up(self, neighbors, remotes=None):
        """With `remotes`: the static set-up instead (no EVPN, no FRR)."""
        vxlan = dict(vni=VNI, local=f"{self.vtep}/24", evpn=remotes is None)
        if remotes is not None:
            vxlan["remotes"] = remotes
        vxlan.update(self.fabric.vxlan)
        uplink = dict(self.uplink(vxlan), **self.fabric.uplink)
        self.topo = hvlab.Topology(
            self.fabric.tmp, self.vms, prefix=f"e{self.index}", netns=self.ns,
            uplinks=[uplink], tables=self.fabric.tables,
            frr=dict(asn=ASN, router_id=self.ip, neighbors=neighbors) if remotes is None else None)
        self.topo.__enter__()

    def pid(self):
        """The switch's daemon."""
        return json.loads(Path(f"/run/hvnet/{self.topo.name}/state.json").read_text())["pid"]

    def evpn(self):
        return json.loads(self.topo.hv("evpn", "--json").stdout)

    def vxlan(self):
        return self.topo.stats("/uplinks/up0/vxlan")

    def shadow_fdb(self):
        """Its shadow vxlan devices' remote entries, what its zebra installed
        and the switch's sync follows (`vxlan_fdb`)."""
        return vxlan_fdb(self.ns, "hvx-")

    def frr_pids(self):
        """The zebra's and bgpd's process IDs of the FRR its switch started."""
        return frr_pids(f"hvnet-{self.topo.name}")

    def remote_macs(self, origin="evpn"):
        return {m["mac"]: m["remote"] for m in self.vxlan()["remote_macs"] if m["origin"] == origin}

    def down(self):
        if self.topo:
            self.topo.__exit__(None, None, None)
            self.topo = None


class Injector:
    """A BGP speaker that advertises what a big fabric would (GoBGP, in
    namespace `ns`): its routes are added while its sessions are down, and
    sent when they are brought up."""

    def __init__(self, fabric, ns):
        self.fabric, self.ns = fabric, ns
        self.ip = f"{UNDERLAY}.30"
        self.proc = None

    def start(self, neighbors):
        conf = [f'[global.config]\n  as = {ASN}\n  router-id = "{self.ip}"\n']
        for n in neighbors:
            conf.append(f'[[neighbors]]\n  [neighbors.config]\n    neighbor-address = "{n}"\n    peer-as = {ASN}\n'
                        f'    admin-down = true\n  [[neighbors.afi-safis]]\n    [neighbors.afi-safis.config]\n'
                        f'      afi-safi-name = "l2vpn-evpn"\n')
        path = self.fabric.tmp / f"{self.ns}.toml"
        path.write_text("".join(conf))
        self.proc = subprocess.Popen(["ip", "netns", "exec", self.ns, "gobgpd", "-f", str(path), "-t", "toml",
                                      "-l", "warn"], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        assert hvlab.eventually(lambda: self.gobgp("global", check=False).returncode == 0, timeout=20), "gobgpd"

    def gobgp(self, *args, check=True):
        return hvlab.run(["ip", "netns", "exec", self.ns, "gobgp", *args], check=check)

    def advertise(self, vteps, macs_per_vtep, first=100, vnis=(VNI,)):
        """Type 3 for `vteps` endpoints (UNDERLAY.first ...) and, behind each,
        `macs_per_vtep` type-2 MAC/IP routes, endpoint v in VNI
        `vnis[v % len(vnis)]`; returns (VTEPs, MACs); with several VNIs,
        the MACs as (VNI, MAC)."""
        script, vtep_ips, macs = [], [], []
        for v in range(vteps):
            ip = f"{UNDERLAY}.{first + v}"
            vni = vnis[v % len(vnis)]
            vtep_ips.append(ip)
            rd = f"{ip}:{vni}"
            # FRR installs a type 3 route as a flood-list entry only with a
            # PMSI tunnel of ingress replication (RFC 8365 §9).
            script.append(f"gobgp global rib -a evpn add multicast {ip} etag 0 rd {rd} rt {ASN}:{vni} encap vxlan"
                          f" pmsi ingress-repl {vni} {ip} nexthop {ip}")
            for m in range(macs_per_vtep):
                mac = f"02:dd:00:{v:02x}:{m >> 8:02x}:{m & 255:02x}"
                macs.append(mac if len(vnis) == 1 else (vni, mac))
                script.append(f"gobgp global rib -a evpn add macadv {mac} {OVERLAY_SCALE}.{100 + v}.{m} etag 0 label {vni}"
                              f" rd {rd} rt {ASN}:{vni} encap vxlan nexthop {ip}")
        path = self.fabric.tmp / f"{self.ns}.sh"
        path.write_text("set -e\n" + "\n".join(script) + "\n")
        hvlab.run(["ip", "netns", "exec", self.ns, "sh", str(path)], timeout=600)
        return vtep_ips, macs

    def enable(self, neighbor):
        self.gobgp("neighbor", neighbor, "enable")

    def stop(self):
        if self.proc:
            hvlab.stop_procs([self.proc])
            self.proc = None


class EvpnFabric:
    """`hvnet_vms` lists, per hvnet host, its VMs (dicts as hvlab.Topology
    takes them); `linux` Linux VTEPs join them; with `injector`, a GoBGP
    speaker too (every FRR peers with it); with `evpn` False, the hvnet
    hosts are the static set-up instead (each other's `remotes`); the
    hvnet hosts whose indices `teams` lists have their uplink on a team;
    `vxlan` and `uplink` add keys to every hvnet host's `[uplink.vxlan]`
    and `[[uplink]]` (several segments: `vni`, `vlans`, `vlan`), and
    `linux_vnis` gives the Linux VTEPs' VNIs and VMs (as `LinuxVtep`'s
    `vnis`, each VTEP's VM at the same addresses; a list: one each),
    `linux_irb` their
    symmetric IRB (`LinuxVtep`'s `irb`); `tables` adds top-level tables
    to every hvnet host's topology (`[[tenant]]`)."""

    def __init__(self, tmp, hvnet_vms, linux=1, injector=False, evpn=True, teams=(), vxlan=None, uplink=None,
                 linux_vnis=None, linux_irb=None, tables=None):
        self.tmp = Path(tmp)
        p = hvlab.unique("ev")[:9]
        self.fab = f"{p}-fab"
        self.namespaces = []
        self.evpn = evpn
        self.vxlan, self.uplink, self.tables = dict(vxlan or {}), dict(uplink or {}), tables
        self.hvnet = [HvnetHost(self, f"{p}-h{i + 1}", i + 1, vms, team=i in teams)
                      for i, vms in enumerate(hvnet_vms)]
        # (A list gives each Linux VTEP its own VMs.)
        per = linux_vnis if isinstance(linux_vnis, list) else [linux_vnis] * linux
        self.linux = [LinuxVtep(self, f"{p}-l{j + 1}", j + 1, per[j], linux_irb) for j in range(linux)]
        self.injector = Injector(self, f"{p}-g") if injector else None

    def hosts(self):
        return self.hvnet + self.linux

    def bgp_hosts(self):
        return self.hosts() + ([self.injector] if self.injector else [])

    def __enter__(self):
        try:
            self.build()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def build(self):
        hvlab.run(["ip", "netns", "add", self.fab])
        self.namespaces.append(self.fab)
        hvlab.run(["ip", "-n", self.fab, "link", "add", "ufab", "mtu", "1600", "type", "bridge"])
        hvlab.run(["ip", "-n", self.fab, "link", "set", "ufab", "up"])
        for i, h in enumerate(self.bgp_hosts()):
            hvlab.run(["ip", "netns", "add", h.ns])
            self.namespaces.append(h.ns)
            hvlab.run(["ip", "-n", self.fab, "link", "add", f"f{i}", "mtu", "1600", "type", "veth",
                       "peer", "name", "u0", "mtu", "1600", "netns", h.ns])
            hvlab.run(["ip", "-n", self.fab, "link", "set", f"f{i}", "master", "ufab", "up"])
            sh(h.ns, f"sysctl -qw net.ipv6.conf.all.disable_ipv6=1 && ip link set lo up"
                     f" && ip addr add {h.ip}/24 dev u0 && ip link set u0 up")
            if getattr(h, "team", False):
                hvlab.run(["ip", "-n", self.fab, "link", "add", f"f{i}t", "mtu", "1600", "type", "veth",
                           "peer", "name", "u1", "mtu", "1600", "netns", h.ns])
                hvlab.run(["ip", "-n", self.fab, "link", "set", f"f{i}t", "master", "ufab", "up"])
                sh(h.ns, "ip link set u1 up")
        everyone = [h.ip for h in self.bgp_hosts()]
        if self.injector:
            self.injector.start([h.ip for h in self.hosts()])
        for h in self.linux:
            h.build()
            h.start_frr([n for n in everyone if n != h.ip])
        for h in self.hvnet:
            if self.evpn:
                h.up([n for n in everyone if n != h.ip])
            else:
                h.up([], remotes=[o.vtep for o in self.hvnet if o is not h])

    def wait_established(self, timeout=60):
        """Every host's BGP sessions up."""
        def all_up():
            # (The injector's sessions stay down until it is told.)
            others = [h.ip for h in self.hosts()]
            for h in self.hvnet:
                bgp = h.evpn().get("bgp", {})
                peers = bgp.get("l2VpnEvpn", bgp).get("peers", {})
                if any(peers.get(n, {}).get("state") != "Established" for n in others if n != h.ip):
                    return False
            for h in self.linux:
                s = json.loads(h.vtysh("-c", "show bgp l2vpn evpn summary json"))
                peers = s.get("l2VpnEvpn", s).get("peers", {})
                if any(peers.get(n, {}).get("state") != "Established" for n in others if n != h.ip):
                    return False
            return True
        assert hvlab.eventually(all_up, timeout=timeout, every=0.5), "BGP sessions not all Established"


    def __exit__(self, *exc):
        if self.injector:
            self.injector.stop()
        for h in self.hvnet:
            h.down()
        for h in self.linux:
            h.stop_frr()
        for ns in reversed(self.namespaces):
            hvlab.run(["ip", "netns", "del", ns], check=False)
        return False


def wait_until(check, timeout=30.0, every=0.01):
    """Seconds until `check()` is true (raises after `timeout`)."""
    t0 = time.monotonic()
    assert hvlab.eventually(check, timeout=timeout, every=every), f"not within {timeout} s"
    return time.monotonic() - t0


def main():
    """`python3 lab/evpn_fabric.py [--hold SECONDS]`: two hvnet hosts and a
    Linux VTEP, a VM each; every VM pings every other; the first host's
    `hvnet evpn` is shown; the fabric stays up until Enter (or SECONDS),
    then everything is removed."""
    import argparse
    import tempfile

    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("--hold", type=float, help="keep the fabric up this long instead of until Enter")
    a = ap.parse_args()
    if not have_frr():
        raise SystemExit("evpn_fabric: FRR is not installed (scripts/install-deps.sh installs it)")
    with tempfile.TemporaryDirectory() as tmp:
        vms = [[dict(name="vm1", ipv4=f"{OVERLAY}.1/24")], [dict(name="vm2", ipv4=f"{OVERLAY}.2/24")]]
        print("building: a fabric namespace, two hvnet hosts and a Linux VTEP, FRR on each ...", flush=True)
        with EvpnFabric(tmp, vms) as f:
            f.wait_established()
            h1, h2, lin = f.hvnet[0], f.hvnet[1], f.linux[0]
            vm = {"vm1": h1.topo.ns("vm1"), "vm2": h2.topo.ns("vm2"), "linux-vm": lin.vm_ns}
            ips = {"vm1": f"{OVERLAY}.1", "vm2": f"{OVERLAY}.2", "linux-vm": lin.vm_ip}
            for src in vm:
                for dst in vm:
                    if src != dst:
                        ok = sh(vm[src], f"ping -c 2 -i 0.2 -W 2 {ips[dst]}", check=False).returncode == 0
                        print(f"  {src} -> {dst} ({ips[dst]}): {'ok' if ok else 'FAILED'}")
            print(f"\n$ hvnet evpn -t {h1.topo.name}")
            print(h1.topo.hv("evpn").stdout)
            print(f"hosts (namespaces): {h1.ns}, {h2.ns} (hvnet, topologies {h1.topo.name} and {h2.topo.name}), "
                  f"{lin.ns} (Linux); VMs: {', '.join(vm.values())}")
            print(f"try: hvnet evpn -t {h2.topo.name}; ip netns exec {lin.ns} bridge fdb show dev vx{VNI}; "
                  f"hvnet port vm1 -t {h1.topo.name} set connected=off")
            if a.hold is not None:
                time.sleep(a.hold)
            else:
                input("Enter removes the fabric ... ")
        print("removed")


if __name__ == "__main__":
    main()
