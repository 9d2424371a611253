"""Containers through CNI: how long a container takes to be on the
network with hvnet-cni, beside the reference `bridge` plugin, in the same
run (a measurement: no study publishes it).

podman (CNI backend, runc) starts containers from a local busybox image
on one network: hvnet-cni on a running topology's switch, or the `bridge`
plugin (a Linux bridge, no gateway, no NAT), both with `host-local`
addresses. A peer container starts first; then each container is timed
from `podman run` to its first answered ping to the peer (pinged from its
namespace every 10 ms), and from `podman rm` to its return. What is left
afterwards (ports, interfaces, leases) is counted: 0 is the only right
answer."""

import json
import subprocess
import time
from pathlib import Path

import hvlab

from .figures import measured
from .podman import Podman
from .runners import interleaved
from .verdict import median

SUBNET = "198.18.183"
PLUGINS = ["hvnet-cni", "bridge"]


def first_answer(ns, peer, timeout=30.0):
    """Pings `peer` from namespace `ns` every 10 ms until it answers."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r = subprocess.run(["nsenter", f"--net={ns}", "ping", "-c", "1", "-W", "0.01", peer],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if r.returncode == 0:
            return
        time.sleep(0.01)
    raise RuntimeError(f"no answer from {peer} in {timeout} s")


def one_run(tmp, plugin, n):
    leases = Path(tmp) / f"leases-{plugin}"
    ipam = {"type": "host-local", "dataDir": str(leases),
            "ranges": [[{"subnet": f"{SUBNET}.0/24", "rangeStart": f"{SUBNET}.10"}]]}
    bridge = hvlab.unique("cnib")
    starts, dels = [], []
    with hvlab.Topology(Path(tmp), [dict(name="a", ipv4=f"{SUBNET}.1/24")], prefix="ct") as t, Podman() as p:
        if plugin == "hvnet-cni":
            conf = {"type": "hvnet-cni", "topology": t.name, "ipam": ipam}
        else:
            conf = {"type": "bridge", "bridge": bridge, "isGateway": False, "ipMasq": False, "ipam": ipam}
        p.network("ctnet", conf)
        try:
            _, peer, _ = p.run("peer", "ctnet")
            for i in range(n):
                t0 = time.monotonic()
                p("run", "-d", "--network", "ctnet", "--name", f"c{i}", p.image, "sleep", "600")
                ns = json.loads(p("inspect", f"c{i}").stdout)[0]["NetworkSettings"]["SandboxKey"]
                first_answer(ns, peer)
                starts.append(time.monotonic() - t0)
                t1 = time.monotonic()
                p("rm", "-f", "-t", "0", f"c{i}")
                dels.append(time.monotonic() - t1)
            p("rm", "-f", "-t", "0", "peer")
            if plugin == "hvnet-cni":
                left = sum(1 for r in json.loads(t.hv("ports", "--json").stdout) if "container" in r)
            else:
                out = hvlab.run(["ip", "-j", "link", "show", "master", bridge], check=False).stdout
                left = len(json.loads(out)) if out.strip() else 0
            left += sum(1 for f in leases.glob("ctnet/*") if f.name[0].isdigit())
        finally:
            hvlab.run(["ip", "link", "del", bridge], check=False)
    return dict(start_ms=median(starts) * 1e3, start_worst_ms=max(starts) * 1e3, del_ms=median(dels) * 1e3,
                containers=n, left=left)


def container_start(tmp, quick, reps, log):
    n = 5 if quick else 20

    def one(plugin):
        r = one_run(tmp, plugin, n)
        log.append({"command": f"{plugin}: podman run of {n} containers one after another, each to its first "
                               "answered ping, then podman rm", "plugin": plugin, **r})
        return r

    runs = interleaved(PLUGINS, reps, one)
    per = lambda c, k: median([r[k] for r in runs[c]])  # noqa: E731
    said = "; ".join(
        f"{c}: {per(c, 'start_ms'):.0f} ms to the first answer (worst {max(r['start_worst_ms'] for r in runs[c]):.0f}),"
        f" {per(c, 'del_ms'):.0f} ms to remove, {max(r['left'] for r in runs[c])} left"
        for c in PLUGINS)
    ratio = per("hvnet-cni", "start_ms") / per("bridge", "start_ms")
    said += f"; hvnet-cni / bridge {ratio:.2f}x to start, " \
            f"{per('hvnet-cni', 'del_ms') / per('bridge', 'del_ms'):.2f}x to remove"
    note = (f"podman 4 (CNI backend, runc), a busybox image imported locally; {n} containers per run one after "
            "another on one network with host-local addresses, a peer container started first; timed from podman "
            "run to the first answered ping (every 10 ms, from the container's namespace) and podman rm's return.")
    place = lambda c: (c, "")  # noqa: E731
    figs = [
        measured("container-start", "podman run to the container's first answered ping", "", "ms", runs, "start_ms",
                 place, "how long until a container is on the network, with hvnet-cni and with the bridge plugin?",
                 said, note),
        measured("container-del", "podman rm of a container", "", "ms", runs, "del_ms", place,
                 "how long does removing a container take?", said, note),
    ]
    return figs, {c: rs for c, rs in runs.items()}
