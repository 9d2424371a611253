#!/usr/bin/env python3
"""Dynamic NetQueue against static NetQueue, same workload, same run
(seed 001, Figure 9: CPU and queues used).

Four VMs behind an uplink with five receive queues, an external host on
the wire sending to each VM (iperf3, one TCP stream per VM):
- static: each VM's filter on a queue of its own (`netqueue = true`);
- dynamic: filters packed on one queue and spread by load
  (`netqueue = "dynamic"`, threshold 60 % of a core).
Low load: each stream held to --low (default 100 Mbit/s); high load:
unlimited. Each point warms up (the balancer settles) and is then
measured: Gbit/s received, busy cores machine-wide (/proc/stat), the
daemon's own cores (/proc/PID/stat), and the queues in use. Both
topologies are up at once and their runs interleaved, medians of --repeat.

Run as root: `scripts/bench_netqueue.py [--repeat 3] [--seconds 5] [--out F]`.
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
from hvnet_lab.netqueue import run_one, topology  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=3, help="runs per point, interleaved; the median is kept")
    ap.add_argument("--low", default="100M", help="each stream's rate at low load (iperf3 -b)")
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    if not hvlab.is_root():
        sys.exit("bench_netqueue: run as root")
    modes = {"static": True, "dynamic": "dynamic"}
    loads = {"low": a.low, "high": None}
    total = a.repeat * len(loads) * len(modes)
    runs, done = {}, 0
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        up = {}
        for name, mode in modes.items():
            up[name] = stack.enter_context(topology(tmp, name, mode))
        for rep in range(a.repeat):
            for load, rate in loads.items():
                for name, t in up.items():
                    done += 1
                    print(f"[{done}/{total}] run {rep + 1} {name:<8} {load} load ...", flush=True)
                    runs.setdefault((name, load), []).append(run_one(t, rate, a.warmup, a.seconds))
    rows = {}
    for k, rs in runs.items():
        # Each figure's own median (not one run's figures).
        rows[k] = {f: sorted(r[f] for r in rs)[len(rs) // 2] for f in rs[0]}
        rows[k]["runs"] = rs
    print()
    print(f"{'load':<5} | {'static: Gbit/s busy hvnet queues':^36} | {'dynamic':^36} | dynamic/static (Gbit/s; busy; hvnet)")
    for load in loads:
        s, d = rows[("static", load)], rows[("dynamic", load)]
        cell = lambda r: f"{r['gbps']:>7.2f} {r['busy_cores']:>6.2f} {r['hvnet_cores']:>6.3f} {r['queues_used']:>3}"  # noqa: E731
        print(f"{load:<5} | {cell(s):^36} | {cell(d):^36} | {d['gbps'] / s['gbps']:.2f}; "
              f"{d['busy_cores'] / s['busy_cores']:.2f}; {d['hvnet_cores'] / max(s['hvnet_cores'], 1e-9):.2f}")
    if a.out:
        meta = {"kernel": os.uname().release, "cpus": os.cpu_count(), "date": time.strftime("%Y-%m-%d %H:%M:%S"),
                "repeat": a.repeat, "seconds": a.seconds, "low": a.low}
        a.out.write_text(json.dumps({"meta": meta, "rows": [dict(zip(("mode", "load"), k), **v)
                                                              for k, v in rows.items()]}, indent=2))
        print(f"results written to {a.out}")


if __name__ == "__main__":
    main()
