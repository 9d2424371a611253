"""The multicast case of NIC Technology in vSphere, and what IGMP/MLD snooping saves: one VM
sends a UDP group stream at 100 Mbit/s to 16 namespace VMs of which 4
joined the group (8 and 2 with --quick).

Configurations, all up at once and run interleaved:
- hvnet with snooping and its querier on (pruning needs a querier, as on
  the Linux bridge), and with snooping off (every group frame flooded);
  each with SplitRxMode off (delivery "auto": the sender's worker writes
  each copy into the VMs itself) and on (delivery "thread": each VM's own
  delivery thread does);
- the Linux bridge with `mcast_snooping 1` and `mcast_querier 1`, and
  with `mcast_snooping 0`, veth pairs into it.

Per run, over a window after a warm-up: the group's frames that reached
the members' eth0 and the non-members' (counted in each VM by a packet
socket whose BPF filter takes only the group's frames, read from the
kernel's counters), the datagrams the members' sockets read, and the CPU
per frame delivered to a member: the switch's (the hvnet daemon's CPU
time, all its threads; for the bridge, the machine's softirq time, where
the bridge, the veths and the receiving stacks run) and the machine's
(all busy time: sender, receivers and switch)."""

import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import hvlab

from .fabrics import Fabric
from .figures import NIC_TECHNOLOGY, measured, vm_note
from .port_scale import cpu_ticks, daemon
from .queues import SR_MODES
from .runners import interleaved
from .verdict import median

PEER = Path(__file__).with_name("mcast_peer.py")
GROUP, PORT, MBITS, LENGTH = "239.1.1.1", 5001, 100, 1472
NET = "198.18.80"

# (switch, forwarding, delivery): delivery only where the switch has a
# choice (hvnet's SplitRxMode).
CONFIGS = [("hvnet", "snooping", "split"), ("hvnet", "snooping", "together"),
           ("hvnet", "flooding", "split"), ("hvnet", "flooding", "together"),
           ("bridge", "snooping", None), ("bridge", "flooding", None)]


def label(c):
    """A configuration's name in the results: "hvnet snooping split"."""
    return " ".join(x for x in c if x)


def place(c):
    """A configuration's (series, x) in the figures."""
    switch, forwarding, delivery = c
    series = "Linux bridge" if switch == "bridge" else f"hvnet, SplitRxMode {'on' if delivery == 'split' else 'off'}"
    return series, forwarding


def receivers(n):
    """The receiving VMs' names, the joined ones first: (members, others),
    a quarter of them members."""
    names = [f"r{i}" for i in range(n)]
    return names[:n // 4], names[n // 4:]


def stat_fields(text):
    """/proc/stat's aggregate cpu line as ticks by name."""
    for line in text.splitlines():
        if line.startswith("cpu "):
            names = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
            return dict(zip(names, map(int, line.split()[1:9])))
    raise ValueError("no aggregate cpu line in /proc/stat")


def window(before, after, joined, hz):
    """One run's figures from two snapshots {"t", "stat", "switch_ticks"
    (None: the switch is the kernel's, its CPU the softirq time), "sent",
    "members": [{"l2", "app"}], "others": [{"l2"}]}."""
    wall = after["t"] - before["t"]
    d = lambda k: (after["stat"][k] - before["stat"][k]) / hz  # noqa: E731
    busy = sum(d(k) for k in after["stat"] if k not in ("idle", "iowait"))
    sent = after["sent"] - before["sent"]
    delivered = sum(a["l2"] - b["l2"] for a, b in zip(after["members"], before["members"]))
    app = sum(a["app"] - b["app"] for a, b in zip(after["members"], before["members"]))
    others = sum(a["l2"] - b["l2"] for a, b in zip(after["others"], before["others"]))
    switch = (d("softirq") if after["switch_ticks"] is None
              else (after["switch_ticks"] - before["switch_ticks"]) / hz)
    per = lambda secs: secs * 1e9 / max(delivered, 1)  # noqa: E731
    return {"sent": sent, "delivered": delivered, "app_read": app, "nonmember_frames": others,
            "sent_mbps": sent * LENGTH * 8 / wall / 1e6,
            "delivered_pct": 100.0 * delivered / max(sent * joined, 1),
            "nonmember_per_s": others / wall,
            "switch_cores": switch / wall, "busy_cores": busy / wall, "softirq_cores": d("softirq") / wall,
            "switch_ns_per_frame": per(switch), "machine_ns_per_frame": per(busy)}


class McHvnet:
    """hvnet with a sender s and `n` receivers, one queue each; snooping
    (with its querier) or flooding; delivery "auto" or "thread"."""

    def __init__(self, tmp, forwarding, delivery, n):
        snoop = forwarding == "snooping"
        vms = [dict(name=v, ipv4=f"{NET}.{i + 1}/24", queues=1, delivery=SR_MODES[delivery])
               for i, v in enumerate(["s", *sum(receivers(n), [])])]
        self.t = hvlab.Topology(Path(tmp), vms, prefix="mc",
                                switch={"multicast_snooping": snoop, "multicast_querier": snoop})
        self.snoop = snoop

    def __enter__(self):
        self.t.__enter__()
        self.pid = daemon(self.t)
        return self

    def __exit__(self, *e):
        return self.t.__exit__(*e)

    def ns(self, vm):
        return self.t.ns(vm)

    def switch_ticks(self):
        return cpu_ticks(self.pid)

    def members_known(self):
        """The ports the switch has as the group's members, once it prunes
        (its own querier counts only after its first query's response
        time: until then the group is flooded)."""
        v = json.loads(self.t.hv("mdb", "--json").stdout)
        queriers = [q for q in v.get("own_querier", []) if q["family"] == "ipv4"]
        if not queriers or not all(q["pruning"] for q in queriers):
            return set()
        return {r["port_name"] for r in v["mdb"] if r["group"] == GROUP}


class McBridge(Fabric):
    """The Linux bridge in a namespace of its own, a veth pair to each VM;
    `mcast_snooping 1` with `mcast_querier 1`, or `mcast_snooping 0`."""

    name = "bridge"

    def __init__(self, tmp, forwarding, delivery, n):
        self.snoop = forwarding == "snooping"
        self.vms = ["s", *sum(receivers(n), [])]
        self.nss = {k: hvlab.Netns("mb") for k in ["sw", *self.vms]}

    def _up(self):
        for n in self.nss.values():
            n.__enter__()
        sw = self.nss["sw"]
        opts = "mcast_snooping 1 mcast_querier 1" if self.snoop else "mcast_snooping 0"
        sw.sh(f"ip link add br0 type bridge {opts} && ip link set br0 up")
        for i, vm in enumerate(self.vms):
            hvlab.run(["ip", "link", "add", "eth0", "netns", self.nss[vm].name, "type", "veth",
                       "peer", "name", f"p{vm}", "netns", sw.name])
            sw.sh(f"ip link set p{vm} master br0 up")
            self.nss[vm].sh(f"ip link set eth0 up && ip addr add {NET}.{i + 1}/24 dev eth0")
        return self

    def __exit__(self, *e):
        for n in self.nss.values():
            n.__exit__(*e)

    def ns(self, vm):
        return self.nss[vm].name

    def switch_ticks(self):
        return None

    def members_known(self):
        out = self.nss["sw"].sh("bridge -j mdb show dev br0").stdout
        return {e["port"][1:] for d in json.loads(out or "[]") for e in d.get("mdb", [])
                if e.get("grp") == GROUP}


class Peer:
    """mcast_peer.py in a VM: its counters on demand."""

    def __init__(self, f, vm, *args):
        self.command = f"ip netns exec {f.ns(vm)} {sys.executable} {PEER} {' '.join(map(str, args))}"
        self.p = subprocess.Popen(["ip", "netns", "exec", f.ns(vm), sys.executable, str(PEER), *map(str, args)],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        if self.p.stdout.readline().strip() != "ready":
            self.stop()
            raise RuntimeError(f"{self.command}: did not start")

    def counters(self):
        self.p.stdin.write("\n")
        self.p.stdin.flush()
        return json.loads(self.p.stdout.readline())

    def stop(self):
        with contextlib.suppress(OSError):
            self.p.stdin.close()
        hvlab.stop_procs([self.p])


def one_run(f, n, warm, secs):
    """One run on fabric `f`: receivers up (members joined and known to a
    snooping switch), the stream, `warm` s, then a `secs` window."""
    members, others = receivers(n)
    peers = []
    try:
        mem = [Peer(f, v, "member", GROUP, PORT) for v in members]
        peers += mem
        oth = [Peer(f, v, "watch", GROUP, PORT) for v in others]
        peers += oth
        if f.snoop and not hvlab.eventually(lambda: set(members) <= f.members_known(), timeout=15, every=0.1):
            raise RuntimeError(f"the switch did not learn the members {members} (it has {f.members_known()})")
        sender = Peer(f, "s", "send", GROUP, PORT, MBITS, LENGTH)
        peers.append(sender)
        time.sleep(warm)

        def snapshot():
            s = {"t": time.monotonic(), "stat": stat_fields(Path("/proc/stat").read_text()),
                 "switch_ticks": f.switch_ticks()}
            s.update(sent=sender.counters()["sent"], members=[p.counters() for p in mem],
                     others=[p.counters() for p in oth])
            return s

        a = snapshot()
        time.sleep(secs)
        b = snapshot()
        return window(a, b, len(members), os.sysconf("SC_CLK_TCK")), sender.command
    finally:
        for p in peers:
            p.stop()


def multicast(tmp, quick, reps, log):
    n, warm, secs = (8, 1, 3) if quick else (16, 2, 6)
    members, _ = receivers(n)
    with contextlib.ExitStack() as stack:
        up = {}
        for c in CONFIGS:
            F = McHvnet if c[0] == "hvnet" else McBridge
            up[c] = stack.enter_context(F(tmp, c[1], c[2], n))

        def run(c):
            r, command = one_run(up[c], n, warm, secs)
            log.append({"command": f"{label(c)}: {command} (-> {n} VMs, {len(members)} joined); {secs} s window "
                                   f"after {warm} s", "config": label(c), **r})
            return r

        runs = interleaved(CONFIGS, reps, run)

    get = lambda c, k: median([r[k] for r in runs[c]])  # noqa: E731

    def ratio(a, b, key):
        return get(a, key) / max(get(b, key), 1e-12)

    said = "; ".join(
        f"{label(c)}: {get(c, 'delivered_pct'):.1f} % delivered to the {len(members)} members, "
        f"{get(c, 'nonmember_per_s'):,.0f} frames/s at the {n - len(members)} others, switch "
        f"{get(c, 'switch_ns_per_frame'):,.0f} ns and machine {get(c, 'machine_ns_per_frame'):,.0f} ns per delivered frame"
        for c in CONFIGS)
    pairs = [(("hvnet", "flooding", d), ("hvnet", "snooping", d)) for d in ("together", "split")] + \
            [(("bridge", "flooding", None), ("bridge", "snooping", None))]
    said += ". Snooping's saving (flooding / snooping, switch CPU per delivered frame): " + ", ".join(
        f"{place(s)[0]} {ratio(fl, s, 'switch_ns_per_frame'):.2f}×" for fl, s in pairs)
    said += "; hvnet / the bridge with snooping (switch CPU per delivered frame): " + ", ".join(
        f"SplitRxMode {'on' if d == 'split' else 'off'} "
        f"{ratio(('hvnet', 'snooping', d), ('bridge', 'snooping', None), 'switch_ns_per_frame'):.2f}×"
        for d in ("together", "split"))
    note = (vm_note() + f" One sender VM, {n} receiving VMs of which {len(members)} joined {GROUP} (a socket's "
            f"IP_ADD_MEMBERSHIP: their kernels report) and read it; {MBITS} Mbit/s of {LENGTH}-byte UDP datagrams, paced "
            f"in Python; a {secs} s window after {warm} s. Frames: the group's UDP frames at each VM's eth0, from a packet "
            "socket's BPF filter and the kernel's counters. The switch's CPU: the hvnet daemon's (all threads, user and "
            "kernel, the receiving VMs' stacks where it writes into them); for the Linux bridge, the machine's softirq "
            "time (the bridge, its veths and the receiving stacks run there; the kernel counts by ticks, no IRQ time "
            "accounting). The machine's: all its busy time. hvnet snoops with its querier on, the bridge with "
            "mcast_querier 1; SplitRxMode off is delivery auto, on is delivery thread. NIC Technology in vSphere: "
            "SplitRxMode was made for multicast, where one thread copies each frame to many VMs.")
    figs = [
        measured("multicast-nonmembers", "Group frames at the VMs that did not join", "forwarding",
                 f"frames/s, all {n - len(members)} non-members", runs, "nonmember_per_s", place,
                 "do the VMs that did not join receive nothing of the group (snooping) — and how much does flooding "
                 "give them?", said, note),
        measured("multicast-delivered", "Group frames delivered to the members", "forwarding",
                 f"% of the frames sent, times {len(members)} members", runs, "delivered_pct", place,
                 "does every member get the stream, pruned or flooded?", said, note),
        measured("multicast-switch-cpu", "The switch's CPU per frame delivered to a member", "forwarding",
                 "ns per delivered frame", runs, "switch_ns_per_frame", place,
                 "what does snooping save the switch per delivered frame, against flooding and against the Linux "
                 "bridge's IGMP snooping, SplitRxMode off and on?", said, note),
        measured("multicast-machine-cpu", "The machine's CPU per frame delivered to a member", "forwarding",
                 "ns per delivered frame", runs, "machine_ns_per_frame", place,
                 "what does the whole machine (sender, receivers, switch) spend per delivered frame?", said, note),
    ]
    for fig in figs:
        fig["source"] += "; " + NIC_TECHNOLOGY + ", SplitRxMode (multicast)"
    return figs, {label(c): rs for c, rs in runs.items()}
