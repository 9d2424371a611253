#!/usr/bin/env python3
"""SplitRxMode at a VXLAN uplink, same workload, same run (seed 001,
Figure 5: throughput, and the latency it costs).

Four VMs behind hvnet's VXLAN endpoint on one receive queue; the external
host runs Linux's vxlan device and sends one TCP stream to each VM:
- together: the queue's thread also writes each frame into its VM while
  the VM's ring is idle (`delivery = "auto"`, run to completion);
- split: each VM's own delivery thread does the copy (`delivery =
  "thread"`), so the queue's thread only decapsulates and switches.
Measured: Gbit/s received by the four VMs, busy cores machine-wide, and
the round-trip time of pings to VM v0 (idle, and under the four streams).
Both topologies are up at once and their runs interleaved, medians of
--repeat.

Run as root: `scripts/bench_splitrx.py [--repeat 3] [--seconds 5] [--out F]`.
Not a test: nothing here asserts a speed.
"""

import argparse
import contextlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "lab")]

import hvlab  # noqa: E402
from hvnet_lab.splitrx import MODES, run_one, topology  # noqa: E402

VMS = 4


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=3, help="runs per point, interleaved; the median is kept")
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    if not hvlab.is_root():
        sys.exit("bench_splitrx: run as root")
    runs, done = {}, 0
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        up = {mode: stack.enter_context(topology(tmp, mode, VMS)) for mode in MODES}
        for rep in range(a.repeat):
            for name, fl in up.items():
                done += 1
                print(f"[{done}/{a.repeat * len(up)}] run {rep + 1} {name} ...", flush=True)
                runs.setdefault(name, []).append(run_one(fl, a.seconds))
    med = {}
    for name, rs in runs.items():
        med[name] = {k: sorted(r[k] for r in rs)[len(rs) // 2] for k in rs[0] if k != "command"}
    print()
    print(f"{'mode':<9} {'Gbit/s':>7} {'busy':>6} {'Gbit/s/core':>11} {'rtt idle ms':>11} {'rtt loaded ms':>13}")
    for name, m in med.items():
        print(f"{name:<9} {m['gbps']:>7.2f} {m['busy_cores']:>6.2f} {m['gbps_per_core']:>11.2f} "
              f"{m['rtt_idle_ms']:>11.3f} {m['rtt_loaded_ms']:>13.3f}")
    s, t = med["split"], med["together"]
    print(f"split/together: Gbit/s {s['gbps'] / t['gbps']:.2f}; per core "
          f"{s['gbps_per_core'] / t['gbps_per_core']:.2f}; "
          f"rtt idle {s['rtt_idle_ms'] / t['rtt_idle_ms']:.2f}; rtt loaded {s['rtt_loaded_ms'] / t['rtt_loaded_ms']:.2f}")
    if a.out:
        meta = {"kernel": os.uname().release, "cpus": os.cpu_count(), "date": time.strftime("%Y-%m-%d %H:%M:%S"),
                "repeat": a.repeat, "seconds": a.seconds}
        a.out.write_text(json.dumps({"meta": meta, "median": med, "runs": runs}, indent=2))
        print(f"results written to {a.out}")


if __name__ == "__main__":
    main()
