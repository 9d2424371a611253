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


def balancer_moves(fl):
    """Filters the uplink's balancer has moved so far; None without a
    balancer (static NetQueue)."""
    return fl.t.stats("/uplinks/up0/filters").get("balancer", {}).get("moves")


# A balancer is settled once it has made no move for this long: it packs
# after PACK_AFTER (5) quiet seconds in a row, one pack at a time.
SETTLED_S, SETTLE_MAX_S = 6, 40


def settle(fl, rate, warmup):
    """A warm-up at the load, then more until the balancer has made no
    move for SETTLED_S seconds of it (at most SETTLE_MAX_S): after a run
    under load Dynamic NetQueue takes 5 s per queue to pack again, so a
    fixed warm-up measured part of a low-load run on queues still spread.
    Waits for the balancer to stop, whatever it decides."""
    moves = balancer_moves(fl)
    quiet = spent = 0
    while True:
        fl.streams(warmup, rate=rate)
        spent += warmup
        now = balancer_moves(fl)
        quiet = quiet + warmup if now == moves else 0
        moves = now
        if now is None or quiet >= SETTLED_S or spent >= SETTLE_MAX_S:
            return


def measure(fl, rate, seconds):
    """One measured run of the streams, and the queues in use after it."""
    r = fl.streams(seconds, rate=rate)
    return {"gbps": r["gbps"], "busy_cores": r["busy_cores"], "hvnet_cores": r["hvnet_cores"],
            "queues_used": queues_used(fl), "command": r["command"]}


def run_one(fl, rate, warmup, seconds):
    """Settled at the load (the balancer spreads under load, stays packed
    when quiet), then the measured run."""
    settle(fl, rate, warmup)
    return measure(fl, rate, seconds)
