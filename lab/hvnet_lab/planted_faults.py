"""Faults planted as an operator would make them by mistake, each with the
real traffic that shows it, and what `hvnet diagnose` must name first:
the system tests run each once (tests/py/test_diagnose.py), the lab's
`diagnose-faults` experiment runs them and the healthy case again and
again and counts.

One topology of namespace VMs holds the single-host faults; a second, with
a team of two veths and a VXLAN endpoint whose remote is not there, the
uplink ones."""

import contextlib
import json
import os
import subprocess
from pathlib import Path

import hvlab

NET = "198.18.76"
GROUPS = [{"name": "ssh", "rules": [{"direction": "in", "protocol": "tcp", "ports": "22"}]},
          {"name": "out", "rules": [{"direction": "out"}]}]
VLAN_PROBE = Path(__file__).resolve().parents[2] / "tests" / "py" / "vlan_probe.py"


def vm(name, ipv4, **settings):
    return dict(name=name, ipv4=f"{ipv4}/24", **settings)


VMS = [vm("a", f"{NET}.1", source_guard=True),
       vm("b", f"{NET}.2"),
       vm("r", f"{NET}.3", queues=1, delivery="thread", rx_overflow="drop"),
       vm("d", f"{NET}.4", security_groups=["ssh", "out"]),
       vm("e", f"{NET}.5", vlan_mode="trunk", vlans=[10]),
       vm("w", f"{NET}.6", queues=1, delivery="thread")]


def diagnose(t, name, window=1.5):
    return json.loads(t.hv("diagnose", name, "-w", str(window), "--json").stdout)


def first(v):
    """The first finding's cause and setting (None, None for none)."""
    if not v["findings"]:
        return None, None
    f = v["findings"][0]
    return f["cause"], f["setting"]


@contextlib.contextmanager
def running(t, vm_, cmd):
    p = t.popen(vm_, cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield p
    finally:
        p.kill()
        p.wait()


def iperf(t, client, ip, *args, seconds=6):
    return running(t, client, f"iperf3 -c {ip} -t {seconds} {' '.join(args)}")


def pinging(t, vm_, args):
    return running(t, vm_, f"ping -i 0.1 -c 200 {args}")


@contextlib.contextmanager
def single_host(tmp):
    """The single-host topology, iperf3 servers at b, r and d."""
    with hvlab.Topology(tmp, VMS, prefix="dg", tables={"security_group": GROUPS}) as t:
        t.servers = {n: t.popen(n, f"iperf3 -s -B {NET}.{i}", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                     for n, i in (("b", 2), ("r", 3), ("d", 4), ("w", 6))}
        for n in ("b", "r", "d", "w"):
            t.wait_listening(n, 5201)
        t.sh("a", f"ping -c 1 -W 5 {NET}.2")
        yield t


def healthy(t):
    """iperf3 at line rate, 4 streams, a to b: b's diagnosis."""
    with iperf(t, "a", f"{NET}.2", "-P", "4"):
        return diagnose(t, "b")


# Each fault: (name, the VM diagnosed, what must come first, plant, undo,
# the traffic that shows it, the window). plant/undo take the topology.
def set_(name, *kv):
    return lambda t: t.hv("port", name, "set", *kv)


def sh(name, cmd):
    return lambda t: t.sh(name, cmd)


# 2 % of the segments b's iperf3 server is sent dropped by b's own
# firewall (nftables in its namespace), after the switch delivered them:
# the sender, a, sends them again.
LOSSY = ("nft add table inet hvlossy && nft add chain inet hvlossy in '{ type filter hook prerouting priority 0; }' "
         "&& nft add rule inet hvlossy in tcp dport 5201 numgen random mod 50 == 0 drop")


def tagged(t):
    return running(t, "e", f"sh -c 'for i in $(seq 60); do {os.sys.executable} {VLAN_PROBE} send eth0 "
                           "ff:ff:ff:ff:ff:ff 30 x y; sleep 0.05; done'")


SINGLE = [
    ("ring of 64", "r", ("ring_full", "ring1=64"), set_("r", "ring1=64", "ring2=64"),
     set_("r", "ring1=1024", "ring2=1024"), lambda t: iperf(t, "a", f"{NET}.3", "-P", "4"), 1.5),
    ("a ring of 64 under backpressure", "w", ("ring_small", "ring1=64"), set_("w", "ring1=64", "ring2=64"),
     set_("w", "ring1=1024", "ring2=1024"), lambda t: iperf(t, "a", f"{NET}.6", "-P", "4"), 1.5),
    ("frames lost past the switch (the receiver's firewall)", "a", ("retransmissions", None), sh("b", LOSSY),
     sh("b", "nft delete table inet hvlossy"), lambda t: iperf(t, "a", f"{NET}.2"), 1.5),
    ("lro=off", "b", ("lro_off", "lro=off"), set_("b", "lro=off"), set_("b", "lro=on"),
     lambda t: iperf(t, "a", f"{NET}.2"), 1.5),
    ("tx_rate=10mbit", "a", ("tx_rate", "tx_rate=10mbit"), set_("a", "tx_rate=10mbit"), set_("a", "tx_rate=none"),
     lambda t: iperf(t, "a", f"{NET}.2"), 1.5),
    ("cpu_limit=5", "a", ("cpu_limit", "cpu_limit=5"), set_("a", "cpu_limit=5"), set_("a", "cpu_limit=0"),
     lambda t: iperf(t, "a", f"{NET}.2", "-P", "2"), 1.5),
    ("mtu 9000 on one side (the sender)", "a", ("mtu", "mtu=9000"), set_("a", "mtu=9000"), set_("a", "mtu=1500"),
     lambda t: pinging(t, "a", f"-s 4000 {NET}.2"), 1.5),
    ("mtu 9000 on one side (the receiver)", "b", ("mtu", "mtu=1500"), set_("a", "mtu=9000"), set_("a", "mtu=1500"),
     lambda t: pinging(t, "a", f"-s 4000 {NET}.2"), 1.5),
    ("a security group without the service's port", "d", ("acl_in", "security_groups"), lambda t: None,
     lambda t: None, lambda t: iperf(t, "a", f"{NET}.4", seconds=3), 1.5),
    ("an address not its own", "a", ("source_guard", "source_guard=on"), sh("a", f"ip addr add {NET}.99/24 dev eth0"),
     sh("a", f"ip addr del {NET}.99/24 dev eth0"), lambda t: pinging(t, "a", f"-I {NET}.99 {NET}.2"), 1.5),
    ("a trunk without the VLAN", "e", ("vlan_not_allowed", "vlans=10"), lambda t: None, lambda t: None, tagged, 1.5),
    ("a neighbour nobody has", "a", ("neighbour_unknown", None), lambda t: None, lambda t: None,
     lambda t: pinging(t, "a", f"{NET}.200"), 3.5),
]


@contextlib.contextmanager
def guest_held(t, percent=10):
    """b's guest (its iperf3 server) in a CPU cgroup of `percent` of a core."""
    with hvlab.CpuLimit(percent) as cpu:
        cpu.add_process(t.servers["b"].pid)
        yield


def held_guest(t):
    """b's guest held to 10 % of a core, under iperf3: b's diagnosis."""
    with guest_held(t), iperf(t, "a", f"{NET}.2"):
        return diagnose(t, "b")


def plant(t, fault):
    """One fault of SINGLE planted, shown, diagnosed and undone: the
    diagnosis."""
    _, who, _, put, undo, traffic, window = fault
    put(t)
    try:
        with traffic(t):
            return diagnose(t, who, window)
    finally:
        undo(t)


@contextlib.contextmanager
def uplink_host(tmp):
    """A topology with a team of two veths (up0, its member m2's far end
    down) and a VXLAN endpoint (vx0, VLAN 7) whose one peer is not there;
    VM a (VLAN 0) and VM t (VLAN 7)."""
    m1, m2, vx = (hvlab.unique("hvdm") for _ in range(3))
    for dev in (m1, m2, vx):
        hvlab.run(["ip", "link", "add", dev, "type", "veth", "peer", "name", dev + "p"])
        hvlab.run(["ip", "link", "set", dev + "p", "up"])
    try:
        vms = [vm("a", f"{NET}.21"), vm("t", f"{NET}.22", vlan=7)]
        uplinks = [dict(name="up0", devices=[m1, m2], teaming="active-backup"),
                   dict(name="vx0", device=vx, vlan=7,
                        vxlan=dict(vni=77, local="198.18.9.21/24", remotes=["198.18.9.29"]))]
        with hvlab.Topology(tmp, vms, prefix="dg", uplinks=uplinks) as t:
            hvlab.run(["ip", "link", "set", m2 + "p", "down"])
            team = lambda: json.loads(t.hv("team", "--json").stdout)["teams"][0]
            assert hvlab.eventually(lambda: any(not m["carrier"] for m in team()["members"]), timeout=30), team()
            t.member_down = m2
            yield t
    finally:
        for dev in (m1, m2, vx):
            hvlab.run(["ip", "link", "del", dev], check=False)


def team_member_down(t):
    return diagnose(t, "a", window=0.5)


def missing_peer(t):
    with pinging(t, "t", f"{NET}.40"):
        return diagnose(t, "t", window=3.5)


def guest_gone(t, name="d"):
    """The guest of `name` gone (its namespace deleted): its diagnosis."""
    t.servers.get(name) and t.servers[name].kill()
    hvlab.run(["ip", "netns", "del", t.ns(name)])
    assert hvlab.eventually(lambda: json.loads(t.hv("port", name, "--json").stdout)["link"] != "up", timeout=30)
    return diagnose(t, name, window=0.5)


def diagnose_faults(tmp, quick, reps, log):
    """The lab experiment: every planted fault `reps` times (its first
    finding and setting as expected or not), the healthy VM under iperf3
    with 4 streams ten times (no finding or not)."""
    from .figures import measured

    runs = {}

    def record(name, v, want):
        got = first(v)
        ok = got == want
        runs.setdefault(name, []).append({"named_first": 1.0 if ok else 0.0, "got": got, "want": want})
        log.append({"command": f"hvnet diagnose ({name})", "fault": name, "got": list(got), "want": list(want),
                    "ok": ok, "findings": v["findings"]})

    healthy_runs = 3 if quick else 10
    for rep in range(reps):
        with single_host(tmp) as t:
            for fault in SINGLE:
                record(fault[0], plant(t, fault), fault[2])
            record("a guest held to 10 % of a core", held_guest(t), ("guest_cpu_quota", "cpu.cfs_quota_us=10000"))
            if rep == 0:
                for _ in range(healthy_runs):
                    record("healthy, iperf3 -P 4", healthy(t), (None, None))
            record("its guest gone", guest_gone(t), ("link_down", None))
        with uplink_host(tmp) as t:
            record("a team member down", team_member_down(t), ("team_degraded", None))
            record("a tunnel without the remote's peer", missing_peer(t), ("neighbour_unknown", None))
    said = "; ".join(f"{name}: {sum(r['named_first'] for r in rs):.0f} of {len(rs)}" for name, rs in runs.items())
    note = ("Each fault planted on a running topology of namespace VMs with the traffic that shows it, "
            "`hvnet diagnose VM -w 1.5 --json` (3.5 s for the neighbour, 0.5 s for the link and the team), and undone; "
            "a run counts when the first finding is the fault's cause with its setting. The healthy case is b "
            "under iperf3 from a at line rate with 4 streams: a run counts when there is no finding.")
    figs = [measured("diagnose-faults", "Planted faults named first by hvnet diagnose", "fault",
                     "share of runs named first", runs, "named_first", lambda c: ("hvnet diagnose", c),
                     "does diagnose name each planted fault first, with its setting, every time; and nothing on a "
                     "healthy VM?", said, note)]
    return figs, runs
