"""Dynamic NetQueue against static NetQueue (seed 001, Figure 9): four
VMs behind an uplink with five receive queues, one TCP stream from the
external host to each; used by `scripts/bench_netqueue.py` and the lab's
`netqueue` experiment."""

import json
import time
from pathlib import Path

import hvlab

from . import measure

VMS, QUEUES = 4, 5
EXT_IP = "198.18.30.100"


def vm_ip(i):
    return f"198.18.30.{i + 1}"


def topology(tmp, mode):
    return hvlab.Topology(
        Path(tmp), [dict(name=f"v{i}", ipv4=vm_ip(i) + "/24") for i in range(VMS)], prefix="nq",
        uplinks=[dict(name="up0", device="", queues=QUEUES, lro="hardware", netqueue=mode)],
        hosts=[dict(name="ext", uplink="up0", ipv4=EXT_IP + "/24")])


def daemon_seconds(t):
    """CPU seconds the topology's daemon has used, all its threads (their
    schedstat run time, in ns: finer than the clock-tick counters)."""
    pid = json.loads(Path(f"/run/hvnet/{t.name}/state.json").read_text())["pid"]
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += measure.schedstat((task / "schedstat").read_text())["run_ns"]
        except (OSError, ValueError):
            pass
    return total / 1e9


def queues_used(t):
    f = t.stats("/uplinks/up0/filters")
    return len({e["queue"] for e in f["filters"]})


def servers(t):
    procs = [t.popen(f"v{i}", f"iperf3 -s -1 -p {5301 + i}") for i in range(VMS)]
    for i in range(VMS):
        t.wait_listening(f"v{i}", 5301 + i)
    return procs


def clients(t, rate, seconds):
    limit = f"-b {rate}" if rate else ""
    return [t.popen("ext", f"iperf3 -c {vm_ip(i)} -p {5301 + i} -t {seconds} {limit} -J",
                    stdout=hvlab.subprocess.PIPE, text=True) for i in range(VMS)]


def finish(procs):
    outs = []
    for p in procs:
        try:
            outs.append(p.communicate(timeout=120)[0])
        except Exception:
            p.kill()
            outs.append(p.communicate()[0])
    return outs


def run_one(t, rate, warmup, seconds):
    # Warm-up at the same load: the balancer settles (spreads under load,
    # stays packed when quiet).
    s = servers(t)
    finish(clients(t, rate, warmup))
    finish(s)
    s = servers(t)
    d0, t0 = daemon_seconds(t), time.monotonic()
    with measure.Cpu() as cpu:
        outs = finish(clients(t, rate, seconds))
    d1, t1 = daemon_seconds(t), time.monotonic()
    finish(s)
    gbps = sum(measure.iperf3(o)["bps"] for o in outs) / 1e9
    return {"gbps": gbps, "busy_cores": cpu.cores, "hvnet_cores": (d1 - d0) / (t1 - t0), "queues_used": queues_used(t)}
