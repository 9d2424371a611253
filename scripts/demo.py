#!/usr/bin/env python3
"""hvnet demo: two VMs on the switch, iperf3 between them, LRO off and on.

Two VMs (network namespaces whose NICs are TAP devices hvnet holds) come
up on hvnet. The sender's vNIC has TSO off, so wire-sized (MTU) frames
reach the switch, as from a physical NIC; hvnet's software LRO coalesces
them before delivery, or not. A last row turns the sender's TSO on: the
VM-to-VM fast path, where 64 KiB frames pass through whole. The table shows
what the receiving VM got: throughput, frames per second and average frame
size at its NIC, and hvnet's drops. Everything is torn down at the end.

With --offline, the demo instead runs a capture of real traffic through
`hvnet pcap gro` and `hvnet pcap gso`.
"""

import argparse
import json
import sys
import tempfile
from pathlib import Path

import hvlab  # lab/, on PYTHONPATH (scripts/demo.sh)


def measure(t, seconds, streams):
    """One iperf3 run from a to b: Gbit/s, receiver frames/s, avg frame,
    ring-full drops, times the sender waited for ring space."""
    b0 = t.link_counters("b")
    d0 = t.stats("/ports/b/rx_summary")
    out = t.sh("a", f"iperf3 -c 10.99.0.2 -t {seconds} -P {streams} -l 64K -J", timeout=seconds + 30).stdout
    b1 = t.link_counters("b")
    d1 = t.stats("/ports/b/rx_summary")
    gbps = json.loads(out)["end"]["sum_received"]["bits_per_second"] / 1e9
    frames = b1["rx_packets"] - b0["rx_packets"]
    nbytes = b1["rx_bytes"] - b0["rx_bytes"]
    delta = lambda k: d1[k] - d0[k]  # noqa: E731
    drops = delta("drop_ring1_full") + delta("drop_ring2_full")
    return gbps, frames / seconds, nbytes / max(frames, 1), drops, delta("backpressure_waits")


def live(a):
    with tempfile.TemporaryDirectory() as tmp:
        vms = [dict(name="a", ipv4="10.99.0.1/24", tso=False), dict(name="b", ipv4="10.99.0.2/24")]
        with hvlab.Topology(Path(tmp), vms, prefix="demo") as t:
            print(f"demo: topology {t.name} is up: VMs a (10.99.0.1) and b (10.99.0.2) on hvnet")
            t.popen("b", "iperf3 -s -B 10.99.0.2", stdout=hvlab.subprocess.DEVNULL, stderr=hvlab.subprocess.DEVNULL)
            hvlab.wait_listening(t.ns("b"), 5201)
            rows = []
            # The third row is the VMXNET3 model of CPU Scheduling and
            # VMXNET3 Ring Exhaustion: the VM's own delivery thread drains
            # its rings, and a full ring drops.
            for label, lro, tso, overflow, delivery in [
                ("LRO off, sender TSO off", False, False, "backpressure", "auto"),
                ("LRO on,  sender TSO off", True, False, "backpressure", "auto"),
                ("LRO on,  sender TSO off, VMXNET3 model", True, False, "drop", "thread"),
                ("LRO on,  sender TSO on (VM-to-VM)", True, True, "backpressure", "auto"),
            ]:
                t.hv("port", "b", "set", f"lro={'on' if lro else 'off'}", f"rx_overflow={overflow}",
                     f"delivery={delivery}")
                t.hv("port", "a", "set", f"tso={'on' if tso else 'off'}")
                print(f"demo: iperf3 a -> b for {a.seconds} s, {label} ...")
                rows.append((label, *measure(t, a.seconds, a.streams)))
            print()
            print(f"{'':<42}{'Gbit/s':>8}{'frames/s at b':>15}{'avg frame B':>13}{'ring drops':>12}{'ring waits':>12}")
            for label, gbps, fps, avg, drops, waits in rows:
                print(f"{label:<42}{gbps:>8.2f}{fps:>15,.0f}{avg:>13,.0f}{drops:>12}{waits:>12}")
            base = rows[0][1]
            print()
            print(f"LRO on / LRO off (wire-sized frames from the sender): {rows[1][1] / base:.2f}x the throughput, "
                  f"{rows[0][2] / max(rows[1][2], 1):.1f}x fewer frames into the receiving VM")
            print("(by default the sender's worker writes each frame into the receiving VM itself, run to completion, and "
                  "a receiver that cannot take more holds the sender (rx_overflow = backpressure); in the VMXNET3 model the "
                  "VM's delivery thread drains 256-entry rings, where a 64 KiB coalesced frame takes 16 ring-2 pages, and a "
                  "full ring drops — the effect in CPU Scheduling and VMXNET3 Ring Exhaustion, part 2)")
            acc = t.stats("/ports/b/accounting")
            print(f"every frame accounted for at b: offered {acc['egress']['offered']:,} = delivered "
                  f"{acc['egress']['delivered_source_frames']:,} + dropped {acc['egress']['drops']:,} + in flight {acc['egress']['in_flight']}")
        print(f"demo: topology {t.name} is down; nothing left behind")
    return 0


def offline(a):
    import capture_lab

    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        cap, gro, gso = d / "wire.pcap", d / "lro.pcap", d / "tso.pcap"
        print("demo: iperf3 sends 8M between two namespaces (offloads off), capturing the wire ...")
        capture_lab.capture_iperf(cap, nbytes="8M")
        s = json.loads(hvlab.hvnet("pcap", "gro", cap, gro, "--json").stdout)
        hvlab.hvnet("pcap", "gso", gro, gso, "--mtu", 1500)
        same = capture_lab.tcp_streams(gro) == capture_lab.tcp_streams(cap) == capture_lab.tcp_streams(gso)
        print(f"{'':<28}{'frames':>8}{'avg bytes':>12}{'max bytes':>12}")
        for name, p in [("captured on the wire", cap), ("after hvnet LRO (GRO)", gro), ("after hvnet TSO (MTU 1500)", gso)]:
            sizes = capture_lab.frame_sizes(p)
            print(f"{name:<28}{len(sizes):>8}{sum(sizes) / len(sizes):>12.0f}{max(sizes):>12}")
        print(f"LRO rate {s['lro_rate']:.1f}; TCP byte stream identical after LRO and after TSO: {'yes' if same else 'NO'}")
        return 0 if same else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=int, default=5, help="length of each iperf3 run (default 5)")
    ap.add_argument("--streams", type=int, default=1, help="parallel iperf3 streams (default 1)")
    ap.add_argument("--offline", action="store_true", help="run the capture-file demo instead")
    a = ap.parse_args()
    if not hvlab.is_root():
        sys.exit("demo: run as root (it creates network namespaces)")
    return offline(a) if a.offline else live(a)


if __name__ == "__main__":
    sys.exit(main())
