"""CPU per frame at vhost-user ports: hvnet beside Open vSwitch with DPDK,
same front ends, same run — a measurement (no study, no verdict).

Two DPDK testpmd `net_virtio_user` front ends — a sends (`txonly`, frames
of 64 or 1500 bytes to b's MAC), b receives (`rxonly`), on split or on
packed virtqueues (`packed_vq=1`) — on vhost-user ports of:
- hvnet: two `kind = "vhost-user"` VMs, b with `rx_overflow = "drop"`;
- ovs-dpdk: Open vSwitch's DPDK build (`ovs-vswitchd-dpdk`, Debian's
  `openvswitch-switch-dpdk`, installed here if missing, its service never
  started), `dpdkvhostuserclient` ports on a `netdev` bridge, b's MAC in
  its FDB, one poll-mode thread on core 0.
The switch runs on core 0, both front ends on core 1, so that the
receiver is slower than the sender and both switches drop at b's full
receive ring. After a warm-up, over the measured window:
- hvnet: CPU time of all its threads (`/proc/PID/task/*/schedstat`) per
  frame it took from a; and of a's ingress worker alone;
- ovs-dpdk: its poll-mode thread's processing cycles per packet
  (`ovs-appctl dpif-netdev/pmd-stats-show`, over the TSC frequency), and
  the whole thread's CPU time per packet (it polls at any load).
Then, a stopped: hvnet's CPU over 2 s with no frames flowing (the poll-
mode thread keeps its core at any load). The two switches run
interleaved, a fresh set-up each run."""

import contextlib
import json
import os
import re
import subprocess
import tempfile
import time
from pathlib import Path

import hvlab

from .fabrics import OvsDaemons, link_exists
from .figures import measured
from .runners import builds, interleaved
from .verdict import median

MAC_A, MAC_B = "02:00:00:00:1b:0a", "02:00:00:00:1b:0b"
OVS_DPDK = "/usr/lib/openvswitch-switch-dpdk/ovs-vswitchd-dpdk"
HUGEPAGES = 1024  # 2 MiB each: OVS's 1 GiB socket memory, 256 MiB per front end


def ensure_ovs_dpdk():
    """Installs Debian's openvswitch-switch-dpdk if missing, with no
    service started (as scripts/install-deps.sh installs Open vSwitch)."""
    if os.path.exists(OVS_DPDK):
        return
    print("lab: installing openvswitch-switch-dpdk (its service not started) ...", flush=True)
    policy = Path("/usr/sbin/policy-rc.d")
    saved = policy.read_bytes() if policy.exists() else None
    policy.write_text("#!/bin/sh\nexit 101\n")
    policy.chmod(0o755)
    try:
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", "openvswitch-switch-dpdk"],
                       check=True, env=env, stdout=subprocess.DEVNULL)
    finally:
        if saved is None:
            policy.unlink()
        else:
            policy.write_bytes(saved)


@contextlib.contextmanager
def hugepages(n):
    """`n` more 2 MiB hugepages and a hugetlbfs mount, both undone."""
    knob = Path("/proc/sys/vm/nr_hugepages")
    before = int(knob.read_text())
    knob.write_text(str(before + n))
    d = tempfile.mkdtemp(prefix="hvnet-huge-")
    subprocess.run(["mount", "-t", "hugetlbfs", "none", d], check=True)
    try:
        yield d
    finally:
        subprocess.run(["umount", d], check=False)
        os.rmdir(d)
        knob.write_text(str(before))


class Pmd:
    """A testpmd front end on core 1 (its two lcores share it)."""

    def __init__(self, name, huge, vdev, mode, extra=()):
        self.log = tempfile.NamedTemporaryFile("w+", prefix=f"testpmd-{name}-", suffix=".log")
        self.proc = subprocess.Popen(
            ["dpdk-testpmd", "--lcores=0@1,1@1", "--no-pci", "--in-memory", "--single-file-segments",
             f"--huge-dir={huge}", "-m", "256", f"--file-prefix=hvl{os.getpid()}{name}", f"--vdev={vdev}", "--",
             "--auto-start", f"--forward-mode={mode}", *extra],
            stdin=subprocess.PIPE, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)

    def stop(self):
        hvlab.interrupt_group(self.proc)


def task_ns(pid, name_prefix=None):
    """CPU time (ns) of a process's threads, or of those whose name
    starts with `name_prefix`."""
    total = 0
    for t in Path(f"/proc/{pid}/task").iterdir():
        try:
            if name_prefix and not (t / "comm").read_text().startswith(name_prefix):
                continue
            total += int((t / "schedstat").read_text().split()[0])
        except (OSError, ValueError):
            pass
    return total


def pin(pid, cpus):
    subprocess.run(["taskset", "-a", "-p", "-c", cpus, str(pid)], check=True, stdout=subprocess.DEVNULL)


def tsc_mhz():
    """The TSC frequency the kernel calibrated (OVS counts cycles in it)."""
    text = subprocess.run(["dmesg"], capture_output=True, text=True).stdout
    for pat in (r"tsc: Refined TSC clocksource calibration: ([\d.]+) MHz", r"tsc: Detected ([\d.]+) MHz"):
        m = re.findall(pat, text)
        if m:
            return float(m[-1])
    return float(re.findall(r"cpu MHz\s*:\s*([\d.]+)", Path("/proc/cpuinfo").read_text())[0])


def run_hvnet(tmp, huge, size, seconds, switch=None, layout="split", vms=(), tables=None, during=None):
    """One run of hvnet between the front ends; `vms` adds settings to a
    and b (by name) or more VMs, `tables` more top-level tables, and
    `during(t)` is a context held over the measured window."""
    base = {"a": dict(name="a", kind="vhost-user", mac=MAC_A),
            "b": dict(name="b", kind="vhost-user", mac=MAC_B, rx_overflow="drop")}
    more = []
    for vm in vms:
        if vm["name"] in base:
            base[vm["name"]].update(vm)
        else:
            more.append(vm)
    with hvlab.Topology(tmp, [*base.values(), *more], prefix="bp", switch=switch, tables=tables) as t:
        pid = json.loads(Path(f"/run/hvnet/{t.name}/state.json").read_text())["pid"]
        pin(pid, "0")
        sock = lambda vm: f"/run/hvnet/{t.name}/{vm}.sock"  # noqa: E731
        vq = ",packed_vq=1" if layout == "packed" else ""
        b = Pmd("b", huge, f"net_virtio_user0,path={sock('b')},mac={MAC_B},queue_size=1024{vq}", "rxonly")
        a = None
        try:
            up = lambda: any(p["name"] == "b" and p["link"] == "up"  # noqa: E731
                             for p in json.loads(t.hv("ports", "--json").stdout))
            hvlab.eventually(up, timeout=30)
            a = Pmd("a", huge, f"net_virtio_user0,path={sock('a')},mac={MAC_A},queue_size=1024{vq}", "txonly",
                    [f"--eth-peer=0,{MAC_B}", f"--txpkts={size}"])
            frames = lambda: t.stats("/ports/a/accounting")["ingress"]["frames_in"]  # noqa: E731
            hvlab.eventually(lambda: frames() > 100_000, timeout=60)
            # The layout asked for is the one the front ends negotiated (a
            # build without packed rings would fall back to split ones).
            got = {vm: json.loads(t.hv("port", vm, "--json").stdout)["vhost_user"].get("ring_layout", "split")
                   for vm in ("a", "b")}
            if set(got.values()) != {layout}:
                raise RuntimeError(f"asked for {layout} virtqueues, the front ends negotiated {got}")
            time.sleep(1)
            # The threads that read a's queue: its queue thread (before the
            # worker pool), or the datapath's workers.
            reader = lambda: task_ns(pid, "a_q") or task_ns(pid, "worker")  # noqa: E731
            with during(t) if during else contextlib.nullcontext():
                f0, c0, w0 = frames(), task_ns(pid), reader()
                time.sleep(seconds)
                f1, c1, w1 = frames(), task_ns(pid), reader()
                arcs = json.loads(t.hv("port", "a", "--json").stdout).get("arcs")
            a.stop()
            a = None
            time.sleep(0.5)
            i0 = task_ns(pid)
            time.sleep(2)
            idle = (task_ns(pid) - i0) / 2e9
            drops = t.stats("/ports/b/rx_summary")["drop_virtqueue_full"]
            refused = t.stats("/ports/a/accounting")["ingress"]["drops"]
        finally:
            if a:
                a.stop()
            b.stop()
    n = max(f1 - f0, 1)
    return dict(mpps=n / seconds / 1e6, ns_per_frame=(c1 - c0) / n, worker_ns_per_frame=(w1 - w0) / n,
                idle_cpu=idle, ring_full_drops=drops, refused_at_a=refused, arcs_a=arcs)


def run_ovs(huge, size, seconds, mhz, layout="split"):
    ovs = OvsDaemons(None)
    had_netdev = link_exists("ovs-netdev")
    socks = {vm: f"{ovs.dir}/{vm}.sock" for vm in ("a", "b")}
    ovs.start(config=["other_config:dpdk-init=true", "other_config:pmd-cpu-mask=0x1",
                      "other_config:dpdk-socket-mem=1024", "other_config:dpdk-socket-limit=1024",
                      f"other_config:dpdk-hugepage-dir={huge}",
                      f'other_config:dpdk-extra="--file-prefix=hvlovs{os.getpid()} --no-pci"'],
              vswitchd=OVS_DPDK)
    a = b = None
    br = f"hvb{os.getpid() % 100000}"
    try:
        ovs.vsctl("add-br", br, "--", "set", "bridge", br, "datapath_type=netdev")
        for vm in ("a", "b"):
            ovs.vsctl("add-port", br, vm, "--", "set", "interface", vm, "type=dpdkvhostuserclient",
                      f"options:vhost-server-path={socks[vm]}")
        pid = ovs.pid("vswitchd")
        ctl = ovs.vswitchd_ctl()
        appctl = lambda *a: ovs.run("ovs-appctl", "-t", str(ctl), *a).stdout  # noqa: E731
        vq = ",packed_vq=1" if layout == "packed" else ""
        b = Pmd("b", huge, f"net_virtio_user0,path={socks['b']},server=1,mac={MAC_B},queue_size=1024{vq}", "rxonly")
        a = Pmd("a", huge, f"net_virtio_user0,path={socks['a']},server=1,mac={MAC_A},queue_size=1024{vq}", "txonly",
                [f"--eth-peer=0,{MAC_B}", f"--txpkts={size}"])

        def fdb_add():
            # Refused until the port's front end has connected.
            try:
                appctl("fdb/add", br, "b", "0", MAC_B)
                return True
            except subprocess.CalledProcessError:
                return False

        hvlab.eventually(fdb_add, timeout=60, every=0.5)

        def received():
            # No poll-mode thread until a port has a queue to poll.
            try:
                m = re.search(r"packets received: (\d+)", appctl("dpif-netdev/pmd-stats-show"))
            except subprocess.CalledProcessError:
                return 0
            return int(m.group(1)) if m else 0

        if not hvlab.eventually(lambda: received() > 100_000, timeout=60, every=0.5):
            a.log.seek(0)
            raise RuntimeError(f"Open vSwitch took nothing from a; testpmd a said: {a.log.read()[-1500:]}")
        time.sleep(1)
        appctl("dpif-netdev/pmd-stats-clear")
        c0 = task_ns(pid, "pmd")
        time.sleep(seconds)
        c1 = task_ns(pid, "pmd")
        stats = appctl("dpif-netdev/pmd-stats-show")
    finally:
        for p in (a, b):
            if p:
                p.stop()
        # The bridge first, while ovs-vswitchd still runs to remove its
        # internal device (a killed ovs-vswitchd leaves it behind).
        with contextlib.suppress(subprocess.CalledProcessError):
            ovs.vsctl("--if-exists", "del-br", br)
        ovs.stop()
        # The netdev datapath's own device, if this run made it.
        for dev in [br] + ([] if had_netdev else ["ovs-netdev"]):
            subprocess.run(["ip", "link", "del", dev], stderr=subprocess.DEVNULL, check=False)
    n = max(int(re.search(r"packets received: (\d+)", stats).group(1)), 1)
    cycles = float(re.search(r"avg processing cycles per packet: ([\d.]+)", stats).group(1))
    return dict(mpps=n / seconds / 1e6, ns_per_frame=(c1 - c0) / n, processing_ns_per_frame=cycles / mhz * 1e3)


def vhost_frames(tmp, quick, reps, log):
    sizes = [64] if quick else [64, 1500]
    layouts = ["split"] if quick else ["split", "packed"]
    secs = 2 if quick else 4
    ensure_ovs_dpdk()
    mhz = tsc_mhz()

    # This build and, with HVNET_LAB_BASELINE, the baseline beside it, on
    # both layouts (a baseline from before packed rings, 2026-11-26, falls
    # back to split ones, and the run says so and stops).
    binaries = dict(builds())
    switches = (*binaries, "ovs-dpdk")
    base = "hvnet-base" in binaries

    def one(c):
        switch, size, layout = c
        if switch in binaries:
            with hvlab.hvnet_binary(binaries[switch]):
                r = run_hvnet(tmp, huge, size, secs, layout=layout)
        else:
            r = run_ovs(huge, size, secs, mhz, layout=layout)
        vq = ",packed_vq=1" if layout == "packed" else ""
        log.append({"command": f"{switch}: dpdk-testpmd txonly --txpkts={size} -> dpdk-testpmd rxonly "
                               f"(net_virtio_user{vq}), {secs} s measured",
                    "switch": switch, "size": size, "layout": layout, **r})
        return r

    configs = [(sw, size, layout) for size in sizes for layout in layouts for sw in switches]
    with hugepages(HUGEPAGES) as huge:
        runs = interleaved(configs, reps, one)
    per = lambda sw, size, layout, k: median([r[k] for r in runs[(sw, size, layout)]])  # noqa: E731
    points = [(size, layout) for size in sizes for layout in layouts]
    label = lambda size, layout: f"{size} B {layout}"  # noqa: E731
    cost = {}
    for size, layout in points:
        for series, sw, k in (("hvnet, all threads", "hvnet", "ns_per_frame"),
                              ("hvnet, a's ingress worker", "hvnet", "worker_ns_per_frame"),
                              ("ovs-dpdk, processing cycles", "ovs-dpdk", "processing_ns_per_frame"),
                              ("ovs-dpdk, poll-mode thread", "ovs-dpdk", "ns_per_frame"),
                              ("hvnet-base, all threads", "hvnet-base", "ns_per_frame")):
            if (sw, size, layout) in runs:
                cost[(series, label(size, layout))] = [{"ns": r[k]} for r in runs[(sw, size, layout)]]

    def said_cost(size, layout):
        ns = per("hvnet", size, layout, "ns_per_frame")
        s = (f"{label(size, layout)}: hvnet {ns:.0f} ns per frame, "
             f"{ns / per('ovs-dpdk', size, layout, 'processing_ns_per_frame'):.2f}x Open vSwitch with DPDK's "
             f"processing cycles, {ns / per('ovs-dpdk', size, layout, 'ns_per_frame'):.2f}x its poll-mode "
             "thread's time")
        if base and ("hvnet-base", size, layout) in runs:
            b = per("hvnet-base", size, layout, "ns_per_frame")
            s += f", {ns / b:.2f}x the baseline build's {b:.0f} ns"
        return s

    said = "; ".join(said_cost(size, layout) for size, layout in points)
    idle = median([r["idle_cpu"] for (sw, _, _), rs in runs.items() if sw == "hvnet" for r in rs])
    note = ("Both switches on core 0, both testpmd front ends on core 1; frames dropped at b's full receive ring "
            f"in both. With no frames flowing hvnet used {idle * 100:.1f} % of a core; the poll-mode thread uses all "
            f"of its core at any load. The TSC runs at {mhz:.0f} MHz. Split and packed: the front ends' "
            "virtqueue layout (net_virtio_user's packed_vq).")
    figs = [
        measured("vhost-cpu-per-frame", "CPU per frame at vhost-user ports: hvnet and Open vSwitch with DPDK",
                 "frame size and virtqueue layout", "ns per frame", cost, "ns", lambda c: c,
                 "how much CPU does hvnet spend per vhost-user frame beside Open vSwitch with DPDK?", said, note),
        measured("vhost-frame-rate", "Frames per second taken from the sending front end",
                 "frame size and virtqueue layout", "Mpps",
                 runs, "mpps", lambda c: (c[0], label(c[1], c[2])),
                 "how many frames per second does each switch take from a testpmd front end?",
                 "; ".join(f"{label(size, layout)}: hvnet {per('hvnet', size, layout, 'mpps'):.2f} Mpps, "
                           f"Open vSwitch with DPDK {per('ovs-dpdk', size, layout, 'mpps'):.2f}"
                           for size, layout in points), note),
    ]
    return figs, {f"{sw} {size} {layout}": rs for (sw, size, layout), rs in runs.items()}
