#!/usr/bin/env python3
"""hvnet's physical side against Linux's, same workload, same run.

An external host (a namespace on the far end of a veth "wire", its NIC's
TSO off so that wire-sized frames cross; the near end's GRO on, the NIC's
"hardware LRO") and a VM:
- hvnet-uplink: the VM behind hvnet, the wire on an hvnet uplink;
- bridge-uplink: the VM on a Linux bridge whose port is the same wire;
- hvnet-vxlan: hvnet's VXLAN tunnel endpoint on the uplink, the host
  running Linux's vxlan device;
- linux-vxlan: a Linux bridge with a kernel vxlan device over the wire
  (Linux's own path for the same two endpoints);
- ovs-vxlan: Open vSwitch's userspace datapath as the endpoint (native
  tunnelling), the host running Linux's vxlan device.
iperf3, 64 KiB writes, 1 and 4 streams, host to VM and VM to host; the
fabrics are all up at once and their runs interleaved, N times each; the
median is reported with Gbit/s per busy core (machine-wide /proc/stat).

Run as root: `scripts/bench_uplink.py [--repeat 3] [--seconds 4]
[--peer-offloads wire|default] [--out F]`.
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
from hvnet_lab.fabrics import (  # noqa: E402
    A_IP, B_IP, BridgeUplink, HvnetUplink, HvnetUplinkNoLro, HvnetUplinkSoftwareLro, HvnetVxlan, LinuxVxlan,
    OvsVxlan)
from hvnet_lab.figures import iperf  # noqa: E402

FABRICS = {F.name: F for F in (HvnetUplink, BridgeUplink, HvnetVxlan, LinuxVxlan, OvsVxlan)}
# Not in the default set: the uplink's LRO variants (`--fabrics` names them).
MORE = {F.name: F for F in (HvnetUplinkSoftwareLro, HvnetUplinkNoLro)}
PAIRS = [("hvnet-uplink", "bridge-uplink"), ("hvnet-vxlan", "linux-vxlan"), ("hvnet-vxlan", "ovs-vxlan"),
         ("hvnet-uplink-swlro", "hvnet-uplink"), ("hvnet-uplink-nolro", "hvnet-uplink")]


def run_one(f, direction, streams, seconds):
    reverse = direction == "vm->host"
    src, ip = ("b", A_IP) if reverse else ("a", B_IP)
    f.sh(src, f"ping -c 1 -W 2 {ip} >/dev/null", check=False)
    r = iperf(f, streams, "64K", seconds, reverse=reverse)
    return {k: r[k] for k in ("gbps", "busy_cores", "gbps_per_core", "retransmits")}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=3, help="runs per point, interleaved; the median is kept")
    ap.add_argument("--fabrics", default=",".join(FABRICS),
                    help="comma-separated, from " + ", ".join({**FABRICS, **MORE}))
    ap.add_argument("--directions", default="host->vm,vm->host", help="comma-separated: host->vm, vm->host")
    ap.add_argument("--peer-offloads", choices=("wire", "default"), default="wire",
                    help="wire: the external host's NIC sends wire-sized frames (TSO off, the default); "
                         "default: its TSO back on, as a Linux peer is left (a veth then hands over "
                         "tunnelled GSO frames)")
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    if not hvlab.is_root():
        sys.exit("bench_uplink: run as root")
    known = {**FABRICS, **MORE}
    bad = [n for n in a.fabrics.split(",") if n not in known]
    if bad:
        sys.exit(f"bench_uplink: unknown fabric {bad[0]!r}; choose from {', '.join(known)}")
    chosen = [known[n] for n in a.fabrics.split(",")]
    points = [(d, s) for d in a.directions.split(",") for s in (1, 4)]
    total = len(points) * len(chosen) * a.repeat
    runs, done = {}, 0
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        up = [stack.enter_context(F(tmp, 1500)) for F in chosen]
        if a.peer_offloads == "default":
            for f in up:
                f.sh("a", "ethtool -K eth0 tso on >/dev/null")
        for rep in range(a.repeat):
            for d, s in points:
                for f in up:
                    done += 1
                    print(f"[{done}/{total}] run {rep + 1} {f.name:<13} {d} streams {s} ...", flush=True)
                    runs.setdefault((f.name, d, s), []).append(run_one(f, d, s, a.seconds))
    rows = {}
    for k, rs in runs.items():
        rs = sorted(rs, key=lambda r: r["gbps"])
        rows[k] = dict(rs[len(rs) // 2], gbps_runs=[round(x["gbps"], 3) for x in rs])
    print()
    print(f"{'direction':<9} {'str':>3} | " + " | ".join(f"{F.name:^26}" for F in chosen) + " | ratios (Gbit/s; per core)")
    for d, s in points:
        cells = " | ".join(f"{rows[(F.name, d, s)]['gbps']:>7.2f} {rows[(F.name, d, s)]['busy_cores']:>5.2f} "
                           f"{rows[(F.name, d, s)]['gbps_per_core']:>6.2f}/c" for F in chosen)
        ratios = []
        for h, o in PAIRS:
            if (h, d, s) in rows and (o, d, s) in rows:
                x, y = rows[(h, d, s)], rows[(o, d, s)]
                ratios.append(f"{h}/{o} {x['gbps'] / y['gbps']:.2f}; {x['gbps_per_core'] / y['gbps_per_core']:.2f}")
        print(f"{d:<9} {s:>3} | {cells} | " + "   ".join(ratios))
    if a.out:
        meta = {"peer_offloads": a.peer_offloads, "kernel": os.uname().release, "cpus": os.cpu_count(), "date": time.strftime("%Y-%m-%d %H:%M:%S"),
                "repeat": a.repeat, "seconds": a.seconds, "iperf3": hvlab.run(["iperf3", "--version"]).stdout.splitlines()[0]}
        a.out.write_text(json.dumps({"meta": meta, "rows": [dict(zip(("fabric", "direction", "streams"), k), **v)
                                                              for k, v in rows.items()]}, indent=2))
        print(f"results written to {a.out}")


if __name__ == "__main__":
    main()
