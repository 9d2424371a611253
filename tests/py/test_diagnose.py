"""`hvnet diagnose VM` against faults planted as an operator would make
them by mistake, one at a time on one topology of namespace VMs with
real traffic (iperf3, ping, raw tagged frames): each is named as the
first finding, with the setting that causes it; a healthy VM under
iperf3 with 4 streams gets no finding."""

import contextlib
import csv
import io
import json
import os
import subprocess
from pathlib import Path

import pytest

import hvlab
from helpers import vm

pytestmark = pytest.mark.root

VLAN_PROBE = Path(__file__).with_name("vlan_probe.py")
NET = "198.18.76"
GROUPS = [{"name": "ssh", "rules": [{"direction": "in", "protocol": "tcp", "ports": "22"}]},
          {"name": "out", "rules": [{"direction": "out"}]}]


def diagnose(t, name, window=1.5):
    return json.loads(t.hv("diagnose", name, "-w", str(window), "--json").stdout)


def first(v):
    assert v["findings"], v
    f = v["findings"][0]
    return f["cause"], f["setting"]


@contextlib.contextmanager
def iperf(t, client, server_ip, *args, seconds=6):
    """iperf3 from `client` to the server at `server_ip` while inside."""
    p = t.popen(client, f"iperf3 -c {server_ip} -t {seconds} {' '.join(args)}",
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield p
    finally:
        p.kill()
        p.wait()


@contextlib.contextmanager
def pinging(t, vm_, args):
    p = t.popen(vm_, f"ping -i 0.1 -c 200 {args}", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield p
    finally:
        p.kill()
        p.wait()


def test_each_planted_fault_is_the_first_finding_with_its_setting(tmp_path):
    vms = [vm("a", f"{NET}.1", source_guard=True),
           vm("b", f"{NET}.2"),
           vm("r", f"{NET}.3", queues=1, delivery="thread", rx_overflow="drop"),
           vm("d", f"{NET}.4", security_groups=["ssh", "out"]),
           vm("e", f"{NET}.5", vlan_mode="trunk", vlans=[10])]
    with hvlab.Topology(tmp_path, vms, prefix="dg", tables={"security_group": GROUPS}) as t:
        servers = {n: t.popen(n, f"iperf3 -s -B {NET}.{i}", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                   for n, i in (("b", 2), ("r", 3), ("d", 4))}
        for n in ("b", "r"):
            t.wait_listening(n, 5201)
        t.sh("a", f"ping -c 1 -W 5 {NET}.2")

        # Healthy: iperf3 at line rate, 4 streams, a to b.
        with iperf(t, "a", f"{NET}.2", "-P", "4"):
            v = diagnose(t, "b")
        assert v["findings"] == [] and v["healthy"], v
        assert v["figures"]["received_frames_per_sec"] > 0 and v["guest_threads"] >= 1, v

        # A ring of 64 at a VM whose deliveries drop when it is full.
        t.hv("port", "r", "set", "ring1=64", "ring2=64")
        with iperf(t, "a", f"{NET}.3", "-P", "4"):
            assert first(diagnose(t, "r")) == ("ring_full", "ring1=64")
        t.hv("port", "r", "set", "ring1=1024", "ring2=1024")

        # LRO off where a sends TSO frames: delivered one segment at a time.
        t.hv("port", "b", "set", "lro=off")
        with iperf(t, "a", f"{NET}.2"):
            assert first(diagnose(t, "b")) == ("lro_off", "lro=off")
        t.hv("port", "b", "set", "lro=on")

        # A policer of 10 Mbit/s on what a sends.
        t.hv("port", "a", "set", "tx_rate=10mbit")
        with iperf(t, "a", f"{NET}.2", seconds=10):
            assert first(diagnose(t, "a")) == ("tx_rate", "tx_rate=10mbit")
            # ... and `hvnet top` marks a's row with it, b's with nothing.
            rows = list(csv.DictReader(io.StringIO(t.hv("top", "-b", "-d", "1", "-n", "2").stdout)))
            last = {r["port"]: r["finding"] for r in rows[len(rows) // 2:]}
            assert last["a"] == "tx_rate" and last["b"] == "", last
        t.hv("port", "a", "set", "tx_rate=none")

        # cpu_limit=5 on a, sending as fast as it can.
        t.hv("port", "a", "set", "cpu_limit=5")
        with iperf(t, "a", f"{NET}.2", "-P", "2"):
            assert first(diagnose(t, "a")) == ("cpu_limit", "cpu_limit=5")
        t.hv("port", "a", "set", "cpu_limit=0")

        # An MTU of 9000 on a, 1500 at b: a's large frames die at b.
        t.hv("port", "a", "set", "mtu=9000")
        with pinging(t, "a", f"-s 4000 {NET}.2"):
            assert first(diagnose(t, "a")) == ("mtu", "mtu=9000")
            assert first(diagnose(t, "b")) == ("mtu", "mtu=1500")
        t.hv("port", "a", "set", "mtu=1500")

        # A security group without the service's port: d takes only SSH.
        with iperf(t, "a", f"{NET}.4", seconds=3):
            v = diagnose(t, "d")
        assert first(v) == ("acl_in", "security_groups"), v

        # a sends from an address not its own: the source guard, naming it.
        t.sh("a", f"ip addr add {NET}.99/24 dev eth0")
        with pinging(t, "a", f"-I {NET}.99 {NET}.2"):
            v = diagnose(t, "a")
        assert first(v) == ("source_guard", "source_guard=on") and f"{NET}.99" in v["findings"][0]["finding"], v
        t.sh("a", f"ip addr del {NET}.99/24 dev eth0")

        # A trunk that does not carry the VLAN its guest tags (30).
        sender = t.popen("e", f"sh -c 'for i in $(seq 60); do {os.sys.executable} {VLAN_PROBE} send eth0 ff:ff:ff:ff:ff:ff 30 x y; sleep 0.05; done'",
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        v = diagnose(t, "e")
        sender.wait()
        assert first(v) == ("vlan_not_allowed", "vlans=10") and "30" in v["findings"][0]["finding"], v

        # A neighbour nothing here has: a asks for it again and again.
        with pinging(t, "a", f"{NET}.200"):
            v = diagnose(t, "a", window=3.5)
        assert first(v) == ("neighbour_unknown", None) and f"{NET}.200" in v["findings"][0]["finding"], v

        # b's guest held to 10 % of a core (its iperf3 server in a CPU cgroup).
        with hvlab.CpuLimit(10) as cpu:
            cpu.add_process(servers["b"].pid)
            with iperf(t, "a", f"{NET}.2"):
                v = diagnose(t, "b")
            assert first(v) == ("guest_cpu_quota", "cpu.cfs_quota_us=10000"), v

        # Its link down: d's guest is gone.
        servers["d"].kill()
        hvlab.run(["ip", "netns", "del", t.ns("d")])
        assert hvlab.eventually(lambda: json.loads(t.hv("port", "d", "--json").stdout)["link"] != "up", timeout=30)
        assert first(diagnose(t, "d", window=0.5)) == ("link_down", None)


def test_bad_arguments_are_refused(tmp_path):
    with hvlab.Topology(tmp_path, [vm("a", f"{NET}.11")], prefix="dg") as t:
        r = t.hv("diagnose", "nosuch", check=False)
        assert r.returncode != 0 and "nosuch" in r.stderr and "a" in r.stderr, r.stderr
        r = t.hv("diagnose", "a", "-w", "0", check=False)
        assert r.returncode != 0 and "more than 0" in r.stderr, r.stderr
        v = diagnose(t, "a", window=0.3)
        assert v["healthy"] and v["vm"] == "a", v
        assert "no finding" in t.hv("diagnose", "a", "-w", "0.3").stdout


def test_a_team_member_down_and_a_missing_tunnel_peer_are_found(tmp_path):
    """Two uplinks an operator could leave broken: a team of two veths with
    one member's far end set down, and a VXLAN endpoint whose remote was
    left out of its peers (the far side is not there at all)."""
    m1, m2, vx = (hvlab.unique("hvdm") for _ in range(3))
    for dev in (m1, m2, vx):
        hvlab.run(["ip", "link", "add", dev, "type", "veth", "peer", "name", dev + "p"])
        hvlab.run(["ip", "link", "set", dev + "p", "up"])
    try:
        vms = [vm("a", f"{NET}.21"), vm("t", f"{NET}.22", vlan=7)]
        uplinks = [dict(name="up0", devices=[m1, m2], teaming="active-backup"),
                   dict(name="vx0", device=vx, vlan=7,
                        vxlan=dict(vni=77, local="198.18.9.21/24", remotes=["198.18.9.29"]))]
        with hvlab.Topology(tmp_path, vms, prefix="dg", uplinks=uplinks) as t:
            t.sh("a", "ping -c 1 -W 1 198.18.76.29", check=False)
            hvlab.run(["ip", "link", "set", m2 + "p", "down"])
            assert hvlab.eventually(lambda: any(not m["carrier"] for m in json.loads(t.hv("team", "--json").stdout)["teams"][0]["members"]), timeout=30)
            v = diagnose(t, "a", window=0.5)
            assert first(v) == ("team_degraded", None) and m2 in v["findings"][0]["finding"], v
            # t's neighbour behind the tunnel is asked for and nobody
            # answers: the finding names the tunnel and its peers (the
            # team, not in t's VLAN, is not on its way).
            with pinging(t, "t", f"{NET}.40"):
                v = diagnose(t, "t", window=3.5)
            assert first(v) == ("neighbour_unknown", None) and "vx0 with 1 peers" in v["findings"][0]["finding"], v
    finally:
        for dev in (m1, m2, vx):
            hvlab.run(["ip", "link", "del", dev], check=False)
