"""Dynamic NetQueue against static NetQueue (seed 001, Figure 9): four
VMs behind an uplink with five receive queues, one TCP stream from the
external host to each; used by `scripts/bench_netqueue.py` and the lab's
`netqueue` experiment."""

from .fleet import Fleet

VMS, QUEUES = 4, 5


def topology(tmp, label, mode):
    """The fleet with NetQueue `mode` (True: static; "dynamic")."""
    return Fleet(tmp, label, VMS, uplink=dict(queues=QUEUES, netqueue=mode), prefix="nq")


def queues_used(fl):
    f = fl.t.stats("/uplinks/up0/filters")
    return len({e["queue"] for e in f["filters"]})


def run_one(fl, rate, warmup, seconds):
    """A warm-up at the same load (the balancer settles: spreads under
    load, stays packed when quiet), then the measured run."""
    fl.streams(warmup, rate=rate)
    r = fl.streams(seconds, rate=rate)
    return {"gbps": r["gbps"], "busy_cores": r["busy_cores"], "hvnet_cores": r["hvnet_cores"],
            "queues_used": queues_used(fl), "command": r["command"]}
