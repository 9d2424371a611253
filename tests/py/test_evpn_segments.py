"""Several segments on one tunnel endpoint, with BGP EVPN for each: two
hvnet hosts whose uplink carries VLAN 10 in VNI 5010 (its own) and VLAN 20
in VNI 5020, and Linux's VTEP with a bridge and a vxlan device per VNI
(FRR's documented set-up, `advertise-all-vni`). Two tenants, one per
segment, with the same subnet and the same MACs (cloned guests): each
reaches its own VMs on every host and never the other tenant's."""

import hashlib
import json
import os
import tomllib

import pytest

import evpn_fabric as ef
import hvlab
from helpers import ns_transfer as transfer
from helpers import tcp_connect as connect

pytestmark = [pytest.mark.root,
              pytest.mark.skipif(not ef.have_frr(), reason="FRR is not installed (apt-get install frr)")]

NET = "198.19.70"
A, B = 5010, 5020  # tenant A's VNI (VLAN 10, the uplink's own) and tenant B's (VLAN 20)


def mac(host):
    return f"02:70:00:00:00:{host:02x}"


@pytest.fixture(scope="module")
def fabric(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("segments")
    # Per host a VM in each tenant, both with the host's one MAC and IP.
    vms = [[dict(name="a", ipv4=f"{NET}.{h}/24", mac=mac(h), vlan=10),
            dict(name="b", ipv4=f"{NET}.{h}/24", mac=mac(h), vlan=20)] for h in (1, 2)]
    f = ef.EvpnFabric(tmp, vms, vxlan=dict(vni=A, vlans={"20": B}), uplink=dict(vlan=10),
                      linux_vnis={A: (f"{NET}.3", mac(3)), B: (f"{NET}.3", mac(3))}).__enter__()
    try:
        f.wait_established()
        # Ready once every endpoint floods each segment to the others (the
        # fabric's type-3 routes in).
        for h in f.hvnet:
            others = {o.vtep for o in f.hosts() if o is not h}
            ef.wait_until(lambda h=h, o=others: all(set(s["flood_list"]) >= o for s in h.vxlan()["segments"]))
        want = {(vni, "00:00:00:00:00:00", h.vtep) for vni in (A, B) for h in f.hvnet}
        ef.wait_until(lambda: want <= f.linux[0].fdb_all())
        yield f
    finally:
        f.__exit__(None, None, None)


def ns(f, host, vm):
    return f.hvnet[host].topo.ns(vm)


def ping(n, ip):
    ef.sh(n, f"ping -c 2 -i 0.2 -W 2 {ip}")


def evpn_macs(h):
    """{(VNI, MAC): VTEP} the fabric advertised to hvnet host `h`."""
    return {(m["vni"], m["mac"]): m["remote"] for m in h.vxlan()["remote_macs"] if m["origin"] == "evpn"}


def test_each_tenant_reaches_its_own_vms_on_every_host(fabric):
    f = fabric
    lin = f.linux[0]
    for vm, vni in (("a", A), ("b", B)):
        for ip in (f"{NET}.2", f"{NET}.3"):
            ping(ns(f, 0, vm), ip)
        ping(lin.vm_ns_of(vni), f"{NET}.2")


def test_the_same_addresses_in_two_tenants_never_meet(fabric, tmp_path):
    """A server listens only in tenant B's VM on the second host: tenant
    B's VM on the first reaches it, tenant A's (same source MAC and IP, same
    destination) is refused by tenant A's VM there; a file crosses in each
    tenant intact."""
    f = fabric
    port = 5601
    server = f.hvnet[1].topo.popen("b", f"python3 -c \"import socket;s=socket.socket();"
                                        f"s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1);"
                                        f"s.bind(('{NET}.2',{port}));s.listen();import time;time.sleep(120)\"")
    try:
        hvlab.wait_listening(ns(f, 1, "b"), port)
        assert connect(ns(f, 0, "b"), f"{NET}.2", port) == "open"
        assert connect(ns(f, 0, "a"), f"{NET}.2", port) == "refused"
    finally:
        hvlab.stop_procs([server])
    data = tmp_path / "random.bin"
    data.write_bytes(os.urandom(4 << 20))
    want = (hashlib.sha256(data.read_bytes()).hexdigest(), 4 << 20)
    assert transfer(ns(f, 0, "a"), ns(f, 1, "a"), f"{NET}.2", data, port=5602) == want
    assert transfer(ns(f, 0, "b"), f.linux[0].vm_ns_of(B), f"{NET}.3", data, port=5603) == want


def test_evpn_advertises_and_installs_each_segment_apart(fabric):
    f = fabric
    h1, h2, lin = f.hvnet[0], f.hvnet[1], f.linux[0]
    want = {(vni, mac(h)): vtep for vni in (A, B) for h, vtep in ((2, h2.vtep), (3, lin.vtep))}
    ef.wait_until(lambda: all(evpn_macs(h1).get(k) == v for k, v in want.items()))
    for vni in (A, B):
        ef.wait_until(lambda v=vni: lin.fdb(v).get(mac(1)) == h1.vtep)
    v = h1.vxlan()
    segs = {s["vni"]: s for s in v["segments"]}
    assert (segs[A]["vlan"], segs[B]["vlan"]) == (None, 20), segs
    for vni in (A, B):
        assert set(segs[vni]["flood_list"]) == {h2.vtep, lin.vtep}, segs
    ips = {(r["vni"], r["ip"]) for r in v["remote_ips"]}
    # (Linux's VTEP advertises its VMs' MACs; their IPs only once its
    # bridge, with no address, has them as neighbours.)
    assert {(A, f"{NET}.2"), (B, f"{NET}.2")} <= ips, ips
    # ARP in a segment is answered from that segment's advertised IPs.
    before = v["evpn"]["arp_suppressed"]
    ef.sh(ns(f, 0, "b"), "ip neigh flush dev eth0")
    ping(ns(f, 0, "b"), f"{NET}.2")
    assert h1.vxlan()["evpn"]["arp_suppressed"] > before
    shown = json.loads(h1.topo.hv("evpn", "--json").stdout)["uplinks"][0]
    assert [s["bridge"] for s in shown["shadows"]] == [f"hvb-{A}", f"hvb-{B}"]
    assert "segments (VNI, VLAN" in h1.topo.hv("evpn").stdout


def set_segments(h, vlans, vms):
    """`hvnet up` of host `h`'s file with its uplink carrying `vlans`
    ({VLAN: VNI} besides its own) and VMs `vms` added to the file's."""
    doc = tomllib.loads(h.topo.file.read_text())
    up = dict(doc["uplink"][0])
    up["vxlan"] = dict(up["vxlan"], vlans=vlans)
    base = [v for v in doc["vm"] if v["name"] in ("a", "b")]
    return h.topo.apply(uplink=[up], vm=base + vms)


def segment_of(h, vni):
    return next((s for s in h.vxlan()["segments"] if s["vni"] == vni), None)


def test_a_segment_is_added_and_removed_at_run_time(fabric):
    """VLAN 30 in VNI 5030 added to both hvnet hosts' running uplinks with
    a VM in it: FRR advertises the new VNI (each host's flood list for it
    gets the other's VTEP) and the VMs reach each other; removed from the
    first host, its shadow devices go and the second host's flood list
    loses it (the VNI withdrawn), while the other segments carry on."""
    f = fabric
    h1, h2 = f.hvnet
    c = 5030
    for i, h in enumerate(f.hvnet, start=1):
        out = set_segments(h, {"20": B, "30": c},
                           [dict(name="c", ipv4=f"{NET}.{i}/24", mac=mac(i), vlan=30)]).stdout
        assert f"segments added {c}, removed none" in out, out
    for h, other in ((h1, h2), (h2, h1)):
        ef.wait_until(lambda h=h, o=other: o.vtep in (segment_of(h, c) or {}).get("flood_list", []))
    assert segment_of(h1, c)["vlan"] == 30
    ping(ns(f, 0, "c"), f"{NET}.2")
    shown = json.loads(h1.topo.hv("evpn", "--json").stdout)["uplinks"][0]
    assert f"hvb-{c}" in [s["bridge"] for s in shown["shadows"]]

    out = set_segments(h1, {"20": B}, []).stdout
    assert f"segments added none, removed {c}" in out, out
    assert segment_of(h1, c) is None
    assert ef.sh(h1.ns, f"ip link show hvb-{c}", check=False).returncode != 0, "the shadow deleted"
    ef.wait_until(lambda: h1.vtep not in (segment_of(h2, c) or {}).get("flood_list", []))
    ping(ns(f, 0, "b"), f"{NET}.2")
    out = set_segments(h2, {"20": B}, []).stdout
    assert f"removed {c}" in out, out


def test_a_vm_removed_from_one_segment_is_withdrawn_there_only(fabric):
    f = fabric
    h1, h2, lin = f.hvnet[0], f.hvnet[1], f.linux[0]
    h2.topo.hv("vm", "del", "b")
    ef.wait_until(lambda: (B, mac(2)) not in evpn_macs(h1) and mac(2) not in lin.fdb(B))
    assert evpn_macs(h1).get((A, mac(2))) == h2.vtep
    assert lin.fdb(A).get(mac(2)) == h2.vtep
    ping(ns(f, 0, "a"), f"{NET}.2")
