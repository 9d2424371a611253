"""`hvnet trace PORT --live FILTER` on real frames between namespace VMs:
each stage's line on the frame's path and its verdict — delivered (to
which port) or dropped (the named reason, the same the counters give) —
bad filters refused with the reason, and a trace whose port goes ends
saying so. `hvnet trace PORT FLOW` on a frame described in words: the
same verdict a real frame of its kind gets, nothing learned, counted or
delivered unless injected, bad words refused with the word."""

import contextlib
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

import hvlab
from helpers import vm

pytestmark = pytest.mark.root


def trace(t, port, live, *more, check=True):
    r = t.hv("trace", port, "--live", live, *more, "--json", check=check)
    return json.loads(r.stdout) if r.stdout.strip() else r


@contextlib.contextmanager
def pinging(t, args):
    """VM a pings with `args` (every 0.2 s) while inside."""
    pinger = t.popen("a", f"ping -i 0.2 -c 50 {args}", stdout=subprocess.DEVNULL)
    try:
        yield
    finally:
        pinger.kill()


def test_a_frames_path_through_the_stages_to_its_port_or_its_drop(tmp_path):
    vms = [vm("a", "198.18.71.1", source_guard=True), vm("b", "198.18.71.2", mtu=1400)]
    with hvlab.Topology(tmp_path, vms, prefix="tr") as t:
        t.sh("a", "ping -c 1 -W 5 198.18.71.2")
        # An echo request a sends while the trace waits: its path, each
        # stage a line, out to b.
        with pinging(t, "198.18.71.2"):
            v = trace(t, "a", "icmp[icmptype] == icmp-echo", "-c", "2")
        assert v["ended"] == "count" and len(v["frames"]) == 2, v
        f = v["frames"][0]
        stages = [s["stage"] for s in f["stages"]]
        for s in ("guard", "vlan", "fdb", "forward", "queue", "tag", "write"):
            assert s in stages, (s, stages)
        assert stages.index("guard") < stages.index("fdb") < stages.index("forward") < stages.index("write")
        assert f["dropped"] is None and [d.split(" queue")[0] for d in f["delivered"]] == ["to b"], f
        # The same frame, told in words.
        with pinging(t, "198.18.71.2"):
            text = t.hv("trace", "a", "--live", "icmp").stdout
        assert text.startswith("frame 1 from a:") and "=> delivered to b queue" in text, text
        # A frame from an address not a's: the source guard drops it, and
        # the trace says so by the counter's own name.
        t.sh("a", "ip addr add 198.18.71.99/24 dev eth0")
        with pinging(t, "-I 198.18.71.99 198.18.71.2"):
            v = trace(t, "a", "icmp and src host 198.18.71.99")
        assert v["frames"][0]["dropped"] == "source_guard" and not v["frames"][0]["delivered"], v
        assert json.loads(t.hv("port", "a", "--json").stdout)["drops"]["from_port"]["source_guard"] > 0
        t.sh("a", "ip addr del 198.18.71.99/24 dev eth0")
        # A frame longer than b's MTU (1400) passes every stage in and is
        # dropped on its way out to b, by the counter's name.
        with pinging(t, "-s 1420 -M do 198.18.71.2"):
            v = trace(t, "a", "icmp and greater 1400")
        f = v["frames"][0]
        assert f["dropped"] is None and f["delivered"] == [] and f["dropped_at"] == ["to b: mtu_exceeded"], f


def test_bad_words_are_refused_and_a_trace_ends_with_its_port(tmp_path):
    with hvlab.Topology(tmp_path, [vm("a", "198.18.72.1"), vm("c", "198.18.72.3")], prefix="tr") as t:
        r = t.hv("trace", "a", "--live", "tcp port", check=False)
        assert r.returncode != 0 and "does not compile" in r.stderr, r.stderr
        r = t.hv("trace", "a", "--live", "icmp", "-c", "65", check=False)
        assert r.returncode != 0 and "1 to 64" in r.stderr, r.stderr
        r = t.hv("trace", "nosuch", "--live", "icmp", check=False)
        assert r.returncode != 0 and "nosuch" in r.stderr, r.stderr
        # Nothing matches: the time runs out with no frame, said.
        v = trace(t, "a", "udp port 9", "--timeout", "0.5")
        assert v["ended"] == "timeout" and v["frames"] == [], v
        def traced(port):
            return json.loads(t.hv("port", port, "--json").stdout)["traced"]

        def waiting_trace(port):
            return subprocess.Popen([hvlab.hvnet_bin(), "trace", "-t", t.name, port, "--live", "udp port 9",
                                     "--timeout", "60", "--json"], stdout=subprocess.PIPE, text=True)

        # A client that leaves ends its trace: the port is free again.
        gone = waiting_trace("a")
        try:
            assert hvlab.eventually(lambda: traced("a"), timeout=10)
        finally:
            gone.kill()
            gone.wait()
        assert hvlab.eventually(lambda: not traced("a"), timeout=10)
        # One trace at a time at a port; the port removed under it.
        waiting = waiting_trace("c")
        try:
            assert hvlab.eventually(lambda: traced("c"), timeout=10)
            r = t.hv("trace", "c", "--live", "icmp", "--timeout", "0.1", check=False)
            assert r.returncode != 0 and "being traced" in r.stderr, r.stderr
            start = time.monotonic()
            t.hv("vm", "del", "c")
            out, _ = waiting.communicate(timeout=30)
        finally:
            waiting.kill()
        assert json.loads(out)["ended"] == "the port was removed" and time.monotonic() - start < 30


def flow(t, port, *words, check=True):
    r = t.hv("trace", port, *words, "--json", check=check)
    return json.loads(r.stdout) if r.returncode == 0 else r


WEB = [{"name": "web", "rules": [{"direction": "in", "protocol": "tcp", "ports": "22"},
                                 {"direction": "in", "protocol": "udp", "ports": "7000-7010"},
                                 {"direction": "in", "protocol": "icmp", "icmp_type": 8}]},
       {"name": "any", "rules": [{"direction": "out"}]}]


def test_a_synthetic_frame_goes_where_a_real_one_of_its_kind_goes(tmp_path):
    """The same frame told in words and sent for real: the same ports
    out, or the same named drop — and the synthetic one changes nothing."""
    vms = [vm("a", "198.18.73.1", source_guard=True, security_groups=["any"]),
           vm("b", "198.18.73.2", mtu=1400, security_groups=["web", "any"]),
           vm("c", "198.18.73.3", security_groups=["web", "any"])]
    with hvlab.Topology(tmp_path, vms, prefix="trs", tables={"security_group": WEB}) as t:
        t.sh("a", "ping -c 1 -W 5 198.18.73.2")
        t.sh("a", "ping -c 1 -W 5 198.18.73.3")

        def real(live, send):
            with contextlib.ExitStack() as s:
                s.enter_context(send)
                v = trace(t, "a", live)
                assert v["frames"], v
                return v["frames"][0]

        def same(words, live, send, want):
            syn = flow(t, "a", *words.split())
            assert syn["synthetic"] and syn["ended"] == "switched", syn
            s = syn["frames"][0]
            r = real(live, send)
            verdict = lambda f: (f["dropped"], [d.split(" queue")[0] for d in f["delivered"]], f["dropped_at"])
            assert verdict(s) == verdict(r) == want, (words, s, r)
            return s

        # Healthy: a to b, and the ICMP echo c's group lets in.
        s = same("dst=b icmp", "icmp and dst host 198.18.73.2", pinging(t, "198.18.73.2"),
                 (None, ["to b"], []))
        assert any(x["stage"] == "acl" and "rule any" in x["text"] for x in s["stages"]), s
        same("dst=198.18.73.3", "icmp and dst host 198.18.73.3", pinging(t, "198.18.73.3"),
             (None, ["to c"], []))
        # Over b's MTU: out of a, dropped at b.
        same("dst=b size=1428", "icmp and greater 1400", pinging(t, "-s 1400 -M do 198.18.73.2"),
             (None, [], ["to b: mtu_exceeded"]))
        # A port c's security group does not open: dropped at c, the
        # trace naming why.
        # (A connection attempt's SYN is sent again after 1, 3 and 7 s.)
        probe = Path(__file__).with_name("acl_probe.py")
        connect = t.popen("a", f"{sys.executable} {probe} connect 198.18.73.3 5201",
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            s = same("dst=c tcp dport=5201 flags=S", "tcp dst port 5201", contextlib.nullcontext(),
                     (None, [], ["to c: acl_in"]))
        finally:
            connect.kill()
        assert any("denied by default" in x["text"] for x in s["stages"]), s
        # From an address not a's: the source guard.
        t.sh("a", "ip addr add 198.18.73.99/24 dev eth0")
        same("src=198.18.73.99 dst=b", "icmp and src host 198.18.73.99",
             pinging(t, "-I 198.18.73.99 198.18.73.2"), ("source_guard", [], []))
        t.sh("a", "ip addr del 198.18.73.99/24 dev eth0")

        # A synthetic frame is learned, counted and delivered nowhere: one
        # from a MAC not a's is a forged frame, dropped as a real one is,
        # yet not in the drop counters; its sender is not in the FDB.
        before = {p: json.loads(t.hv("port", p, "--json").stdout) for p in ("a", "b")}
        s = flow(t, "a", "smac=02:99:00:00:00:01", "src=198.18.73.1", "dst=b")["frames"][0]
        assert s["dropped"] == "policy", s
        s = flow(t, "a", "dst=b", "size=1428")["frames"][0]
        assert s["dropped_at"] == ["to b: mtu_exceeded"], s
        after = {p: json.loads(t.hv("port", p, "--json").stdout) for p in ("a", "b")}
        for p in ("a", "b"):
            assert after[p]["drops"] == before[p]["drops"], p
        assert "02:99:00:00:00:01" not in t.hv("fdb").stdout
        for p in ("a", "b", "c"):
            assert t.stats(f"/ports/{p}/accounting")["ingress"]["balanced"], p
        # Told in words for a person.
        text = t.hv("trace", "a", "dst=b", "udp", "dport=7001").stdout
        assert text.startswith("synthetic frame from a (dst=b udp dport=7001,") and "=> would be delivered to b" in text, text

        # Injected, it is a real frame: b's kernel takes it (its checksums
        # are right) and a UDP socket there reads it.
        got = t.popen("b", f"{sys.executable} -c \"import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); "
                           "s.bind(('198.18.73.2', 7007)); s.settimeout(20); print(len(s.recvfrom(2048)[0]))\"",
                      stdout=subprocess.PIPE, text=True)
        assert hvlab.eventually(lambda: ":7007 " in t.sh("b", "ss -Hlun").stdout, timeout=30, every=0.1)
        v = flow(t, "a", "dst=b", "udp", "dport=7007", "size=128", "--inject")
        assert not v["synthetic"] and v["frames"][0]["delivered"], v
        out, _ = got.communicate(timeout=30)
        assert out.strip() == "100", out


def test_bad_flow_words_are_refused_with_the_word_and_the_reason(tmp_path):
    vms = [vm("a", "198.18.74.1"), vm("b", "198.18.74.2", vlan=20), vm("e", "198.18.74.5", vlan_mode="trunk", vlans=[10])]
    with hvlab.Topology(tmp_path, vms, prefix="trs") as t:
        for words, says in [
            (["dst=b", "vlan=5000"], '"vlan=5000": a VLAN is a number from 1 to 4094'),
            (["dst=b", "color=red"], 'no field "color"'),
            (["dst=nosuch"], "dst=nosuch: no VM, host or port of that name"),
            (["dst=198.18.9.9"], "no VM or host here has 198.18.9.9"),
            (["udp", "flags=S", "dst=b"], "flags= needs proto=tcp"),
        ]:
            r = t.hv("trace", "a", *words, check=False)
            assert r.returncode != 0 and says in r.stderr, (words, r.stderr)
        r = t.hv("trace", "a", "dst=b", "--live", "icmp", check=False)
        assert r.returncode != 0 and "cannot be used with" in r.stderr, r.stderr
        # b is in VLAN 20, a in none: the frame floods a's VLAN and finds
        # nobody there, as a real one would.
        f = flow(t, "a", "dst=b")["frames"][0]
        assert f["delivered"] == [] and f["dropped"] == "no_route", f
        # A trunk's guest tagging a VLAN its port does not carry: the
        # synthetic frame and the real ones dropped alike.
        syn = flow(t, "e", "vlan=30", "dmac=ff:ff:ff:ff:ff:ff")["frames"][0]
        probe = Path(__file__).with_name("vlan_probe.py")
        sender = t.popen("e", f"sh -c 'for i in $(seq 40); do {sys.executable} {probe} send eth0 ff:ff:ff:ff:ff:ff 30 x y;"
                              " sleep 0.2; done'", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            real = trace(t, "e", "vlan 30")["frames"][0]
        finally:
            sender.kill()
        assert syn["dropped"] == real["dropped"] == "vlan_not_allowed", (syn, real)
        # A port whose guest is gone reads nothing: the trace says so.
        hvlab.run(["ip", "netns", "del", t.ns("a")])
        assert hvlab.eventually(lambda: json.loads(t.hv("port", "a", "--json").stdout)["link"] != "up", timeout=30)
        v = flow(t, "a", "dst=b")
        assert v["ended"] == "port down" and v["frames"][0]["dropped"] == "port_down", v


def test_a_trace_follows_its_frame_through_a_tunnel_to_the_next_hvnet_host(tmp_path):
    """Two hvnet hosts (namespaces' daemons) over one underlay: a real
    frame's trace and a synthetic one's go on at the far host, which
    reports its part back over the tunnel — one path across both. A far
    end that is Linux's vxlan device ends the trace at the tunnel with
    what was sent, and still gets the real frame."""
    da, db = hvlab.unique("hvta"), hvlab.unique("hvtb")
    hvlab.run(["ip", "link", "add", da, "mtu", "1550", "type", "veth", "peer", "name", db, "mtu", "1550"])
    try:
        def side(name, dev, local, remote, ip):
            return hvlab.Topology(
                tmp_path, [vm(name, ip)], prefix="trx",
                uplinks=[dict(name="up0", device=dev, mtu=1550,
                              vxlan=dict(vni=77, local=local + "/24", remotes=[remote]))])
        with side("a", da, "198.18.10.1", "198.18.10.2", "198.18.78.1") as ta, \
                side("b", db, "198.18.10.2", "198.18.10.1", "198.18.78.2") as tb:
            ta.sh("a", "ping -c 2 -i 0.2 -W 2 198.18.78.2")
            # A real frame: through a's stages into the tunnel, then b's host.
            with pinging(ta, "198.18.78.2"):
                v = trace(ta, "a", "icmp[icmptype] == icmp-echo")
            f = v["frames"][0]
            assert [d.split(":")[0] for d in f["delivered"]] == ["to up0"] and "trace #" in f["delivered"][0], f
            assert len(f["far"]) == 1, f
            far = f["far"][0]
            assert far["host"] == "198.18.10.2" and far["endpoint"] == "up0", far
            assert [d.split(" queue")[0] for d in far["delivered"]] == ["to b"], far
            assert "fdb" in [s["stage"] for s in far["stages"]], far
            # In words: the far end's part under the near end's.
            with pinging(ta, "198.18.78.2"):
                text = ta.hv("trace", "a", "--live", "icmp[icmptype] == icmp-echo").stdout
            assert "-> at the far end 198.18.10.2 (up0):" in text and "=> delivered to b queue" in text, text

            # A synthetic frame: its decisions run on both hosts, and b's
            # guest gets nothing.
            bmac = json.loads(tb.hv("ports", "--json").stdout)
            bmac = next(p["mac"] for p in bmac if p["name"] == "b")
            before = tb.stats("/ports/b/rx_summary")["delivered_frames"]
            v = flow(ta, "a", "dst=198.18.78.2", f"dmac={bmac}", "udp", "dport=9")
            f = v["frames"][0]
            assert v["synthetic"] and len(f["far"]) == 1, v
            far = f["far"][0]
            assert [d.split(" queue")[0] for d in far["delivered"]] == ["to b"], far
            assert any("not delivered: a synthetic frame" in s["text"] for s in far["stages"]), far
            assert tb.stats("/ports/b/rx_summary")["delivered_frames"] == before
            # Every frame accounted for on both hosts: the far end's
            # synthetic frame counted in at its endpoint and consumed there.
            for t, port in ((ta, "a"), (ta, "up0"), (tb, "up0"), (tb, "b")):
                assert t.stats(f"/ports/{port}/accounting")["ingress"]["balanced"], (t.name, port)
            # The far host's MTU drops it there, and the trace says where.
            tb.hv("port", "b", "set", "mtu=1200")
            v = flow(ta, "a", "dst=198.18.78.2", f"dmac={bmac}", "size=1300")
            far = v["frames"][0]["far"][0]
            assert far["dropped_at"] == ["to b: mtu_exceeded"], far
    finally:
        hvlab.run(["ip", "link", "del", da], check=False)


def test_a_trace_into_a_tunnel_to_a_linux_vtep_ends_at_the_tunnel(tmp_path):
    with hvlab.Topology(
            tmp_path, [vm("a", "198.18.79.1")], prefix="trl",
            uplinks=[dict(name="up0", device="", mtu=1550,
                          vxlan=dict(vni=78, local="198.18.11.1/24", remotes=["198.18.11.2"]))],
            hosts=[dict(name="ext", uplink="up0", ipv4="198.18.11.2/24")]) as t:
        t.sh("ext", "ip link add vx78 type vxlan id 78 local 198.18.11.2 remote 198.18.11.1 dstport 4789 dev eth0"
                    " && ip addr add 198.18.79.100/24 dev vx78 && ip link set vx78 up")
        t.sh("a", "ping -c 2 -i 0.2 -W 2 198.18.79.100")
        # The marked frames reach the Linux peer and are answered: the
        # pings traced get their replies as the others do.
        pinger = t.popen("a", "ping -c 20 -i 0.2 -W 2 198.18.79.100", stdout=subprocess.PIPE, text=True)
        v = trace(t, "a", "icmp[icmptype] == icmp-echo", "-c", "3")
        out, _ = pinger.communicate(timeout=60)
        f = v["frames"][0]
        assert len(v["frames"]) == 3 and f["far"] == [] and "ends at the tunnel" in f["far_silent"], f
        assert "VXLAN VNI 78" in f["delivered"][0] and "198.18.11.2" in f["delivered"][0], f
        assert " 0% packet loss" in out, out


def test_uplink_group_and_mirrored_paths_agree_with_real_frames(tmp_path):
    """The healthy paths beside VM to VM: to the wire (an external host
    behind an uplink), to a multicast group's members (snooping with the
    switch's querier: the members and the router port, not the others),
    and a mirrored port's copies — a synthetic frame's verdict is a real
    one's."""
    mcast = Path(__file__).with_name("mcast_probe.py")
    vms = [vm("s", "198.18.80.1"), vm("m1", "198.18.80.2"), vm("n", "198.18.80.3"), vm("mon", "198.18.80.4")]
    with hvlab.Topology(tmp_path, vms, prefix="trp", switch={"multicast_querier": True},
                        uplinks=[dict(name="up0", device="")],
                        hosts=[dict(name="ext", uplink="up0", ipv4="198.18.80.100/24")]) as t:
        t.sh("s", "ping -c 1 -W 5 198.18.80.100")
        join = t.popen("m1", f"{sys.executable} {mcast} recv 239.1.2.3 5001 1000000", stdin=subprocess.PIPE,
                       stdout=subprocess.PIPE, text=True)
        assert join.stdout.readline().strip() == "joined"
        mdb = lambda: json.loads(t.hv("mdb", "--json").stdout)
        pruning = lambda: any(q["pruning"] and q["family"] == "ipv4" for q in mdb()["own_querier"])
        assert hvlab.eventually(lambda: pruning() and any(r["group"] == "239.1.2.3" for r in mdb()["mdb"]),
                                timeout=30), mdb()

        def verdict(f):
            return (f["dropped"], sorted(d.split(" queue")[0] for d in f["delivered"]), sorted(f["dropped_at"]))

        def agree(words, live, sender):
            s = flow(t, "s", *words.split())["frames"][0]
            p = t.popen("s", sender, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                r = trace(t, "s", live)["frames"][0]
            finally:
                p.kill()
            assert verdict(s) == verdict(r), (words, s, r)
            return verdict(s)

        to_group = f"sh -c 'for i in $(seq 50); do {sys.executable} {mcast} send 239.1.2.3 5001 1; sleep 0.2; done'"
        assert agree("dst=239.1.2.3 udp dport=5001", "udp and dst host 239.1.2.3", to_group) == \
            (None, ["to m1", "to up0"], [])
        assert agree("dst=ext", "icmp and dst host 198.18.80.100", "ping -i 0.2 -c 50 198.18.80.100") == \
            (None, ["to up0"], [])
        # s mirrored to mon: each path gets mon's copy too.
        span = dict(name="span-s", select_src_port=["s"], select_dst_port=["s"], output_port="mon")
        t.apply(mirror=[span])
        assert agree("dst=ext", "icmp and dst host 198.18.80.100", "ping -i 0.2 -c 50 198.18.80.100") == \
            (None, ["to mon", "to up0"], [])
        assert agree("dst=m1", "icmp and dst host 198.18.80.2", "ping -i 0.2 -c 50 198.18.80.2") == \
            (None, ["to m1", "to mon"], [])
        join.stdin.close()
