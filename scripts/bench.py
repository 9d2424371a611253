#!/usr/bin/env python3
"""hvnet against the Linux bridge and Open vSwitch's userspace datapath,
same workload, same run.

Two VMs (network namespaces) are joined by each fabric in turn:
- hvnet: `hvnet up`, TAP ports with virtio-net headers;
- bridge: veth pairs into a Linux bridge (in a namespace of its own);
- ovs: Open vSwitch's userspace datapath (datapath_type=netdev) with
  userspace TSO on, its own ovsdb-server and ovs-vswitchd in a private run
  directory, TAP ports moved into the namespaces.
iperf3 runs VM a -> VM b for each combination of streams, write size and
MTU. Reported: Gbit/s, CPU cores busy machine-wide (from /proc/stat during
the run), Gbit/s per busy core, and hvnet's ratios to the others.

Run as root: `scripts/bench.py [--quick] [--out results.json]`. Not a test:
nothing here asserts a speed.
"""

import argparse
import contextlib
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "lab")]

import hvlab  # noqa: E402
from hvnet_lab import measure  # noqa: E402
from hvnet_lab.fabrics import B_IP, Bridge, Hvnet, HvnetUring, Ovs  # noqa: E402

def run_one(f, streams, size, seconds):
    server = f.popen("b", f"iperf3 -s -B {B_IP}")
    hvlab.wait_listening(f.ns("b"), 5201)
    try:
        f.sh("a", f"ping -c 1 -W 2 {B_IP} >/dev/null", check=False)
        with measure.Cpu() as cpu:
            out = f.sh("a", f"iperf3 -c {B_IP} -t {seconds} -P {streams} -l {size} -J", timeout=seconds + 60).stdout
    finally:
        server.terminate()
        server.wait()
    r = measure.iperf3(out)
    gbps = r["bps"] / 1e9
    return {"gbps": gbps, "busy_cores": cpu.cores, "gbps_per_core": cpu.gbit_per_core_second(r["bytes"]),
            "retransmits": r["retransmits"]}


def baseline_fabric(binary):
    """hvnet from another binary, as fabric `hvnet-base`."""

    class Base(Hvnet):
        name = "hvnet-base"
        env = {"HVNET_BIN": str(Path(binary).resolve())}

    return Base


def lro_wire(a, seconds):
    """Sender TSO off, so wire-sized frames reach the switch; the
    receiver's LRO off and on, interleaved. Reports Gbit/s, frames/s the
    sender's worker read, and frames/s delivered to the receiver."""
    binaries = [("hvnet", None)] + ([("hvnet-base", str(Path(a.baseline).resolve()))] if a.baseline else [])
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        with contextlib.ExitStack() as stack:
            up = []
            for name, binary in binaries:
                F = baseline_fabric(binary) if binary else Hvnet
                up.append((name, stack.enter_context(F(tmp, 1500, a={"tso": False}, b={"queues": 1}))))
            runs = {}
            for rep in range(a.repeat):
                for lro in ("off", "on"):
                    for name, f in up:
                        f.t.hv("port", "b", "set", f"lro={lro}")
                        print(f"[lro-wire] run {rep + 1} {name} lro {lro} ...", flush=True)
                        i0 = f.t.stats("/ports/a/tx_summary")["frames"]
                        d0 = f.t.stats("/ports/b/rx_summary")["delivered_frames"]
                        r = run_one(f, 1, "64K", seconds)
                        r["in_fps"] = (f.t.stats("/ports/a/tx_summary")["frames"] - i0) / seconds
                        r["delivered_fps"] = (f.t.stats("/ports/b/rx_summary")["delivered_frames"] - d0) / seconds
                        runs.setdefault((name, lro), []).append(r)
            for (name, lro), rs in runs.items():
                rs = sorted(rs, key=lambda r: r["gbps"])
                rows.append({"fabric": name, "lro": lro, **rs[len(rs) // 2], "gbps_runs": [round(x["gbps"], 3) for x in rs]})
    print()
    print("sender TSO off, 1 stream, 64 KiB writes, MTU 1500")
    print(f"{'fabric':<11} {'LRO':>3} {'Gbit/s':>7} {'cores':>5} {'in frames/s':>12} {'delivered/s':>12} {'retrans':>8}")
    for r in rows:
        print(f"{r['fabric']:<11} {r['lro']:>3} {r['gbps']:>7.2f} {r['busy_cores']:>5.2f} {r['in_fps']:>12,.0f} {r['delivered_fps']:>12,.0f} {r['retransmits']:>8}")
    for name, _ in binaries:
        on = next(r for r in rows if (r["fabric"], r["lro"]) == (name, "on"))
        off = next(r for r in rows if (r["fabric"], r["lro"]) == (name, "off"))
        print(f"{name}: LRO on / off = {on['gbps'] / off['gbps']:.2f}x")
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="1 and 4 streams at 64K only, MTU 1500, 3 s runs")
    ap.add_argument("--seconds", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=1, help="runs per point; the median is kept")
    ap.add_argument("--fabrics", default="hvnet,bridge,ovs",
                    help="comma-separated, from hvnet, hvnet-uring (io_uring TAP I/O), bridge, ovs")
    ap.add_argument("--baseline", metavar="BIN",
                    help="another hvnet binary (e.g. a build of an earlier commit), run as fabric hvnet-base beside the others")
    ap.add_argument("--lro-wire", action="store_true",
                    help="also: sender TSO off (wire-sized frames), receiver LRO off vs on, hvnet (and the baseline)")
    ap.add_argument("--mtus", default="1500,9000", help="comma-separated MTUs (default 1500,9000)")
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    if not hvlab.is_root():
        sys.exit("bench: run as root")
    if "ovs" in a.fabrics and not shutil.which("ovs-vswitchd"):
        sys.exit("bench: Open vSwitch is not installed (apt-get install openvswitch-switch), or leave it out with --fabrics hvnet,bridge")
    seconds = 3 if a.quick else a.seconds
    mtus = [1500] if a.quick else [int(m) for m in a.mtus.split(",")]
    sizes = ["64K"] if a.quick else ["256", "16K", "64K"]
    streams = [1, 4]
    fabrics = {"hvnet": Hvnet, "hvnet-uring": HvnetUring, "bridge": Bridge, "ovs": Ovs}
    chosen = [fabrics[n] for n in a.fabrics.split(",")]
    if a.baseline:
        chosen.insert(1, baseline_fabric(a.baseline))
    results = []
    total = len(mtus) * len(chosen) * len(sizes) * len(streams) * a.repeat
    done = 0
    with tempfile.TemporaryDirectory() as tmp:
        for mtu in mtus:
            # Every fabric is up at once and the runs interleave (A, B, C,
            # A, B, C, ...), so that drift in the machine's speed hits all.
            with contextlib.ExitStack() as stack:
                up = [stack.enter_context(F(tmp, mtu)) for F in chosen]
                runs = {}
                for rep in range(a.repeat):
                    for size in sizes:
                        for s in streams:
                            for f in up:
                                done += 1
                                print(f"[{done}/{total}] run {rep + 1} {f.name:<10} mtu {mtu} streams {s} writes {size} ...", flush=True)
                                runs.setdefault((f.name, size, s), []).append(run_one(f, s, size, seconds))
                for (name, size, s), rs in runs.items():
                    rs = sorted(rs, key=lambda r: r["gbps"])
                    r = dict(rs[len(rs) // 2])
                    r["gbps_runs"] = [round(x["gbps"], 3) for x in rs]
                    results.append({"fabric": name, "mtu": mtu, "streams": s, "write": size, **r})
    wire = lro_wire(a, seconds) if a.lro_wire else []
    print()
    print(f"{'mtu':>5} {'str':>3} {'write':>5} | " + " | ".join(f"{F.name:^24}" for F in chosen) + " | hvnet/bridge  hvnet/ovs  hvnet/base (Gbit/s; per core)")
    print(f"{'':>17}| " + " | ".join(f"{'Gbit/s':>7} {'cores':>5} {'/core':>8}" for _ in chosen) + " |")
    for mtu in mtus:
        for size in sizes:
            for s in streams:
                row = {r["fabric"]: r for r in results if (r["mtu"], r["write"], r["streams"]) == (mtu, size, s)}
                cells = " | ".join(f"{row[F.name]['gbps']:>7.2f} {row[F.name]['busy_cores']:>5.2f} {row[F.name]['gbps_per_core']:>8.2f}" for F in chosen)
                ratios = []
                for other in ("bridge", "ovs", "hvnet-base"):
                    if "hvnet" in row and other in row:
                        h, o = row["hvnet"], row[other]
                        ratios.append(f"{h['gbps'] / o['gbps']:.2f}; {h['gbps_per_core'] / o['gbps_per_core']:.2f}")
                print(f"{mtu:>5} {s:>3} {size:>5} | {cells} | " + "   ".join(ratios))
    if a.out:
        meta = {"kernel": os.uname().release, "cpus": os.cpu_count(), "date": time.strftime("%Y-%m-%d %H:%M:%S"),
                "iperf3": hvlab.run(["iperf3", "--version"]).stdout.splitlines()[0]}
        a.out.write_text(json.dumps({"meta": meta, "results": results, "lro_wire": wire}, indent=2))
        print(f"results written to {a.out}")


if __name__ == "__main__":
    main()
