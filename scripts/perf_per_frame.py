#!/usr/bin/env python3
"""What the switch spends per frame: system calls, CPU cycles and
instructions of the hvnet daemon (all its threads, user and kernel) per
frame its ingress workers read, from `perf stat` during an iperf3 run
between two VMs. Several hvnet binaries can be compared in one run (e.g.
a build of an earlier commit), interleaved.

    scripts/perf_per_frame.py [--binary NAME=PATH ...] [--tso off|on] [--lro off|on] [--repeat 3]

Run as root. Not a test: it measures, it asserts nothing.
"""

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "lab")]

import hvlab  # noqa: E402
from hvnet_lab.fabrics import B_IP  # noqa: E402

sys.path.insert(0, str(ROOT / "scripts"))
from bench import baseline_fabric  # noqa: E402

# task-clock is CPU time (ms) of all the daemon's threads; cycles and
# instructions count where the machine exposes a PMU (a VM may not).
EVENTS = "task-clock,cycles,instructions,raw_syscalls:sys_enter,context-switches"


def one(f, seconds):
    pid = json.loads(Path(f"/run/hvnet/{f.t.name}/state.json").read_text())["pid"]
    server = f.popen("b", f"iperf3 -s -1 -B {B_IP}")
    hvlab.wait_listening(f.ns("b"), 5201)
    client = f.popen("a", f"iperf3 -c {B_IP} -t {seconds + 2} -l 64K")
    time.sleep(1)
    i0 = f.t.stats("/ports/a/tx_summary")["frames"] + f.t.stats("/ports/b/tx_summary")["frames"]
    p = subprocess.run(["perf", "stat", "-x,", "-e", EVENTS, "-p", str(pid), "--", "sleep", str(seconds)],
                       capture_output=True, text=True)
    i1 = f.t.stats("/ports/a/tx_summary")["frames"] + f.t.stats("/ports/b/tx_summary")["frames"]
    client.wait(timeout=seconds + 30)
    server.wait(timeout=10)
    counts = {}
    for line in p.stderr.splitlines():
        parts = line.split(",")
        if len(parts) > 2 and re.match(r"^[0-9.]+$", parts[0]):
            counts[parts[2]] = float(parts[0])
    frames = max(i1 - i0, 1)
    return {"frames": frames, **{k: v / frames for k, v in counts.items()}}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--binary", action="append", default=[], metavar="NAME=PATH",
                    help="an hvnet binary to measure (default: this tree's release build as 'hvnet')")
    ap.add_argument("--tso", default="off", choices=["on", "off"], help="sender's TSO (off: wire-sized frames)")
    ap.add_argument("--lro", default="off", choices=["on", "off"], help="receiver's LRO")
    ap.add_argument("--seconds", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    binaries = [b.split("=", 1) for b in a.binary] or [["hvnet", hvlab.hvnet_bin()]]
    settings = dict(a={"tso": a.tso == "on", "queues": 1}, b={"lro": a.lro == "on", "queues": 1})
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(a.repeat):
            for name, path in binaries:
                F = baseline_fabric(path)
                with F(tmp, 1500, **settings) as f:
                    print(f"[{rep + 1}/{a.repeat}] {name} ...", flush=True)
                    rows.setdefault(name, []).append(one(f, a.seconds))
    print(f"\nper frame read by the ingress workers (sender TSO {a.tso}, receiver LRO {a.lro}, 1 stream, 64 KiB writes; medians of {a.repeat})")
    keys = [("task-clock", "CPU ns", 1e6), ("cycles", "cycles", 1), ("instructions", "instructions", 1),
            ("raw_syscalls:sys_enter", "syscalls", 1), ("context-switches", "ctx switches", 1)]
    print(f"{'binary':<12}{'frames/s':>12}" + "".join(f"{label:>14}" for _, label, _ in keys))
    for name, rs in rows.items():
        med = lambda k: sorted(r.get(k, 0) for r in rs)[len(rs) // 2]  # noqa: E731
        cells = "".join(f"{med(k) * scale:>14,.1f}" if med(k) else f"{'n/a':>14}" for k, _, scale in keys)
        print(f"{name:<12}{med('frames') / a.seconds:>12,.0f}{cells}")
    print("(CPU ns: the daemon's threads, user and kernel, including the receiving guest's stack when a worker"
          " delivers run to completion; n/a: no PMU on this machine)")


if __name__ == "__main__":
    main()
