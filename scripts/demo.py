#!/usr/bin/env python3
"""hvnet demo: what software LRO and TSO do to real TCP traffic.

iperf3 runs between two fresh network namespaces over a veth pair with
every offload off, so the capture holds what a wire carries: MTU-sized
segments. hvnet's GRO engine (software LRO) coalesces them as Linux would
before handing them to a VM; its GSO engine (software TSO) splits the
result back to the MTU. The table shows frames, sizes, the LRO rate (frames
in per frame delivered) and whether the TCP byte stream survived intact.
"""

import argparse
import json
import sys
import tempfile
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "py"))

import capture_lab  # noqa: E402
import hvlab  # noqa: E402


def row(name, path):
    sizes = capture_lab.frame_sizes(path)
    avg = sum(sizes) / len(sizes)
    bad = len(capture_lab.bad_checksums(path))
    return f"{name:<28}{len(sizes):>8}{avg:>12.0f}{max(sizes):>12}{bad:>14}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bytes", default="8M", help="bytes iperf3 sends (default 8M)")
    ap.add_argument("--mtu", type=int, default=1500)
    ap.add_argument("--keep", metavar="DIR", help="keep the captures in DIR")
    a = ap.parse_args()
    if not hvlab.is_root():
        sys.exit("demo: run as root (it creates network namespaces)")
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(a.keep or tmp)
        d.mkdir(parents=True, exist_ok=True)
        cap, gro, gso = d / "wire.pcap", d / "lro.pcap", d / "tso.pcap"
        print(f"demo: iperf3 sends {a.bytes} between two namespaces (MTU {a.mtu}, offloads off), capturing the wire ...")
        capture_lab.capture_iperf(cap, nbytes=a.bytes, mtu=a.mtu)
        print("demo: hvnet pcap gro (software LRO), then hvnet pcap gso (software TSO) ...")
        s = json.loads(hvlab.hvnet("pcap", "gro", cap, gro, "--json").stdout)
        hvlab.hvnet("pcap", "gso", gro, gso, "--mtu", a.mtu)
        rss = [json.loads(x) for x in hvlab.hvnet("pcap", "rss", cap, "--queues", 4).stdout.splitlines()]
        streams = capture_lab.tcp_streams(cap)
        same = capture_lab.tcp_streams(gro) == streams == capture_lab.tcp_streams(gso)
        print()
        print(f"{'':<28}{'frames':>8}{'avg bytes':>12}{'max bytes':>12}{'bad checksums':>14}")
        print(row("captured on the wire", cap))
        print(row("after hvnet LRO (GRO)", gro))
        print(row(f"after hvnet TSO (MTU {a.mtu})", gso))
        print()
        print(f"LRO rate: {s['lro_rate']:.1f} frames in per frame delivered "
              f"({s['coalesced_frames']} coalesced frames built from {s['coalesced_segments']} segments)")
        print("run flushes: " + ", ".join(f"{k} {v}" for k, v in s["flushes"].items()))
        print(f"TCP byte stream identical after LRO and after TSO: {'yes' if same else 'NO'}")
        queues = Counter(r["queue"] for r in rss)
        print("RSS over 4 queues (Toeplitz, Microsoft key): frames per queue "
              + ", ".join(f"q{q}={queues[q]}" for q in range(4))
              + " (each direction of each TCP connection stays on one queue)")
        if a.keep:
            print(f"captures kept in {d}")
        return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
