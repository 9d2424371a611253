"""Real guests VM to VM, and frame rates at vhost-user ports, hvnet beside
the references: measurements (no study, no verdict).

- guests: two QEMU guests (TCG; Debian's cloud kernel and its
  virtio-net-pci driver, iperf3 in a busybox initramfs, booted through the
  one QEMU helper, lab/qemu_guest.py), one iperf3 stream from a to b,
  through hvnet's vhost-user ports, through QEMU's own virtio-net on TAPs
  joined by a Linux bridge, and through DPDK testpmd's vhost back end
  (`net_vhost`, io forwarding); fresh guests every run, interleaved;
  through hvnet on packed virtqueues too (QEMU's `packed=on`).
- frame-rate: DPDK testpmd front ends (`net_virtio_user`) at both ends,
  64-byte frames from `txonly` to `rxonly`, through hvnet or through
  testpmd's own vhost back end, on split and on packed virtqueues
  (`packed_vq=1`).

The same comparison with User-Mode Linux guests on TAPs (their vector
driver) is not here: hvnet starts UML guests only on its own ports."""

import contextlib
import functools
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import hvlab
import qemu_guest

from . import measure
from .figures import measured
from .runners import interleaved
from .verdict import median

A_IP, B_IP = "198.18.20.1", "198.18.20.2"
VLAN_A_IP, VLAN_B_IP = "198.18.22.1", "198.18.22.2"


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


# QEMU guests: Debian's cloud kernel and its
# virtio-net-pci driver (TCG here), iperf3 in a busybox initramfs
# (lab/qemu_guest.py). The same guests on every fabric; only the NIC's
# back end differs: hvnet's vhost-user ports, QEMU's own virtio-net on
# TAPs joined by a Linux bridge, or DPDK testpmd's vhost back end
# (`net_vhost`, io forwarding).
QMAC_A, QMAC_B = "02:00:00:00:21:0a", "02:00:00:00:21:0b"


def qemu_pair(work: Path, nics, seconds: int, packed=False, vlan=None) -> dict:
    """Boots server guest b and client guest a on `nics` ({"sock": path}
    or {"tap": device} each, a first), on packed virtqueues if `packed`;
    returns the client's transfer with the machine's CPU while it ran.
    With `vlan`, the stream crosses an 802.1Q sub-interface of that VLAN
    in each guest (eth0.VLAN, made by the guest's own kernel)."""
    dst = VLAN_B_IP if vlan else B_IP
    sub = lambda ip: (f"ip link add link eth0 name eth0.{vlan} type vlan id {vlan} && "  # noqa: E731
                      f"ip addr add {ip}/24 dev eth0.{vlan} && ip link set eth0.{vlan} up && " if vlan else "")
    client = (sub(VLAN_A_IP) + f"until ping -c 1 -W 1 {dst} > /dev/null 2>&1; do :; done; echo HVNET-GO; "
              f"iperf3 -c {dst} -t {seconds} -J")
    procs, logs = [], []
    try:
        for name, mac, ip, cmd, nic in (("b", QMAC_B, B_IP, sub(VLAN_B_IP) + "iperf3 -s -1", nics[1]),
                                        ("a", QMAC_A, A_IP, client, nics[0])):
            d = work / f"guest-{name}"
            d.mkdir()
            initrd = qemu_guest.initramfs(d, mac, f"{ip}/24", cmd, binaries=["/usr/bin/iperf3"],
                                          modules=qemu_guest.VLAN_MODULES if vlan else ())
            logs.append(d / "console.log")
            procs.append(subprocess.Popen(qemu_guest.argv(nic.get("sock"), mac, initrd, tap=nic.get("tap"),
                                                          packed=packed),
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


def qemu_hvnet_run(work: Path, seconds: int, packed=False) -> dict:
    vms = [dict(name="a", kind="vhost-user", mac=QMAC_A), dict(name="b", kind="vhost-user", mac=QMAC_B)]
    with hvlab.Topology(work, vms, prefix="hvq") as t:
        d = Path(f"/run/hvnet/{t.name}")
        return qemu_pair(work, [{"sock": str(d / "a.sock")}, {"sock": str(d / "b.sock")}], seconds, packed)


def qemu_trunk_run(work: Path, seconds: int, vlan=None) -> dict:
    """Two guests on trunk ports (VLAN 10, native VLAN 1): the stream
    untagged (the native VLAN) or, with `vlan`, tagged by the guests; with
    the receiving port's average delivered frame (larger than the wire's:
    TSO at the sender, delivered whole)."""
    trunk = dict(kind="vhost-user", vlan_mode="trunk", vlans=[10], native_vlan=1)
    vms = [dict(name="a", mac=QMAC_A, **trunk), dict(name="b", mac=QMAC_B, **trunk)]
    with hvlab.Topology(work, vms, prefix="hvv") as t:
        d = Path(f"/run/hvnet/{t.name}")
        r = qemu_pair(work, [{"sock": str(d / "a.sock")}, {"sock": str(d / "b.sock")}], seconds, vlan=vlan)
        r["avg_frame_bytes"] = t.stats("/ports/b/rx_summary")["avg_frame_bytes"]
        return r


VLAN_FABRICS = {"untagged (native VLAN)": qemu_trunk_run,
                "tagged (VLAN 10)": functools.partial(qemu_trunk_run, vlan=10)}


def qemu_bridge_run(work: Path, seconds: int) -> dict:
    with bridged_taps("hvq", "vnet_hdr") as taps:
        return qemu_pair(work, [{"tap": t} for t in taps], seconds)


def qemu_testpmd_run(work: Path, seconds: int) -> dict:
    with testpmd_forwarder(work) as socks:
        return qemu_pair(work, [{"sock": str(s)} for s in socks], seconds)


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
        ["stdbuf", "-oL", "dpdk-testpmd", "--no-huge", "-m", "512", "--no-pci", f"--file-prefix=hvg{os.getpid()}{name}",
         "-l", "0,1", f"--main-lcore={1 - fwd_core}", *vdevs, "--", "--auto-start", "--total-num-mbufs=16384", "--stats-period=1", *fwd_args],
        stdin=subprocess.PIPE, stdout=open(work / f"{name}.log", "w"), stderr=subprocess.STDOUT,
        start_new_session=True)


def rx_pps(log: Path) -> list:
    """testpmd's own once-a-second receive rates, in order."""
    return [int(x) for x in re.findall(r"Rx-pps:\s+(\d+)", log.read_text())]


def frames_between(work: Path, sock_a: Path, sock_b: Path, seconds: int, ready, packed=False) -> dict:
    """txonly into `sock_a`, rxonly on `sock_b` (on packed virtqueues if
    `packed`): the receiver's frames/s (median of testpmd's per-second
    rates over the measured span)."""
    vq = ",packed_vq=1" if packed else ""
    rx = pmd(work, "rx", [f"--vdev=net_virtio_user0,path={sock_b},mac={MAC_B},queue_size=1024{vq}"],
             ["--forward-mode=rxonly"])
    tx = None
    try:
        hvlab.eventually(ready, timeout=30)
        tx = pmd(work, "tx", [f"--vdev=net_virtio_user0,path={sock_a},mac={MAC_A},queue_size=1024{vq}"],
                 ["--forward-mode=txonly", f"--eth-peer=0,{MAC_B}"])
        time.sleep(3)  # past start-up
        skip = len(rx_pps(work / "rx.log"))
        with measure.Cpu() as cpu:
            time.sleep(seconds)
        rates = rx_pps(work / "rx.log")[skip:]
    finally:
        if tx:
            hvlab.interrupt_group(tx)
        hvlab.interrupt_group(rx)
    fps = statistics.median(rates) if rates else 0.0
    return {"fps": fps, "busy_cores": cpu.cores, "fps_per_core": fps / max(cpu.cores, 1e-9)}


def hvnet_frames(work: Path, seconds: int, packed=False) -> dict:
    vms = [dict(name="a", kind="vhost-user", mac=MAC_A), dict(name="b", kind="vhost-user", mac=MAC_B)]
    with hvlab.Topology(work, vms, prefix="hvf") as t:
        d = Path(f"/run/hvnet/{t.name}")

        def ready():
            return any(p["name"] == "b" and p["link"] == "up" for p in json.loads(t.hv("ports", "--json").stdout))

        return frames_between(work, d / "a.sock", d / "b.sock", seconds, ready, packed)


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
        hvlab.interrupt_group(fwd)


def testpmd_frames(work: Path, seconds: int, packed=False) -> dict:
    with testpmd_forwarder(work) as socks:
        return frames_between(work, socks[0], socks[1], seconds, lambda: True, packed)


# "-packed": the same on packed virtqueues (QEMU's packed=on, testpmd's
# packed_vq=1).
GUEST_FABRICS = {"hvnet": qemu_hvnet_run, "hvnet-packed": functools.partial(qemu_hvnet_run, packed=True),
                 "bridge": qemu_bridge_run, "testpmd": qemu_testpmd_run}
FRAME_FABRICS = {"hvnet": hvnet_frames, "hvnet-packed": functools.partial(hvnet_frames, packed=True),
                 "testpmd": testpmd_frames, "testpmd-packed": functools.partial(testpmd_frames, packed=True)}
GUEST_NOTE = ("VMs are real guests: QEMU machines (one vCPU, 256 MiB, TCG: no KVM here); the guests, the switch and "
              "the references share this machine's 2 cores.")


def run_each(tmp, table, reps, secs, log, what):
    """Each back end of `table` ({name: run(work, seconds)}) `reps` times,
    interleaved, in a fresh directory every run; `what` says in the log
    what ran. Needs dpdk-testpmd (a reference in both measurements)."""
    if not shutil.which("dpdk-testpmd"):
        raise RuntimeError("needs dpdk-testpmd (scripts/install-deps.sh installs dpdk-dev)")

    def one(name):
        # A directory of its own (hvlab.unique cuts names to an interface
        # name's 15 characters: "testpmd-packed" kept one hex digit).
        work = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=tmp))
        r = table[name](work, secs)
        log.append({"command": f"{name}: {what}", **r})
        return r

    return interleaved(list(table), reps, one)


def ratios_said(runs, key, unit):
    hv = median([r[key] for r in runs["hvnet"]])
    value = f"{hv:,.0f}" if hv >= 1000 else f"{hv:,.2f}"
    return f"hvnet {value} {unit}; " + ", ".join(
        f"hvnet / {n} {hv / max(median([r[key] for r in rs]), 1e-9):.2f}" for n, rs in runs.items() if n != "hvnet")


def guests(tmp, quick, reps, log):
    secs = 3 if quick else 5
    runs = run_each(tmp, GUEST_FABRICS, reps, secs, log, f"QEMU guest a: iperf3 -c {B_IP} -t {secs} -J")
    figs = [
        measured("guests-throughput", "QEMU guest to QEMU guest: hvnet, a Linux bridge, testpmd's vhost back end", "",
                 "Gbit/s", runs, "gbps", lambda n: (n, "1 stream"),
                 "how does hvnet carry real guests' traffic beside QEMU's own back end on a bridge and DPDK's?",
                 ratios_said(runs, "gbps", "Gbit/s"), GUEST_NOTE),
        measured("guests-efficiency", "QEMU guest to QEMU guest: Gbit/s per busy core", "", "Gbit/s per busy core",
                 runs, "gbps_per_core", lambda n: (n, "1 stream"), "how much CPU does each spend for it?",
                 ratios_said(runs, "gbps_per_core", "Gbit/s per core"), GUEST_NOTE),
    ]
    return figs, runs


def guests_vlan(tmp, quick, reps, log):
    secs = 3 if quick else 5
    runs = run_each(tmp, VLAN_FABRICS, reps, secs, log,
                    f"QEMU guest a: iperf3 -c {B_IP} (untagged) or {VLAN_B_IP} (eth0.10) -t {secs} -J, trunk ports")
    med = {n: median([r["gbps"] for r in rs]) for n, rs in runs.items()}
    size = {n: median([r["avg_frame_bytes"] for r in rs]) for n, rs in runs.items()}
    tagged, untagged = med["tagged (VLAN 10)"], med["untagged (native VLAN)"]
    figs = [
        measured("guests-vlan", "QEMU guest to QEMU guest on trunk ports: tagged by the guests vs untagged", "",
                 "Gbit/s", runs, "gbps", lambda n: (n, "1 stream"),
                 "does a stream the guests tag themselves (802.1Q sub-interfaces on trunk ports) run as fast as "
                 "the same stream untagged, with TSO and LRO in effect?",
                 f"tagged {tagged:.2f} Gbit/s, untagged {untagged:.2f} (tagged / untagged {tagged / untagged:.2f}); "
                 "average frame delivered to the receiver: "
                 + ", ".join(f"{n} {b:,.0f} B" for n, b in size.items()), GUEST_NOTE),
    ]
    return figs, runs


def frame_rate(tmp, quick, reps, log):
    secs = 3 if quick else 5
    runs = run_each(tmp, FRAME_FABRICS, reps, secs, log, f"dpdk-testpmd txonly -> dpdk-testpmd rxonly, 64 B, {secs} s")
    note = ("Both testpmd front ends share core 1; testpmd's forwarder polls core 0, hvnet's threads are not pinned "
            "and find it free.")
    figs = [
        measured("frame-rate", "64-byte frames per second between testpmd front ends", "", "frames/s", runs, "fps",
                 lambda n: (n, "64 B"), "how many small frames per second does hvnet carry beside DPDK's own vhost "
                 "back end?", ratios_said(runs, "fps", "frames/s"), note),
        measured("frame-rate-efficiency", "64-byte frames per second per busy core", "", "frames/s per busy core",
                 runs, "fps_per_core", lambda n: (n, "64 B"), "and per busy core?",
                 ratios_said(runs, "fps_per_core", "frames/s per core"), note),
    ]
    return figs, runs
