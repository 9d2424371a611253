"""What every figure shares: where each study comes from, what is
emulated (said beside every figure), and the figure record the report
draws (a reproduction's, judged, or a measurement's). The runs behind
them are made by `runners`."""

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

# The published studies, as docs/references.md lists them: {anchor of
# its section there: (short title, who published it)}. A reproduction's
# source begins with the study's short title, which the report's summary
# shows and its Markdown links to that section.
STUDIES = {
    "lro-vmxnet3": ("LRO for VMXNET3 on Windows VMs", "VMware VROOM! blog, 2015"),
    "nic-technology": ("NIC Technology in vSphere", "Rishi Mehta, VMware white paper"),
    "cpu-scheduling": ("CPU Scheduling and VMXNET3 Ring Exhaustion", "a vSphere support engineer's blog"),
    "lro-virtualized": ("LRO in a Virtualized System", "Hatori & Oi, VPACT 2008"),
    "jumbo-frames": ("Jumbo Frames Inside Virtual Machines", "a Hyper-V blog"),
}


def _source(anchor):
    short, by = STUDIES[anchor]
    return f"{short} ({by})"


LRO_VMXNET3 = _source("lro-vmxnet3")
NIC_TECHNOLOGY = _source("nic-technology")
CPU_SCHEDULING = _source("cpu-scheduling")
LRO_VIRTUALIZED = _source("lro-virtualized")
JUMBO_FRAMES = _source("jumbo-frames")


def cites_study(source):
    """Whether a figure's source names a published study (begins with a
    study's short title)."""
    return any(source.startswith(short) for short, _ in STUDIES.values())


def linked(text, page):
    """`text` with each study's short title in it, the first time, as a
    Markdown link to its section of the references page at the relative
    path `page` (unchanged when `page` is None)."""
    if page is None:
        return text
    for anchor, (short, _) in STUDIES.items():
        text = text.replace(short, f"[{short}]({page}#{anchor})", 1)
    return text


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
    # message size, socket buffer, as in LRO for VMXNET3 on Windows VMs
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

