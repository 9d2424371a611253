"""Containers on the switch: a port made in a namespace someone else made
(`hvnet vm add NAME netns=PATH ifname=IF`), and the CNI plugin
(`hvnet-cni`) driven by hand as a runtime drives it — the spec's
environment and a configuration on standard input, the reference
`host-local` IPAM plugin for addresses."""

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

import hvlab
import helpers
from helpers import vm

pytestmark = pytest.mark.root

CNI_DIRS = ["/usr/lib/cni", "/opt/cni/bin"]


def links(ns):
    """The interfaces of namespace `ns` (a name under /run/netns)."""
    out = hvlab.run(["ip", "-n", ns, "-j", "link", "show"]).stdout
    return {link["ifname"]: link for link in json.loads(out)}


def cni_bin():
    return str(Path(hvlab.hvnet_bin()).with_name("hvnet-cni"))


def host_local():
    for d in CNI_DIRS:
        if Path(d, "host-local").exists():
            return d
    pytest.skip("no host-local IPAM plugin (containernetworking-plugins): scripts/install-deps.sh installs it")


class Cni:
    """Runs hvnet-cni as a runtime does: one network's configuration, the
    attachment's environment."""

    def __init__(self, conf, ipam_dir, state_dir):
        self.conf = conf
        self.env = dict(os.environ, CNI_PATH=f"{ipam_dir}:{Path(cni_bin()).parent}")
        # host-local keeps its leases here (not under /var/lib/cni).
        self.conf.setdefault("ipam", {}).setdefault("dataDir", str(state_dir))

    def __call__(self, command, container="", netns="", ifname="", conf=None, stdin=None):
        env = dict(self.env, CNI_COMMAND=command, CNI_CONTAINERID=container, CNI_NETNS=netns, CNI_IFNAME=ifname)
        text = stdin if stdin is not None else json.dumps(conf or self.conf)
        r = subprocess.run([cni_bin()], input=text, env=env, capture_output=True, text=True, timeout=120)
        out = json.loads(r.stdout) if r.stdout.strip() else None
        return r.returncode, out


def test_a_port_in_a_namespace_someone_else_made(tmp_path):
    with hvlab.Netns("cnx") as c:
        path = f"/run/netns/{c.name}"
        with hvlab.Topology(tmp_path, [vm("a", "10.79.0.1")], prefix="cn") as t:
            in_foreign_namespace(t, c, path)
        # `hvnet down` took out what it had put in a namespace it did not
        # make, and left the namespace.
        assert sorted(links(c.name)) == ["lo"]


def in_foreign_namespace(t, c, path):
    """What test_a_port_in_a_namespace_someone_else_made checks while the
    topology runs (`c` the foreign namespace, at `path`)."""
    out = json.loads(t.hv("vm", "add", "c1", f"netns={path}", "ifname=net1", "ipv4=10.79.0.5/24",
                          "routes=[\"198.19.0.0/16 via 10.79.0.1\"]", "--json").stdout)
    assert out["kind"] == "netns", out
    have = links(c.name)
    assert "net1" in have and have["net1"]["address"] == out["mac"], have
    c.sh("ping -c 1 -W 5 10.79.0.1")
    routes = c.sh("ip -j route show").stdout
    assert any(r["dst"] == "198.19.0.0/16" and r.get("gateway") == "10.79.0.1" for r in json.loads(routes)), routes
    row = helpers.ports(t)["c1"]
    assert (row["netns"], row["ifname"]) == (path, "net1"), row
    # Its name there is taken: refused, nothing made.
    r = t.hv("vm", "add", "c2", f"netns={path}", "ifname=net1", check=False)
    assert r.returncode != 0 and "net1" in r.stderr, r.stderr
    r = t.hv("vm", "add", "c3", f"netns={path}", "ifname=lo", check=False)
    assert r.returncode != 0 and "has an interface lo already" in r.stderr, r.stderr
    assert sorted(helpers.ports(t)) == ["a", "c1"]
    # Removed: nothing of it left in the namespace, which stays.
    t.hv("vm", "del", "c1")
    assert sorted(links(c.name)) == ["lo"]
    assert Path(path).exists()
    # The namespace deleted under the port: it goes down, and `vm del`
    # still removes it.
    with hvlab.Netns("cny") as gone:
        t.hv("vm", "add", "c4", f"netns=/run/netns/{gone.name}", "ipv4=10.79.0.6/24")
    assert hvlab.eventually(lambda: helpers.ports(t)["c4"]["link"] != "up", timeout=15)
    t.hv("vm", "del", "c4")
    assert "c4" not in helpers.ports(t)
    # One left for `hvnet down`.
    t.hv("vm", "add", "c5", f"netns={path}", "ifname=net5", "ipv4=10.79.0.7/24")
    assert "net5" in links(c.name)


def test_the_cni_verbs_as_a_runtime_calls_them(tmp_path):
    ipam = host_local()
    with hvlab.Topology(tmp_path, [vm("a", "10.80.0.1")], prefix="cv") as t, \
            hvlab.Netns("cva") as c1, hvlab.Netns("cvb") as c2:
        conf = {"cniVersion": "1.0.0", "name": "cvnet", "type": "hvnet-cni", "topology": t.name, "mtu": 1400,
                "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.80.0.0/24", "rangeStart": "10.80.0.10",
                                                            "gateway": "10.80.0.1"}]],
                         "routes": [{"dst": "198.19.0.0/16"}]}}
        cni = Cni(conf, ipam, tmp_path / "leases")
        rc, v = cni("VERSION", stdin="")
        assert rc == 0 and "1.1.0" in v["supportedVersions"] and "0.4.0" in v["supportedVersions"], v
        ns1, ns2 = f"/run/netns/{c1.name}", f"/run/netns/{c2.name}"
        rc, r1 = cni("ADD", "ctr-one", ns1, "eth0")
        assert rc == 0, r1
        assert r1["cniVersion"] == "1.0.0" and r1["interfaces"][0]["sandbox"] == ns1, r1
        ip1 = r1["ips"][0]["address"]
        assert ip1.startswith("10.80.0.") and r1["ips"][0]["interface"] == 0, r1
        assert r1["routes"] == [{"dst": "198.19.0.0/16", "gw": "10.80.0.1"}], r1
        rc, r2 = cni("ADD", "ctr-two", ns2, "eth0")
        assert rc == 0, r2
        ip2 = r2["ips"][0]["address"].split("/")[0]
        c1.sh(f"ping -c 1 -W 5 {ip2}")
        c1.sh("ping -c 1 -W 5 10.80.0.1")
        assert links(c1.name)["eth0"]["mtu"] == 1400
        # The plugin's ports are tagged with their container.
        mine = {p["container"]["id"]: p for p in helpers.ports(t).values() if "container" in p}
        assert sorted(mine) == ["ctr-one", "ctr-two"] and mine["ctr-one"]["ifname"] == "eth0", mine
        # CHECK against ADD's result.
        rc, out = cni("CHECK", "ctr-one", ns1, "eth0", conf=dict(conf, prevResult=r1))
        assert rc == 0, out
        rc, out = cni("CHECK", "ctr-one", ns1, "eth0")
        assert rc != 0 and out["code"] == 7 and "prevResult" in out["msg"], out
        # Errors the runtime reads: codes and the words of each.
        rc, out = cni("ADD", "", ns1, "eth1")
        assert rc != 0 and out["code"] == 4 and "CNI_CONTAINERID" in out["details"], out
        rc, out = cni("ADD", "x", ns1, "eth1", conf=dict(conf, bridge="br0"))
        assert rc != 0 and out["code"] == 2 and out["details"].startswith("bridge"), out
        rc, out = cni("ADD", "x", ns1, "eth1", conf=dict(conf, cniVersion="0.2.0"))
        assert rc != 0 and out["code"] == 1, out
        rc, out = cni("ADD", "x", ns1, "eth1", conf=dict(conf, topology="nosuchtopo"))
        assert rc != 0 and out["code"] == 102 and "not up" in out["details"], out
        rc, out = cni("ADD", "x", ns1, "eth1", conf=dict(conf, vlan=5000))
        assert rc != 0 and out["code"] == 100, out
        rc, out = cni("ADD", "ctr-one", ns1, "eth0")
        assert rc != 0 and out["code"] == 100, out
        # Failed ADDs gave their addresses back: the next one gets the
        # next free address, not a fourth.
        leases = sorted(p.name for p in (tmp_path / "leases" / "cvnet").iterdir() if p.name.startswith("10."))
        assert len(leases) == 2, leases
        # DEL, and DEL again: both succeed; the port and the lease go.
        for _ in range(2):
            rc, out = cni("DEL", "ctr-one", ns1, "eth0", conf=dict(conf, prevResult=r1))
            assert rc == 0, out
        assert "eth0" not in links(c1.name)
        assert not any(p.get("container", {}).get("id") == "ctr-one" for p in helpers.ports(t).values())
        # GC (1.1): what the runtime no longer lists goes.
        rc, out = cni("GC", conf=dict(conf, cniVersion="1.1.0"))
        assert rc != 0 and out["code"] == 7 and "valid-attachments" in out["details"], out
        assert len(mine) == 2
        gc = dict(conf, cniVersion="1.1.0", **{"cni.dev/valid-attachments": []})
        rc, out = cni("GC", conf=gc)
        assert rc == 0, out
        assert not any("container" in p for p in helpers.ports(t).values())
        assert "eth0" not in links(c2.name)
        # STATUS (1.1): available while the switch answers.
        status = dict(conf, cniVersion="1.1.0")
        rc, out = cni("STATUS", conf=status)
        assert rc == 0, out
        name = t.name
    # The topology is down: STATUS says so; DEL still succeeds.
    rc, out = cni("STATUS", conf=dict(status, topology=name))
    assert rc != 0 and out["code"] == 50, out
    rc, out = cni("DEL", "ctr-two", "", "eth0")
    assert rc == 0, out


def test_a_del_while_the_switch_restarts_is_done_when_it_returns(tmp_path):
    ipam = host_local()
    with hvlab.Netns("cwa") as c1, hvlab.Netns("cwb") as c2:
        with hvlab.Topology(tmp_path, [vm("a", "10.82.0.1")], prefix="cw") as t:
            conf = {"cniVersion": "1.0.0", "name": "cwnet", "type": "hvnet-cni", "topology": t.name,
                    "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.82.0.0/24", "rangeStart": "10.82.0.10"}]]}}
            cni = Cni(conf, ipam, tmp_path / "leases")
            ns1, ns2 = f"/run/netns/{c1.name}", f"/run/netns/{c2.name}"
            assert cni("ADD", "k1", ns1, "eth0")[0] == 0
            assert cni("ADD", "k2", ns2, "eth0")[0] == 0
            assert cni("ADD", "k4", ns2, "eth4")[0] == 0
            with hvlab.Netns("cwc") as c3:
                assert cni("ADD", "k3", f"/run/netns/{c3.name}", "eth0")[0] == 0
                # The daemon stops (its VMs keep their NICs)...
                os.kill(helpers.daemon_pid(t), 15)
                assert hvlab.eventually(lambda: not Path(f"/run/hvnet/{t.name}/ctl.sock").exists(), timeout=10)
                # ... and meanwhile a container is removed: DEL succeeds.
                rc, out = cni("DEL", "k1", ns1, "eth0")
                assert rc == 0, out
                # And root in another deletes its interface: it cannot
                # keep the switch from starting again.
                c2.sh("ip link del eth4")
            # And another container's namespace goes without a DEL.
            hvlab.hvnet("up", t.file)
            ids = sorted(p["container"]["id"] for p in helpers.ports(t).values() if "container" in p)
            assert ids == ["k2"], ids
            assert "eth0" not in links(c1.name)
            c2.sh("ping -c 1 -W 5 10.82.0.1")
        assert "eth0" not in links(c2.name)


def test_the_switch_features_hold_for_containers(tmp_path):
    """VLANs apart, a trunk's sub-interface, jumbo MTU, a security group,
    rates from the runtime's bandwidth capability and the source guard,
    each set in the network's configuration and checked on traffic or on
    the port."""
    import tomli_w
    import tomllib

    ipam = host_local()
    with hvlab.Netns("cfa") as c1, hvlab.Netns("cfb") as c2, hvlab.Netns("cfc") as c3:
        t = hvlab.Topology(tmp_path, [vm("a", "10.84.0.1", vlan=10)], prefix="cf")
        doc = tomllib.loads(t.file.read_text())
        doc["security_group"] = [{"name": "pingless", "rules": [{"direction": "out"}]}]
        t.file.write_text(tomli_w.dumps(doc))
        with t:
            def net(name, start, **keys):
                return Cni({"cniVersion": "1.0.0", "name": name, "type": "hvnet-cni", "topology": t.name, **keys,
                            "ipam": {"type": "host-local",
                                     "ranges": [[{"subnet": "10.84.0.0/24", "rangeStart": f"10.84.0.{start}",
                                                  "rangeEnd": f"10.84.0.{start + 9}"}]]}},
                           ipam, tmp_path / "leases")

            ns = {c.name: f"/run/netns/{c.name}" for c in (c1, c2, c3)}
            v10 = net("v10", 10, vlan=10, mtu=9000)
            v20 = net("v20", 20, vlan=20)
            rc, r1 = v10("ADD", "f1", ns[c1.name], "eth0",
                         conf=dict(v10.conf, runtimeConfig={"bandwidth": {
                             "ingressRate": 100_000_000, "ingressBurst": 8_000_000,
                             "egressRate": 50_000_000, "egressBurst": 8_000_000}}))
            assert rc == 0, r1
            rc, r2 = v20("ADD", "f2", ns[c2.name], "eth0")
            assert rc == 0, r2
            ip2 = r2["ips"][0]["address"].split("/")[0]
            # Jumbo frames, and the VLAN: a (VLAN 10) answers; VLAN 20 does not.
            assert links(c1.name)["eth0"]["mtu"] == 9000
            c1.sh("ping -c 1 -W 5 10.84.0.1")
            assert c1.sh(f"ping -c 2 -W 1 {ip2}", check=False).returncode != 0
            # The runtime's bandwidth: into the container its shaper, out
            # of it its policer.
            port = next(p for p in helpers.ports(t).values() if p.get("container", {}).get("id") == "f1")
            s = json.loads(t.hv("port", port["name"], "--json").stdout)
            assert (s["rx_rate"], s["tx_rate"]) == ("100mbit", "50mbit"), s
            # A security group: pings into the container are dropped and
            # counted, its own pings out are answered.
            sg = net("sg", 30, vlan=10, security_groups=["pingless"])
            rc, r3 = sg("ADD", "f3", ns[c3.name], "eth0")
            assert rc == 0, r3
            ip3 = r3["ips"][0]["address"].split("/")[0]
            c3.sh("ping -c 1 -W 5 10.84.0.1")
            name3 = next(p for p in helpers.ports(t).values() if p.get("container", {}).get("id") == "f3")["name"]
            before = t.stats(f"/ports/{name3}/rx_summary")["drop_acl_in"]
            assert t.sh("a", f"ping -c 2 -W 1 {ip3}", check=False).returncode != 0
            assert t.stats(f"/ports/{name3}/rx_summary")["drop_acl_in"] > before
            # The source guard: a container that takes an address it was
            # not given is dropped and counted.
            name1 = port["name"]
            before = t.stats(f"/ports/{name1}/tx_summary")["drop_source_guard"]
            c1.sh("ip addr add 10.84.0.99/24 dev eth0")
            assert c1.sh("ping -c 2 -W 1 -I 10.84.0.99 10.84.0.1", check=False).returncode != 0
            assert t.stats(f"/ports/{name1}/tx_summary")["drop_source_guard"] > before
            c1.sh("ip addr del 10.84.0.99/24 dev eth0")
            # The runtime's bandwidth holds on traffic: what the container
            # sends (UDP, unlimited) arrives at no more than its 50 Mbit/s
            # policer lets through (the bound only: a slow machine sends
            # less).
            t.popen("a", "iperf3 -s -1 -B 10.84.0.1", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            hvlab.eventually(lambda: "5201" in t.sh("a", "ss -Hltn").stdout, timeout=10)
            out = json.loads(c1.sh("iperf3 -c 10.84.0.1 -u -b 0 -l 1400 -t 2 -J", timeout=60).stdout)
            got = out["end"]["sum_received"]["bits_per_second"]
            assert 0 < got <= 50e6 * 1.2, got
            with hvlab.Netns("cft") as c4:
                # A trunk container (VLAN 10 tagged, no native VLAN): what
                # it sends tagged 10 reaches a (VLAN 10), tagged 20 or
                # untagged does not; a's frames come to it tagged 10. (No
                # VLAN device in this kernel: raw frames, as test_trunk.)
                tr = net("tr", 40, vlan_mode="trunk", vlans=[10])
                rc, r4 = tr("ADD", "f4", f"/run/netns/{c4.name}", "eth0")
                assert rc == 0, r4
                probe = f"{os.sys.executable} {Path(__file__).with_name('vlan_probe.py')}"

                def heard(popen, send):
                    """What `popen`'s namespace receives while `send` runs
                    (its last frame, labelled "end", ends the listening)."""
                    p = popen(f"{probe} recv eth0 tk", stdout=subprocess.PIPE, text=True)
                    try:
                        assert p.stdout.readline().strip() == "ready"
                        send()
                        return {(f["label"], f["vlan"]) for f in json.loads(p.stdout.readline())}
                    finally:
                        p.kill()
                        p.wait()

                bcast = "ff:ff:ff:ff:ff:ff"
                got = heard(lambda cmd, **kw: t.popen("a", cmd, **kw), lambda: [c4.sh(f"{probe} send eth0 {bcast} {tag} tk {label}")
                                          for tag, label in (("10", "v10"), ("20", "v20"), ("-", "untagged"),
                                                             ("10", "end"))])
                assert got == {("v10", None)}, got
                got = heard(c4.popen, lambda: t.sh("a", f"{probe} send eth0 {bcast} - tk from-a end"))
                assert got == {("from-a", 10)}, got
                rc, out = tr("DEL", "f4", f"/run/netns/{c4.name}", "eth0")
                assert rc == 0, out


def test_adds_and_dels_at_once_as_a_runtime_starts_many(tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    ipam = host_local()
    n = 8
    with hvlab.Topology(tmp_path, [vm("a", "10.86.0.1")], prefix="cc") as t:
        spaces = [hvlab.Netns("ccn") for _ in range(n)]
        for s in spaces:
            s.__enter__()
        try:
            cni = Cni({"cniVersion": "1.0.0", "name": "ccnet", "type": "hvnet-cni", "topology": t.name,
                       "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.86.0.0/24", "rangeStart": "10.86.0.10"}]]}},
                      ipam, tmp_path / "leases")
            with ThreadPoolExecutor(n) as pool:
                added = list(pool.map(lambda i: cni("ADD", f"cc{i}", f"/run/netns/{spaces[i].name}", "eth0"), range(n)))
            assert all(rc == 0 for rc, _ in added), added
            ips = {r["ips"][0]["address"] for _, r in added}
            assert len(ips) == n, ips
            for i, s in enumerate(spaces):
                s.sh("ping -c 1 -W 5 10.86.0.1")
            with ThreadPoolExecutor(n) as pool:
                gone = list(pool.map(lambda i: cni("DEL", f"cc{i}", f"/run/netns/{spaces[i].name}", "eth0"), range(n)))
            assert all(rc == 0 for rc, _ in gone), gone
            assert sorted(helpers.ports(t)) == ["a"]
            assert all(sorted(links(s.name)) == ["lo"] for s in spaces)
        finally:
            for s in spaces:
                s.__exit__(None, None, None)


def test_the_switch_killed_during_an_add_leaves_nothing_after_a_restart_and_gc(tmp_path):
    """The daemon killed (SIGKILL) at points through an ADD: whatever the
    ADD answered, once the switch is back and GC has run with the
    runtime's list empty, the container has no interface of ours and the
    switch no port for it."""
    import signal
    import time

    ipam = host_local()
    with hvlab.Netns("ckx") as c, hvlab.Topology(tmp_path, [vm("a", "10.87.0.1")], prefix="ck") as t:
        conf = {"cniVersion": "1.1.0", "name": "cknet", "type": "hvnet-cni", "topology": t.name,
                "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.87.0.0/24", "rangeStart": "10.87.0.10"}]]}}
        cni = Cni(conf, ipam, tmp_path / "leases")
        ns = f"/run/netns/{c.name}"
        for i, delay in enumerate([0.0, 0.004, 0.008, 0.012, 0.016, 0.024]):
            env = dict(cni.env, CNI_COMMAND="ADD", CNI_CONTAINERID=f"k{i}", CNI_NETNS=ns, CNI_IFNAME=f"eth{i}")
            add = subprocess.Popen([cni_bin()], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            add.stdin.write(json.dumps(conf))
            add.stdin.close()
            time.sleep(delay)
            os.kill(helpers.daemon_pid(t), signal.SIGKILL)
            add.wait(timeout=60)
            hvlab.eventually(lambda: not Path(f"/proc/{helpers.daemon_pid(t)}").exists(), timeout=10)
            hvlab.hvnet("up", t.file)
            rc, out = cni("GC", conf=dict(conf, **{"cni.dev/valid-attachments": []}))
            assert rc == 0, out
            assert not any("container" in p for p in helpers.ports(t).values()), (delay, helpers.ports(t))
            assert sorted(links(c.name)) == ["lo"], (delay, links(c.name))
        t.sh("a", "ping -c 1 -W 5 10.87.0.1")


CNITOOL = shutil.which("cnitool") or "/usr/local/bin/cnitool"


@pytest.mark.skipif(not os.path.exists(CNITOOL), reason="cnitool: scripts/install-deps.sh builds it")
def test_cnitool_drives_the_plugin_through_every_verb(tmp_path):
    """The CNI project's own client (libcni) runs hvnet-cni from a
    configuration list in CNI 1.1 (Debian's host-local speaks up to 1.0:
    asked again in that): ADD, CHECK, STATUS, DEL and GC."""
    ipam_dir = host_local()
    confs = tmp_path / "net.d"
    confs.mkdir()
    with hvlab.Topology(tmp_path, [vm("a", "10.84.0.1")], prefix="ct") as t, hvlab.Netns("ctl") as c:
        (confs / "10-ctnet.conflist").write_text(json.dumps({
            "cniVersion": "1.1.0", "name": "ctnet", "plugins": [{
                "type": "hvnet-cni", "topology": t.name, "mtu": 1400, "ipam": {
                    "type": "host-local", "dataDir": str(tmp_path / "leases"),
                    "ranges": [[{"subnet": "10.84.0.0/24", "rangeStart": "10.84.0.10"}]]}}]}))
        env = dict(os.environ, NETCONFPATH=str(confs), CNI_PATH=f"{Path(cni_bin()).parent}:{ipam_dir}",
                   CNI_IFNAME="eth0")
        path = f"/run/netns/{c.name}"

        def tool(verb):
            return subprocess.run([CNITOOL, verb, "ctnet", path], env=env, capture_output=True, text=True,
                                  timeout=120)

        r = tool("add")
        assert r.returncode == 0, r.stderr
        result = json.loads(r.stdout)
        assert result["cniVersion"] == "1.1.0" and result["interfaces"][0]["mtu"] == 1400, result
        ip = result["ips"][0]["address"].split("/")[0]
        assert links(c.name)["eth0"]["mtu"] == 1400
        t.sh("a", f"ping -c 1 -W 5 {ip}")
        for verb in ("check", "status"):
            r = tool(verb)
            assert r.returncode == 0, (verb, r.stderr)
        r = tool("del")
        assert r.returncode == 0, r.stderr
        assert sorted(helpers.ports(t)) == ["a"] and "eth0" not in links(c.name)
        r = tool("del")
        assert r.returncode == 0, ("a second DEL", r.stderr)
        # cnitool's GC passes no list of valid attachments: libcni DELs
        # every attachment it cached first, then hvnet-cni refuses a GC
        # without the list the spec requires (it would take every port of
        # the network, other runtimes' too).
        assert tool("add").returncode == 0
        r = tool("gc")
        assert r.returncode != 0 and "cni.dev/valid-attachments is missing" in r.stderr, r.stderr
        assert sorted(helpers.ports(t)) == ["a"] and "eth0" not in links(c.name)


@pytest.mark.skipif(not shutil.which("dpdk-testpmd"), reason="needs dpdk-testpmd (scripts/install-deps.sh)")
def test_a_userspace_container_gets_a_vhost_user_socket(tmp_path):
    """`"kind": "vhost-user"`: the port is a socket in the network's
    directory, named in the result's socketPath (CNI 1.1), for the
    container's DPDK to open; nothing is made in its namespace."""
    from test_vhost_user import Pmd

    ipam = host_local()
    socks = tmp_path / "socks"
    with hvlab.Topology(tmp_path, [vm("a", "10.86.0.1")], prefix="cu") as t, hvlab.Netns("cud") as c:
        conf = {"cniVersion": "1.1.0", "name": "cunet", "type": "hvnet-cni", "topology": t.name,
                "kind": "vhost-user", "socket_dir": str(socks),
                "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.86.0.0/24", "rangeStart": "10.86.0.10"}]]}}
        cni = Cni(conf, ipam, tmp_path / "leases")
        ns = f"/run/netns/{c.name}"
        rc, r = cni("ADD", "dpdk-one", ns, "net1")
        assert rc == 0, r
        sock = r["interfaces"][0]["socketPath"]
        assert Path(sock).parent == socks and Path(sock).is_socket(), r
        assert r["ips"][0]["address"].startswith("10.86.0."), r
        assert "net1" not in links(c.name)
        port = next(p for p in helpers.ports(t).values() if p.get("container", {}).get("id") == "dpdk-one")
        rc, out = cni("CHECK", "dpdk-one", ns, "net1", conf=dict(conf, prevResult=r))
        assert rc == 0, out
        # The container's DPDK opens the socket and sends to VM a, from
        # the MAC and address ADD gave it (its port's guards know them).
        mac_a = helpers.ports(t)["a"]["mac"]
        ip = r["ips"][0]["address"].split("/")[0]
        pmd = Pmd("cu", sock, r["interfaces"][0]["mac"], "txonly",
                  ["--eth-peer=0," + mac_a, f"--tx-ip={ip},10.86.0.1"])
        try:
            got = lambda: t.stats(f"/ports/{port['name']}/accounting")["ingress"]["forwarded"]  # noqa: E731
            assert hvlab.eventually(lambda: got() > 1000, timeout=30), pmd.text()[-1500:]
            assert helpers.ports(t)[port["name"]]["link"] == "up"
        finally:
            pmd.stop()
        # DEL: the port, its socket and the lease go; DEL again succeeds.
        for _ in range(2):
            rc, out = cni("DEL", "dpdk-one", ns, "net1", conf=dict(conf, prevResult=r))
            assert rc == 0, out
        assert sorted(helpers.ports(t)) == ["a"] and not Path(sock).exists()
        assert not [p for p in (tmp_path / "leases" / "cunet").iterdir() if p.name.startswith("10.")]
        # A kind hvnet-cni does not make is refused, naming the ones it does.
        rc, out = cni("ADD", "x", ns, "net1", conf=dict(conf, kind="tap"))
        assert rc != 0 and out["code"] == 7 and "vhost-user" in out["details"], out
        rc, out = cni("ADD", "x", ns, "net1", conf={k: v for k, v in conf.items() if k != "kind"})
        assert rc != 0 and out["code"] == 7 and "socket_dir" in out["details"], out
