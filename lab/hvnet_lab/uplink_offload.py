"""NIC Technology in vSphere (VMware's white paper), its
offload figures at an uplink: TSO in hardware vs software (Figure 6),
receive checksums from the device vs checked by hvnet (7), and hardware vs
software LRO (8), each with a real external host on the wire."""

import contextlib

from . import wire_fabrics
from .figures import NIC_TECHNOLOGY, figure
from .fleet import VXLAN_NOTE, WIRE_NOTE, each, fleets_compared, fleets_together
from .runners import interleaved, iperf
from .verdict import effect_size, judge, median, ratios, summarize, undecided

# rx-csum's offered load per VM: the two switches run at the same moment,
# 8 x 125 Mbit/s each, together about two thirds of what 8 VMs behind a
# VXLAN endpoint receive here when unlimited.
RX_CSUM_MBPS = 125


def tso_offload(tmp, quick, reps, log):
    """Figure 6: the switch's send CPU with TSO at the wire in hardware
    (GSO frames go to the device whole) vs software (hvnet segments), VMs
    sending to the external host; a VXLAN endpoint drawn beside them (it
    segments in software on this kernel: see the note)."""
    secs, vms = (2, 4) if quick else (4, 8)

    def figs(runs):
        res, ser, spr = each(runs, tuple(runs), "hvnet_cores_per_gbps")
        cost = ratios(runs["software"], runs["hardware"], "hvnet_cores_per_gbps")
        note = (WIRE_NOTE + f" {vms} VMs send one stream each to the external host. CPU: the hvnet daemon's threads per "
                "Gbit/s. Hardware TSO here is a veth taking the GSO frame whole (a NIC would segment it in hardware). "
                "A VXLAN endpoint cannot hand the wire a tunnelled GSO frame (a packet socket's virtio-net header has no "
                "UDP-tunnel GSO type; Linux 6.17 gave one to tun and virtio-net only), so hvnet segments VXLAN in "
                "software always: drawn, not judged.")
        return [figure(
            "tso-offload-cpu", "The switch's send CPU, TSO at the wire in hardware vs software", "TSO",
            "hvnet cores per Gbit/s", {"hvnet": ser}, {}, NIC_TECHNOLOGY + ", Figure 6",
            "Without TSO at the NIC the switch segments in software and its send CPU per Gbit/s about doubles (ratio "
            f"software/hardware > 1; hvnet {median(cost):.2f}; " + effect_size(median(cost), 2.0) + " (\"almost doubled\"))",
            judge([("software vs hardware", cost)], "up", published=2.0), note, {"hvnet": spr}),
        ], res

    return figs(fleets_compared(tmp, reps, log, "tso", {
        "hardware": dict(vms=vms, uplink=dict(tso="hardware"), prefix="th"),
        "software": dict(vms=vms, uplink=dict(tso="software"), prefix="ts"),
        "vxlan": dict(vms=vms, vxlan=True, prefix="tv")}, seconds=secs, to_vms=False, write="128K",
        settle=lambda r: undecided(figs(r)[0])))


# NIC Technology in vSphere, Figure 7: 15% more CPU than non-VXLAN receive without the
# offload, 10% with it.
RX_CSUM_PUBLISHED = 1.15 / 1.10


def rx_csum(tmp, quick, reps, log):
    """Figure 7: the switch's receive CPU for VXLAN with the inner
    checksums taken from the device (hardware) vs checked by hvnet
    (software), at the same throughput in both, as the study compared
    them at line rate: a fixed offered load under what either carries.
    Saturated instead, the CPU per Gbit/s follows how the 2 cores happen
    to be shared between the streams, the external host and hvnet (runs
    spread 0.80-1.37), and hides a cost of a few per cent. The two
    switches run at the same moment: one after the other, the ratio of a
    pair scattered about twice as widely (log-scale spread 0.04-0.055
    against 0.016-0.025 in 10 pairs of each, 2026-11-24), enough for a
    run's centre to land past the 5% band now and then."""
    secs, vms = (2, 4) if quick else (4, 8)

    def figs(runs):
        res, ser, spr = each(runs, tuple(runs), "hvnet_cores_per_gbps")
        cost = ratios(runs["software"], runs["hardware"], "hvnet_cores_per_gbps")
        return [figure(
            "rx-csum-cpu", "The switch's receive CPU for VXLAN, checksum offload in hardware vs software", "checksum",
            "hvnet cores per Gbit/s (CPU-seconds per Gbit)", {"hvnet": ser}, {}, NIC_TECHNOLOGY + ", Figure 7",
            "Without receive checksum offload for encapsulated frames the switch checks them in software and spends "
            f"more CPU (ratio software/hardware > 1; hvnet {median(cost):.2f}, carrying "
            f"{res['hardware']['gbps']:.2f} and {res['software']['gbps']:.2f} Gbit/s; published overheads 15% vs 10% over "
            f"non-VXLAN: {RX_CSUM_PUBLISHED:.3f}, reading them as shares of the non-VXLAN CPU — their base is not "
            "given, so not drawn — and inside this machine's 5% noise; "
            + effect_size(median(cost), RX_CSUM_PUBLISHED) + ")",
            judge([("software vs hardware", cost)], "up", published=RX_CSUM_PUBLISHED),
            WIRE_NOTE + VXLAN_NOTE + f" {vms} VMs per switch, one stream each at {RX_CSUM_MBPS} Mbit/s "
            f"({vms * RX_CSUM_MBPS / 1000:g} Gbit/s offered to each); the two switches (each its own daemon, VMs and "
            "host) run at the same moment, so that the machine's noise hits both alike; CPU: each hvnet daemon's "
            "threads' run time per Gbit received. "
            "The external host's kernel leaves inner checksums "
            "partial on the veth; hardware: hvnet passes them on so; software: hvnet completes and checks each.",
            {"hvnet": spr}),
        ], res

    return figs(fleets_together(tmp, reps, log, "csum", {
        "hardware": dict(vms=vms, vxlan=True, uplink=dict(csum="hardware"), prefix="ch"),
        "software": dict(vms=vms, vxlan=True, uplink=dict(csum="software"), prefix="cs")}, seconds=secs, write="128K",
        rate=f"{RX_CSUM_MBPS}M",
        settle=lambda r: undecided(figs(r)[0])))


def uplink_lro(tmp, quick, reps, log):
    """NIC Technology in vSphere, Figure 8: hardware LRO (the NIC's; here the uplink device's
    own GRO) against software LRO (hvnet's, at the uplink before
    switching), a real external sender on the wire, large receives."""
    secs = 2 if quick else 4

    def figs(runs):
        res = {c: summarize(runs[c]) for c in up}
        eff = ratios(runs["hardware"], runs["software"], "gbps_per_core")
        note = ("An external host (a namespace on a veth wire, its NIC's TSO off: wire-sized frames) sends to a VM behind "
                "an hvnet uplink; hardware LRO is the near end's GRO (a veth's, in the kernel), software LRO is hvnet's "
                "GRO at the uplink's receive queue. The study gives no numbers, only the direction.")
        out = [
            figure("uplink-lro-cpu-efficiency", "CPU efficiency, hardware vs software LRO at the uplink", "LRO at the uplink",
                   "Gbit/s per busy core",
                   {"hvnet": [(c, res[c]["gbps_per_core"]) for c in up]}, {}, NIC_TECHNOLOGY + ", Figure 8",
                   "NICs with hardware LRO have higher CPU efficiency for large receives than software LRO (ratio "
                   f"hardware/software > 1; hvnet {median(eff):.2f})",
                   judge([("hardware vs software", eff)], "up"), note,
                   {"hvnet": [(c, *res[c]["spread"]["gbps_per_core"]) for c in up]}),
        ]
        return out, res

    with contextlib.ExitStack() as stack:
        up = {"hardware": stack.enter_context(wire_fabrics.HvnetUplink(tmp, 1500)),
              "software": stack.enter_context(wire_fabrics.HvnetUplinkSoftwareLro(tmp, 1500))}
        runs = interleaved(tuple(up), reps, lambda c: iperf(up[c], 1, "64K", secs, None, log),
                           settle=lambda r: undecided(figs(r)[0]))
    return figs(runs)
