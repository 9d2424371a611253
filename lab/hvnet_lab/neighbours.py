"""A VM beside a hostile neighbour: a measurement (no study, no verdict).
iperf3 from VM c to VM b, alone and while VM a floods b with in-order
1-byte TCP segments (each one held for coalescing into b's LRO) and
frames from random source MACs (the FDB's limit), interleaved; the
daemon's memory is sampled after each run. What a guest can do to the
others is bounded (docs/security.md): this says what it costs them; a
third mode runs the flood with the flooder's port policed
(`tx_rate`), as an operator would limit it; a fourth limits the port's
worker time besides (`cpu_limit`); a fifth holds the flooding programs to
a quarter of a core too (a cgroup quota, as a hypervisor holds a VM to
its vCPUs: here every VM's programs share the switch's two cores). Each
run also reads the worker time spent on a's and on c's port."""

import contextlib
import json
import os
import subprocess
from pathlib import Path

import hvlab

from . import measure
from .figures import measured
from .runners import interleaved
from .verdict import median

FLOOD = Path(__file__).resolve().parents[1] / "hostile_traffic.py"
IPS = {n: f"10.73.0.{i + 1}" for i, n in enumerate("abc")}
POLICED = "hostile, policed"
LIMITED = "hostile, policed, cpu_limit"
HELD = "hostile, policed, cpu_limit, CPU held"
POLICE_RATE = "10mbit"
CPU_LIMIT = 5
HELD_PERCENT = 25
MODES = ["idle", "hostile", POLICED, LIMITED, HELD]


def hostile_neighbour(tmp, quick, reps, log):
    secs = 2 if quick else 4
    vms = [dict(name=n, ipv4=f"{ip}/24") for n, ip in IPS.items()]
    with hvlab.Topology(tmp, vms, prefix="hn") as t:
        pid = json.loads(Path(f"/run/hvnet/{t.name}/state.json").read_text())["pid"]
        macs = {p["client"]: p["mac"] for p in json.loads(t.hv("ports", "--json").stdout)}
        t.hv("port", "a", "set", "allow_forged_transmits=on")
        t.popen("b", f"iperf3 -s -B {IPS['b']}", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        t.wait_listening("b", 5201)
        py = os.sys.executable
        floods = [f"{py} {FLOOD} tiny-segments {macs['a']} {macs['b']} {IPS['a']} {IPS['b']} 10000000",
                  f"{py} {FLOOD} random-macs {macs['b']} 10000000"]
        cmd = f"iperf3 -c {IPS['b']} -t {secs} -J"

        def busy_ns():
            return {v: t.stats(f"/ports/{v}/tx_summary")["busy_ns"] for v in "ac"}

        def run(mode):
            # "policed": the flooder's port has a policer (tx_rate) for the
            # run, the switch dropping the flood as it enters; "held": its
            # programs in a cgroup of a quarter of a core besides.
            policed, limited = mode in (POLICED, LIMITED, HELD), mode in (LIMITED, HELD)
            with contextlib.ExitStack() as stack:
                if policed:
                    t.hv("port", "a", "set", f"tx_rate={POLICE_RATE}")
                    stack.callback(t.hv, "port", "a", "set", "tx_rate=off")
                if limited:
                    t.hv("port", "a", "set", f"cpu_limit={CPU_LIMIT}")
                    stack.callback(t.hv, "port", "a", "set", "cpu_limit=0")
                cpu = stack.enter_context(hvlab.CpuLimit(HELD_PERCENT)) if mode == HELD else None
                flood = [t.popen("a", f, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for f in floods] \
                    if mode != "idle" else []
                stack.callback(hvlab.stop_procs, flood)
                for p in flood if cpu else []:
                    cpu.add_process(p.pid)
                before = busy_ns()
                out = t.sh("c", cmd, timeout=secs + 60).stdout
                after = busy_ns()
                rss = hvlab.rss_bytes(pid) / 2**20
            bps = measure.iperf3(out)["bps"]
            # Worker time per second of the run on each port's queues.
            r = {"gbps": bps / 1e9, "rss_mib": rss,
                 **{f"{v}_worker_ms_per_s": (after[v] - before[v]) / 1e6 / secs for v in "ac"}}
            during = f" while VM a floods (lab/{FLOOD.name} tiny-segments and random-macs)" if flood else ""
            if policed:
                during += f", a's port policed (hvnet port a set tx_rate={POLICE_RATE})"
            if limited:
                during += f", its worker time limited (hvnet port a set cpu_limit={CPU_LIMIT})"
            if mode == HELD:
                during += f", a's flooding programs held to {HELD_PERCENT} % of a core (cgroup cpu quota)"
            log.append({"command": f"ip netns exec {t.ns('c')} {cmd}{during}", **r})
            return r

        runs = interleaved(MODES, reps, run)
        tx = t.stats("/ports/a/tx_summary")
    idle, hostile, policed, limited, held = (median([r["gbps"] for r in runs[m]]) for m in MODES)
    worker = {m: (median([r["a_worker_ms_per_s"] for r in runs[m]]), median([r["c_worker_ms_per_s"] for r in runs[m]]))
              for m in MODES}
    note = (f"VMs are network namespaces behind hvnet's TAP ports; the flood is a Python program in VM a (scapy "
            f"and a packet socket). Over the run a sent {tx['frames']:,} frames and the FDB refused "
            f"{tx.get('fdb_learn_refused', 0):,} source addresses.")
    figs = [
        measured("hostile-neighbour-throughput", "A VM's throughput beside an idle and a hostile neighbour", "",
                 "Gbit/s", runs, "gbps", lambda m: ("VM c to VM b", f"neighbour {m}"),
                 "how much does a flooding neighbour take from another VM's throughput?",
                 f"{hostile:.2f} Gbit/s beside the flood, {idle:.2f} beside an idle neighbour "
                 f"({hostile / idle:.2f}x), {policed:.2f} beside the flood with its port policed at {POLICE_RATE} "
                 f"({policed / idle:.2f}x), {limited:.2f} with a's worker time limited to {CPU_LIMIT} % besides "
                 f"({limited / idle:.2f}x), {held:.2f} with its programs held to {HELD_PERCENT} % of a core too "
                 f"({held / idle:.2f}x; medians of {reps} runs)", note),
        measured("hostile-neighbour-worker-time", "Worker time on each VM's port", "", "ms per second",
                 {(m, v): [{"ms": r[f"{v}_worker_ms_per_s"]} for r in runs[m]] for m in MODES for v in "ac"},
                 "ms", lambda mv: (f"VM {mv[1]}'s port", f"neighbour {mv[0]}"),
                 "how much of the workers' time does the flooding VM's port take beside the other's?",
                 "; ".join(f"{m}: a {worker[m][0]:.0f}, c {worker[m][1]:.0f} ms/s" for m in MODES)
                 + f" (medians of {reps} runs)", note),
        measured("hostile-neighbour-memory", "The daemon's memory after each run", "", "MiB resident", runs,
                 "rss_mib", lambda m: ("hvnet daemon", f"neighbour {m}"),
                 "does the daemon's memory stay bounded whatever a guest sends?",
                 f"at most {max(r['rss_mib'] for rs in runs.values() for r in rs):.1f} MiB resident", note),
    ]
    return figs, runs
