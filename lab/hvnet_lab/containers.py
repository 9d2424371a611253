"""Containers through CNI: how long a container takes to be on the
network with hvnet-cni, beside the reference `bridge` plugin, in the same
run (a measurement: no study publishes it).

Two runtimes start containers from a local busybox image on one network:
podman (CNI backend, runc) and containerd's CRI driven by crictl (pod
sandboxes, as a kubelet asks); the network is hvnet-cni on a running
topology's switch, or the `bridge` plugin (a Linux bridge, no gateway,
no NAT), both with `host-local` addresses. A peer starts first; then each
container is timed from `podman run` (`crictl runp`) to its first
answered ping to the peer (pinged from its namespace every 10 ms), and
from `podman rm` (`crictl stopp` and `rmp`) to their return. What is
left afterwards (ports, interfaces, leases) is counted: 0 is the only
right answer.

`container-churn`: 200 containers (podman) and 100 pods (crictl) started
and removed one after another, while two others carry a SHA-256-checked
file between them: the file intact, and what is left after against
before (ports, interfaces, leases, the daemon's descriptors and
threads)."""

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import hvlab

from . import cri
from .figures import measured
from .podman import Podman
from .runners import interleaved
from .verdict import median

SUBNET = "198.18.183"
XFER = Path(__file__).resolve().parents[2] / "tests" / "py" / "xfer.py"
PLUGINS = ["hvnet-cni", "bridge"]


class OnPodman(Podman):
    """podman on one CNI network, as `cri.Cri` is: `run(name)` and
    `rm(name)`."""

    def __init__(self, network, plugin):
        super().__init__()
        self.net = network
        self.network(network, plugin)

    def run(self, name):
        return super().run(name, self.net)

    def rm(self, name):
        self("rm", "-f", "-t", "0", name)


RUNTIMES = {"podman": OnPodman, "crictl": cri.Cri}


def runtimes():
    """The runtimes this machine has (crictl's path needs containerd and
    crictl, which scripts/install-deps.sh installs)."""
    return ["podman"] + (["crictl"] if cri.available() else [])


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


def one_run(tmp, runtime, plugin, n):
    leases = Path(tmp) / f"leases-{plugin}"
    ipam = {"type": "host-local", "dataDir": str(leases),
            "ranges": [[{"subnet": f"{SUBNET}.0/24", "rangeStart": f"{SUBNET}.10"}]]}
    bridge = hvlab.unique("cnib")
    starts, dels = [], []
    with hvlab.Topology(Path(tmp), [dict(name="a", ipv4=f"{SUBNET}.1/24")], prefix="ct") as t:
        if plugin == "hvnet-cni":
            conf = {"type": "hvnet-cni", "topology": t.name, "ipam": ipam}
        else:
            conf = {"type": "bridge", "bridge": bridge, "isGateway": False, "ipMasq": False, "ipam": ipam}
        try:
            with RUNTIMES[runtime]("ctnet", conf) as r:
                _, peer, _ = r.run("peer")
                for i in range(n):
                    t0 = time.monotonic()
                    _, _, ns = r.run(f"c{i}")
                    first_answer(ns, peer)
                    starts.append(time.monotonic() - t0)
                    t1 = time.monotonic()
                    r.rm(f"c{i}")
                    dels.append(time.monotonic() - t1)
                r.rm("peer")
                if plugin == "hvnet-cni":
                    left = sum(1 for p in json.loads(t.hv("ports", "--json").stdout) if "container" in p)
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
    configs = [(rt, plugin) for rt in runtimes() for plugin in PLUGINS]
    how = {"podman": "podman run of {n} containers one after another, each to its first answered ping, then "
                     "podman rm",
           "crictl": "crictl runp of {n} pod sandboxes one after another, each to its first answered ping, then "
                     "crictl stopp and rmp"}

    def one(c):
        rt, plugin = c
        r = one_run(tmp, rt, plugin, n)
        log.append({"command": f"{plugin}: " + how[rt].format(n=n), "runtime": rt, "plugin": plugin, **r})
        return r

    runs = interleaved(configs, reps, one)
    per = lambda c, k: median([r[k] for r in runs[c]])  # noqa: E731
    said = "; ".join(
        f"{rt} on {plugin}: {per((rt, plugin), 'start_ms'):.0f} ms to the first answer "
        f"(worst {max(r['start_worst_ms'] for r in runs[(rt, plugin)]):.0f}), "
        f"{per((rt, plugin), 'del_ms'):.0f} ms to remove, {max(r['left'] for r in runs[(rt, plugin)])} left"
        for rt, plugin in configs)
    for rt in runtimes():
        said += (f"; {rt}: hvnet-cni / bridge {per((rt, 'hvnet-cni'), 'start_ms') / per((rt, 'bridge'), 'start_ms'):.2f}x"
                 f" to start, {per((rt, 'hvnet-cni'), 'del_ms') / per((rt, 'bridge'), 'del_ms'):.2f}x to remove")
    note = (f"podman 4 (CNI backend, runc) and containerd 1.6's CRI driven by crictl (pod sandboxes of a busybox "
            f"'pause' image imported locally); {n} containers per run one after another on one network with "
            "host-local addresses, a peer started first; timed from podman run (crictl runp) to the first answered "
            "ping (every 10 ms, from the container's namespace) and podman rm's (crictl stopp and rmp's) return.")
    place = lambda c: (c[1], c[0])  # noqa: E731
    figs = [
        measured("container-start", "A container's start to its first answered ping", "runtime", "ms", runs,
                 "start_ms", place,
                 "how long until a container is on the network, with hvnet-cni and with the bridge plugin?",
                 said, note),
        measured("container-del", "A container's removal", "runtime", "ms", runs, "del_ms", place,
                 "how long does removing a container take?", said, note),
    ]
    return figs, {f"{rt} {plugin}": rs for (rt, plugin), rs in runs.items()}


def held(pid):
    """The daemon's open descriptors and threads."""
    return len(os.listdir(f"/proc/{pid}/fd")), len(os.listdir(f"/proc/{pid}/task"))


def one_churn(tmp, runtime, n, data, want):
    leases = Path(tmp) / f"leases-churn-{runtime}"
    ipam = {"type": "host-local", "dataDir": str(leases),
            "ranges": [[{"subnet": f"{SUBNET}.0/24", "rangeStart": f"{SUBNET}.10"}]]}
    with hvlab.Topology(Path(tmp), [dict(name="a", ipv4=f"{SUBNET}.1/24")], prefix="cc") as t, \
            RUNTIMES[runtime]("ccnet", {"type": "hvnet-cni", "topology": t.name, "ipam": ipam}) as p:
        _, ip1, ns1 = p.run("src")
        _, ip2, ns2 = p.run("dst")
        pid = json.loads(Path(f"/run/hvnet/{t.name}/state.json").read_text())["pid"]
        time.sleep(1)
        before = held(pid)
        server = subprocess.Popen(["nsenter", f"--net={ns2}", sys.executable, str(XFER), "serve", ip2, "5700"],
                                  stdout=subprocess.PIPE, text=True)
        t0 = time.monotonic()
        try:
            hvlab.eventually(lambda: "5700" in hvlab.run(["nsenter", f"--net={ns2}", "ss", "-ltn"]).stdout,
                             timeout=30)
            # Paced to last about as long as the churn.
            sender = subprocess.Popen(["nsenter", f"--net={ns1}", sys.executable, str(XFER), "paced", ip2, "5700",
                                       str(data), str(max(data.stat().st_size // max(n // 4, 1), 1 << 16))])
            for i in range(n):
                p.run(f"k{i}")
                p.rm(f"k{i}")
            churn_s = time.monotonic() - t0
            sender.wait(timeout=600)
            out = server.communicate(timeout=120)[0].split()
        finally:
            server.kill()
        intact = out[:1] == [want]
        ports = sum(1 for r in json.loads(t.hv("ports", "--json").stdout) if "container" in r) - 2
        lease_files = sum(1 for f in leases.glob("ccnet/*") if f.name[0].isdigit()) - 2
        # (A removed port's queues close once every worker let it go.)
        hvlab.eventually(lambda: held(pid) == before, timeout=15)
        after = held(pid)
    return dict(containers=n, churn_s=churn_s, per_container_ms=churn_s / n * 1e3, intact=intact,
                ports_left=ports, leases_left=lease_files, fds_left=after[0] - before[0],
                threads_left=after[1] - before[1])


def container_churn(tmp, quick, reps, log):
    sizes = {"podman": 50 if quick else 200, "crictl": 25 if quick else 100}
    data = Path(tmp) / "churn-data"
    data.write_bytes(os.urandom(32 << 20))
    want = hashlib.sha256(data.read_bytes()).hexdigest()
    what = {"podman": "podman run and rm of {n} containers", "crictl": "crictl runp, stopp and rmp of {n} pods"}

    def one(rt):
        r = one_churn(tmp, rt, sizes[rt], data, want)
        log.append({"command": what[rt].format(n=sizes[rt]) + " while two others carry a 32 MiB file",
                    "runtime": rt, **r})
        return r

    runs = interleaved(runtimes(), reps, one)
    parts = []
    for rt, rs in runs.items():
        left = {k: max(r[k] for r in rs) for k in ("ports_left", "leases_left", "fds_left", "threads_left")}
        parts.append(f"{rt}: {sizes[rt]} started and removed in {median([r['churn_s'] for r in rs]):.0f} s "
                     f"({median([r['per_container_ms'] for r in rs]):.0f} ms each); the file intact in "
                     f"{sum(r['intact'] for r in rs)} of {len(rs)} runs; left after: " +
                     ", ".join(f"{k.removesuffix('_left')} {v}" for k, v in left.items()))
    note = ("podman (CNI backend, runc) and containerd's CRI driven by crictl, hvnet-cni with host-local "
            "addresses; each container (pod) run then removed, one after another, while a 32 MiB file crosses "
            "between two others on the network (SHA-256 checked); left after: the plugin's ports and leases beyond "
            "the two, the daemon's descriptors and threads against before the churn.")
    place = lambda c: (c, "")  # noqa: E731
    figs = [measured("container-churn", "A container started and removed, under a transfer", "", "ms each", runs,
                     "per_container_ms", place, "do containers that come and go disturb the others or leave "
                     "anything behind?", "; ".join(parts), note)]
    return figs, {c: v for c, v in runs.items()}
