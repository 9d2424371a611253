"""SplitRxMode at a VXLAN uplink (seed 001, Figure 5): VMs behind hvnet's
tunnel endpoint on one receive queue, one TCP stream from the external
host's vxlan device to each;
- together: the queue's thread also writes each frame into its VM while
  the VM's ring is idle (`delivery = "auto"`, run to completion);
- split: each VM's own delivery thread does the copy (`delivery =
  "thread"`), so the queue's thread only decapsulates and switches.
Used by `scripts/bench_splitrx.py` and the lab's `splitrx` experiment."""

from .fleet import Fleet

MODES = {"together": "auto", "split": "thread"}


def topology(tmp, mode, vms):
    return Fleet(tmp, f"sr-{mode}", vms, vxlan=True, uplink=dict(queues=1), vm=dict(delivery=MODES[mode]), prefix="sr")


def run_one(fl, seconds, write=None):
    """Ping round trip to v0 idle, then the streams with a ping under
    load: Gbit/s, busy cores, and both round trips (ms)."""
    idle = fl.rtt_ms(200)
    r = fl.streams(seconds, write=write, during=lambda: fl.rtt_ms(100))
    return {"gbps": r["gbps"], "busy_cores": r["busy_cores"], "gbps_per_core": r["gbps_per_core"],
            "rtt_idle_ms": idle, "rtt_loaded_ms": r["during"], "command": r["command"]}
