#!/usr/bin/env python3
"""A VM's throughput with a hostile neighbour: iperf3 from VM c to VM b,
alone and while VM a floods b with in-order 1-byte TCP segments and
frames from random source MACs (tests/py/hostile.py), interleaved runs;
the daemon's RSS is sampled too. Run as root:

    scripts/hostile_neighbour.py [--repeat 3] [--seconds 4]

Not a test: it measures, it asserts nothing.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "lab")]

import hvlab  # noqa: E402
from hvnet_lab import measure  # noqa: E402

HOSTILE = ROOT / "tests" / "py" / "hostile.py"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=4)
    a = ap.parse_args()
    vms = [dict(name=n, ipv4=f"10.73.0.{i + 1}/24") for i, n in enumerate("abc")]
    rows = {"idle": [], "hostile": []}
    with tempfile.TemporaryDirectory() as tmp, hvlab.Topology(Path(tmp), vms, prefix="hn") as t:
        pid = json.loads(Path(f"/run/hvnet/{t.name}/state.json").read_text())["pid"]
        ports = {p["client"]: p for p in json.loads(t.hv("ports", "--json").stdout)}
        t.hv("port", "a", "set", "allow_forged_transmits=on")
        t.popen("b", "iperf3 -s -B 10.73.0.2", stdout=subprocess.DEVNULL)
        hvlab.wait_listening(t.ns("b"), 5201)
        py = os.sys.executable
        for rep in range(a.repeat):
            for mode in ("idle", "hostile"):
                flood = []
                if mode == "hostile":
                    flood = [t.popen("a", f"{py} {HOSTILE} tiny-segments {ports['a']['mac']} {ports['b']['mac']} "
                                          f"10.73.0.1 10.73.0.2 10000000"),
                             t.popen("a", f"{py} {HOSTILE} random-macs {ports['b']['mac']} 10000000")]
                out = t.sh("c", f"iperf3 -c 10.73.0.2 -t {a.seconds} -J", timeout=a.seconds + 60).stdout
                rss = hvlab.rss_bytes(pid) / 2**20
                hvlab.stop_procs(flood)
                gbps = measure.iperf3(out)["bps"] / 1e9
                rows[mode].append((gbps, rss))
                print(f"[{rep + 1}/{a.repeat}] {mode:<8} c->b {gbps:6.2f} Gbit/s, daemon RSS {rss:6.1f} MiB", flush=True)
        tx = t.stats("/ports/a/tx_summary")
    med = {m: sorted(g for g, _ in r)[len(r) // 2] for m, r in rows.items()}
    print(f"\nmedian c->b: idle neighbour {med['idle']:.2f} Gbit/s, hostile neighbour {med['hostile']:.2f} Gbit/s "
          f"({med['hostile'] / med['idle']:.2f}x); largest daemon RSS {max(r for v in rows.values() for _, r in v):.1f} MiB; "
          f"a sent {tx['frames']:,} frames, FDB refused {tx['fdb_learn_refused']:,} source addresses")


if __name__ == "__main__":
    main()
