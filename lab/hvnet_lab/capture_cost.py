"""What live capture costs per frame (issue 42's goal: with no capture
running, the same CPU per frame as before — within the machine's noise —
and, with a capture of everything at one port, its cost per captured frame
measured): VM a sends TCP to VM b (a's TSO and b's LRO off: one
wire-sized frame in, one out), with no capture; with `hvnet capture b
--point in,offload,out,drop -w /dev/null` running (every frame at b, both
ways, whole, streamed as pcapng through the CLI); and, with HVNET_LAB_BASELINE set to a build
without capture, that build, in the same run. CPU is the machine's, from
/proc/stat, over the iperf3 run (the capture's CLI included), and the
daemon's own, per frame b received."""

import contextlib
import os
import re
import signal
import subprocess
import threading

import hvlab

from .acl_cost import daemon_ticks
from .fabrics import Hvnet
from .figures import measured, vm_note
from .runners import builds, interleaved, iperf
from .verdict import median

POINTS = "in,offload,out,drop"


class HvnetCapture(Hvnet):
    """hvnet with a capture of everything at b through each run."""

    name = "hvnet-capture"


class Baseline(Hvnet):
    """The baseline build (HVNET_LAB_BASELINE), no capture."""

    name = "hvnet-base"


class Capture:
    """`hvnet capture PORT --point POINTS -w /dev/null` on topology `t`
    for the length of a run; `stop()` returns the copies it took, as it
    says at the end."""

    def __init__(self, t, port="b", points=POINTS):
        self.p = subprocess.Popen([hvlab.hvnet_bin(), "capture", "-t", t.name, port, "--point", points,
                                   "-w", "/dev/null"], stderr=subprocess.PIPE, text=True)
        self.said, started = [], threading.Event()

        def pump():
            for line in self.p.stderr:
                self.said.append(line)
                started.set()
            started.set()

        self.pump = threading.Thread(target=pump, daemon=True)
        self.pump.start()
        if not started.wait(30) or self.p.poll() is not None:
            raise RuntimeError("hvnet capture did not start: " + "".join(self.said))

    def stop(self):
        self.p.send_signal(signal.SIGINT)
        self.p.wait(timeout=60)
        self.pump.join(10)
        said = "".join(self.said)
        m = re.search(r"(\d+) frames captured", said)
        if not m:
            raise RuntimeError("hvnet capture said no count: " + said)
        lost = re.search(r"(\d+) copies lost", said)
        return int(m.group(1)), int(lost.group(1)) if lost else 0


def once(f, secs, log):
    cap = Capture(f.t) if isinstance(f, HvnetCapture) else None
    t0 = daemon_ticks(f)
    r = iperf(f, 1, "64K", secs, None, log)
    r["cpu_ns"] = r["busy_cores"] * secs * 1e9 / max(r["rx_frames"], 1)
    r["daemon_ns"] = (daemon_ticks(f) - t0) / os.sysconf("SC_CLK_TCK") * 1e9 / max(r["rx_frames"], 1)
    if cap:
        r["copies"], r["copies_lost"] = cap.stop()
        r["copies_per_frame"] = r["copies"] / max(r["rx_frames"], 1)
    return r


def capture_cost(tmp, quick, reps, log):
    secs = 2 if quick else 4
    settings = dict(a={"tso": False, "queues": 1}, b={"lro": False, "queues": 1})
    with contextlib.ExitStack() as stack:
        up = {}
        for F in (Hvnet, HvnetCapture):
            up[F.name] = stack.enter_context(F(tmp, 1500, **settings))
        base = dict(builds()).get("hvnet-base")
        if base:
            with hvlab.hvnet_binary(base):
                up[Baseline.name] = stack.enter_context(Baseline(tmp, 1500, **settings))
        runs = interleaved(list(up), reps, lambda name: once(up[name], secs, log))
    m = {n: median([r["cpu_ns"] for r in rs]) for n, rs in runs.items()}
    d = {n: median([r["daemon_ns"] for r in rs]) for n, rs in runs.items()}
    per_copy = median([(r["cpu_ns"] - m["hvnet"]) / max(r["copies_per_frame"], 1e-9)
                       for r in runs["hvnet-capture"]])
    cpf = median([r["copies_per_frame"] for r in runs["hvnet-capture"]])
    lost = sum(r["copies_lost"] for r in runs["hvnet-capture"])
    said = (f"with a capture of everything at b ({cpf:.2f} copies per frame b received, {lost} lost): "
            f"{m['hvnet-capture'] / m['hvnet']:.2f}x the machine's CPU per frame "
            f"({m['hvnet-capture']:,.0f} vs {m['hvnet']:,.0f} ns), {per_copy:,.0f} ns per captured copy; "
            f"the daemon alone {d['hvnet-capture'] / d['hvnet']:.2f}x")
    if "hvnet-base" in m:
        said += (f"; no capture running / the build before capture: {m['hvnet'] / m['hvnet-base']:.2f}x "
                 f"the machine's CPU per frame ({m['hvnet']:,.0f} vs {m['hvnet-base']:,.0f} ns), "
                 f"the daemon's {d['hvnet'] / d['hvnet-base']:.2f}x")
    note = (vm_note() + " One TCP stream a -> b, 64 KiB writes, a's TSO and b's LRO off. The capture: "
            f"`hvnet capture b --point {POINTS} -w /dev/null`, started before each run and "
            "stopped after it (its copies counted by its own summary). CPU: the machine's busy cores over the run (/proc/stat, every process and the "
            "kernel: the capture's CLI included), and the daemon's own, per frame b received."
            + (" hvnet-base: HVNET_LAB_BASELINE, a build without capture, in the same run." if base else ""))
    figs = [measured("capture-cost", "Live capture: CPU per frame with no capture and with one of every frame",
                     "", "CPU ns per frame", {n: [{"v": r["cpu_ns"]} for r in rs] for n, rs in runs.items()},
                     "v", lambda c: (c, "1 stream"),
                     "what does a capture cost per frame, and what does it cost when none runs?", said, note),
            measured("capture-cost-daemon", "Live capture: the daemon's CPU per frame",
                     "", "CPU ns per frame", {n: [{"v": r["daemon_ns"]} for r in rs] for n, rs in runs.items()},
                     "v", lambda c: (c, "1 stream"),
                     "what does a capture add to the switch's own work per frame?", said, note)]
    return figs, runs
