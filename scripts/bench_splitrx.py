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
import re
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "lab")]

import hvlab  # noqa: E402
from hvnet_lab import measure  # noqa: E402

VMS, VNI = 4, 42
LOCAL, REMOTE, EXT_IP = "198.18.31.1", "198.18.31.2", "10.31.0.100"


def vm_ip(i):
    return f"10.31.0.{i + 1}"


def topology(tmp, delivery):
    return hvlab.Topology(
        Path(tmp), [dict(name=f"v{i}", ipv4=vm_ip(i) + "/24", delivery=delivery) for i in range(VMS)], prefix="sr",
        uplinks=[dict(name="up0", device="", queues=1, mtu=1550, lro="hardware",
                      vxlan=dict(vni=VNI, local=LOCAL + "/24", remotes=[REMOTE]))],
        hosts=[dict(name="ext", uplink="up0", ipv4=REMOTE + "/24")])


def rtt_ms(t, count):
    out = t.sh("ext", f"ping -q -c {count} -i 0.01 -W 2 {vm_ip(0)}", check=False).stdout
    m = re.search(r"= [\d.]+/([\d.]+)/([\d.]+)/", out)
    return float(m.group(1)) if m else float("nan")


def run_one(t, seconds):
    idle = rtt_ms(t, 200)
    servers = [t.popen(f"v{i}", f"iperf3 -s -1 -p {5301 + i}") for i in range(VMS)]
    for i in range(VMS):
        t.wait_listening(f"v{i}", 5301 + i)
    with measure.Cpu() as cpu:
        clients = [t.popen("ext", f"iperf3 -c {vm_ip(i)} -p {5301 + i} -t {seconds} -J",
                           stdout=hvlab.subprocess.PIPE, text=True) for i in range(VMS)]
        time.sleep(1)
        loaded = rtt_ms(t, 100)
        outs = [c.communicate(timeout=120)[0] for c in clients]
    for s in servers:
        s.wait(timeout=10)
    gbps = sum(measure.iperf3(o)["bps"] for o in outs) / 1e9
    return {"gbps": gbps, "busy_cores": cpu.cores, "rtt_idle_ms": idle, "rtt_loaded_ms": loaded}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=3, help="runs per point, interleaved; the median is kept")
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    if not hvlab.is_root():
        sys.exit("bench_splitrx: run as root")
    modes = {"together": "auto", "split": "thread"}
    runs, done = {}, 0
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        up = {}
        for name, delivery in modes.items():
            d = Path(tmp) / name
            d.mkdir()
            t = up[name] = stack.enter_context(topology(d, delivery))
            t.sh("ext", f"ip link add vx{VNI} type vxlan id {VNI} local {REMOTE} remote {LOCAL} dstport 4789 "
                        f"dev eth0 noudpcsum && ip addr add {EXT_IP}/24 dev vx{VNI} && ip link set vx{VNI} up")
            hvlab.eventually(lambda: t.sh("ext", f"ping -c 1 -W 1 {vm_ip(0)}", check=False).returncode == 0,
                             timeout=20)
        for rep in range(a.repeat):
            for name, t in up.items():
                done += 1
                print(f"[{done}/{a.repeat * len(up)}] run {rep + 1} {name} ...", flush=True)
                runs.setdefault(name, []).append(run_one(t, a.seconds))
    med = {}
    for name, rs in runs.items():
        med[name] = {k: sorted(r[k] for r in rs)[len(rs) // 2] for k in rs[0]}
    print()
    print(f"{'mode':<9} {'Gbit/s':>7} {'busy':>6} {'Gbit/s/core':>11} {'rtt idle ms':>11} {'rtt loaded ms':>13}")
    for name, m in med.items():
        print(f"{name:<9} {m['gbps']:>7.2f} {m['busy_cores']:>6.2f} {m['gbps'] / m['busy_cores']:>11.2f} "
              f"{m['rtt_idle_ms']:>11.3f} {m['rtt_loaded_ms']:>13.3f}")
    s, t = med["split"], med["together"]
    print(f"split/together: Gbit/s {s['gbps'] / t['gbps']:.2f}; per core "
          f"{(s['gbps'] / s['busy_cores']) / (t['gbps'] / t['busy_cores']):.2f}; "
          f"rtt idle {s['rtt_idle_ms'] / t['rtt_idle_ms']:.2f}; rtt loaded {s['rtt_loaded_ms'] / t['rtt_loaded_ms']:.2f}")
    if a.out:
        meta = {"kernel": os.uname().release, "cpus": os.cpu_count(), "date": time.strftime("%Y-%m-%d %H:%M:%S"),
                "repeat": a.repeat, "seconds": a.seconds}
        a.out.write_text(json.dumps({"meta": meta, "median": med, "runs": runs}, indent=2))
        print(f"results written to {a.out}")


if __name__ == "__main__":
    main()
