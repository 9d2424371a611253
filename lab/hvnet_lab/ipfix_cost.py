"""What flow export costs per frame (issue 42's goal: IPFIX at 1:1 and at
1:1000, measured against Open vSwitch userspace exporting IPFIX in the
same run): VM a sends TCP to VM b (a's TSO and b's LRO off: one
wire-sized frame in, one out) through hvnet and through Open vSwitch's
userspace datapath, each without flow export, with every frame metered,
and with 1 in 1000; the exporter set before each run (hvnet: `[ipfix]`
applied with `hvnet up` on the running topology; Open vSwitch: the
bridge's `IPFIX` record). Both send to a UDP port on loopback nobody
listens on. CPU is the machine's, from /proc/stat, over the iperf3 run,
per frame b received."""

import contextlib


from .fabrics import Hvnet, Ovs
from .figures import measured, vm_note
from .runners import interleaved, iperf
from .verdict import median

TARGET = "127.0.0.1:4739"
MODES = {"off": None, "1:1": 1, "1:1000": 1000}


def set_hvnet(f, sampling):
    f.t.apply(ipfix={"targets": [TARGET], "sampling": sampling} if sampling else None)


def set_ovs(f, sampling):
    if sampling:
        f.vsctl("--", "set", "Bridge", f.br, "ipfix=@i", "--", "--id=@i", "create", "IPFIX",
                f'targets="{TARGET}"', f"sampling={sampling}")
    else:
        f.vsctl("clear", "Bridge", f.br, "ipfix")


def ipfix_cost(tmp, quick, reps, log):
    secs = 2 if quick else 4
    settings = dict(a={"tso": False, "queues": 1}, b={"lro": False, "queues": 1})
    with contextlib.ExitStack() as stack:
        hv = stack.enter_context(Hvnet(tmp, 1500, **settings))
        ovs = stack.enter_context(Ovs(tmp, 1500, **settings))
        # Wire-sized frames through Open vSwitch too (a's stack segments).
        ovs.sh("a", "ethtool -K eth0 tso off gso off")
        ovs.sh("b", "ethtool -K eth0 gro off")
        configs = [f"{sw} {m}" for sw in ("hvnet", "ovs") for m in MODES]

        def once(config):
            sw, mode = config.split()
            f, setter = (hv, set_hvnet) if sw == "hvnet" else (ovs, set_ovs)
            setter(f, MODES[mode])
            r = iperf(f, 1, "64K", secs, None, log)
            r["cpu_ns"] = r["busy_cores"] * secs * 1e9 / max(r["rx_frames"], 1)
            return r

        runs = interleaved(configs, reps, once)
        set_hvnet(hv, None)
        set_ovs(ovs, None)
    m = {c: median([r["cpu_ns"] for r in rs]) for c, rs in runs.items()}

    def ratio(sw, mode):
        return m[f"{sw} {mode}"] / m[f"{sw} off"]

    said = "; ".join(
        f"{mode}: hvnet {ratio('hvnet', mode):.2f}x its CPU per frame without export "
        f"({m[f'hvnet {mode}'] - m['hvnet off']:+,.0f} ns), Open vSwitch {ratio('ovs', mode):.2f}x "
        f"({m[f'ovs {mode}'] - m['ovs off']:+,.0f} ns)"
        for mode in ("1:1", "1:1000"))
    said += f"; without export, hvnet / Open vSwitch: {m['hvnet off'] / m['ovs off']:.2f}x"
    note = (vm_note() + " One TCP stream a -> b, 64 KiB writes, a's TSO and b's LRO (GRO) off; Open vSwitch "
            "userspace (netdev) with a bridge IPFIX record (`sampling`), hvnet with `[ipfix] sampling`; "
            f"both exporting to {TARGET} (nothing listens). CPU: the machine's busy cores over the run "
            "(/proc/stat), per frame the receiver took.")
    figs = [measured("ipfix-cost", "Flow export: CPU per frame without IPFIX, at 1:1 and at 1:1000", "",
                     "CPU ns per frame", {c: [{"v": r["cpu_ns"]} for r in rs] for c, rs in runs.items()}, "v",
                     lambda c: (c.split()[0], c.split()[1]),
                     "what does IPFIX export cost per frame, beside Open vSwitch's?", said, note)]
    return figs, runs
