"""Routing across hosts with symmetric IRB, measured (no study, no
verdict): two hvnet hosts and two Linux VTEPs with FRR's symmetric IRB
(an L3 VNI, anycast gateways; the default VRF, as this kernel has no VRF
devices), one fabric, one run:

- throughput of a VM on one host to a VM in the other subnet on another
  host, routed at both ends: hvnet to hvnet beside Linux to Linux,
  interleaved, 1 and 4 streams;
- how soon a new VM's MAC/IP route is installed at the other host of its
  kind: from the moment the VM is there (hvnet: `hvnet vm add` returned;
  Linux: its first ARP to its gateway answered) to the moment the other
  host routes to it through the L3 VNI (hvnet: its router has the host
  route; Linux: its kernel does), polled every 5 ms.
"""

import time

import evpn_fabric as ef
import hvlab

from .figures import measured
from .runners import interleaved, iperf
from .verdict import median

L3 = 5999
GW = {5010: "198.19.80.254/24", 5020: "198.19.81.254/24"}
NOTE = ("Four hosts on one machine (2 cores), each a network namespace on one bridge: two hvnet hosts (VLAN 10 in "
        "VNI 5010, VLAN 20 in 5020, the L3 VNI 5999 in VLAN 999) and two Linux VTEPs (a bridge and vxlan device per "
        "VNI, SVIs with the anycast gateway, FRR's `vni 5999` and `advertise ipv4 unicast`), FRR 8.4 on each, iBGP "
        "full mesh. VMs are namespaces (hvnet: TAP ports; Linux: veth pairs into the bridges).")


class Pair:
    """Two VMs in two subnets on two hosts, as the runner drives them."""

    def __init__(self, name, ns_a, ns_b, a_ip, b_ip):
        self.name, self.nss, self.a_ip, self.b_ip = name, {"a": ns_a, "b": ns_b}, a_ip, b_ip

    def ns(self, vm):
        return self.nss[vm]

    def sh(self, vm, cmd, **kw):
        return hvlab.run(["ip", "netns", "exec", self.nss[vm], "sh", "-c", cmd], **kw)

    def popen(self, vm, cmd):
        import subprocess
        return subprocess.Popen(["ip", "netns", "exec", self.nss[vm], "sh", "-c", f"exec {cmd}"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def wait_listening(self, vm, port):
        hvlab.wait_listening(self.nss[vm], port)

    def command(self, vm, cmd):
        return f"ip netns exec {self.nss[vm]} {cmd}"


def fabric(tmp):
    vms = [[dict(name="a", ipv4="198.19.80.1/24", vlan=10)], [dict(name="b", ipv4="198.19.81.2/24", vlan=20)]]
    linux = [{5010: ("198.19.80.21", "02:70:00:00:01:01"), 5020: ("198.19.81.121", "02:70:00:00:01:02")},
             {5010: ("198.19.80.122", "02:70:00:00:02:01"), 5020: ("198.19.81.22", "02:70:00:00:02:02")}]
    tenant = dict(name="blue", gateways={"10": GW[5010], "20": GW[5020]}, l3_vni=L3)
    f = ef.EvpnFabric(tmp, vms, linux=2, vxlan=dict(vni=5010, vlans={"20": 5020, "999": L3}), uplink=dict(vlan=10),
                      linux_vnis=linux, linux_irb=dict(l3_vni=L3, mac="02:68:76:00:00:01", gateways=GW),
                      tables=dict(tenant=[tenant]))
    return f


def routed(h, prefix):
    t = ef.json.loads(h.topo.hv("route", "--json").stdout)["tenants"][0]
    return any(f"{r['to'][0]}/{r['to'][1]}" == prefix for r in t["remote"])


def install_times(f, n, log):
    """`n` new VMs each way: hvnet host 1 -> host 2, Linux l1 -> l2."""
    h1, h2 = f.hvnet
    l1, l2 = f.linux
    out = {"hvnet": [], "linux": []}
    for i in range(n):
        ip = f"198.19.80.{50 + i}"
        t0 = time.monotonic()
        h1.topo.hv("vm", "add", f"n{i}", "vlan=10", f"ipv4={ip}/24")
        t1 = time.monotonic()
        assert hvlab.eventually(lambda: routed(h2, f"{ip}/32"), timeout=30, every=0.005), ip
        out["hvnet"].append({"v": time.monotonic() - t1, "add_s": t1 - t0})
        log.append({"command": f"hvnet vm add n{i} ({ip}) on {h1.ns}; poll hvnet route on {h2.ns}",
                    "seconds": out["hvnet"][-1]["v"]})
        lip = f"198.19.80.{150 + i}"
        vm = f"{l1.ns}-n{i}"
        hvlab.run(["ip", "netns", "add", vm])
        f.namespaces.append(vm)
        hvlab.run(["ip", "-n", l1.ns, "link", "add", f"n{i}", "type", "veth", "peer", "name", "eth0", "netns", vm])
        ef.sh(l1.ns, f"ip link set n{i} master br5010 up")
        ef.sh(vm, f"ip link set lo up && ip link set eth0 address 02:70:00:00:09:{i:02x} up && ip addr add {lip}/24 "
                  "dev eth0 && ip route add default via 198.19.80.254")
        ef.sh(vm, "ping -c 1 -W 2 198.19.80.254")
        t1 = time.monotonic()
        assert hvlab.eventually(lambda: f"{lip} " in ef.sh(l2.ns, f"ip route show {lip}").stdout, timeout=30,
                                every=0.005), lip
        out["linux"].append({"v": time.monotonic() - t1})
        log.append({"command": f"a VM ({lip}) on {l1.ns} pings its gateway; poll ip route on {l2.ns}",
                    "seconds": out["linux"][-1]["v"]})
    return out


def irb(tmp, quick, reps, log):
    secs = 2 if quick else 3
    with fabric(tmp) as f:
        f.wait_established()
        h1, h2 = f.hvnet
        l1, l2 = f.linux
        for lin in f.linux:
            for vni, gw in GW.items():
                ef.sh(lin.vm_ns_of(vni), f"ping -c 1 -W 2 {gw.split('/')[0]}")
        pairs = {"hvnet": Pair("hvnet", h1.topo.ns("a"), h2.topo.ns("b"), "198.19.80.1", "198.19.81.2"),
                 "linux": Pair("linux", l1.vm_ns_of(5010), l2.vm_ns_of(5020), "198.19.80.21", "198.19.81.22")}
        for p in pairs.values():
            assert hvlab.eventually(lambda p=p: p.sh("a", f"ping -c 1 -W 1 {p.b_ip}", check=False).returncode == 0,
                                    timeout=60, every=0.5), p.name
        configs = [(name, streams) for streams in (1, 4) for name in pairs]
        runs = interleaved(configs, reps, lambda c: iperf(pairs[c[0]], c[1], "64K", secs, None, log))
        installs = install_times(f, 3 if quick else 10, log)
    place = lambda c: (c[0], f"{c[1]} stream{'s' if c[1] > 1 else ''}")  # noqa: E731

    def r(key, s):
        mine = median([x[key] for x in runs[("hvnet", s)]])
        theirs = median([x[key] for x in runs[("linux", s)]])
        return mine / theirs if theirs else float("nan")
    said = lambda key: "; ".join(f"{s} stream{'s' if s > 1 else ''}: hvnet / Linux {r(key, s):.2f}"  # noqa: E731
                                 for s in (1, 4))
    inst = {(k, "new VM's host route"): v for k, v in installs.items()}
    figs = [
        measured("irb-throughput", "Routed across hosts (symmetric IRB): VM to VM", "streams", "Gbit/s", runs, "gbps",
                 place, "is a VM-to-VM stream routed across two hvnet hosts as fast as across two Linux VTEPs with "
                 "FRR's symmetric IRB?", said("gbps"), NOTE),
        measured("irb-efficiency", "Routed across hosts: Gbit/s per busy core", "streams", "Gbit/s per busy core",
                 runs, "gbps_per_core", place, "and for how much CPU?", said("gbps_per_core"), NOTE),
        measured("irb-install", "A new VM's host route installed at another host", "", "seconds", inst, "v",
                 lambda c: (c[0], c[1]), "how soon does another host route to a new VM?",
                 "median hvnet {:.3f} s, Linux {:.3f} s: hvnet / Linux {:.2f}".format(
                     median([x["v"] for x in installs["hvnet"]]), median([x["v"] for x in installs["linux"]]),
                     median([x["v"] for x in installs["hvnet"]]) / max(median([x["v"] for x in installs["linux"]]),
                                                                        1e-9)),
                 NOTE + " hvnet's VM is advertised when it is added (its address is in the topology); Linux's when "
                        "its bridge's SVI has heard its ARP."),
    ]
    return figs, {**{f"{c[0]} {c[1]}": v for c, v in runs.items()}, **{k: v for k, v in installs.items()}}
