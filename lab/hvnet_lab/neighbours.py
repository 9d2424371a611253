"""A VM beside a hostile neighbour: a measurement (no study, no verdict).
iperf3 from VM c to VM b, alone and while VM a floods b with in-order
1-byte TCP segments (each one held for coalescing into b's LRO) and
frames from random source MACs (the FDB's limit), interleaved; the
daemon's memory is sampled after each run. What a guest can do to the
others is bounded (docs/security.md): this says what it costs them; a
third mode runs the flood with the flooder's port policed
(`tx_rate`), as an operator would limit it."""

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
POLICE_RATE = "10mbit"


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

        def run(mode):
            # "policed": the flooder's port has a policer (tx_rate) for the
            # run, the switch dropping the flood as it enters.
            if mode == POLICED:
                t.hv("port", "a", "set", f"tx_rate={POLICE_RATE}")
            flood = [t.popen("a", f, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for f in floods] \
                if mode != "idle" else []
            try:
                out = t.sh("c", cmd, timeout=secs + 60).stdout
                rss = hvlab.rss_bytes(pid) / 2**20
            finally:
                hvlab.stop_procs(flood)
                if mode == POLICED:
                    t.hv("port", "a", "set", "tx_rate=off")
            r = {"gbps": measure.iperf3(out)["bps"] / 1e9, "rss_mib": rss}
            during = f" while VM a floods (lab/{FLOOD.name} tiny-segments and random-macs)" if flood else ""
            if mode == POLICED:
                during += f", a's port policed (hvnet port a set tx_rate={POLICE_RATE})"
            log.append({"command": f"ip netns exec {t.ns('c')} {cmd}{during}", **r})
            return r

        runs = interleaved(["idle", "hostile", POLICED], reps, run)
        tx = t.stats("/ports/a/tx_summary")
    idle, hostile, policed = (median([r["gbps"] for r in runs[m]]) for m in ("idle", "hostile", POLICED))
    note = (f"VMs are network namespaces behind hvnet's TAP ports; the flood is a Python program in VM a (scapy "
            f"and a packet socket). Over the run a sent {tx['frames']:,} frames and the FDB refused "
            f"{tx.get('fdb_learn_refused', 0):,} source addresses.")
    figs = [
        measured("hostile-neighbour-throughput", "A VM's throughput beside an idle and a hostile neighbour", "",
                 "Gbit/s", runs, "gbps", lambda m: ("VM c to VM b", f"neighbour {m}"),
                 "how much does a flooding neighbour take from another VM's throughput?",
                 f"{hostile:.2f} Gbit/s beside the flood, {idle:.2f} beside an idle neighbour "
                 f"({hostile / idle:.2f}x), {policed:.2f} beside the flood with its port policed at {POLICE_RATE} "
                 f"({policed / idle:.2f}x; medians of {reps} runs)", note),
        measured("hostile-neighbour-memory", "The daemon's memory after each run", "", "MiB resident", runs,
                 "rss_mib", lambda m: ("hvnet daemon", f"neighbour {m}"),
                 "does the daemon's memory stay bounded whatever a guest sends?",
                 f"at most {max(r['rss_mib'] for rs in runs.values() for r in rs):.1f} MiB resident", note),
    ]
    return figs, runs
