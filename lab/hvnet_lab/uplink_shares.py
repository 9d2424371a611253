"""Shares of an uplink (Network I/O Control): a measurement (no study
publishes these figures; the policy issue asks for shares among the VMs
sending through an uplink when it is the bottleneck).

Three VMs send one TCP stream each at once through an uplink whose
`capacity` is `CAPACITY`, to a host on the wire (a namespace behind a
veth): VM a with shares 100, b and c with 50 (vSphere's high and
normal), and, as the control, all three with 50. What each got (Gbit/s),
its part of what the three got together beside its part of the shares,
and the three together against the capacity. hvnet alone: Linux's
nearest reference (HTB classes by source with rates in the shares'
ratio) is not run beside it yet."""

import json
import subprocess

import hvlab

from . import measure
from .figures import measured
from .runners import interleaved
from .verdict import median

CAPACITY = "1gbit"
EXT = "198.18.46.100"
SHARES = {"weighted": {"a": 100, "b": 50, "c": 50}, "equal": {"a": 50, "b": 50, "c": 50}}
NOTE = (f"A measurement, not a study's reproduction: no verdict. The uplink's capacity is {CAPACITY}; the VMs are "
        "namespaces behind TAP ports, the host a namespace behind a veth, all on this machine's 2 cores. Each "
        "VM's allowance is a policer at the uplink (docs/guide/rates.md), so its TCP loses frames where vSphere's "
        "queues would hold them.")


def uplink_shares(tmp, quick, reps, log):
    secs = 3 if quick else 8
    vms = [dict(name=v, ipv4=f"198.18.46.{i + 1}/24") for i, v in enumerate("abc")]
    with hvlab.Topology(tmp, vms, prefix="us",
                        uplinks=[dict(name="up0", device="", lro="off", capacity=CAPACITY)],
                        hosts=[dict(name="ext", uplink="up0", ipv4=EXT + "/24")]) as t:
        for i, _ in enumerate("abc"):
            t.popen("ext", f"iperf3 -s -p {5401 + i}", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            t.wait_listening("ext", 5401 + i)

        def run(mode):
            for v, s in SHARES[mode].items():
                t.hv("port", v, "set", f"shares={s}")
            cmds = {v: f"iperf3 -c {EXT} -p {5401 + i} -t {secs} -J" for i, v in enumerate("abc")}
            procs = {v: t.popen(v, c, stdout=subprocess.PIPE, text=True) for v, c in cmds.items()}
            r = {}
            for v, p in procs.items():
                out, _ = p.communicate(timeout=secs + 60)
                r[v] = json.loads(out)["end"]["sum_received"]["bits_per_second"] / 1e9
            total = sum(r.values())
            r.update({f"{v}_part": r[v] / total for v in "abc"}, total=total)
            log.append({"command": "; ".join(f"ip netns exec {t.ns(v)} {c}" for v, c in cmds.items())
                        + f" (at once; shares {SHARES[mode]}, uplink capacity {CAPACITY})", **r})
            return r

        runs = interleaved(list(SHARES), reps, run)
    per_vm = {(m, v): [{"gbps": r[v], "part": r[f"{v}_part"]} for r in runs[m]] for m in SHARES for v in "abc"}
    parts = {m: {v: median([r[f"{v}_part"] for r in runs[m]]) for v in "abc"} for m in SHARES}
    totals = {m: median([r["total"] for r in runs[m]]) for m in SHARES}
    figs = [
        measured("uplink-shares-throughput", "Three VMs through one uplink, by their shares", "", "Gbit/s", per_vm,
                 "gbps", lambda mv: (f"VM {mv[1]}", f"shares {mv[0]}"),
                 "does each VM get its shares' part of a full uplink?",
                 "; ".join(f"shares {m} ({', '.join(f'{v} {SHARES[m][v]}' for v in 'abc')}): parts "
                           + ", ".join(f"{v} {parts[m][v]:.2f}" for v in "abc")
                           + f", together {totals[m]:.2f} Gbit/s of {CAPACITY}" for m in SHARES)
                 + f" (medians of {reps} runs; the shares' parts: 0.50, 0.25, 0.25 and 0.33 each)", NOTE),
    ]
    return figs, runs
