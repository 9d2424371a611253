"""NIC teams against the real thing: a measurement (no study publishes
these figures; Jumbo Frames Inside Virtual Machines names the effect:
its host's VMs run on a team of two 10 GbE NICs, and one VM's flow is
bounded by one team member).

This machine's kernel has no bonding or team driver, so the "physical
switch" is Open vSwitch userspace (the netdev datapath) in a namespace of
its own, with an external host behind it. Every team member is a veth
pair, its near end the team's and its far end a port of that switch,
limited to `RATE_MBIT` on the way toward the host by a `tc` TBF on the
near end (the switch's other ports are not limited). Four teams share
the switch at once, each on its own pair of members:

- hvnet `port-id` (VMs a and b), the far ends plain ports of the bridge;
- hvnet `lacp` (VM a), the far ends an LACP bond (`lacp=active`,
  `bond_mode=balance-tcp`, fast);
- hvnet `active-backup` (VM a), plain ports;
- Open vSwitch userspace in hvnet's place (a second instance in a
  namespace of its own: two userspace instances cannot share one), a
  bond `bond_mode=active-backup` on its members, a VM on one of its
  ports; the far ends plain ports.

Throughput: iperf3 from the VMs to the host (the direction in which the
team's policy picks the member), 64 KiB writes: one VM one stream, two
VMs one stream each (port-id), one VM four streams (port-id and lacp);
Gbit/s, the ratio to one member's rate, and the busiest member's share
of the frames the team sent. Failover: the host pings a VM every 10 ms;
1.5 s in, the far end of the member carrying the VM's frames goes down
(the switch's port, so the member loses its carrier); pings lost and the
longest silence between two answers (the time to recover), per team.
The member comes back up and the team settles before the next run.

A team facing Open vSwitch userspace has `tso = "software"` and
`csum = "software"` and the host's checksum offload is off: Open
vSwitch userspace forwards partial checksums and GSO frames unfinished
(a NIC would finish them)."""

import contextlib
import json
import re
import subprocess
import time

import hvlab

from . import measure
from .fabrics import OvsDaemons
from .figures import measured
from .runners import interleaved
from .verdict import median

RATE_MBIT = 1000
# Jumbo frames on the members, as on the team in Jumbo Frames Inside
# Virtual Machines: Open vSwitch userspace reads and writes every frame
# with a system call, and at 1,500 bytes it dropped frames (its sockets
# overflowing) at 0.3-0.45 Gbit/s here with the lead's builds beside it,
# under the members' 2 Gbit/s.
MTU = 9000
EXT_IP = "198.18.44.100"
PID_A, PID_B, LACP_A, AB_A, OVS_VM = (f"198.18.44.{i}" for i in (1, 2, 3, 4, 5))
PING_EVERY, PING_COUNT, PULL_AFTER = 0.01, 500, 1.5
NOTE = ("A measurement, not a study's reproduction: no verdict. The physical switch is Open vSwitch userspace with "
        "a host behind it, each team member a veth pair limited to "
        f"{RATE_MBIT / 1000:g} Gbit/s toward the host by a tc TBF, MTU {MTU} (as the team in Jumbo Frames Inside "
        "Virtual Machines); the VMs are network namespaces; the switches, host and VMs share this machine's 2 "
        "cores. Teams facing Open vSwitch userspace segment and checksum in software (tso/csum = \"software\").")

HV_PID, HV_LACP, HV_AB, OVS_AB = "hvnet port-id", "hvnet lacp", "hvnet active-backup", "Open vSwitch active-backup"


def ping_outage(text, every=PING_EVERY):
    """From `ping -D` output: {sent, answered, lost, outage_ms}, the outage
    the longest run of unanswered pings in a row, in time (an unbroken
    stream gives 0; pings unanswered up to the end of the run count: a
    VM that never answers again is out for the rest of it)."""
    m = re.search(r"(\d+) packets transmitted, (\d+) (?:packets )?received", text)
    if not m:
        raise RuntimeError(f"ping printed no summary:\n{text[-1000:]}")
    sent, answered = int(m.group(1)), int(m.group(2))
    seqs = sorted({int(s) for s in re.findall(r"bytes from .*icmp_seq=(\d+)", text)})
    # Sequence numbers start at 1; `sent + 1` closes a silence at the end.
    bounds = [0] + seqs + [sent + 1]
    run = max((b - a - 1 for a, b in zip(bounds, bounds[1:])), default=0)
    return {"sent": sent, "answered": answered, "lost": sent - answered,
            "outage_ms": run * every * 1000}


def busiest_share(before, after):
    """The busiest member's share of the frames a team sent between two
    `hvnet team --json` views ({device: tx_frames}); 0.5 is an even
    spread over two, 1.0 all on one."""
    sent = [after[d] - before.get(d, 0) for d in after]
    return max(sent) / sum(sent) if sum(sent) > 0 else 0.0


def ovs_active_member(bond_show):
    """The active member of an Open vSwitch bond, from `ovs-appctl
    bond/show`, or None."""
    m = re.search(r"^active member mac: \S+\((\S+)\)", bond_show, re.M)
    if m and m.group(1) != "none":
        return m.group(1)
    block = None
    for line in bond_show.splitlines():
        h = re.match(r"^member (\S+):", line)
        if h:
            block = h.group(1)
        elif block and line.strip() == "active member":
            return block
    return None


class Lab:
    """The switch (Open vSwitch userspace with the host behind it), the
    members of every team, the hvnet topologies and the Open vSwitch
    instance in hvnet's place, all up at once; everything made is removed
    on exit, also when the start fails half-way."""

    def __init__(self, tmp):
        self.tmp = tmp
        self.stack = contextlib.ExitStack()
        self.sw, self.ext, self.hv, self.vm = (hvlab.Netns(p) for p in ("tmsw", "tmext", "tmhv", "tmvm"))
        self.near = []   # near ends in this namespace (each deleted with its pair)
        self.topo = {}
        self.members = {}  # team -> [(near, far)]

    def __enter__(self):
        try:
            self._up()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *e):
        self.stack.close()
        for n in self.near:
            hvlab.run(["ip", "link", "del", n], check=False)
        return False

    def wire(self, into=None):
        """A member: a veth pair, its far end a port-to-be of the switch,
        its near end here (or in namespace `into`), limited toward the
        host."""
        near, far = hvlab.unique("tmn"), hvlab.unique("tmf")
        hvlab.run(["ip", "link", "add", near, "type", "veth", "peer", "name", far, "netns", self.sw.name])
        self.near.append(near)
        self.sw.sh(f"ip link set {far} mtu {MTU} up")
        on = hvlab.run if into is None else into.sh
        if into is None:
            hvlab.run(["sysctl", "-qw", f"net.ipv6.conf.{near}.disable_ipv6=1"])
        else:
            hvlab.run(["ip", "link", "set", near, "netns", into.name])
        on(f"tc qdisc add dev {near} root tbf rate {RATE_MBIT}mbit burst 256kb latency 20ms && "
           f"ip link set {near} mtu {MTU} up")
        return near, far

    def _up(self):
        for n in (self.sw, self.ext, self.hv, self.vm):
            self.stack.enter_context(n)
        sw = self.sw
        hostport = hvlab.unique("tmh")
        hvlab.run(["ip", "link", "add", hostport, "netns", sw.name, "type", "veth", "peer", "name", "eth0",
                   "netns", self.ext.name])
        sw.sh(f"ip link set {hostport} mtu {MTU} up")
        # Open vSwitch userspace forwards bytes: the host's NIC finishes its own checksums.
        self.ext.sh(f"ip addr add {EXT_IP}/24 dev eth0 && ethtool -K eth0 tx off >/dev/null && "
                    f"ip link set eth0 mtu {MTU} up")
        self.switch = OvsDaemons(sw.name)
        self.stack.callback(self.switch.stop)
        self.switch.start()
        self.switch.vsctl("add-br", "br", "--", "set", "bridge", "br", "datapath_type=netdev")
        self.port(self.switch, "br", hostport)
        for team in (HV_PID, HV_LACP, HV_AB):
            self.members[team] = [self.wire(), self.wire()]
        self.members[OVS_AB] = [self.wire(self.hv), self.wire(self.hv)]
        for team, ms in self.members.items():
            fars = [f for _, f in ms]
            if team == HV_LACP:
                self.switch.vsctl("add-bond", "br", "bond0", *fars, "lacp=active", "bond_mode=balance-tcp",
                                  "other_config:lacp-time=fast", *self.jumbo(fars))
            else:
                for f in fars:
                    self.port(self.switch, "br", f)
        # Open vSwitch in hvnet's place: its own instance, an active-backup
        # bond on its members and a VM on a port.
        self.ovs = OvsDaemons(self.hv.name)
        self.stack.callback(self.ovs.stop)
        self.ovs.start()
        self.ovs.vsctl("add-br", "hvbr", "--", "set", "bridge", "hvbr", "datapath_type=netdev")
        self.ovs.vsctl("add-bond", "hvbr", "bond1", *[n for n, _ in self.members[OVS_AB]],
                       "bond_mode=active-backup", *self.jumbo([n for n, _ in self.members[OVS_AB]]))
        vmport = hvlab.unique("tmv")
        hvlab.run(["ip", "link", "add", vmport, "netns", self.hv.name, "type", "veth", "peer", "name", "eth0",
                   "netns", self.vm.name])
        self.hv.sh(f"ip link set {vmport} mtu {MTU} up")
        self.port(self.ovs, "hvbr", vmport)
        self.vm.sh(f"ip addr add {OVS_VM}/24 dev eth0 && ethtool -K eth0 tx off tso off >/dev/null && "
                   f"ip link set eth0 mtu {MTU} up")
        # hvnet's teams.
        for team, prefix, teaming, vms, keys in (
                (HV_PID, "tp", "port-id", [("a", PID_A), ("b", PID_B)], {}),
                (HV_LACP, "tl", "lacp", [("a", LACP_A)], {"lacp_rate": "fast"}),
                (HV_AB, "ta", "active-backup", [("a", AB_A)], {"failback": True})):
            devs = [n for n, _ in self.members[team]]
            if teaming == "active-backup":
                keys = dict(keys, order=devs)
            up = dict(name="up0", devices=devs, teaming=teaming, queues=1, mtu=MTU, tso="software", csum="software",
                      **keys)
            self.topo[team] = self.stack.enter_context(hvlab.Topology(
                self.tmp, [dict(name=n, ipv4=f"{ip}/24", queues=1, mtu=MTU) for n, ip in vms], prefix=prefix,
                uplinks=[up]))
        for ip in (PID_A, PID_B, LACP_A, AB_A, OVS_VM):
            if not hvlab.eventually(lambda: self.reaches(ip), timeout=30, every=0.2):
                raise RuntimeError(f"the host does not reach {ip} through its team")
        if not hvlab.eventually(lambda: self.settled(HV_LACP), timeout=30, every=0.2):
            raise RuntimeError(f"hvnet's LACP team never had both members distributing: {self.team(HV_LACP)}")

    @staticmethod
    def port(ovs, br, dev):
        ovs.vsctl("add-port", br, dev, *Lab.jumbo([dev]))

    @staticmethod
    def jumbo(devs):
        """ovs-vsctl's words that ask for the MTU on `devs`."""
        return [w for d in devs for w in ("--", "set", "Interface", d, f"mtu_request={MTU}")]

    def reaches(self, ip):
        return self.ext.sh(f"ping -c 1 -W 1 {ip}", check=False).returncode == 0

    def team(self, team):
        return json.loads(self.topo[team].hv("team", "--json").stdout)["teams"][0]

    def tx(self, team):
        return {m["device"]: m["tx_frames"] for m in self.team(team)["members"]}

    def settled(self, team):
        """Every member back in use: hvnet's members active/standby or
        distributing, Open vSwitch's bond members enabled."""
        if team == OVS_AB:
            return len(re.findall(r"^member \S+: enabled", self.bond_show(), re.M)) == 2
        states = [m["state"] for m in self.team(team)["members"]]
        if team == HV_LACP:
            return states == ["distributing"] * 2
        ok = [s for s in states if s != "down"]
        return len(ok) == 2 and (team != HV_AB or self.team(team)["active"] == self.members[team][0][0])

    def bond_show(self):
        return self.ovs.run("ovs-appctl", "-t", str(self.ovs.vswitchd_ctl()), "bond/show", "bond1").stdout


# (team, what is drawn): (VMs, streams each)
THROUGHPUT = {
    (HV_PID, "1 VM, 1 stream"): (("a",), 1),
    (HV_PID, "2 VMs, 1 stream each"): (("a", "b"), 1),
    (HV_PID, "1 VM, 4 streams"): (("a",), 4),
    (HV_LACP, "1 VM, 4 streams"): (("a",), 4),
    (HV_LACP, "1 VM, 1 stream"): (("a",), 1),
}


def stream(lab, team, vms, streams, secs, log):
    """iperf3 from each of `vms` to the host at once, `streams` each:
    {gbps, ratio (to one member's rate), busiest_share, retransmits}."""
    t = lab.topo[team]
    servers, clients = [], []
    try:
        for i, vm in enumerate(vms):
            servers.append(subprocess.Popen(["ip", "netns", "exec", lab.ext.name, "iperf3", "-s", "-1", "-p",
                                             str(5201 + i), "-B", EXT_IP],
                                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        for i, _ in enumerate(vms):
            hvlab.wait_listening(lab.ext.name, 5201 + i)
        before = lab.tx(team)
        cmds = [f"iperf3 -c {EXT_IP} -p {5201 + i} -t {secs} -P {streams} -l 64K -J" for i, _ in enumerate(vms)]
        for vm, cmd in zip(vms, cmds):
            clients.append(t.popen(vm, cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
        outs = [c.communicate(timeout=secs + 60)[0] for c in clients]
        after = lab.tx(team)
    finally:
        hvlab.stop_procs(clients + servers)
    rs = [measure.iperf3(o) for o in outs]
    gbps = sum(r["bps"] for r in rs) / 1e9
    s = {"gbps": gbps, "ratio": gbps / (RATE_MBIT / 1000), "busiest_share": busiest_share(before, after),
         "retransmits": sum(r["retransmits"] for r in rs)}
    if log is not None:
        log.append({"command": f"{team}: " + "; ".join(f"ip netns exec {t.ns(vm)} {c}" for vm, c in zip(vms, cmds)),
                    **s})
    return s


def failover(lab, team, log):
    """The host pings the team's VM every 10 ms; 1.5 s in, the switch's
    port of the member carrying it goes down; then it comes back and the
    team settles. {lost, sent, outage_ms}."""
    ip = {HV_LACP: LACP_A, HV_AB: AB_A, OVS_AB: OVS_VM}[team]
    cmd = f"ping -D -i {PING_EVERY} -c {PING_COUNT} -W 1 {ip}"
    ping = subprocess.Popen(["ip", "netns", "exec", lab.ext.name, "sh", "-c", cmd], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    far = None
    try:
        before = lab.tx(team) if team != OVS_AB else None
        time.sleep(PULL_AFTER)
        if team == OVS_AB:
            active = ovs_active_member(lab.bond_show())
        elif team == HV_AB:
            active = lab.team(team)["active"]
        else:
            # The member hvnet's hash put the VM's frames on.
            now = lab.tx(team)
            active = max(now, key=lambda d: now[d] - before.get(d, 0))
        far = dict(lab.members[team]).get(active)
        if far is None:
            raise RuntimeError(f"{team}: no active member to pull ({active!r})")
        lab.sw.sh(f"ip link set {far} down")
        out, _ = ping.communicate(timeout=PING_COUNT * PING_EVERY + 60)
    finally:
        hvlab.stop_procs([ping])
        if far:
            lab.sw.sh(f"ip link set {far} up", check=False)
    r = ping_outage(out)
    r["member"] = active
    if not hvlab.eventually(lambda: lab.settled(team), timeout=30, every=0.2):
        state = lab.bond_show() if team == OVS_AB else json.dumps(lab.team(team))
        raise RuntimeError(f"{team} did not settle after its member came back: {state}")
    # Back on its first member, the VM unreachable from the host is the
    # physical switch still sending to the other (its table missed the
    # team's announcements): said, and waited out (its MAC table ages
    # the entry, or the VM's own traffic moves it), not a failed run.
    r["reachable_after_failback_s"] = None
    start = time.monotonic()
    if hvlab.eventually(lambda: lab.reaches(ip), timeout=330, every=0.5):
        r["reachable_after_failback_s"] = round(time.monotonic() - start, 1)
    time.sleep(1)
    log.append({"command": f"{team}: ip netns exec {lab.ext.name} {cmd}; ip link set {far} down at "
                           f"{PULL_AFTER} s (in {lab.sw.name})", **r})
    return r


def teams(tmp, quick, reps, log):
    secs = 3 if quick else 5
    points = [p for p in THROUGHPUT if not (quick and p == (HV_LACP, "1 VM, 1 stream"))]
    with Lab(tmp) as lab:
        runs = interleaved(points, reps, lambda p: stream(lab, p[0], *THROUGHPUT[p], secs, log))
        fails = interleaved([HV_AB, HV_LACP, OVS_AB], reps, lambda team: failover(lab, team, log))
    one = median([r["gbps"] for r in runs[(HV_PID, "1 VM, 1 stream")]])
    said = "; ".join(f"{team}, {x}: {median([r['gbps'] for r in rs]):.2f} Gbit/s, "
                     f"{median([r['gbps'] for r in rs]) / one:.2f}× one VM's one stream, busiest member "
                     f"{median([r['busiest_share'] for r in rs]):.0%} of the frames"
                     for (team, x), rs in runs.items())
    def outages(rs):
        late = sum(1 for r in rs if (r.get("reachable_after_failback_s") or 0) > 2)
        return ", ".join(f"{r['outage_ms']:.0f}" for r in rs) + (
            f"; unreachable for more than 2 s after failing back in {late} of {len(rs)}" if late else "")

    lost = "; ".join(f"{team}: {median([r['lost'] for r in rs]):g} pings lost, "
                     f"{median([r['outage_ms'] for r in rs]):.0f} ms without an answer (runs: {outages(rs)})"
                     for team, rs in fails.items())
    place = lambda c: c  # noqa: E731
    fplace = lambda team: (team, "member pulled")  # noqa: E731
    figs = [
        measured("teams-throughput", "VMs to the host over a team of two members limited to "
                 f"{RATE_MBIT / 1000:g} Gbit/s each", "VMs, streams", "Gbit/s", runs, "gbps", place,
                 "does one VM's stream take one member and do two VMs (port-id) or one VM's four streams (lacp) "
                 "take both, as the host's team in Jumbo Frames Inside Virtual Machines does?", said, NOTE),
        measured("teams-ratio", "Throughput over a team, in members' rates", "VMs, streams",
                 f"× one member ({RATE_MBIT / 1000:g} Gbit/s)", runs, "ratio", place,
                 "how many members' worth does each load get?", said, NOTE),
        measured("teams-spread", "The busiest member's share of the frames the team sent", "VMs, streams",
                 "share", runs, "busiest_share", place,
                 "are the VMs (port-id) or flows (lacp) spread over both members?", said, NOTE),
        measured("teams-failover-lost", "Pings lost (10 ms apart) when a member's carrier goes", "",
                 "pings lost", fails, "lost", fplace,
                 "does hvnet's team lose more than Open vSwitch's bond doing the same job?", lost, NOTE),
        measured("teams-failover-outage", "Time to recover: the longest run of unanswered pings", "",
                 "ms", fails, "outage_ms", fplace,
                 "how long until the VM answers again over the other member?", lost, NOTE),
    ]
    raw = {f"{team} {x}": rs for (team, x), rs in runs.items()}
    raw.update({f"{team} failover": rs for team, rs in fails.items()})
    return figs, raw
