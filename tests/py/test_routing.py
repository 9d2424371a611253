"""Routing at the edge on one host: two tenants, each with two segments
(VLANs) and an anycast gateway per segment, the same subnets in both.
Namespace VMs run Linux's own stack: they ARP for their gateway, route
through it (their default route, given by hvnet), and see what a router
answers (TTL, time exceeded)."""

import hashlib
import json
import os

import pytest

import hvlab
from helpers import ns_transfer, vm
from helpers import tcp_connect as connect

pytestmark = pytest.mark.root

GW_MAC = "02:68:76:00:00:01"
TENANTS = [
    dict(name="blue", gateways={"10": ["198.19.80.254/24", "fd80:10::1/64"], "20": ["198.19.81.254/24", "fd80:20::1/64"]}),
    dict(name="red", gateways={"30": "198.19.80.254/24", "40": "198.19.81.254/24"}),
]


@pytest.fixture(scope="module")
def t(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("routing")
    vms = [vm("a", "198.19.80.1", ipv6="fd80:10::2", vlan=10), vm("b", "198.19.81.1", ipv6="fd80:20::2", vlan=20),
           vm("c", vlan=20),  # an address hvnet does not know: found with ARP
           vm("ra", "198.19.80.1", vlan=30), vm("rb", "198.19.81.1", vlan=40)]
    with hvlab.Topology(tmp, vms, prefix="rt", tables=dict(tenant=TENANTS)) as topo:
        topo.sh("c", "ip addr add 198.19.81.9/24 dev eth0 && ip route add default via 198.19.81.254")
        yield topo


def test_a_vm_reaches_another_segment_through_its_gateway(t):
    out = t.sh("a", "ping -c 2 -i 0.2 -W 2 198.19.81.1").stdout
    assert "ttl=63" in out, out  # routed once each way
    t.sh("a", "ping -c 1 -W 2 198.19.80.254")
    neigh = t.sh("a", "ip neigh show 198.19.80.254").stdout
    assert GW_MAC in neigh, neigh
    assert t.sh("a", "ip route show default").stdout.startswith("default via 198.19.80.254")


def test_tso_frames_are_routed_whole_and_arrive_intact(t, tmp_path):
    data = tmp_path / "random.bin"
    data.write_bytes(os.urandom(8 << 20))
    want = (hashlib.sha256(data.read_bytes()).hexdigest(), 8 << 20)
    before = t.stats("/ports/a/tx_summary")
    assert ns_transfer(t.ns("a"), t.ns("b"), "198.19.81.1", data) == want
    assert ns_transfer(t.ns("b"), t.ns("a"), "198.19.80.1", data, port=5556) == want
    after = t.stats("/ports/a/tx_summary")
    assert after["gso_frames"] > before["gso_frames"], after
    assert after["routed"] - before["routed"] > 100, after
    for p in ("a", "b"):
        acc = t.stats(f"/ports/{p}/accounting")
        assert acc["ingress"]["balanced"], acc


def test_a_ttl_that_runs_out_is_answered_with_time_exceeded(t):
    out = t.sh("a", "ping -c 1 -t 1 -W 2 198.19.81.1", check=False).stdout
    assert "198.19.80.254" in out and "Time to live exceeded" in out, out
    assert t.stats("/ports/a/tx_summary")["drop_ttl_exceeded"] >= 1


def test_an_unknown_neighbour_is_resolved_by_the_gateway(t):
    out = t.sh("a", "ping -c 4 -i 0.3 -W 1 198.19.81.9", check=False).stdout
    assert "ttl=63" in out, out
    view = json.loads(t.hv("route", "blue", "--json").stdout)
    learned = {(n["ip"], n["origin"]) for n in view["tenants"][0]["neighbours"]}
    assert ("198.19.81.9", "learned") in learned, learned
    assert view["arp_requests_sent"] >= 1


def test_tenants_with_the_same_subnets_never_meet(t):
    """A server only in blue's b: blue's a reaches it, red's ra (the same
    source and destination addresses) is answered by red's rb instead."""
    port = 5601
    server = t.popen("b", f"python3 -c \"import socket,time;s=socket.socket();"
                          f"s.bind(('198.19.81.1',{port}));s.listen();time.sleep(120)\"")
    try:
        hvlab.wait_listening(t.ns("b"), port)
        assert connect(t.ns("a"), "198.19.81.1", port) == "open"
        assert connect(t.ns("ra"), "198.19.81.1", port) == "refused"
    finally:
        hvlab.stop_procs([server])


def test_the_route_view_and_its_errors(t):
    out = t.hv("route", "blue").stdout
    assert "198.19.81.0/24 dev vlan20 proto kernel scope link src 198.19.81.254" in out, out
    assert "198.19.81.1 dev vlan20 lladdr" in out, out
    bad = t.hv("route", "green", check=False)
    assert bad.returncode != 0 and "blue, red" in bad.stderr, bad.stderr


def test_a_trace_shows_the_frame_routed(t):
    """`hvnet trace` builds the frame as a's stack would (to its gateway's
    MAC, b being off its subnet) and shows the route stage's decision."""
    out = t.hv("trace", "a", "dst=b", "icmp").stdout
    assert "routed from VLAN 10 into VLAN 20: next hop 198.19.81.1" in out, out
    assert "would be delivered to b" in out, out


def test_ipv6_is_routed_with_neighbour_discovery_for_the_gateway(t):
    out = t.sh("a", "ping -6 -c 2 -i 0.2 -W 2 fd80:20::2").stdout
    assert "ttl=63" in out, out  # hop limit 64, routed once each way
    t.sh("a", "ping -6 -c 1 -W 2 fd80:10::1")
    neigh = t.sh("a", "ip -6 neigh show fd80:10::1").stdout
    assert GW_MAC in neigh and "router" in neigh, neigh
    out = t.sh("a", "ping -6 -c 1 -t 1 -W 2 fd80:20::2", check=False).stdout
    assert "fd80:10::1" in out and "Time exceeded" in out, out
