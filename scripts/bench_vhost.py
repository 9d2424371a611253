#!/usr/bin/env python3
"""Two real guests, VM to VM, through hvnet and through the references,
same guests, same run.

The guests are User-Mode Linux kernels (`linux.uml`, their own TCP stack)
with 256 MiB each:
- hvnet: vhost-user ports on hvnet (`kind = "uml"`), virtio-net in the
  guests;
- bridge: each guest on a TAP device (UML's vector driver,
  `vec0:transport=tap,gro=1`: virtio-net headers and GSO on the TAP, its
  fastest setting here), the two TAPs joined by a Linux bridge.
(DPDK testpmd's vhost back end is not a fabric yet: with User-Mode Linux
guests it forwarded nothing here, see docs/perf/vhost-user.md.)
One iperf3 stream, guest a to guest b, for `--seconds`; each repetition
boots fresh guests for every fabric in turn (interleaved), and the median
of `--repeat` runs is reported with Gbit/s per busy core (machine-wide
/proc/stat during the transfer).

With `--guests qemu`, the guests are QEMU machines instead (see
QEMU_FABRICS), and testpmd's vhost back end is a third fabric.

Run as root: `scripts/bench_vhost.py [--guests uml|qemu] [--repeat 3] [--seconds 5] [--out F]`.
Not a test: nothing here asserts a speed.
"""

import argparse
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "lab")]

import hvlab  # noqa: E402
from hvnet_lab import measure  # noqa: E402

UML = "/usr/bin/linux.uml"
A_IP, B_IP = "198.18.20.1", "198.18.20.2"

# The bench's own guests (bridge): an init that configures the
# NIC and runs one role, with files in a directory shared with the host.
INIT = r"""#!/bin/sh
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/tmp
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t tmpfs tmp /tmp; mount -t tmpfs run /run
mkdir -p /run/x; mount -t hostfs -o {shared} hostfs /run/x
M=/usr/lib/uml/modules/$(uname -r)/kernel
for m in lib/crc-ccitt net/ipv6/ipv6 net/core/failover drivers/net/net_failover drivers/net/virtio_net; do
    insmod $M/$m.ko 2>/dev/null
done
n=0
while [ ! -e /sys/class/net/{ifname} ] && [ $n -lt 600 ]; do sleep 0.05; n=$((n+1)); done
ip link set lo up
ip link set {ifname} up
ip addr add {ip}/24 dev {ifname}
if [ {role} = server ]; then
    iperf3 -s -1 > /run/x/server.log 2>&1
else
    until ping -c 1 -W 1 {peer} > /dev/null 2>&1; do :; done
    n=0
    while [ $n -lt 100 ]; do
        date +%s.%N > /run/x/start
        iperf3 -c {peer} -t {seconds} -J > /run/x/result.tmp 2>&1 && break
        sleep 0.1; n=$((n+1))
    done
    mv /run/x/result.tmp /run/x/result.json
fi
poweroff -f > /dev/null 2>&1
"""


class UmlGuest:
    """A bench guest: `nic` is the UML device argument."""

    def __init__(self, work: Path, name: str, nic: str, ifname: str, ip: str, peer: str, role: str, seconds: int):
        self.dir = work / name
        self.dir.mkdir(parents=True)
        init = self.dir / "init"
        init.write_text(INIT.format(shared=self.dir, ifname=ifname, ip=ip, peer=peer, role=role, seconds=seconds))
        init.chmod(0o755)
        self.log = open(self.dir / "console.log", "w")
        self.proc = subprocess.Popen(
            ["setarch", "x86_64", "-R", UML, f"umid=hvb-{name}-{os.getpid()}", f"uml_dir={self.dir}",
             "root=/dev/root", "rootfstype=hostfs", "rootflags=/", "ro", "quiet", "con=null", "con0=fd:0,fd:1",
             f"init={init}", "mem=256M", nic],
            stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)

    def stop(self):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self.log.close()


def run_guests(work: Path, nics, seconds: int) -> dict:
    """Boots a server and a client guest, measures the client's transfer."""
    b = UmlGuest(work, "b", nics[1][0], nics[1][1], B_IP, A_IP, "server", seconds)
    a = UmlGuest(work, "a", nics[0][0], nics[0][1], A_IP, B_IP, "client", seconds)
    try:
        start, result = a.dir / "start", a.dir / "result.json"
        deadline = time.monotonic() + 90
        while not start.exists():
            if time.monotonic() > deadline or a.proc.poll() is not None:
                raise RuntimeError(f"guest a did not start its transfer; see {a.dir}/console.log")
            time.sleep(0.02)
        with measure.Cpu() as cpu:
            while not result.exists():
                if time.monotonic() > deadline + seconds or a.proc.poll() is not None and not result.exists():
                    raise RuntimeError(f"guest a's transfer did not end; see {a.dir}")
                time.sleep(0.02)
        return summary(result.read_text(), cpu)
    finally:
        a.stop()
        b.stop()


def summary(out: str, cpu) -> dict:
    r = measure.iperf3(out)
    gbps = r["bps"] / 1e9
    return {"gbps": gbps, "busy_cores": cpu.cores, "gbps_per_core": cpu.gbit_per_core_second(r["bytes"]),
            "retransmits": r.get("retransmits", 0)}


@contextlib.contextmanager
def bridged_taps(prefix: str, *tap_flags):
    """Two TAP devices (created with `tap_flags`) joined by a Linux bridge,
    removed afterwards: yields their names."""
    tag = f"{os.getpid() % 100000}"
    br, taps = f"{prefix}br{tag}", [f"{prefix}t{tag}a", f"{prefix}t{tag}b"]
    try:
        hvlab.run(["ip", "link", "add", br, "type", "bridge"])
        hvlab.run(["ip", "link", "set", br, "up"])
        for t in taps:
            hvlab.run(["ip", "tuntap", "add", t, "mode", "tap", *tap_flags])
            hvlab.run(["ip", "link", "set", t, "master", br, "up"])
        yield taps
    finally:
        for d in taps + [br]:
            hvlab.run(["ip", "link", "del", d], check=False)


def bridge_run(work: Path, seconds: int) -> dict:
    with bridged_taps("hvb") as taps:
        opts = os.environ.get("HVNET_BENCH_VEC_OPTS", ",gro=1")
        nics = [(f"vec0:transport=tap,ifname={t}{opts}", "vec0") for t in taps]
        return run_guests(work, nics, seconds)


def hvnet_run(work: Path, seconds: int) -> dict:
    vms = [dict(name="a", kind="uml", ipv4=A_IP + "/24"), dict(name="b", kind="uml", ipv4=B_IP + "/24")]
    with hvlab.Topology(work, vms, prefix="hvb") as t:
        t.sh("b", "iperf3 -s -D -1")
        t.wait_listening("b", 5201)
        with measure.Cpu() as cpu:
            out = t.sh("a", f"iperf3 -c {B_IP} -t {seconds} -J", timeout=seconds + 60).stdout
        return summary(out, cpu)


FABRICS = {"hvnet": hvnet_run, "bridge": bridge_run}

# QEMU guests (`--guests qemu`): Debian's cloud kernel and its
# virtio-net-pci driver (TCG here), iperf3 in a busybox initramfs
# (lab/qemu_guest.py). The same guests on every fabric; only the NIC's
# back end differs: hvnet's vhost-user ports, QEMU's own virtio-net on
# TAPs joined by a Linux bridge, or DPDK testpmd's vhost back end
# (`net_vhost`, io forwarding).
QMAC_A, QMAC_B = "02:00:00:00:21:0a", "02:00:00:00:21:0b"


def qemu_pair(work: Path, nics, seconds: int) -> dict:
    """Boots server guest b and client guest a on `nics` ({"sock": path}
    or {"tap": device} each, a first); returns the client's transfer with
    the machine's CPU while it ran."""
    import qemu_guest

    client = (f"until ping -c 1 -W 1 {B_IP} > /dev/null 2>&1; do :; done; echo HVNET-GO; "
              f"iperf3 -c {B_IP} -t {seconds} -J")
    procs, logs = [], []
    try:
        for name, mac, ip, cmd, nic in (("b", QMAC_B, B_IP, "iperf3 -s -1", nics[1]),
                                        ("a", QMAC_A, A_IP, client, nics[0])):
            d = work / f"guest-{name}"
            d.mkdir()
            initrd = qemu_guest.initramfs(d, mac, f"{ip}/24", cmd, binaries=["/usr/bin/iperf3"])
            logs.append(d / "console.log")
            procs.append(subprocess.Popen(qemu_guest.argv(nic.get("sock"), mac, initrd, tap=nic.get("tap")),
                                          stdin=subprocess.DEVNULL, stdout=open(logs[-1], "w"),
                                          stderr=subprocess.STDOUT, start_new_session=True))
        a, log = procs[1], logs[1]
        deadline = time.monotonic() + 180
        while "HVNET-GO" not in log.read_text(errors="replace"):
            if time.monotonic() > deadline or a.poll() is not None:
                raise RuntimeError(f"guest a did not start its transfer; see {log}")
            time.sleep(0.02)
        with measure.Cpu() as cpu:
            a.wait(timeout=seconds + 120)
        rc, text = qemu_guest.output(log.read_text(errors="replace"))
        if rc != 0:
            raise RuntimeError(f"guest a's iperf3 failed ({rc}); see {log}")
        return summary(text.split("HVNET-GO", 1)[1], cpu)
    finally:
        for p in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def qemu_hvnet_run(work: Path, seconds: int) -> dict:
    vms = [dict(name="a", kind="vhost-user", mac=QMAC_A), dict(name="b", kind="vhost-user", mac=QMAC_B)]
    with hvlab.Topology(work, vms, prefix="hvq") as t:
        d = Path(f"/run/hvnet/{t.name}")
        return qemu_pair(work, [{"sock": str(d / "a.sock")}, {"sock": str(d / "b.sock")}], seconds)


def qemu_bridge_run(work: Path, seconds: int) -> dict:
    with bridged_taps("hvq", "vnet_hdr") as taps:
        return qemu_pair(work, [{"tap": t} for t in taps], seconds)


def qemu_testpmd_run(work: Path, seconds: int) -> dict:
    with testpmd_forwarder(work) as socks:
        return qemu_pair(work, [{"sock": str(s)} for s in socks], seconds)


QEMU_FABRICS = {"hvnet": qemu_hvnet_run, "bridge": qemu_bridge_run, "testpmd": qemu_testpmd_run}

# Frame rate: DPDK testpmd front ends (`net_virtio_user`, a poll-mode
# virtio driver) at both ends, 64-byte frames from `txonly` to `rxonly`,
# through hvnet or through testpmd's own vhost back end (`net_vhost`, io
# forwarding).
MAC_A, MAC_B = "02:00:00:00:20:0a", "02:00:00:00:20:0b"


def pmd(work: Path, name: str, vdevs, fwd_args, fwd_core=1) -> subprocess.Popen:
    """testpmd, its forwarding thread polling `fwd_core`: the two front
    ends share core 1, the switch under test has core 0 (the reference's
    forwarder polls it; hvnet's threads are not pinned and find it free)."""
    # Line-buffered: its statistics are read while it runs.
    return subprocess.Popen(
        ["stdbuf", "-oL", "dpdk-testpmd", "--no-huge", "-m", "512", "--no-pci", f"--file-prefix=hvb{os.getpid()}{name}",
         "-l", "0,1", f"--main-lcore={1 - fwd_core}", *vdevs, "--", "--auto-start", "--total-num-mbufs=16384", "--stats-period=1", *fwd_args],
        stdin=subprocess.PIPE, stdout=open(work / f"{name}.log", "w"), stderr=subprocess.STDOUT,
        start_new_session=True)


def pmd_stop(p: subprocess.Popen):
    with contextlib.suppress(ProcessLookupError):
        os.killpg(p.pid, signal.SIGINT)
    try:
        p.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()


def rx_pps(log: Path) -> list:
    """testpmd's own once-a-second receive rates, in order."""
    import re

    return [int(x) for x in re.findall(r"Rx-pps:\s+(\d+)", log.read_text())]


def frames_between(work: Path, sock_a: Path, sock_b: Path, seconds: int, ready) -> dict:
    """txonly into `sock_a`, rxonly on `sock_b`: the receiver's frames/s
    (median of testpmd's per-second rates over the measured span)."""
    rx = pmd(work, "rx", [f"--vdev=net_virtio_user0,path={sock_b},mac={MAC_B},queue_size=1024"], ["--forward-mode=rxonly"])
    tx = None
    try:
        hvlab.eventually(ready, timeout=30)
        tx = pmd(work, "tx", [f"--vdev=net_virtio_user0,path={sock_a},mac={MAC_A},queue_size=1024"],
                 ["--forward-mode=txonly", f"--eth-peer=0,{MAC_B}"])
        time.sleep(3)  # past start-up
        skip = len(rx_pps(work / "rx.log"))
        with measure.Cpu() as cpu:
            time.sleep(seconds)
        rates = rx_pps(work / "rx.log")[skip:]
    finally:
        if tx:
            pmd_stop(tx)
        pmd_stop(rx)
    fps = statistics.median(rates) if rates else 0.0
    return {"fps": fps, "busy_cores": cpu.cores, "fps_per_core": fps / max(cpu.cores, 1e-9)}


def hvnet_frames(work: Path, seconds: int) -> dict:
    vms = [dict(name="a", kind="vhost-user", mac=MAC_A), dict(name="b", kind="vhost-user", mac=MAC_B)]
    with hvlab.Topology(work, vms, prefix="hvf") as t:
        d = Path(f"/run/hvnet/{t.name}")

        def ready():
            return any(p["name"] == "b" and p["link"] == "up" for p in json.loads(t.hv("ports", "--json").stdout))

        return frames_between(work, d / "a.sock", d / "b.sock", seconds, ready)


@contextlib.contextmanager
def testpmd_forwarder(work: Path):
    """testpmd's vhost back end, two `net_vhost` ports with io forwarding
    between them (the reference switch): yields their two sockets."""
    socks = [work / "vhost0.sock", work / "vhost1.sock"]
    fwd = pmd(work, "fwd", [f"--vdev=net_vhost0,iface={socks[0]}", f"--vdev=net_vhost1,iface={socks[1]}"],
              ["--forward-mode=io", "--nb-cores=1"], fwd_core=0)
    try:
        hvlab.eventually(lambda: all(s.exists() for s in socks), timeout=30)
        yield socks
    finally:
        pmd_stop(fwd)


def testpmd_frames(work: Path, seconds: int) -> dict:
    with testpmd_forwarder(work) as socks:
        return frames_between(work, socks[0], socks[1], seconds, lambda: True)


FRAME_FABRICS = {"hvnet": hvnet_frames, "testpmd": testpmd_frames}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=5)
    ap.add_argument("--fabrics", default=",".join(FABRICS),
                    help="comma-separated, of the mode's: " + ", ".join(FABRICS) + " (UML); "
                         + ", ".join(QEMU_FABRICS) + " (QEMU); " + ", ".join(FRAME_FABRICS) + " (--frames)")
    ap.add_argument("--guests", choices=("uml", "qemu"), default="uml",
                    help="the guests VM to VM: User-Mode Linux (hvnet and bridge) or QEMU under TCG (hvnet, bridge "
                         "and testpmd's vhost back end)")
    ap.add_argument("--frames", action="store_true",
                    help="frame rate instead: testpmd txonly -> hvnet or testpmd io forwarding -> testpmd rxonly, 64-byte frames")
    ap.add_argument("--out", help="write the runs and medians as JSON here")
    a = ap.parse_args()
    table = FRAME_FABRICS if a.frames else QEMU_FABRICS if a.guests == "qemu" else FABRICS
    names = a.fabrics.split(",") if a.fabrics != ",".join(FABRICS) else list(table)
    for n in names:
        if n not in table:
            ap.error(f"unknown fabric {n!r}; fabrics are {', '.join(table)}")
    if (a.frames or "testpmd" in names) and not shutil.which("dpdk-testpmd"):
        ap.error("--frames needs dpdk-testpmd (scripts/install-deps.sh installs dpdk-dev)")
    keys = ("fps", "busy_cores", "fps_per_core") if a.frames else ("gbps", "busy_cores", "gbps_per_core")
    runs = {n: [] for n in names}
    for r in range(a.repeat):
        for n in names:
            work = Path(tempfile.mkdtemp(prefix=f"hvnet-bench-{n}-", dir="/var/tmp"))
            try:
                res = table[n](work, a.seconds)
            finally:
                if not os.environ.get("HVNET_BENCH_KEEP"):
                    shutil.rmtree(work, ignore_errors=True)
            runs[n].append(res)
            unit = "frames/s" if a.frames else "Gbit/s"
            extra = "" if a.frames else f"  {res['retransmits']} retransmits"
            print(f"run {r + 1}/{a.repeat} {n:8} {res[keys[0]]:12.2f} {unit}  {res['busy_cores']:.2f} busy cores  "
                  f"{res[keys[2]]:12.2f} per core{extra}", flush=True)
    med = {n: {k: statistics.median(x[k] for x in runs[n]) for k in keys} for n in names}
    print(f"\nmedians ({keys[0]}; per busy core):")
    for n in names:
        print(f"  {n:8} {med[n][keys[0]]:12.2f}  {med[n][keys[2]]:12.2f}")
    if "hvnet" in med:
        for ref in [n for n in names if n != "hvnet"]:
            print(f"  hvnet / {ref}: {med['hvnet'][keys[0]] / med[ref][keys[0]]:.2f}  "
                  f"per core {med['hvnet'][keys[2]] / med[ref][keys[2]]:.2f}")
    if a.out:
        Path(a.out).write_text(json.dumps({"runs": runs, "medians": med, "seconds": a.seconds}, indent=1))


if __name__ == "__main__":
    main()
