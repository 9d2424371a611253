"""Routing across hosts with symmetric IRB through FRR: two hvnet hosts and
Linux's VTEP configured as FRR documents it (an L3 VNI, an SVI per
segment with the anycast gateway; in the default VRF, as this kernel has
no VRF devices), one tenant with subnets 198.19.80.0/24 (VNI 5010, VLAN
10) and 198.19.81.0/24 (VNI 5020, VLAN 20) on every host and
198.19.90.0/24 on the Linux VTEP alone (advertised as a type-5 prefix).
A frame between subnets is routed at the host it enters (into the L3 VNI,
to the far host's router MAC) and again at the host it leaves: its TTL
drops by two, where routing into the far segment and bridging there
would drop it by one."""

import hashlib
import json
import os

import pytest

import evpn_fabric as ef
from helpers import ns_transfer

pytestmark = [pytest.mark.root,
              pytest.mark.skipif(not ef.have_frr(), reason="FRR is not installed (apt-get install frr)")]

GW_MAC = "02:68:76:00:00:01"
L3 = 5999
TENANT = dict(name="blue", gateways={"10": "198.19.80.254/24", "20": "198.19.81.254/24"}, l3_vni=L3)


@pytest.fixture(scope="module")
def fabric(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("irb")
    vms = [[dict(name="a", ipv4="198.19.80.1/24", vlan=10)],
           [dict(name="b", ipv4="198.19.81.2/24", vlan=20)]]
    linux_vnis = {5010: ("198.19.80.3", "02:70:00:00:00:03"), 5020: ("198.19.81.3", "02:70:00:00:00:04"),
                  5030: ("198.19.90.3", "02:70:00:00:00:05")}
    irb = dict(l3_vni=L3, mac=GW_MAC,
               gateways={5010: "198.19.80.254/24", 5020: "198.19.81.254/24", 5030: "198.19.90.254/24"})
    f = ef.EvpnFabric(tmp, vms, vxlan=dict(vni=5010, vlans={"20": 5020, "999": L3}), uplink=dict(vlan=10),
                      linux_vnis=linux_vnis, linux_irb=irb, tables=dict(tenant=[TENANT])).__enter__()
    try:
        f.wait_established()
        lin = f.linux[0]
        # Linux's VMs make themselves known to their SVI (a guest's first
        # ARP for its gateway), so that it advertises their addresses.
        for vni in linux_vnis:
            ef.sh(lin.vm_ns_of(vni), f"ping -c 1 -W 2 {irb['gateways'][vni].split('/')[0]}")
        yield f
    finally:
        f.__exit__(None, None, None)


def ns(f, host, vm):
    return f.hvnet[host].topo.ns(vm)


def route_view(h):
    return json.loads(h.topo.hv("route", "--json").stdout)


def ttl_of(n, ip):
    """The TTL of the replies to a few pings from namespace `n` to `ip`
    (waiting for the fabric's routes, at most 30 s)."""
    def replied():
        out = ef.sh(n, f"ping -c 1 -W 1 {ip}", check=False).stdout
        return "ttl=" in out and out
    out = None
    assert ef.hvlab.eventually(lambda: (out := replied()), timeout=30, every=0.5), f"{n} -> {ip}: no reply"
    out = ef.sh(n, f"ping -c 2 -i 0.2 -W 2 {ip}").stdout
    return {int(w[4:]) for w in out.split() if w.startswith("ttl=")}


def test_the_fabric_gives_each_hvnet_host_the_others_host_routes(fabric):
    f = fabric
    h1, h2, lin = f.hvnet[0], f.hvnet[1], f.linux[0]
    want = {("198.19.81.2", 32): h2.vtep, ("198.19.80.3", 32): lin.vtep, ("198.19.81.3", 32): lin.vtep,
            ("198.19.90.0", 24): lin.vtep}

    def remote():
        t = route_view(h1)["tenants"][0]
        return {(r["to"][0], r["to"][1]): r["vtep"] for r in t["remote"]}
    ef.wait_until(lambda: all(remote().get(k) == v for k, v in want.items()), timeout=60)
    assert route_view(h1)["router_mac"] == "02:72:c6:12:3c:01"
    out = h1.topo.hv("route").stdout
    assert f"198.19.81.2/32 via {h2.vtep} dev vlan999 proto bgp onlink (L3 VNI {L3})" in out, out


def test_hvnet_hosts_route_to_each_other_through_the_l3_vni(fabric):
    f = fabric
    assert ttl_of(ns(f, 0, "a"), "198.19.81.2") == {62}
    assert ttl_of(ns(f, 1, "b"), "198.19.80.1") == {62}


def test_an_hvnet_host_and_a_linux_vtep_route_both_ways(fabric, tmp_path):
    f = fabric
    lin = f.linux[0]
    a = ns(f, 0, "a")
    assert ttl_of(a, "198.19.81.3") == {62}
    assert ttl_of(lin.vm_ns_of(5020), "198.19.80.1") == {62}
    # A prefix only the Linux VTEP has (type 5).
    assert ttl_of(a, "198.19.90.3") == {62}
    data = tmp_path / "random.bin"
    data.write_bytes(os.urandom(8 << 20))
    want = (hashlib.sha256(data.read_bytes()).hexdigest(), 8 << 20)
    assert ns_transfer(a, lin.vm_ns_of(5020), "198.19.81.3", data) == want
    assert ns_transfer(lin.vm_ns_of(5030), a, "198.19.80.1", data, port=5556) == want
    for h in f.hvnet:
        for p in [v["name"] for v in h.vms] + ["up0"]:
            acc = h.topo.stats(f"/ports/{p}/accounting")
            assert acc["ingress"]["balanced"], (p, acc)
