"""What a feature costs a frame, and what a feature that is off costs —
a measurement (no study, no verdict).

`vhost-frames`' set-up (two DPDK testpmd front ends on vhost-user ports,
a sending 64-byte UDP frames from 198.18.0.1 to b at 198.18.0.2 as fast
as it can, b taking them; the switch on core 0, the front ends on core
1), run once per configuration, interleaved:
- `bare`: a build without the feature stages (`RUSTFLAGS="--cfg
  hvnet_bare_arcs" cargo build --release -p hvnet --target-dir
  target/bare`; `HVNET_LAB_BARE`, default `target/bare/release/hvnet`),
  every feature off;
- `off`: this build, every feature off (IGMP/MLD snooping too);
- then this build with one feature on at a time: `snooping` (the
  default), `guards` (all five at a, its address 198.18.0.1), `policer`
  (a's `tx_rate`, far above what it sends), `shaper` (b's `rx_rate`,
  likewise), `mirror` (what a sends, to a namespace VM), `security group`
  (100 rules at both ports, the frames' one connection tracked), `ipfix`
  (every frame metered, exported to a loopback port nobody listens on),
  `capture` (`hvnet capture a --point in` to /dev/null) and `trace
  waiting` (`hvnet trace a --live 'udp port 9'`, which no frame matches:
  each is matched against the filter, none traced).
The figure is the daemon's CPU time (all its threads) per frame taken
from a, over the measured window; a frame refused by a feature would
still count as taken, so each run also checks that a's port dropped
nothing."""

import contextlib
import json
import os
import subprocess
from pathlib import Path

import hvlab

from .capture_cost import Capture
from .figures import measured
from .runners import interleaved
from .vhost_compare import HUGEPAGES, hugepages, run_hvnet
from .verdict import median

A_IP, B_IP = "198.18.0.1", "198.18.0.2"  # testpmd txonly's addresses
SNOOPING_OFF = {"multicast_snooping": False}
# What is on by default at a VM's port, off: the guards, DHCP snooping
# (and, set at run time, the forged-MAC check).
DEFAULTS_OFF = dict(source_guard=False, arp_guard=False, nd_guard=False, dhcp_guard=False, ra_guard=False,
                    dhcp_snooping=False)
COLLECTOR = "127.0.0.1:4739"


def filler(i):
    """A security group rule no frame of the run matches."""
    return {"direction": "in" if i % 2 else "out", "protocol": "tcp", "ports": 20000 + i,
            "remote": "198.18.250.0/24"}


@contextlib.contextmanager
def capture(t):
    """`hvnet capture a --point in` to /dev/null over the window."""
    cap = Capture(t, "a", "in")
    try:
        yield
    finally:
        cap.stop()


@contextlib.contextmanager
def trace_waiting(t):
    """`hvnet trace a --live 'udp port 9'` waiting over the window: a
    filter no frame of the run matches, so every frame is matched
    against it and none is traced."""
    p = subprocess.Popen([hvlab.hvnet_bin(), "trace", "-t", t.name, "a", "--live", "udp port 9", "--timeout", "600"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        held = lambda: json.loads(t.hv("port", "a", "--json").stdout).get("traced")  # noqa: E731
        if not hvlab.eventually(held, timeout=30):
            raise RuntimeError("hvnet trace did not start waiting")
        yield
    finally:
        p.kill()
        p.wait()


# Each configuration: (build, [switch], more VM settings, tables, context).
FEATURES = {
    "bare": ("bare", SNOOPING_OFF, [], None, None),
    "off": ("this", SNOOPING_OFF, [], None, None),
    "snooping": ("this", None, [], None, None),
    "guards": ("this", SNOOPING_OFF,
               [dict(name="a", addresses=[A_IP], source_guard=True, arp_guard=True, nd_guard=True,
                     dhcp_guard=True, ra_guard=True)], None, None),
    "policer": ("this", SNOOPING_OFF, [dict(name="a", tx_rate="40gbit")], None, None),
    "shaper": ("this", SNOOPING_OFF, [dict(name="b", rx_rate="40gbit")], None, None),
    "mirror": ("this", SNOOPING_OFF, [dict(name="m", ipv4="198.18.9.3/24", queues=1)],
               {"mirror": [{"name": "span", "select_src_port": ["a"], "output_port": "m"}]}, None),
    "security group": ("this", SNOOPING_OFF,
                       [dict(name="a", security_groups=["bench"]), dict(name="b", security_groups=["bench"])],
                       {"security_group": [{"name": "bench", "rules": [filler(i) for i in range(98)]
                                            + [{"direction": "in"}, {"direction": "out"}]}]}, None),
    "ipfix": ("this", SNOOPING_OFF, [], {"ipfix": {"targets": [COLLECTOR], "sampling": 1}}, None),
    "capture": ("this", SNOOPING_OFF, [], None, capture),
    "trace waiting": ("this", SNOOPING_OFF, [], None, trace_waiting),
}


@contextlib.contextmanager
def forged_allowed(t, then=None):
    """a's and b's forged-MAC check off (`allow_forged_transmits`, set
    only at run time), then `then`'s context."""
    for vm in ("a", "b"):
        t.hv("port", vm, "set", "allow_forged_transmits=on")
    with then(t) if then else contextlib.nullcontext():
        yield


def bare_build():
    """The build without feature stages (it says so in its version), or
    None."""
    root = Path(__file__).resolve().parents[2]
    path = Path(os.environ.get("HVNET_LAB_BARE", root / "target" / "bare" / "release" / "hvnet"))
    if not path.exists():
        return None
    version = subprocess.run([str(path), "--version"], capture_output=True, text=True).stdout
    if "bare arcs" not in version:
        raise RuntimeError(f"{path} is not a build without the feature stages ({version.strip()})")
    return str(path.resolve())


def feature_cost(tmp, quick, reps, log):
    secs = 2 if quick else 4
    bare = bare_build()
    if not bare:
        print("lab: feature-cost: no build without the feature stages (HVNET_LAB_BARE, or `RUSTFLAGS=\"--cfg "
              "hvnet_bare_arcs\" cargo build --release -p hvnet --target-dir target/bare`); measuring without it",
              flush=True)
    # HVNET_LAB_FEATURES=bare,off: only those configurations (more runs
    # of a pair whose difference is inside one run's noise).
    only = [c for c in os.environ.get("HVNET_LAB_FEATURES", "").split(",") if c]
    unknown = [c for c in only if c not in FEATURES]
    if unknown:
        raise RuntimeError(f"HVNET_LAB_FEATURES: {', '.join(unknown)}: not one of {', '.join(FEATURES)}")
    configs = [c for c in FEATURES if (c != "bare" or bare) and (not only or c in only)]
    if "off" not in configs:
        configs.append("off")

    def one(config):
        build, switch, vms, tables, during = FEATURES[config]
        binary = bare if build == "bare" else hvlab.hvnet_bin()
        with hvlab.hvnet_binary(binary):
            r = run_hvnet(tmp, huge, 64, secs, switch=switch,
                          vms=[dict(name="a", **DEFAULTS_OFF), dict(name="b", **DEFAULTS_OFF), *vms], tables=tables,
                          during=lambda t: forged_allowed(t, during))
        if r["refused_at_a"]:
            raise RuntimeError(f"{config}: a's port dropped {r['refused_at_a']} frames: the feature refused "
                               "what it should pass, and the figure would be of less work")
        log.append({"command": f"{config}: dpdk-testpmd txonly --txpkts=64 -> dpdk-testpmd rxonly, {secs} s "
                               "measured", "config": config, **r})
        return r

    with hugepages(HUGEPAGES) as huge:
        runs = interleaved(configs, reps, one)
    ns = {c: median([r["ns_per_frame"] for r in rs]) for c, rs in runs.items()}
    off = ns["off"]
    parts = []
    if "bare" in ns:
        parts.append(f"every feature off: {off:.0f} ns per frame, {off / ns['bare']:.3f}x the build without "
                     f"feature stages ({ns['bare']:.0f} ns)")
    else:
        parts.append(f"every feature off: {off:.0f} ns per frame (no build without the feature stages to compare)")
    parts += [f"{c} {ns[c] / off:.2f}x ({ns[c] - off:+.0f} ns)" for c in configs if c not in ("bare", "off")]
    note = ("vhost-frames' set-up at 64 B on split virtqueues: the daemon on core 0, both testpmd front ends on "
            f"core 1, frames dropped at b's full ring; {secs} s measured per run. The daemon's CPU (all its threads) "
            "per frame taken from a; a capture's own reader (the CLI) is not in it. Every configuration but "
            "`snooping` has IGMP/MLD snooping off.")
    figs = [measured("feature-cost", "CPU per vhost-user frame, with each feature on alone", "configuration",
                     "ns per frame", runs, "ns_per_frame", lambda c: ("hvnet", c),
                     "what does a feature cost a frame when on, and when off?", "; ".join(parts), note)]
    return figs, runs
