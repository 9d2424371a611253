"""Jumbo Frames Inside Virtual Machines (a Hyper-V blog): VM to VM at MTU
1500 vs 9000, throughput and CPU per Gbit/s, beside the Linux bridge and
Open vSwitch."""

import contextlib

from .fabrics import Bridge, Hvnet, Ovs
from .figures import JUMBO_FRAMES, figure, vm_note
from .runners import interleaved, iperf
from .verdict import effect_size, judge, median, ratios, summarize, undecided


def with_cost(r):
    """A run with its CPU per Gbit/s."""
    r["cores_per_gbps"] = 1 / max(r["gbps_per_core"], 1e-9)
    return r


def jumbo_judged(runs):
    """The study's two claims on hvnet's runs {mtu: [run]}: the verdicts,
    and the throughput and CPU ratios 9000/1500."""
    thr = ratios(runs[9000], runs[1500], "gbps")
    cpu = ratios(runs[9000], runs[1500], "cores_per_gbps")
    return (judge([("hvnet", thr)], "up", published=30.0 / 17.0),
            judge([("hvnet", cpu)], "down", published=3.0 / 7.0)), thr, cpu


def jumbo(tmp, quick, reps, log, vms="netns"):
    secs = 2 if quick else 4
    fabs = [Hvnet] if quick or vms != "netns" else [Hvnet, Bridge, Ovs]
    rows, errors = {}, {}
    for F in fabs:
        try:
            with contextlib.ExitStack() as stack:
                if F is Hvnet:
                    # Both MTUs up at once, runs interleaved: the verdict
                    # is hvnet's.
                    up = {mtu: stack.enter_context(F(tmp, mtu, vms)) for mtu in (1500, 9000)}
                    runs = interleaved((1500, 9000), reps, lambda mtu: with_cost(iperf(up[mtu], 4, "128K", secs, None, log)),
                                       settle=lambda r: undecided(jumbo_judged(r)[0]))
                else:
                    # A reference, drawn only: one MTU after the other (two
                    # Open vSwitch instances cannot share the userspace
                    # datapath's device).
                    runs = {}
                    for mtu in (1500, 9000):
                        with F(tmp, mtu) as f:
                            runs[mtu] = [with_cost(iperf(f, 4, "128K", secs, None, log)) for _ in range(reps)]
                for mtu, rs in runs.items():
                    rows[(F.name, mtu)] = summarize(rs)
        except Exception as e:
            errors[F.name] = str(e)
    names = [F.name for F in fabs if F.name not in errors]
    (judged_thr, judged_cpu), thr, cpu = jumbo_judged({m: rows[("hvnet", m)]["runs"] for m in (1500, 9000)})
    ser = lambda key: {f"{n}": [(str(m), rows[(n, m)][key]) for m in (1500, 9000)] for n in names}  # noqa: E731
    spr = lambda key: {f"{n}": [(str(m), *rows[(n, m)]["spread"][key]) for m in (1500, 9000)] for n in names}  # noqa: E731
    note = vm_note(vms) + " 4 streams, 128 KiB writes." + "".join(f" {n} reference failed: {e}" for n, e in errors.items())
    figs = [
        figure("jumbo-throughput", "VM to VM throughput, MTU 1500 vs 9000", "MTU", "Gbit/s", ser("gbps"),
               {"published (Hyper-V, same host)": [("1500", 17.0), ("9000", 30.0)]}, JUMBO_FRAMES,
               "MTU 9000 raises VM-to-VM throughput (ratio 9000/1500 > 1; " + effect_size(median(thr), 30.0 / 17.0) + ")",
               judged_thr, note, spr("gbps")),
        figure("jumbo-cpu", "CPU per Gbit/s, MTU 1500 vs 9000", "MTU", "busy cores per Gbit/s", ser("cores_per_gbps"),
               {}, JUMBO_FRAMES,
               "MTU 9000 lowers CPU per Gbit/s (ratio 9000/1500 < 1; published host 7% -> 3%, VM 15% -> 9% of CPU, "
               "percentages with no throughput beside them, so not drawn; " + effect_size(median(cpu), 3.0 / 7.0) + " (host))",
               judged_cpu, note, spr("cores_per_gbps")),
    ]
    return figs, {f"{k[0]}-{k[1]}": v for k, v in rows.items()}
