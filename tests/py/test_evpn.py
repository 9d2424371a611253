"""BGP EVPN through FRR, on a fabric of three hosts on one underlay: two
hvnet hosts (each its switch and FRR in a namespace of its own; the first
one's uplink a team of two members, active-backup, BGP from the host's
address on its backup member) and Linux's own VTEP (bridge + vxlan + FRR,
FRR's documented set-up), no static peer list anywhere. The tests run in
order on one fabric; the last stops a host."""

import hashlib
import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

import evpn_fabric as ef
import hvlab
from helpers import ns_transfer as transfer

pytestmark = [pytest.mark.root,
              pytest.mark.skipif(not ef.have_frr(), reason="FRR is not installed (apt-get install frr)")]

MOBILE = "02:ee:00:00:00:05"
WANDERER = "02:ee:00:00:00:08"


@pytest.fixture(scope="module")
def fabric(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("evpn")
    vms = [
        [dict(name="a", ipv4=f"{ef.OVERLAY}.1/24", ipv6="fd60::1/64"),
         dict(name="m", ipv4=f"{ef.OVERLAY}.5/24", mac=MOBILE),
         dict(name="r", ipv4=f"{ef.OVERLAY}.6/24"),
         dict(name="w", ipv4=f"{ef.OVERLAY}.8/24", mac=WANDERER)],
        [dict(name="b", ipv4=f"{ef.OVERLAY}.2/24", ipv6="fd60::2/64"),
         dict(name="m", ipv4=f"{ef.OVERLAY}.5/24", mac=MOBILE, connected=False)],
    ]
    f = ef.EvpnFabric(tmp, vms, injector=True, teams=[0]).__enter__()
    try:
        f.wait_established()
        # The Linux VM is advertised once its bridge has learned it.
        ef.sh(f.linux[0].vm_ns, f"ping -c 2 -i 0.2 -W 2 {ef.OVERLAY}.1")
        yield f
    finally:
        names = list(f.namespaces) + [h.topo.ns(v["name"]) for h in f.hvnet if h.topo for v in h.vms]
        pathspaces = [h.ns for h in f.linux] + [f"hvnet-{h.topo.name}" for h in f.hvnet if h.topo]
        f.__exit__(None, None, None)
        assert f.injector.proc is None
        # Nothing left behind: namespaces, FRR's daemons and run directories.
        listed = hvlab.run(["ip", "netns", "list"]).stdout
        assert not [n for n in names if n in listed.split()], listed
        assert not [p for p in pathspaces if Path("/var/run/frr", p).exists()]
        ps = hvlab.run(["ps", "-eo", "args"]).stdout
        assert not [p for p in pathspaces if f"-N {p} " in ps], ps


def vm_ns(f, host, vm):
    return f.hvnet[host].topo.ns(vm)


def ping(ns, ip, count=2):
    ef.sh(ns, f"ping -c {count} -i 0.2 -W 2 {ip}")


def test_every_vm_reaches_every_other_with_no_peer_list(fabric, tmp_path):
    f = fabric
    a, b, lvm = vm_ns(f, 0, "a"), vm_ns(f, 1, "b"), f.linux[0].vm_ns
    ips = {a: f"{ef.OVERLAY}.1", b: f"{ef.OVERLAY}.2", lvm: f.linux[0].vm_ip}
    for src in ips:
        for dst, ip in ips.items():
            if src != dst:
                ping(src, ip)
    data = tmp_path / "random.bin"
    data.write_bytes(os.urandom(8 << 20))
    want = (hashlib.sha256(data.read_bytes()).hexdigest(), 8 << 20)
    for src, dst in ((a, b), (b, a), (a, lvm), (lvm, b)):
        assert transfer(src, dst, ips[dst], data) == want, (src, dst)
    for h in f.hvnet:
        assert h.vxlan()["remotes"] == [] or all(r["origin"] != "static" for r in h.vxlan()["remotes"])


def test_a_trace_follows_a_frame_across_the_fabric(fabric):
    """`hvnet trace` from a VM on one hvnet host to one on the other: the
    far host's part comes back over the tunnel, for a real frame and for
    a synthetic one (whose destination MAC EVPN advertised); to the Linux
    VTEP's VM the trace ends at the tunnel."""
    f = fabric
    t0, b_ip = f.hvnet[0].topo, f"{ef.OVERLAY}.2"
    ping(vm_ns(f, 0, "a"), b_ip)

    def trace(*args):
        return json.loads(t0.hv("trace", "a", *args, "--json").stdout)["frames"][0]

    def live(ip):
        pinger = subprocess.Popen(["ip", "netns", "exec", vm_ns(f, 0, "a"), "ping", "-i", "0.2", "-c", "50", ip],
                                  stdout=subprocess.DEVNULL)
        try:
            return trace("--live", f"icmp and dst host {ip}")
        finally:
            pinger.kill()

    real = live(b_ip)
    syn = trace(f"dst={b_ip}", "icmp")
    for fr in (real, syn):
        assert len(fr["far"]) == 1, fr
        assert [d.split(" queue")[0] for d in fr["far"][0]["delivered"]] == ["to b"], fr
    lin_ip = f.linux[0].vm_ip
    ping(vm_ns(f, 0, "a"), lin_ip)
    fr = live(lin_ip)
    assert fr["far"] == [] and "ends at the tunnel" in fr["far_silent"], fr


def test_remote_macs_and_the_flood_list_come_from_evpn(fabric):
    f = fabric
    h1, h2, lin = f.hvnet[0], f.hvnet[1], f.linux[0]
    v = h1.vxlan()
    assert sorted(r["ip"] for r in v["remotes"] if r["origin"] == "evpn") == sorted([h2.vtep, lin.vtep]), v
    assert set(v["flood_list"]) == {h2.vtep, lin.vtep}, v
    macs = h1.remote_macs()
    assert macs.get(lin.vm_mac) == lin.vtep, macs
    assert h2.vtep in macs.values(), macs
    assert all(m["age_secs"] == 0 for m in v["remote_macs"] if m["origin"] == "evpn")
    assert any(r["ip"] == f"{ef.OVERLAY}.2" for r in v["remote_ips"]), v["remote_ips"]
    # Linux's VTEP installed both hvnet hosts' VMs, behind their VTEPs.
    fdb = lin.fdb()
    assert h1.vtep in fdb.values() and h2.vtep in fdb.values(), fdb
    # hvnet fdb shows them too, as evpn entries on the uplink.
    rows = json.loads(h1.topo.hv("fdb", "--json").stdout)
    assert any(r["mac"] == lin.vm_mac and r["kind"] == "evpn" and r["port_name"] == "up0" for r in rows), rows
    text = h1.topo.hv("evpn").stdout
    assert "Established" in text and "evpn" in text, text


def test_no_flooding_to_the_fabric_for_known_destinations(fabric, tmp_path):
    f = fabric
    h1, h2 = f.hvnet
    a, b = vm_ns(f, 0, "a"), vm_ns(f, 1, "b")
    ping(a, f"{ef.OVERLAY}.2")
    before = [h.vxlan()["evpn"] for h in f.hvnet]
    for ns in (a, b):
        ef.sh(ns, "ip neigh flush all")
    data = tmp_path / "random.bin"
    data.write_bytes(os.urandom(2 << 20))
    ping(a, f"{ef.OVERLAY}.2")
    ef.sh(a, "ping -6 -c 2 -i 0.2 -W 2 fd60::2")
    transfer(b, a, f"{ef.OVERLAY}.1", data)
    after = [h.vxlan()["evpn"] for h in f.hvnet]
    for x, y in zip(before, after):
        assert y["flooded_unknown_unicast"] == x["flooded_unknown_unicast"], (x, y)
        assert y["flooded_arp"] == x["flooded_arp"], (x, y)
    assert after[0]["arp_suppressed"] > before[0]["arp_suppressed"], (before, after)
    assert after[1]["arp_suppressed"] > before[1]["arp_suppressed"], (before, after)
    assert after[0]["nd_suppressed"] > before[0]["nd_suppressed"], (before, after)
    acc = h1.topo.stats("/ports/a/accounting")
    assert acc["ingress"]["balanced"] and acc["ingress"]["arp_suppressed"] > 0, acc
    assert acc["ingress"]["nd_suppressed"] > 0, acc
    assert "fd60::2" in ef.sh(a, "ip -6 neigh show").stdout


def test_a_disconnected_vm_is_withdrawn_and_comes_back(fabric):
    f = fabric
    h1, h2, lin = f.hvnet[0], f.hvnet[1], f.linux[0]
    b_mac = next(m for m, r in h1.remote_macs().items() if r == h2.vtep and m != MOBILE)
    h2.topo.hv("port", "b", "set", "connected=off")
    ef.wait_until(lambda: b_mac not in h1.remote_macs() and b_mac not in lin.fdb())
    assert not any(r["ip"] == f"{ef.OVERLAY}.2" for r in h1.vxlan()["remote_ips"])
    h2.topo.hv("port", "b", "set", "connected=on")
    ef.wait_until(lambda: h1.remote_macs().get(b_mac) == h2.vtep and lin.fdb().get(b_mac) == h2.vtep)
    ping(vm_ns(f, 0, "a"), f"{ef.OVERLAY}.2")


def test_a_mac_that_moves_follows_the_higher_sequence_number(fabric):
    f = fabric
    h1, h2, lin = f.hvnet[0], f.hvnet[1], f.linux[0]
    ef.wait_until(lambda: lin.fdb().get(MOBILE) == h1.vtep and h2.remote_macs().get(MOBILE) == h1.vtep)
    # The VM arrives on host 2 while host 1 still advertises it: host 2's
    # advertisement carries the higher sequence number and wins.
    h2.topo.hv("port", "m", "set", "connected=on")
    ef.wait_until(lambda: lin.fdb().get(MOBILE) == h2.vtep)
    routes = lin.vtysh("-c", f"show evpn mac vni {ef.VNI} mac {MOBILE}")
    assert h2.vtep in routes, routes
    h1.topo.hv("port", "m", "set", "connected=off")
    ef.wait_until(lambda: h1.remote_macs().get(MOBILE) == h2.vtep)
    ping(lin.vm_ns, f"{ef.OVERLAY}.5")
    ping(vm_ns(f, 0, "a"), f"{ef.OVERLAY}.5")


def test_a_mac_that_moves_to_a_linux_vtep_and_back_is_local_again(fabric):
    """VM w leaves host 1 for the Linux VTEP (a namespace on its bridge with
    w's MAC) and comes back while the Linux host still has it: host 1 lists
    w as its own again, as its FRR does, whatever stale entry zebra leaves
    on the shadow's vxlan device, and it stays so when w leaves again."""
    f = fabric
    h1, h2, lin = f.hvnet[0], f.hvnet[1], f.linux[0]
    vtysh = ["vtysh", "-N", f"hvnet-{h1.topo.name}", "--config_dir", "/var/run/frr"]

    def frr_says():
        out = hvlab.run(vtysh + ["-c", f"show evpn mac vni {ef.VNI} mac {WANDERER} json"]).stdout
        return json.loads(out or "{}").get(WANDERER, {})

    def seen():
        return (f"hvx: {ef.sh(h1.ns, f'bridge fdb show dev hvx-{ef.VNI}').stdout}"
                f"FRR: {frr_says()}\nhvnet: {h1.remote_macs().get(WANDERER)}")
    ef.wait_until(lambda: lin.fdb().get(WANDERER) == h1.vtep)
    h1.topo.hv("port", "w", "set", "connected=off")
    away = hvlab.unique("evw")
    hvlab.run(["ip", "netns", "add", away])
    try:
        hvlab.run(["ip", "-n", lin.ns, "link", "add", "vw", "type", "veth", "peer", "name", "eth0", "netns", away])
        ef.sh(away, f"sysctl -qw net.ipv6.conf.all.disable_ipv6=1 && ip link set eth0 address {WANDERER}"
                    f" && ip addr add {ef.OVERLAY}.8/24 dev eth0 && ip link set eth0 up")
        ef.sh(lin.ns, f"ip link set vw master br{ef.VNI} up")
        ping(away, f"{ef.OVERLAY}.1")
        ef.wait_until(lambda: h1.remote_macs().get(WANDERER) == lin.vtep
                      and h2.remote_macs().get(WANDERER) == lin.vtep)
        # Back on host 1 while the Linux host still has it learned.
        h1.topo.hv("port", "w", "set", "connected=on")
        ef.wait_until(lambda: lin.fdb().get(WANDERER) == h1.vtep and h2.remote_macs().get(WANDERER) == h1.vtep)
    finally:
        hvlab.run(["ip", "netns", "del", away], check=False)
    ef.wait_until(lambda: frr_says().get("type") == "local", timeout=30)
    assert hvlab.eventually(lambda: WANDERER not in h1.remote_macs(), timeout=30), seen()
    rows = json.loads(h1.topo.hv("fdb", "--json").stdout)
    assert not any(r["mac"] == WANDERER and r["kind"] == "evpn" for r in rows), (rows, seen())
    ping(lin.vm_ns, f"{ef.OVERLAY}.8")
    ping(vm_ns(f, 1, "b"), f"{ef.OVERLAY}.8")
    # Gone from host 1 again (nowhere now): not installed behind the
    # Linux VTEP from what zebra left on the shadow.
    h1.topo.hv("port", "w", "set", "connected=off")
    ef.wait_until(lambda: WANDERER not in lin.fdb() and WANDERER not in h2.remote_macs())
    assert WANDERER not in h1.remote_macs(), seen()


def test_hostile_entries_are_refused_bounded_and_counted(fabric):
    """What a misbehaving control plane could write to the shadow: a VTEP of
    0.0.0.0, a local VM's MAC behind another VTEP, more MACs than the table
    holds. The switch refuses, counts, and forwards on."""
    f = fabric
    h1 = f.hvnet[0]
    before = h1.vxlan()["evpn"]
    a_mac = next(p["mac"] for p in json.loads(h1.topo.hv("ports", "--json").stdout) if p.get("client") == "a")
    ef.sh(h1.ns, f"bridge fdb append 00:00:00:00:00:00 dev hvx-{ef.VNI} dst 0.0.0.0 self permanent"
                 f" && bridge fdb add {a_mac} dev hvx-{ef.VNI} dst 198.18.60.99 self")
    ef.wait_until(lambda: h1.vxlan()["evpn"]["vteps_refused"] > before["vteps_refused"]
                  and h1.vxlan()["evpn"]["local_claims_refused"] > before["local_claims_refused"])
    assert "0.0.0.0" not in h1.vxlan()["flood_list"]
    batch = "".join(f"fdb add 02:dd:{i >> 16 & 255:02x}:{i >> 8 & 255:02x}:{i & 255:02x}:01 dev hvx-{ef.VNI}"
                    f" dst 198.18.60.99 self\n" for i in range(17000))
    path = f.tmp / "many.batch"
    path.write_text(batch)
    ef.sh(h1.ns, f"bridge -batch {path}", timeout=120)
    # The table holds 16384 advertised MACs; the rest are refused, counted.
    ef.wait_until(lambda: h1.vxlan()["evpn"]["macs_refused"] >= before["macs_refused"] + 17000 - 16384,
                  timeout=60)
    assert len(h1.remote_macs()) == 16384
    ping(vm_ns(f, 0, "a"), f"{ef.OVERLAY}.2")
    ef.sh(h1.ns, f"sed 's/^fdb add/fdb del/' {path} > {path}.del && bridge -batch {path}.del"
                 f" && bridge fdb del {a_mac} dev hvx-{ef.VNI} dst 198.18.60.99 self"
                 f" && bridge fdb del 00:00:00:00:00:00 dev hvx-{ef.VNI} dst 0.0.0.0 self", timeout=120)


def test_hostile_advertisements_over_bgp_do_not_take_a_local_vm(fabric):
    """A BGP speaker in the fabric advertises host 1's VM a behind a VTEP of
    its own: host 1 keeps its VM (FRR prefers the local one; hvnet would
    refuse it, counted, were it installed), the other hosts keep reaching a
    where it is. Then a VTEP of 0.0.0.0: FRR resets the session that
    carries it, nothing is installed, the fabric goes on."""
    f = fabric
    h1, h2, lin, inj = f.hvnet[0], f.hvnet[1], f.linux[0], f.injector
    a_mac = next(p["mac"] for p in json.loads(h1.topo.hv("ports", "--json").stdout) if p.get("client") == "a")
    rt = ["rt", f"{ef.ASN}:{ef.VNI}", "encap", "vxlan"]
    inj.gobgp("global", "rib", "-a", "evpn", "add", "macadv", a_mac, f"{ef.OVERLAY}.1", "etag", "0", "label",
              str(ef.VNI), "rd", f"{inj.ip}:{ef.VNI}", *rt, "nexthop", "198.18.60.99")
    for h in f.hosts():
        inj.enable(h.ip)

    def from_injector(h):
        bgp = h.evpn()["bgp"]
        return bgp.get("l2VpnEvpn", bgp)["peers"].get(inj.ip, {})
    ef.wait_until(lambda: all(from_injector(h).get("pfxRcd", 0) >= 1 for h in f.hvnet), timeout=30)
    assert a_mac not in h1.remote_macs(), "host 1 keeps its VM"
    assert h2.remote_macs().get(a_mac) == h1.vtep and lin.fdb().get(a_mac) == h1.vtep
    ping(vm_ns(f, 1, "b"), f"{ef.OVERLAY}.1")
    ping(lin.vm_ns, f"{ef.OVERLAY}.1")
    drops = from_injector(h1)["connectionsDropped"]
    inj.gobgp("global", "rib", "-a", "evpn", "add", "multicast", "0.0.0.0", "etag", "0", "rd", f"{inj.ip}:43", *rt,
              "pmsi", "ingress-repl", str(ef.VNI), "0.0.0.0")
    ef.wait_until(lambda: from_injector(h1).get("connectionsDropped", 0) > drops, timeout=30)
    for h in f.hvnet:
        assert "0.0.0.0" not in h.vxlan()["flood_list"]
    ping(vm_ns(f, 1, "b"), f"{ef.OVERLAY}.1")
    for h in f.hosts():
        inj.gobgp("neighbor", h.ip, "disable")


def test_a_switch_restart_keeps_the_fabric(fabric):
    """The daemon stopped (SIGTERM) and started again: FRR and the shadow
    stay, so the fabric keeps reaching host 1's VMs meanwhile, and the new
    daemon reads its remote MACs and flood list back from the shadow."""
    f = fabric
    h1, h2, lin = f.hvnet[0], f.hvnet[1], f.linux[0]
    a_mac = next(p["mac"] for p in json.loads(h1.topo.hv("ports", "--json").stdout) if p.get("client") == "a")
    pid = h1.pid()
    os.kill(pid, signal.SIGTERM)
    ef.wait_until(lambda: not Path(f"/proc/{pid}").exists(), timeout=30)
    assert lin.fdb().get(a_mac) == h1.vtep and h2.remote_macs().get(a_mac) == h1.vtep
    hvlab.hvnet("up", h1.topo.file)

    def back():
        v = h1.vxlan()
        resolved = {r["ip"] for r in v["remotes"] if r["mac"]}
        return h1.remote_macs().get(lin.vm_mac) == lin.vtep and {h2.vtep, lin.vtep} <= resolved
    ef.wait_until(back)
    for ip in (f"{ef.OVERLAY}.2", lin.vm_ip):
        ping(vm_ns(f, 0, "a"), ip)


def test_frr_that_dies_is_started_again_and_the_fabric_comes_back(fabric):
    """Host 1's zebra and bgpd killed (a crash, SIGKILL): the switch's
    daemon, which started them (`[frr]`), starts them again within its
    look; their BGP sessions come back, the routes zebra took with it
    are installed again, and the VMs reach across the fabric."""
    f = fabric
    h1, h2, lin = f.hvnet[0], f.hvnet[1], f.linux[0]
    old = h1.frr_pids()
    for pid in old:
        os.kill(pid, signal.SIGKILL)

    def again():
        try:
            pids = h1.frr_pids()
        except (OSError, ValueError):
            return False
        return set(pids).isdisjoint(old) and all(Path(f"/proc/{p}").exists() for p in pids)
    ef.wait_until(again, timeout=60)
    f.wait_established(timeout=120)
    ef.wait_until(lambda: h1.remote_macs().get(lin.vm_mac) == lin.vtep, timeout=60)
    reaches = lambda ns, ip: ef.sh(ns, f"ping -c 1 -W 1 {ip}", check=False).returncode == 0  # noqa: E731
    for ns, ip in ((vm_ns(f, 0, "a"), f"{ef.OVERLAY}.2"), (vm_ns(f, 0, "a"), lin.vm_ip),
                   (lin.vm_ns, f"{ef.OVERLAY}.1")):
        # (The routes back a moment after the sessions: BGP's update.)
        ef.wait_until(lambda: reaches(ns, ip), timeout=60, every=0.2)
    assert h2.remote_macs().get(next(p["mac"] for p in json.loads(h1.topo.hv("ports", "--json").stdout)
                                     if p.get("client") == "a")) == h1.vtep


def test_a_vm_that_is_removed_is_withdrawn(fabric):
    """VM r's namespace deleted: its NIC goes with it, its port goes down,
    and its MAC and IP leave every host's tables."""
    f = fabric
    h1, h2, lin = f.hvnet[0], f.hvnet[1], f.linux[0]
    r_mac = next(p["mac"] for p in json.loads(h1.topo.hv("ports", "--json").stdout) if p.get("client") == "r")
    ef.wait_until(lambda: lin.fdb().get(r_mac) == h1.vtep and h2.remote_macs().get(r_mac) == h1.vtep)
    hvlab.run(["ip", "netns", "del", h1.topo.ns("r")])
    ef.wait_until(lambda: r_mac not in lin.fdb() and r_mac not in h2.remote_macs()
                  and all(r["ip"] != f"{ef.OVERLAY}.6" for r in h2.vxlan()["remote_ips"]))
    ping(vm_ns(f, 0, "a"), f"{ef.OVERLAY}.2")


def test_a_vm_added_at_run_time_is_advertised_and_withdrawn_when_removed(fabric):
    """`hvnet vm add` on a running EVPN host: the new VM's MAC reaches every
    host's tables and traffic flows; `hvnet vm del`: it leaves them."""
    f = fabric
    h1, h2, lin = f.hvnet[0], f.hvnet[1], f.linux[0]
    mac = "02:00:00:00:60:77"
    h1.topo.hv("vm", "add", "n", f"ipv4={ef.OVERLAY}.7/24", f"mac={mac}")
    try:
        ef.wait_until(lambda: lin.fdb().get(mac) == h1.vtep and h2.remote_macs().get(mac) == h1.vtep)
        ping(vm_ns(f, 0, "n"), f"{ef.OVERLAY}.2")
    finally:
        h1.topo.hv("vm", "del", "n")
    ef.wait_until(lambda: mac not in lin.fdb() and mac not in h2.remote_macs())
    ping(vm_ns(f, 0, "a"), f"{ef.OVERLAY}.2")


def test_evpn_over_a_team_fails_over_and_back_under_traffic(fabric):
    """The first host's tunnel goes by its team's active member (`u1`);
    its carrier pulled, the backup (`u0`, where BGP runs) takes over, the
    endpoint is announced there and the fabric keeps reaching the host's
    VMs; given back, traffic fails back."""
    f = fabric
    h1, lin = f.hvnet[0], f.linux[0]
    team = lambda: json.loads(h1.topo.hv("team", "--json").stdout)["teams"][0]  # noqa: E731
    assert team()["active"] == "u1", team()
    mac = h1.vxlan()["mac"]
    u0 = ef.sh(h1.ns, "cat /sys/class/net/u0/address").stdout.strip()
    assert mac != u0, "the endpoint's MAC is its own, not the host's"
    a = vm_ns(f, 0, "a")
    ping(a, lin.vm_ip)
    pings = subprocess.Popen(["ip", "netns", "exec", lin.vm_ns, "ping", "-i", "0.05", "-W", "1", f"{ef.OVERLAY}.1"],
                             stdout=subprocess.DEVNULL)
    try:
        hvlab.run(["ip", "-n", f.fab, "link", "set", "f0t", "down"])
        ef.wait_until(lambda: team()["active"] == "u0", timeout=15)
        ping(a, lin.vm_ip)
        ping(a, f"{ef.OVERLAY}.2")
        assert team()["failovers"] >= 1 and team()["announcements"] >= 1, team()
        hvlab.run(["ip", "-n", f.fab, "link", "set", "f0t", "up"])
        ef.wait_until(lambda: team()["active"] == "u1", timeout=15)
        ping(a, lin.vm_ip)
    finally:
        hvlab.stop_procs([pings])
        hvlab.run(["ip", "-n", f.fab, "link", "set", "f0t", "up"], check=False)
    # BGP ran from the host's own address on u0 throughout.
    f.wait_established(timeout=30)


def test_a_host_that_stops_is_withdrawn(fabric):
    f = fabric
    h1, h2, lin = f.hvnet[0], f.hvnet[1], f.linux[0]
    h2.down()
    ef.wait_until(lambda: h2.vtep not in h1.vxlan()["flood_list"] and h2.vtep not in h1.remote_macs().values()
                  and h2.vtep not in lin.fdb().values(), timeout=30)
    ping(vm_ns(f, 0, "a"), lin.vm_ip)

