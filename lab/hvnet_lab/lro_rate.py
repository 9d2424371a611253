"""LRO in a Virtualized System (Hatori & Oi, LRO in Xen, VPACT 2008): the
LRO rate and the ACKs a receiver sends with delayed ACKs on and off, and
LRO at the physical interface vs the virtual one with a real sender on
the wire."""

import contextlib
import math
import shutil

import hvlab

from . import measure, wire_fabrics
from .fabrics import Hvnet
from .figures import LRO_VIRTUALIZED, NATIVE_NOTE, figure
from .runners import interleaved, iperf
from .verdict import INCONCLUSIVE, effect_size, judge, ratios, summarize, value_range

# SACK blocks per run below which a configuration's SACK rate is not
# measured at all: SACKs come only with losses, which are rare here.
SACK_MIN = 20


def sack_verdict(on_runs, off_runs):
    """The SACK rate (SACK blocks per ACK) with LRO on against off. SACKs
    come only with losses; a configuration with fewer than SACK_MIN in any
    run has no rate to compare, whatever the other side shows, so the
    verdict does not swing with one lost segment."""
    def counts(runs):
        return [r["sack_merged_at_sender"] for r in runs]
    thin = [(name, counts(runs)) for name, runs in (("LRO off", off_runs), ("LRO on", on_runs))
            if min(counts(runs)) < SACK_MIN]
    if thin:
        return INCONCLUSIVE, ("SACKs come only with losses, too few to give a rate: " + "; ".join(
            f"{name} {value_range(c)} SACK blocks per run (fewer than {SACK_MIN} in some run)" for name, c in thin))
    return judge([("delayed ACKs on", ratios(on_runs, off_runs, "sack_rate"))], "down", 1.0, "SACK rate ratio")


def lro_rate(tmp, quick, reps, log):
    secs = 2 if quick else 4
    with Hvnet(tmp, 1500, a={"tso": False}, b={"ring1": 4096, "ring2": 4096}) as f:
        def run(c):
            lro, quickack = c
            f.t.hv("port", "b", "set", f"lro={lro}")
            f.sh("b", f"ip route change 10.98.0.0/24 dev eth0 {'quickack 1' if quickack else ''} || true")
            nb0 = measure.nstat(f.sh("b", "nstat -az").stdout)
            na0 = measure.nstat(f.sh("a", "nstat -az").stdout)
            # Machine-wide cycles and instructions during the run, where
            # perf can count them (not on every virtual machine).
            perf = hvlab.subprocess.Popen(["perf", "stat", "-x,", "-a", "-e", "cycles,instructions", "--", "sleep", str(secs)],
                                          stdout=hvlab.subprocess.DEVNULL, stderr=hvlab.subprocess.PIPE, text=True) if shutil.which("perf") else None
            s = iperf(f, 1, "64K", secs, None, log)
            counts = measure.perf_stat(perf.communicate(timeout=secs + 30)[1]) if perf else {}
            nb1 = measure.nstat(f.sh("b", "nstat -az").stdout)
            na1 = measure.nstat(f.sh("a", "nstat -az").stdout)
            d = lambda n0, n1, k: n1.get(k, 0) - n0.get(k, 0)  # noqa: E731
            mb = s["gbps"] * 1e9 * secs / 8 / 1e6
            return {"lro": lro, "quickack": quickack, "gbps": s["gbps"],
                    "lro_rate": s["tx_frames_sender"] / max(s["rx_frames"], 1),
                    "acks_per_mb": d(nb0, nb1, "TcpOutSegs") / max(mb, 1e-9),
                    "delayed_acks_per_mb": d(nb0, nb1, "TcpExtDelayedACKs") / max(mb, 1e-9),
                    # SACK blocks the sender processed (merged into its
                    # scoreboard) and SACK recoveries it entered.
                    "sack_merged_at_sender": d(na0, na1, "TcpExtTCPSackMerged"),
                    "sack_recoveries_at_sender": d(na0, na1, "TcpExtTCPSackRecovery"),
                    # SACK blocks per ACK the receiver sent: the paper's
                    # "selective acknowledgment rate".
                    "sack_rate": d(na0, na1, "TcpExtTCPSackMerged") / max(d(nb0, nb1, "TcpOutSegs"), 1),
                    "cycles_per_byte": (counts.get("cycles") or math.nan) / max(s["gbps"] * 1e9 * secs / 8, 1),
                    "instructions_per_byte": (counts.get("instructions") or math.nan) / max(s["gbps"] * 1e9 * secs / 8, 1)}

        configs = [(lro, qa) for lro in ("off", "on") for qa in (False, True)]
        runs = interleaved(configs, reps, run)
        f.sh("b", "ip route change 10.98.0.0/24 dev eth0 || true")
    rows = [summarize(runs[c]) for c in configs]
    on_runs, off_runs = runs[("on", False)], runs[("off", False)]
    on, off = summarize(on_runs), summarize(off_runs)
    label = lambda r: f"LRO {r['lro']}{' quickack' if r['quickack'] else ''}"  # noqa: E731
    ser = lambda key: [(label(r), r[key]) for r in rows]  # noqa: E731
    spr = lambda key: [(label(r), *r["spread"][key]) for r in rows]  # noqa: E731
    figs = [
        figure("lro-rate", "LRO rate: frames in per frame delivered", "configuration", "frames in / frames out",
               {"hvnet": ser("lro_rate")},
               {"published": [("Native", 1.00), ("Non-LRO", 1.00), ("LRO Phys.", 1.98), ("LRO Virt.", 4.91)]}, LRO_VIRTUALIZED,
               "LRO in the virtual interface delivers several frames per frame (LRO on > 1.5; "
               + effect_size(on["lro_rate"], 4.91) + "). hvnet coalesces up to 64 KiB per frame, as Linux GRO does; "
               "the paper's Xen LRO coalesced less",
               judge([("LRO on", [r["lro_rate"] for r in on_runs])], "up", 1.5, "LRO rate"), NATIVE_NOTE, {"hvnet": spr("lro_rate")}),
        figure("lro-rate-acks", "ACKs the receiver sent per MB", "configuration", "ACKs per MB",
               {"hvnet ACKs/MB": ser("acks_per_mb")}, {}, LRO_VIRTUALIZED + " (acknowledgment breakdown)",
               f"LRO reduces the ACKs the receiver sends (ratio on/off < 1; hvnet {off['acks_per_mb']:.0f} -> "
               f"{on['acks_per_mb']:.0f} per MB; delayed ACKs: {off['delayed_acks_per_mb']:.1f} -> {on['delayed_acks_per_mb']:.1f} per MB)",
               judge([("delayed ACKs on", ratios(on_runs, off_runs, "acks_per_mb"))], "down"),
               NATIVE_NOTE + " quickack = `ip route ... quickack 1` in the receiving VM, the paper's proposed option.",
               {"hvnet ACKs/MB": spr("acks_per_mb")}),
        figure("lro-rate-sacks", "SACK blocks merged at the sender", "configuration", "SACK blocks per run",
               {"hvnet SACK blocks merged": ser("sack_merged_at_sender")}, {}, LRO_VIRTUALIZED + " (selective acknowledgment rate)",
               f"the paper saw the SACK rate (SACK blocks per ACK) drop with LRO in the virtual interface (ratio on/off < 1; "
               f"hvnet {off['sack_merged_at_sender']:.0f} -> {on['sack_merged_at_sender']:.0f} SACK blocks per run, "
               f"{off['sack_rate']:.4f} -> {on['sack_rate']:.4f} per ACK)",
               sack_verdict(on_runs, off_runs), NATIVE_NOTE,
               {"hvnet SACK blocks merged": spr("sack_merged_at_sender")}),
    ]
    if all(math.isfinite(r["cycles_per_byte"]) for r in rows):
        figs.append(figure("lro-rate-cycles", "CPU cycles per byte received (whole machine)", "configuration", "cycles per byte",
                           {"hvnet cycles/byte": ser("cycles_per_byte")}, {}, LRO_VIRTUALIZED + " (clock cycles and instruction count)",
                           f"LRO lowers the cycles spent per byte (ratio on/off < 1; hvnet {off['cycles_per_byte']:.2f} -> "
                           f"{on['cycles_per_byte']:.2f}; instructions per byte {off['instructions_per_byte']:.2f} -> "
                           f"{on['instructions_per_byte']:.2f})",
                           judge([("delayed ACKs on", ratios(on_runs, off_runs, "cycles_per_byte"))], "down"),
                           NATIVE_NOTE + " perf stat -a over the run.", {"hvnet cycles/byte": spr("cycles_per_byte")}))
    return figs, rows


def lro_rate_wire(tmp, quick, reps, log):
    """The paper's LRO rates with a real sender on the wire: LRO at the
    physical interface (the uplink device's GRO) against LRO at the
    virtual interface (hvnet's, into the VM), and neither."""
    secs = 2 if quick else 4
    # LRO Phys.: the VM takes the device's coalesced frames whole (its
    # port's LRO on, as netfront takes GSO frames), and hvnet's own
    # coalescing is counted to show it adds next to nothing.
    cfgs = {"Non-LRO": ("off", "off"), "LRO Phys.": ("hardware", "on"), "LRO Virt.": ("off", "on")}
    with contextlib.ExitStack() as stack:
        up = {"hardware": stack.enter_context(wire_fabrics.HvnetUplink(tmp, 1500)),
              "off": stack.enter_context(wire_fabrics.HvnetUplinkNoLro(tmp, 1500))}

        def run(name):
            uplink, vm = cfgs[name]
            f = up[uplink]
            f.t.hv("port", "b", "set", f"lro={vm}")
            c0 = f.t.stats("/ports/b/rx_summary")
            s = iperf(f, 1, "64K", secs, None, log)
            c1 = f.t.stats("/ports/b/rx_summary")
            return {"gbps": s["gbps"], "lro_rate": s["tx_frames_sender"] / max(s["rx_frames"], 1),
                    "hvnet_coalesced_share": (c1["lro_frames"] - c0["lro_frames"]) / max(s["rx_frames"], 1)}

        runs = interleaved(tuple(cfgs), reps, run)
    res = {c: summarize(runs[c]) for c in cfgs}
    rate = lambda c: [r["lro_rate"] for r in runs[c]]  # noqa: E731
    pub = {"Non-LRO": 1.00, "LRO Phys.": 1.98, "LRO Virt.": 4.91}
    return [figure(
        "lro-rate-wire", "LRO rate at the physical vs the virtual interface (external sender)", "configuration",
        "frames in / frames out", {"hvnet": [(c, res[c]["lro_rate"]) for c in cfgs]},
        {"published": [("Native", 1.00)] + list(pub.items())}, LRO_VIRTUALIZED,
        "LRO at the physical interface and at the virtual interface each deliver several frames per frame (rate > "
        "1.5 for both; " + "; ".join(f"{c}: hvnet {res[c]['lro_rate']:.2f}, published {pub[c]:.2f}" for c in cfgs)
        + "). The paper's virtual LRO coalesced more than its physical one; here both coalesce up to 64 KiB, "
        "as Linux GRO does",
        judge([("LRO Phys.", rate("LRO Phys.")), ("LRO Virt.", rate("LRO Virt."))], "up", 1.5, "LRO rate"),
        "Native sender on a wire: an external host (a namespace on a veth, its NIC's TSO off: wire-sized frames) "
        "sends to a VM through an hvnet uplink. Physical: the uplink device's GRO (lro = \"hardware\"), the "
        "VM taking its coalesced frames whole (of the frames the VM got, hvnet coalesced "
        f"{100 * res['LRO Phys.']['hvnet_coalesced_share']:.1f}% itself); virtual: the uplink's off, hvnet's LRO "
        "into the VM on.",
        {"hvnet": [(c, *res[c]["spread"]["lro_rate"]) for c in cfgs]}),
    ], res
