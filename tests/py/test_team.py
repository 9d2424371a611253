"""NIC teams against the real thing: the physical switch is Open vSwitch
userspace (this machine's kernel has no bonding or team driver) in a
namespace of its own, with an external host behind it; the team's members
are veths whose far ends are its ports — a plain bridge for the
switch-independent policies, a bond with `lacp=active`, `balance-tcp` for
`lacp`. One switch serves every test of the module (a fixture); each test
sets its bridge up as it needs and brings its own topology up and down.
Failover and failback under a SHA-256-checked transfer, a member that
flaps, LACP seen from both sides, a partner that stops sending LACPDUs,
malformed LACPDUs and a second partner."""

import hashlib
import json
import os
import re
import socket
import struct
import subprocess
from pathlib import Path

import pytest

import hvlab
from test_observe import scrape

pytestmark = pytest.mark.root

XFER = Path(__file__).parent / "xfer.py"
EXT_IP, VM_A, VM_B = "198.18.40.100", "198.18.40.1", "198.18.40.2"

needs_ovs = pytest.mark.skipif(not hvlab.have("ovs-vswitchd"), reason="needs Open vSwitch")


class Ovs:
    """Open vSwitch userspace (netdev datapath) in namespace `ns`: bridge
    `br` with the members' far ends and the external host's veth. Only
    what it made is removed; its daemons are ended by their PIDs."""

    def __init__(self, tmp: Path):
        self.dir = tmp
        self.ns = hvlab.unique("hvtovs")
        self.ext = hvlab.unique("hvtext")
        self.members = [hvlab.unique("hvta"), hvlab.unique("hvtb")]
        self.far = [hvlab.unique("hvfa"), hvlab.unique("hvfb")]
        self.hostport = hvlab.unique("hvfh")
        # How the far ends are joined: None (not yet), "plain", "bond" or
        # "linux" (a Linux bridge instead of Open vSwitch).
        self.mode = None

    def sh(self, cmd, check=True):
        return hvlab.run(["ip", "netns", "exec", self.ns, "sh", "-c", cmd], check=check)

    def vsctl(self, *args):
        return hvlab.run(["ip", "netns", "exec", self.ns, "ovs-vsctl", f"--db=unix:{self.dir}/db.sock",
                          "--timeout=15", *args])

    def appctl(self, *args, check=True):
        return hvlab.run(["ip", "netns", "exec", self.ns, "ovs-appctl", "-t",
                          f"{self.dir}/ovs-vswitchd.ctl", *args], check=check)

    def ext_sh(self, cmd, check=True, timeout=120):
        return hvlab.run(["ip", "netns", "exec", self.ext, "sh", "-c", cmd], check=check, timeout=timeout)

    def ext_popen(self, cmd, **kw):
        return subprocess.Popen(["ip", "netns", "exec", self.ext, "sh", "-c", cmd], **kw)

    def start(self):
        run = hvlab.run
        run(["ip", "netns", "add", self.ns])
        run(["ip", "netns", "add", self.ext])
        for m, f in zip(self.members, self.far):
            run(["ip", "link", "add", m, "type", "veth", "peer", "name", f, "netns", self.ns])
            # The host's own stack stays off the members (no IPv6 of its own).
            run(["sysctl", "-qw", f"net.ipv6.conf.{m}.disable_ipv6=1"])
            self.sh(f"ip link set {f} up")
        run(["ip", "link", "add", self.hostport, "netns", self.ns, "type", "veth", "peer", "name", "eth0",
             "netns", self.ext])
        self.sh(f"ip link set {self.hostport} up")
        # Open vSwitch userspace forwards bytes: a partial checksum would
        # reach the VMs unfinished, so the host's NIC finishes its own.
        self.ext_sh(f"ip link set lo up && ip addr add {EXT_IP}/24 dev eth0 && "
                    "ip addr add fd18:40::100/64 dev eth0 nodad && ethtool -K eth0 tx off >/dev/null && "
                    "ip link set eth0 up")
        d = self.dir
        env = f"OVS_RUNDIR={d} OVS_LOGDIR={d} OVS_DBDIR={d}"
        self.sh(f"ovsdb-tool create {d}/conf.db /usr/share/openvswitch/vswitch.ovsschema")
        self.sh(f"{env} ovsdb-server {d}/conf.db --remote=punix:{d}/db.sock --pidfile={d}/ovsdb-server.pid "
                f"--unixctl={d}/ovsdb-server.ctl --detach -vconsole:off --log-file={d}/db.log")
        self.vsctl("--no-wait", "init")
        self.sh(f"{env} ovs-vswitchd unix:{d}/db.sock --pidfile={d}/ovs-vswitchd.pid "
                f"--unixctl={d}/ovs-vswitchd.ctl --detach -vconsole:off --log-file={d}/vsd.log")
        self.vsctl("add-br", "br", "--", "set", "bridge", "br", "datapath_type=netdev")
        self.vsctl("add-port", "br", self.hostport)

    def _detach(self):
        """The far ends out of whatever joins them now."""
        if self.mode == "plain":
            for f in self.far:
                self.vsctl("del-port", "br", f)
        elif self.mode == "bond":
            self.vsctl("del-port", "br", "bond0")
        elif self.mode == "linux":
            self.sh("ip link del lbr")
            self.vsctl("add-port", "br", self.hostport)
        self.mode = None

    def plain(self):
        """The members as two ports of a plain bridge (switch independent)."""
        if self.mode != "plain":
            self._detach()
            for f in self.far:
                self.vsctl("add-port", "br", f)
            self.mode = "plain"

    def bond(self):
        """The members as one LACP bond (active, fast, balance-tcp)."""
        if self.mode != "bond":
            self._detach()
            self.vsctl("add-bond", "br", "bond0", *self.far, "lacp=active", "bond_mode=balance-tcp",
                       "other_config:lacp-time=fast")
            self.mode = "bond"

    def linux(self):
        """The members and the host on a Linux bridge instead (switch
        independent): it forwards GSO frames whole, where Open vSwitch
        userspace reads whole, checksummed frames only."""
        if self.mode != "linux":
            self._detach()
            self.vsctl("del-port", "br", self.hostport)
            ports = " ".join([*self.far, self.hostport])
            self.sh(f"ip link add lbr type bridge && ip link set lbr up && "
                    f"for d in {ports}; do ip link set $d master lbr; done")
            self.mode = "linux"

    def stop(self):
        for name in ["ovs-vswitchd", "ovsdb-server"]:
            pid = self.dir / f"{name}.pid"
            if pid.exists():
                try:
                    os.kill(int(pid.read_text().strip()), 15)
                except (ValueError, ProcessLookupError):
                    pass
        for ns in [self.ns, self.ext]:
            hvlab.run(["ip", "netns", "del", ns], check=False)
        for m in self.members:
            hvlab.run(["ip", "link", "del", m], check=False)


@pytest.fixture(scope="module")
def ovs(tmp_path_factory):
    o = Ovs(tmp_path_factory.mktemp("ovs"))
    try:
        o.start()
        yield o
    finally:
        o.stop()


def topology(tmp_path, ovs, teaming, vms=1, up_args=(), **keys):
    # The host forgets the VMs of the module's earlier tests (same
    # addresses, other MACs).
    ovs.ext_sh("ip neigh flush all")
    vm = [dict(name="a", ipv4=VM_A + "/24", ipv6="fd18:40::1/64"), dict(name="b", ipv4=VM_B + "/24")][:vms]
    # Open vSwitch userspace reads the wire with packet sockets, without a
    # virtio-net header: it takes whole, checksummed frames (a NIC's job,
    # done by hvnet here).
    up = dict(name="up0", devices=ovs.members, teaming=teaming, queues=2, tso="software", csum="software", **keys)
    return hvlab.Topology(tmp_path, vm, prefix="tm", uplinks=[up], up_args=up_args)


def team(t):
    return json.loads(t.hv("team", "--json").stdout)["teams"][0]


def member(t, i, ovs):
    return next(m for m in team(t)["members"] if m["device"] == ovs.members[i])


def reaches(ovs, ip):
    return ovs.ext_sh(f"ping -c 1 -W 1 {ip}", check=False).returncode == 0


class Transfer:
    """A paced transfer from the external host to VM `vm`, its SHA-256
    checked at the end."""

    def __init__(self, t, ovs, tmp_path, vm="a", ip=VM_A, size=12 << 20, rate=3 << 20):
        self.data = tmp_path / "random.bin"
        self.data.write_bytes(os.urandom(size))
        self.want = (hashlib.sha256(self.data.read_bytes()).hexdigest(), size)
        self.server = t.popen(vm, f"{os.sys.executable} {XFER} serve {ip} 5555", stdout=subprocess.PIPE,
                              text=True)
        t.wait_listening(vm, 5555)
        self.sender = ovs.ext_popen(f"{os.sys.executable} {XFER} paced {ip} 5555 {self.data} {rate}")

    def check(self):
        assert self.sender.wait(timeout=180) == 0
        digest, n = self.server.communicate(timeout=60)[0].split()
        assert (digest, int(n)) == self.want

    def stop(self):
        hvlab.stop_procs([self.sender, self.server])


def rx_moves(t, ovs, i, more=50):
    """Waits until member `i` has received `more` frames beyond now."""
    base = member(t, i, ovs)["rx_frames"]
    return hvlab.eventually(lambda: member(t, i, ovs)["rx_frames"] >= base + more, timeout=30)


@needs_ovs
def test_active_backup_fails_over_and_back_under_a_transfer(tmp_path, ovs):
    ovs.plain()
    with topology(tmp_path, ovs, "active-backup", order=ovs.members, failback=True) as t:
        a, b = ovs.members
        assert hvlab.eventually(lambda: team(t)["active"] == a, timeout=15), team(t)
        assert hvlab.eventually(lambda: reaches(ovs, VM_A), timeout=15)
        x = Transfer(t, ovs, tmp_path)
        try:
            assert rx_moves(t, ovs, 0), team(t)
            # The active member's carrier goes (the switch's port down).
            ovs.sh(f"ip link set {ovs.far[0]} down")
            assert hvlab.eventually(lambda: team(t)["active"] == b, timeout=15), team(t)
            tm = team(t)
            assert tm["failovers"] >= 1 and tm["announcements"] >= 2, tm
            assert [m["state"] for m in tm["members"]] == ["down", "active"], tm
            # Announced again at the next looks (RARP and a gratuitous
            # ARP, three rounds).
            assert hvlab.eventually(lambda: team(t)["announcements"] >= 6, timeout=5), team(t)
            assert rx_moves(t, ovs, 1), team(t)
            # Back: with failback the first in order is active again.
            ovs.sh(f"ip link set {ovs.far[0]} up")
            assert hvlab.eventually(lambda: team(t)["active"] == a, timeout=15), team(t)
            assert team(t)["failbacks"] >= 1
            assert rx_moves(t, ovs, 0), team(t)
            x.check()
        finally:
            x.stop()
        tm = team(t)
        placed = {p["port"]: p["member"] for p in tm["placements"]}
        assert placed == {"a": a}, tm
        # The standby member saw what the switch flooded, and let none in.
        assert tm["drops"]["not_active_member"] > 0, tm
        # ... each counted at the team's port under its drop reason too.
        up_in = t.stats("/uplinks/up0/tx_summary")
        assert up_in["drop_team_not_active_member"] > 0, up_in
        out = t.hv("team").stdout
        assert "active-backup" in out and a in out, out


@needs_ovs
def test_port_id_spreads_vms_and_a_flapping_member_moves_them_and_back(tmp_path, ovs):
    ovs.plain()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with topology(tmp_path, ovs, "port-id", vms=2, up_args=[f"--metrics=127.0.0.1:{port}"]) as t:
        a, b = ovs.members
        for ip in [VM_A, VM_B]:
            assert hvlab.eventually(lambda: reaches(ovs, ip), timeout=15), ip
        placed = lambda: {p["port"]: p["member"] for p in team(t)["placements"]}  # noqa: E731
        first = placed()
        assert set(first) == {"a", "b"} and set(first.values()) == {a, b}, first
        on_b = next(vm for vm, m in first.items() if m == b)
        ip_b = VM_A if on_b == "a" else VM_B
        pings = ovs.ext_popen(f"ping -i 0.05 -W 1 {ip_b}", stdout=subprocess.DEVNULL)
        try:
            for n in range(3):
                ovs.sh(f"ip link set {ovs.far[1]} down")
                assert hvlab.eventually(lambda: placed()[on_b] == a, timeout=15), team(t)
                assert hvlab.eventually(lambda: reaches(ovs, ip_b), timeout=15)
                ovs.sh(f"ip link set {ovs.far[1]} up")
                assert hvlab.eventually(lambda: placed()[on_b] == b, timeout=15), team(t)
                assert hvlab.eventually(lambda: reaches(ovs, ip_b), timeout=15)
        finally:
            hvlab.stop_procs([pings])
        tm = team(t)
        assert tm["failovers"] >= 3 and tm["failbacks"] >= 3, tm
        assert member(t, 1, ovs)["downs"] >= 3
        assert placed() == first
        # Prometheus has them too.
        _, samples = scrape(port)
        got = {(name, dict(labels).get("member")): v for (name, labels), v in samples.items()}
        assert got[("hvnet_team_failovers_total", None)] >= 3, got
        assert got[("hvnet_team_member_downs_total", b)] >= 3, got
        assert got[("hvnet_team_members_usable", None)] == 2, got
        t.sh("a", f"ping -c 2 -i 0.2 -W 2 {EXT_IP}")
        t.sh("b", f"ping -c 2 -i 0.2 -W 2 {EXT_IP}")


def lacpdu(actor_system, actor_key=1, state=0x3d, actor_tlv=(1, 20)):
    """A LACPDU frame from `actor_system` (bytes) to the Slow Protocols address."""
    src = actor_system
    actor = bytes(actor_tlv) + struct.pack("!H6sHHHB3x", 65534, actor_system, actor_key, 255, 9, state)
    partner = bytes([2, 20]) + bytes(18)
    collector = bytes([3, 16]) + bytes(14)
    body = bytes([1, 1]) + actor + partner + collector + bytes(2) + bytes(50)
    return bytes.fromhex("0180c2000002") + src + b"\x88\x09" + body


def inject(ovs, dev, frame):
    code = ("import socket,sys; s=socket.socket(socket.AF_PACKET, socket.SOCK_RAW); "
            f"s.bind(({dev!r}, 0)); s.send(bytes.fromhex({frame.hex()!r}))")
    hvlab.run(["ip", "netns", "exec", ovs.ns, os.sys.executable, "-c", code])


def bond_show(ovs):
    return ovs.appctl("bond/show", "bond0").stdout


def negotiated(ovs):
    out = bond_show(ovs)
    enabled = len(re.findall(r"^member \S+: enabled", out, re.M))
    return "lacp_status: negotiated" in out and enabled == 2


@needs_ovs
def test_lacp_negotiates_with_open_vswitch_and_survives_its_failures(tmp_path, ovs):
    ovs.bond()
    with topology(tmp_path, ovs, "lacp", lacp_rate="fast") as t:
        a, b = ovs.members
        distributing = lambda: [m["state"] for m in team(t)["members"]] == ["distributing"] * 2  # noqa: E731
        assert hvlab.eventually(distributing, timeout=20), team(t)
        assert hvlab.eventually(lambda: negotiated(ovs), timeout=20), bond_show(ovs)
        # Both sides: the switch has hvnet (the first member's address) as
        # its partner on both members, in one aggregate; hvnet has the
        # switch's system and key on both.
        shown = ovs.appctl("lacp/show", "bond0").stdout
        mine = member(t, 0, ovs)["mac"]
        partners = re.findall(r"partner sys_id:\s*([0-9a-f:]+)", shown)
        assert partners == [mine, mine], shown
        keys = set(re.findall(r"partner key:\s*(\d+)", shown))
        assert len(keys) == 1, shown
        tm = team(t)
        sys_id = re.search(r"actor sys_id:\s*([0-9a-f:]+)", shown).group(1)
        assert tm["partner"]["system"] == sys_id, (tm["partner"], shown)
        assert {m["lacp"]["partner"]["system"] for m in tm["members"]} == {sys_id}
        assert hvlab.eventually(lambda: reaches(ovs, VM_A), timeout=15)

        x = Transfer(t, ovs, tmp_path, size=16 << 20)
        try:
            assert hvlab.eventually(lambda: sum(m["rx_frames"] for m in team(t)["members"]) > 200, timeout=30)
            # A member's carrier goes, and comes back.
            ovs.sh(f"ip link set {ovs.far[0]} down")
            assert hvlab.eventually(lambda: member(t, 0, ovs)["state"] == "down", timeout=15), team(t)
            assert team(t)["failovers"] >= 1
            ovs.sh(f"ip link set {ovs.far[0]} up")
            assert hvlab.eventually(distributing, timeout=20), team(t)
            # The partner stops sending LACPDUs on member b (they are
            # dropped on their way out of the switch): b's partner expires,
            # then goes, and b leaves the aggregate; the transfer goes on.
            # (A classic BPF filter in direct-action mode returning
            # TC_ACT_SHOT: this kernel has no gact module.)
            ovs.sh(f"tc qdisc add dev {ovs.far[1]} clsact && tc filter add dev {ovs.far[1]} egress "
                   "protocol 0x8809 bpf da bytecode '1,6 0 0 2,'")
            try:
                assert hvlab.eventually(
                    lambda: member(t, 1, ovs)["lacp"]["partner_status"] == "defaulted", timeout=20), team(t)
                assert member(t, 1, ovs)["state"] in ("no partner", "not in aggregate"), team(t)
                assert member(t, 0, ovs)["state"] == "distributing"
                # The switch moves b's flows to a once it hears b is out
                # (hvnet's next LACPDU on b, within a second at the fast rate).
                assert hvlab.eventually(lambda: reaches(ovs, VM_A), timeout=15)
            finally:
                ovs.sh(f"tc qdisc del dev {ovs.far[1]} clsact", check=False)
            assert hvlab.eventually(distributing, timeout=20), team(t)
            # Bad LACPDUs on the wire: counted, refused, nothing else moves.
            inject(ovs, ovs.far[1], lacpdu(bytes.fromhex("02dead000001"), actor_tlv=(1, 19)))
            inject(ovs, ovs.far[1], lacpdu(bytes.fromhex("02dead000002"), actor_key=77))
            drops = lambda: team(t)["drops"]  # noqa: E731
            assert hvlab.eventually(lambda: drops()["lacp_malformed"] >= 1, timeout=10), drops()
            assert hvlab.eventually(lambda: drops()["lacp_second_partner"] >= 1, timeout=10), drops()
            up_in = t.stats("/uplinks/up0/tx_summary")
            assert up_in["drop_lacp_malformed"] >= 1 and up_in["drop_lacp_second_partner"] >= 1, up_in
            assert distributing(), team(t)
            assert {m["lacp"]["partner"]["system"] for m in team(t)["members"]} == {sys_id}
            x.check()
        finally:
            x.stop()
        t.sh("a", f"ping -c 2 -i 0.2 -W 2 {EXT_IP}")
        assert negotiated(ovs), bond_show(ovs)


@needs_ovs
def test_a_switch_independent_team_behind_a_snooping_switch_gets_its_vms_groups(tmp_path, ovs):
    """The switch (Open vSwitch with IGMP snooping) sends a group where the
    reports came from; the team takes multicast from its active member
    only. A VM placed on the other member joins: its reports leave by the
    active member, so the group comes back where the team takes it."""
    from test_mcast import PROBE, Lines
    ovs.plain()
    ovs.vsctl("set", "Bridge", "br", "mcast_snooping_enable=true")
    recv = None
    try:
        with topology(tmp_path, ovs, "port-id", vms=2) as t:
            for ip in [VM_A, VM_B]:
                assert hvlab.eventually(lambda: reaches(ovs, ip), timeout=15), ip
            tm = team(t)
            placed = {p["port"]: p["member"] for p in tm["placements"]}
            vm = next(v for v, m in placed.items() if m != tm["active"])
            recv = Lines(t.popen(vm, f"{os.sys.executable} {PROBE} recv 239.9.9.9 5009 20",
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True))
            recv.expect("joined")
            # The switch learned the group on the active member's port.
            active_far = ovs.far[ovs.members.index(tm["active"])]
            learned = lambda: [ln for ln in ovs.appctl("mdb/show", "br").stdout.splitlines()  # noqa: E731
                               if "239.9.9.9" in ln]
            assert hvlab.eventually(lambda: learned(), timeout=15), ovs.appctl("mdb/show", "br").stdout
            port_no = ovs.vsctl("get", "Interface", active_far, "ofport").stdout.strip()
            assert all(ln.split()[0] == port_no for ln in learned()), (learned(), port_no)
            ovs.ext_sh(f"{os.sys.executable} {PROBE} send 239.9.9.9 5009 40")
            recv.expect("got 20")
            assert placed == {p["port"]: p["member"] for p in team(t)["placements"]}, "nothing moved"
    finally:
        if recv:
            hvlab.stop_procs([recv.p])
        ovs.vsctl("set", "Bridge", "br", "mcast_snooping_enable=false")


TUN_VM, TUN_EXT = "198.18.41.1", "198.18.41.100"
VTEP = "198.18.40.50"


@needs_ovs
@pytest.mark.parametrize("teaming", ["lacp", "active-backup"])
def test_a_team_underlays_a_vxlan_endpoint_with_a_linux_peer(tmp_path, ovs, teaming):
    """The tunnel endpoint's outer frames leave by the team's members and
    are read from all of them; a Linux `vxlan` device behind the switch is
    the peer. `lacp`: Open vSwitch's bond, frames segmented by hvnet (it
    takes only whole, checksummed frames). `active-backup`: a Linux
    bridge, the VM's TSO frames written whole into a TAP per member. A
    member's carrier goes under a transfer each way, byte-exact."""
    if teaming == "lacp":
        ovs.bond()
        offloads = dict(tso="software", csum="software", lacp_rate="fast")
    else:
        ovs.linux()
        offloads = dict(order=ovs.members, failback=True)
    ovs.ext_sh("ip neigh flush all")
    ovs.ext_sh(f"ip link add vxt type vxlan id 42 local {EXT_IP} remote {VTEP} dstport 4789 dev eth0 && "
               f"ip addr add {TUN_EXT}/24 dev vxt && ip link set vxt up")
    try:
        up = dict(name="up0", devices=ovs.members, teaming=teaming, queues=2,
                  vxlan=dict(vni=42, local=VTEP + "/24", remotes=[EXT_IP]), **offloads)
        vm = [dict(name="a", ipv4=TUN_VM + "/24", mtu=1450)]
        with hvlab.Topology(tmp_path, vm, prefix="tx", uplinks=[up]) as t:
            a, b = ovs.members
            usable = "distributing" if teaming == "lacp" else "active"
            assert hvlab.eventually(lambda: member(t, 0, ovs)["state"] == usable, timeout=20), team(t)
            assert hvlab.eventually(lambda: reaches(ovs, TUN_VM), timeout=20), team(t)
            kg = t.stats("/uplinks/up0/vxlan")["kernel_gso"]
            if teaming == "lacp":
                assert kg is None or kg["gso_frames"] == 0, kg
            else:
                assert kg["device"].count("+") == 1, kg

            # The peer to the VM, then the VM to the peer, each with the
            # first member's carrier pulled and given back on the way.
            data = tmp_path / "random.bin"
            data.write_bytes(os.urandom(12 << 20))
            want = f"{hashlib.sha256(data.read_bytes()).hexdigest()} {12 << 20}"
            for src, dst in [("ext", "a"), ("a", "ext")]:
                serve = f"{os.sys.executable} {XFER} serve {TUN_EXT if dst == 'ext' else TUN_VM} 5556"
                send = f"{os.sys.executable} {XFER} paced {TUN_EXT if dst == 'ext' else TUN_VM} 5556 {data} {3 << 20}"
                server = (ovs.ext_popen if dst == "ext" else lambda c, **kw: t.popen("a", c, **kw))(
                    serve, stdout=subprocess.PIPE, text=True)
                sender = None
                try:
                    if dst == "a":
                        t.wait_listening("a", 5556)
                    sender = ovs.ext_popen(send) if src == "ext" else t.popen("a", send)
                    moved = lambda: sum(m["rx_frames"] + m["tx_frames"] for m in team(t)["members"])  # noqa: E731
                    base = moved()
                    assert hvlab.eventually(lambda: moved() > base + 300, timeout=30), team(t)
                    ovs.sh(f"ip link set {ovs.far[0]} down")
                    assert hvlab.eventually(lambda: member(t, 0, ovs)["state"] == "down", timeout=15), team(t)
                    tx_b = member(t, 1, ovs)["tx_frames"]
                    assert hvlab.eventually(lambda: member(t, 1, ovs)["tx_frames"] > tx_b + 50, timeout=30), team(t)
                    ovs.sh(f"ip link set {ovs.far[0]} up")
                    assert hvlab.eventually(lambda: member(t, 0, ovs)["state"] == usable, timeout=20), team(t)
                    assert sender.wait(timeout=180) == 0
                    assert server.communicate(timeout=60)[0].strip() == want
                finally:
                    hvlab.stop_procs([p for p in [sender, server] if p])
            v = t.stats("/uplinks/up0/vxlan")
            assert v["remotes"][0]["mac"], v
            tm = team(t)
            assert tm["failovers"] >= 2, tm
            kg = v["kernel_gso"]
            if teaming == "active-backup":
                # The VM's TSO frames went whole, by both members' TAPs.
                assert kg["gso_frames"] > 0 and kg["errors"] == 0, kg
            up_in = t.stats("/uplinks/up0/tx_summary")
            assert up_in["decapsulated"] > 1000 and up_in["drop_bad_vxlan"] == 0, up_in
    finally:
        ovs.ext_sh("ip link del vxt", check=False)
