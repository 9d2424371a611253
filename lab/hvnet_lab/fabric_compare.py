"""Measurements between two VMs, hvnet beside the references (no study,
no verdict): the same iperf3 workloads through hvnet, the Linux bridge
and Open vSwitch's userspace datapath, all up at once and run
interleaved; and what the switch spends per frame (`perf stat` on the
daemon). With `HVNET_LAB_BASELINE=PATH` another hvnet binary (a build of
an earlier commit) runs beside this one as "hvnet-base"."""

import contextlib
import json
import re
import shutil
import subprocess
import time
from pathlib import Path

from .fabrics import B_IP, Bridge, Hvnet, HvnetUring, Ovs, baseline
from .figures import measured, vm_note
from .runners import interleaved, iperf
from .verdict import median

FABRICS_NOTE = (vm_note() + " hvnet's VMs are TAP ports with virtio-net headers; the bridge's are veth pairs into a "
                "Linux bridge in a namespace of its own; Open vSwitch runs its userspace datapath (netdev) with "
                "userspace TSO, TAP ports moved into the namespaces.")


def point(c):
    """A grid point's label: MTU, streams and write size."""
    _, mtu, streams, write = c
    return f"MTU {mtu}, {streams}x{write}"


def ratio_range(runs, ours, other, key):
    """The range, over grid points, of the ratio of medians ours/other."""
    rs = []
    for c in runs:
        if c[0] == ours and (other, *c[1:]) in runs:
            mine, theirs = (median([r[key] for r in runs[(f, *c[1:])]]) for f in (ours, other))
            if theirs > 0:
                rs.append(mine / theirs)
    return f"{min(rs):.2f}–{max(rs):.2f}" if rs else "n/a"


def fabrics(tmp, quick, reps, log):
    secs = 2 if quick else 3
    # Small and large writes at MTU 1500, large ones at 9000; 1 and 4
    # streams each.
    grid = {1500: ["64K"], 9000: []} if quick else {1500: ["256", "64K"], 9000: ["64K"]}
    base = baseline()
    chosen = [Hvnet, *([base] if base else []), HvnetUring, Bridge, Ovs]
    runs, failed = {}, {}
    for mtu, writes in grid.items():
        if not writes:
            continue
        with contextlib.ExitStack() as stack:
            up = {}
            for F in chosen:
                try:
                    up[F.name] = stack.enter_context(F(tmp, mtu))
                except Exception as e:  # a reference that cannot run is reported, not hidden
                    failed[F.name] = str(e)
            configs = [(name, mtu, streams, w) for w in writes for streams in (1, 4) for name in up]
            runs.update(interleaved(configs, reps, lambda c: iperf(up[c[0]], c[2], c[3], secs, None, log)))
    note = FABRICS_NOTE + "".join(f" {n} could not run: {e}" for n, e in failed.items())
    said = lambda key: "hvnet / bridge " + ratio_range(runs, "hvnet", "bridge", key) + ", hvnet / Open vSwitch " \
        + ratio_range(runs, "hvnet", "ovs", key) + " over the grid's points"  # noqa: E731
    figs = [
        measured("fabrics-throughput", "VM to VM throughput: hvnet and the references", "MTU, streams x write size",
                 "Gbit/s", runs, "gbps", lambda c: (c[0], point(c)),
                 "how does hvnet's VM-to-VM throughput compare with the Linux bridge and Open vSwitch's userspace "
                 "datapath on the same machine?", said("gbps"), note),
        measured("fabrics-efficiency", "VM to VM CPU efficiency: Gbit/s per busy core", "MTU, streams x write size",
                 "Gbit/s per busy core", runs, "gbps_per_core", lambda c: (c[0], point(c)),
                 "how much CPU does each switch spend for the same traffic?", said("gbps_per_core"), note),
    ]
    return figs, {f"{c[0]} {point(c)}": rs for c, rs in runs.items()}


# task-clock is CPU time (ms) of all the daemon's threads; cycles and
# instructions count where the machine exposes a PMU (a VM may not).
EVENTS = "task-clock,cycles,instructions,raw_syscalls:sys_enter,context-switches"


def per_frame_once(f, seconds, log):
    """One iperf3 run VM a -> b (64 KiB writes) with `perf stat` on the
    daemon for `seconds` of it: its counts per frame the ingress workers
    read."""
    pid = json.loads(Path(f"/run/hvnet/{f.t.name}/state.json").read_text())["pid"]
    server = f.popen("b", f"iperf3 -s -1 -B {B_IP}")
    f.wait_listening("b", 5201)
    client = f.popen("a", f"iperf3 -c {B_IP} -t {seconds + 2} -l 64K")
    try:
        time.sleep(1)  # past iperf3's start-up: the window is steady traffic
        frames = lambda: f.t.stats("/ports/a/tx_summary")["frames"] + f.t.stats("/ports/b/tx_summary")["frames"]  # noqa: E731
        i0 = frames()
        cmd = ["perf", "stat", "-x,", "-e", EVENTS, "-p", str(pid), "--", "sleep", str(seconds)]
        p = subprocess.run(cmd, capture_output=True, text=True)
        n = max(frames() - i0, 1)
    finally:
        client.wait(timeout=seconds + 30)
        server.wait(timeout=10)
    counts = {}
    for line in p.stderr.splitlines():
        parts = line.split(",")
        if len(parts) > 2 and re.match(r"^[0-9.]+$", parts[0]):
            counts[parts[2]] = float(parts[0])
    r = {"frames_per_s": n / seconds, "cpu_ns": counts.get("task-clock", 0) * 1e6 / n,
         "syscalls": counts.get("raw_syscalls:sys_enter", 0) / n,
         "context_switches": counts.get("context-switches", 0) / n,
         "cycles": counts.get("cycles", 0) / n, "instructions": counts.get("instructions", 0) / n}
    log.append({"command": " ".join(cmd) + f" (during {f.command('a', f'iperf3 -c {B_IP} -l 64K')})", **r})
    return r


def per_frame(tmp, quick, reps, log):
    if not shutil.which("perf"):
        raise RuntimeError("per-frame needs perf (Debian's linux-perf)")
    secs = 2 if quick else 3
    settings = dict(a={"tso": False, "queues": 1}, b={"lro": False, "queues": 1})
    base = baseline()
    chosen = [Hvnet, *([base] if base else [])]
    with contextlib.ExitStack() as stack:
        up = {F.name: stack.enter_context(F(tmp, 1500, **settings)) for F in chosen}
        runs = interleaved(list(up), reps, lambda name: per_frame_once(up[name], secs, log))
    note = (vm_note() + " The sender's TSO is off (wire-sized frames) and the receiver's LRO off: one frame in, one "
            "out. Counted over all the daemon's threads, user and kernel, including the receiving VM's stack where "
            "a worker delivers run to completion; divided by the frames the ingress workers read.")
    # Cycles and instructions only where the machine has a PMU to count
    # them (a VM may not).
    counted = [(k, label, scale) for k, label, scale in (("cpu_ns", "CPU ns", 1), ("cycles", "cycles / 10", 0.1),
                                                         ("instructions", "instructions / 10", 0.1))
               if any(r[k] for rs in runs.values() for r in rs)]
    if len(counted) < 3:
        note += " This machine exposes no PMU: no cycles or instructions."
    costs = {(name, label): [{"v": r[k] * scale} for r in rs] for name, rs in runs.items()
             for k, label, scale in counted}
    calls = {(name, label): [{"v": r[k]} for r in rs] for name, rs in runs.items()
             for k, label in (("syscalls", "system calls"), ("context_switches", "context switches"))}
    said = "; ".join(f"{name}: {median([r['cpu_ns'] for r in rs]):,.0f} CPU ns, "
                     f"{median([r['syscalls'] for r in rs]):.2f} system calls per frame" for name, rs in runs.items())
    figs = [
        measured("per-frame-cpu", "What the switch spends per frame: CPU time (cycles and instructions where the "
                 "machine counts them)", "", "per frame", costs, "v", lambda c: c,
                 "what does a frame cost the switch?", said, note),
        measured("per-frame-calls", "System calls and context switches per frame", "", "per frame", calls, "v",
                 lambda c: c, "how many system calls does a frame take (the batched port interface: well under "
                 "one)?", said, note),
    ]
    return figs, runs
