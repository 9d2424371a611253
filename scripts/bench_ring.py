#!/usr/bin/env python3
"""The receive ring of a real guest, as seed 002 measured VMXNET3's: a
QEMU guest (Debian's cloud kernel, its virtio-net driver, TCG here) whose
vCPU thread is held to a share of one core receives one TCP stream from a
namespace VM through hvnet; its receive virtqueue is set up with 256 or
1024 entries (`rx_queue_size`), the port drops what finds the ring full
(`rx_overflow = "drop"`). Per size, interleaved, `--repeat` runs: the
drops hvnet counts (`drop_virtqueue_full`), the sender's retransmissions
and the throughput.

Run as root: `scripts/bench_ring.py [--repeat 3] [--seconds 8] [--cpu 25] [--out F]`.
Not a test: nothing here asserts a number.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "lab")]

import hvlab  # noqa: E402
import qemu_guest  # noqa: E402
from hvnet_lab import measure  # noqa: E402

MAC = "02:00:00:00:24:01"
GUEST_IP, SENDER_IP = "198.18.24.1", "198.18.24.3"


def vcpu_threads(pid: int) -> list:
    """QEMU's vCPU threads (named `CPU n/TCG` or `CPU n/KVM`)."""
    out = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        name = Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip()
        if name.startswith("CPU "):
            out.append(int(tid))
    return out


def one_run(work: Path, size: int, seconds: int, cpu: int, lro: bool) -> dict:
    vms = [dict(name="q", kind="vhost-user", mac=MAC, rx_overflow="drop", lro=lro),
           dict(name="s", ipv4=SENDER_IP + "/24", queues=1)]
    with hvlab.Topology(work, vms, prefix="hr") as t:
        initrd = qemu_guest.initramfs(work, MAC, GUEST_IP + "/24", "iperf3 -s", binaries=["/usr/bin/iperf3"])
        guest = subprocess.Popen(qemu_guest.argv(f"/run/hvnet/{t.name}/q.sock", MAC, initrd, rx_queue_size=size),
                                 stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                 text=True)
        try:
            hvlab.wait_for_line(guest.stdout, "HVNET-BEGIN", timeout=120)
            sizes = json.loads(t.hv("port", "q", "--json").stdout)["vhost_user"]["virtqueues"][0]
            # The server is up once a short run gets through (TCG starts
            # it slowly); the guest is then held to its share.
            deadline = time.monotonic() + 120
            while t.sh("s", f"iperf3 -c {GUEST_IP} -t 1", check=False, timeout=60).returncode != 0:
                if time.monotonic() > deadline:
                    raise RuntimeError("the guest's iperf3 server did not answer within 120 s")
                time.sleep(0.5)
            with hvlab.CpuLimit(cpu) as group:
                for tid in vcpu_threads(guest.pid):
                    group.add(tid)
                before = t.stats("/ports/q/rx_summary")
                r = t.sh("s", f"iperf3 -c {GUEST_IP} -t {seconds} -J", timeout=seconds + 120)
                after = t.stats("/ports/q/rx_summary")
            res = measure.iperf3(r.stdout)
        finally:
            guest.kill()
            guest.wait()
    return {"virtqueue": sizes["rx"], "gbps": res["bps"] / 1e9, "retransmits": res["retransmits"],
            "drop_virtqueue_full": after["drop_virtqueue_full"] - before["drop_virtqueue_full"],
            "delivered_frames": after["delivered_frames"] - before["delivered_frames"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=8)
    ap.add_argument("--cpu", type=int, default=25, help="the guest's vCPU share of one core, percent")
    ap.add_argument("--sizes", default="256,1024")
    ap.add_argument("--lro", choices=("on", "off"), default="off",
                    help="LRO into the guest (off: wire-sized frames, one per receive buffer, as 002's VMXNET3 "
                         "ring filled; on: 64 KiB frames, few buffers)")
    ap.add_argument("--out")
    a = ap.parse_args()
    sizes = [int(x) for x in a.sizes.split(",")]
    runs = {s: [] for s in sizes}
    for r in range(a.repeat):
        for s in sizes:
            with tempfile.TemporaryDirectory(prefix="hvnet-ring-", dir="/var/tmp") as tmp:
                res = one_run(Path(tmp), s, a.seconds, a.cpu, a.lro == "on")
            runs[s].append(res)
            print(f"run {r + 1}/{a.repeat} rx_queue_size {s:5} (guest set up {res['virtqueue']}): "
                  f"{res['gbps']:.3f} Gbit/s, {res['drop_virtqueue_full']} ring-full drops, "
                  f"{res['retransmits']} retransmits, {res['delivered_frames']} delivered", flush=True)
    print("\nmedians:")
    med = {}
    for s in sizes:
        med[s] = {k: statistics.median(x[k] for x in runs[s])
                  for k in ("gbps", "drop_virtqueue_full", "retransmits", "delivered_frames")}
        print(f"  {s:5}: {med[s]['gbps']:.3f} Gbit/s, {med[s]['drop_virtqueue_full']:.0f} drops, "
              f"{med[s]['retransmits']:.0f} retransmits")
    if a.out:
        Path(a.out).write_text(json.dumps({"runs": runs, "medians": med, "cpu_pct": a.cpu, "lro": a.lro,
                                           "seconds": a.seconds}, indent=1))


if __name__ == "__main__":
    main()
