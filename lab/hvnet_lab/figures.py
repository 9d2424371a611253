"""What every experiment shares: where each study comes from, what is
emulated (said beside every figure), one iperf3 run with what it cost,
configurations run interleaved, and the figure record the report draws."""

from . import measure
from .fabrics import A_IP, B_IP
from .verdict import MEASURED, REPRODUCED, median

MEASUREMENT = "measurement (no published study)"

NATIVE_NOTE = "Native sender emulated: a VM whose vNIC has TSO off puts MTU-sized frames on the switch, as a physical NIC would."
VM_NOTES = {
    "netns": "VMs are network namespaces behind TAP devices held by hvnet; both VMs and the switch share this machine's 2 cores.",
    "uml": "VMs are real guests: User-Mode Linux kernels (one vCPU, 256 MiB) with their own TCP stack and virtio-net driver "
           "on hvnet's vhost-user ports; every guest system call is trapped by UML, so small writes are far slower than in "
           "a KVM guest; the guests and the switch share this machine's 2 cores; no references (not the same guests).",
    "qemu": "VMs are real guests: QEMU machines (one vCPU, 256 MiB, TCG: no KVM here) running Debian's cloud kernel, "
            "its TCP stack and virtio-net-pci driver, on hvnet's vhost-user ports; binary translation makes the guests "
            "far slower than KVM guests; the guests and the switch share this machine's 2 cores; no references "
            "(not the same guests).",
}


def vm_note(kind="netns"):
    return VM_NOTES[kind]
CPU_NOTES = {
    "netns": "CPU limit emulated with a cgroup-v1 CPU quota on the receiving VM's delivery thread and iperf3 server, "
             "not a hypervisor scheduler.",
    "uml": "CPU limit: a cgroup-v1 CPU quota on the receiving guest's processes (its kernel, which is its one vCPU, "
           "and its user space), as a hypervisor limits a VM's vCPU; its run-queue wait is the kernel process's.",
    "qemu": "CPU limit: a cgroup-v1 CPU quota on the receiving guest's QEMU process (its vCPU thread and QEMU's "
            "own), as a hypervisor limits a VM's vCPU; its run-queue wait is the vCPU thread's.",
}


def cpu_note(kind="netns"):
    return CPU_NOTES[kind]

SEED_000 = "shared/seeds/000 (VMware VROOM! blog, LRO for VMXNET3, vSphere 6, 2015)"
SEED_001 = "shared/seeds/001 (VMware white paper, NIC technologies in vSphere)"
SEED_002 = "shared/seeds/002 (blog: VM throughput vs CPU scheduling; VMXNET3 ring exhaustion)"
SEED_003 = "shared/seeds/003 (Hatori & Oi, LRO in Xen, VPACT 2008)"
SEED_004 = "shared/seeds/004 (blog: jumbo frames inside Hyper-V VMs)"


def link(f, vm):
    base = "/sys/class/net/eth0/statistics/"
    out = f.sh(vm, f"cat {base}rx_packets {base}rx_bytes {base}tx_packets {base}tx_bytes").stdout.split()
    return dict(zip(["rx_packets", "rx_bytes", "tx_packets", "tx_bytes"], map(int, out)))


def iperf(f, streams=1, write="128K", seconds=3, window=None, log=None, reverse=False):
    """One iperf3 run a -> b (b -> a when `reverse`) with machine CPU, the
    receiver's NIC counters and the sender's frames sent; the command is
    recorded in `log`."""
    src, dst, ip = ("b", "a", A_IP) if reverse else ("a", "b", B_IP)
    server = f.popen(dst, f"iperf3 -s -1 -B {ip}")
    f.wait_listening(dst, 5201)
    cmd = f"iperf3 -c {ip} -t {seconds} -P {streams} -l {write} -J" + (f" -w {window}" if window else "")
    try:
        a0, b0 = link(f, src), link(f, dst)
        with measure.Cpu() as cpu:
            out = f.sh(src, cmd, timeout=seconds + 60).stdout
        a1, b1 = link(f, src), link(f, dst)
    finally:
        try:
            server.wait(timeout=5)
        except Exception:
            server.terminate()
            server.wait()
    r = measure.iperf3(out)
    secs = r["seconds"] or seconds
    frames = b1["rx_packets"] - b0["rx_packets"]
    s = {
        "gbps": r["bps"] / 1e9,
        "busy_cores": cpu.cores,
        "gbps_per_core": cpu.gbit_per_core_second(r["bytes"]),
        "retransmits": r["retransmits"],
        "rx_frames_per_s": frames / secs,
        "rx_avg_frame": (b1["rx_bytes"] - b0["rx_bytes"]) / max(frames, 1),
        "tx_frames_sender": a1["tx_packets"] - a0["tx_packets"],
        "rx_frames": frames,
    }
    if log is not None:
        log.append({"command": f.command(src, cmd), **s})
    return s


def most_runs(reps):
    """The runs an undecided comparison may get: 5N, from N >= 3."""
    return 5 * reps if reps >= 3 else reps


def interleaved(configs, reps, run, settle=None, feeds=None):
    """Runs every configuration `reps` times, interleaved (A, B, C, A, B,
    C, ...), so that drift in the machine's speed hits all of them alike.
    With `settle` (runs -> the labels of the points still undecided,
    `verdict.undecided`; empty once every verdict drawn from them is
    decided) and 3 or more repetitions, more rounds follow while a point
    is undecided, up to 5 * reps (the verdict module says why), each of
    only the configurations that `feeds(config, label)` says an
    undecided point is drawn from (every configuration without `feeds`,
    or when a figure cannot say which of its points are undecided): a
    point that needs 15 runs does not make the decided ones run 15 times.
    Returns {config: [run, ...]} with runs in repetition order."""
    runs = {c: [] for c in configs}
    for _ in range(reps):
        for c in configs:
            runs[c].append(run(c))
    most = most_runs(reps) if settle else reps
    while most > reps:
        pending = settle(runs)
        todo = [c for c in configs if feeds is None or None in pending or any(feeds(c, p) for p in pending)]
        have = max((len(runs[c]) for c in todo), default=most)
        if not pending or have >= most:
            break
        named = ", ".join(sorted(str(p) for p in pending if p is not None)) or "all points"
        # With one configuration (settings run at the same moment) every
        # repetition is a round of all of them.
        more = "one more round" if len(configs) == 1 else f"one more of {len(todo)} of {len(configs)} configurations"
        print(f"      undecided after {have} runs ({named}): {more} (at most {most} runs)", flush=True)
        for c in todo:
            runs[c].append(run(c))
    return runs


def figure(fid, title, xlabel, ylabel, series, published, source, claim, judged, note, spreads=None):
    """A figure: our series (medians), published values, the claim and its
    verdict `judged` = (verdict, reason), the judge calls behind it where
    it came from `judge` (for `hvnet lab stability`), and the spread of
    each of our series as (x, min, max) for error bars."""
    v, why = judged
    return {"id": fid, "title": title, "xlabel": xlabel, "ylabel": ylabel, "series": series,
            "published": published, "source": source, "claim": claim, "verdict": v,
            "reproduced": v == REPRODUCED, "note": note, "why_not": why, "spread": spreads or {},
            "judged_by": getattr(judged, "calls", [])}


def sizes(quick):
    # message size, socket buffer, as in seed 000
    return [("256", "8K"), ("16K", "64K"), ("64K", "256K")] if not quick else [("256", "8K"), ("64K", "256K")]


def series_of(points, key, label_of):
    """(median series, spread series) of `key` over summarized points."""
    med = [(label_of(p), p[key]) for p in points]
    spr = [(label_of(p), *p["spread"][key]) for p in points]
    return med, spr


def measured(fid, title, xlabel, ylabel, runs, key, place, question, said, note):
    """A measurement's figure (no study, no verdict): for each
    configuration of `runs` ({config: [run]}), `place(config)` gives its
    (series, x); drawn is the median of `key` over its runs, with their
    min-max. `said`: what was measured, in words."""
    series, spread = {}, {}
    for c, rs in runs.items():
        s, x = place(c)
        vals = [r[key] for r in rs]
        series.setdefault(s, []).append((x, median(vals)))
        spread.setdefault(s, []).append((x, min(vals), max(vals)))
    return figure(fid, title, xlabel, ylabel, series, {}, MEASUREMENT, question, (MEASURED, said), note, spread)

