"""hvnet-cni under a real container runtime: podman with its CNI network
backend runs containers from a local busybox image (no registry) on an
hvnet switch; they reach each other and the topology's VMs, a transfer
between two of them stays whole while others come and go, and what the
runtime removes leaves nothing behind (ports, interfaces, leases)."""

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

import hvlab
import helpers
from helpers import vm
from hvnet_lab import cri
from hvnet_lab.podman import Podman

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(not (shutil.which("podman") and shutil.which("runc")),
                       reason="podman and runc: scripts/install-deps.sh installs them"),
]

XFER = Path(__file__).with_name("xfer.py")


def container_ports(t):
    return {p["container"]["id"]: p for p in helpers.ports(t).values() if "container" in p}


def test_podman_containers_on_the_switch_come_and_go_and_leave_nothing(tmp_path):
    data = tmp_path / "data"
    data.write_bytes(os.urandom(16 << 20))
    want = hashlib.sha256(data.read_bytes()).hexdigest()
    leases = tmp_path / "leases"
    with hvlab.Topology(tmp_path, [vm("a", "10.81.0.1")], prefix="cp") as t, Podman() as p:
        p.network("cpnet", {"type": "hvnet-cni", "topology": t.name, "ipam": {
            "type": "host-local", "dataDir": str(leases),
            "ranges": [[{"subnet": "10.81.0.0/24", "rangeStart": "10.81.0.10", "gateway": "10.81.0.1"}]]}})
        id1, ip1, ns1 = p.run("c1", "cpnet")
        id2, ip2, ns2 = p.run("c2", "cpnet")
        mine = container_ports(t)
        assert sorted(mine) == sorted([id1, id2]) and all(m["link"] == "up" for m in mine.values()), mine
        p("exec", "c1", "ping", "-c", "1", "-W", "5", ip2)
        p("exec", "c2", "ping", "-c", "1", "-W", "5", "10.81.0.1")
        t.sh("a", f"ping -c 1 -W 5 {ip1}")
        # The daemon's descriptors and threads, to compare after the churn.
        pid = helpers.daemon_pid(t)
        held = lambda: (len(os.listdir(f"/proc/{pid}/fd")), len(os.listdir(f"/proc/{pid}/task")))  # noqa: E731
        before = held()
        # A transfer between two containers (its ends run in their
        # namespaces) while ten more come and go.
        server = subprocess.Popen(["nsenter", f"--net={ns2}", os.sys.executable, str(XFER), "serve", ip2, "5600"],
                                  stdout=subprocess.PIPE, text=True)
        try:
            hvlab.eventually(lambda: "5600" in hvlab.run(["nsenter", f"--net={ns2}", "ss", "-ltn"]).stdout, timeout=30)
            sender = subprocess.Popen(["nsenter", f"--net={ns1}", os.sys.executable, str(XFER), "paced", ip2, "5600",
                                       str(data), str(4 << 20)])
            for i in range(10):
                p.run(f"churn{i}", "cpnet")
                if i >= 2:
                    p("rm", "-f", "-t", "0", f"churn{i - 2}")
            p("rm", "-f", "-t", "0", "churn8", "churn9")
            assert sender.wait(timeout=120) == 0
            digest, n = server.communicate(timeout=60)[0].split()
        finally:
            server.kill()
        assert (digest, int(n)) == (want, 16 << 20)
        assert sorted(container_ports(t)) == sorted([id1, id2])
        # Nothing of the ten is left in the daemon either (a removed
        # port's queues close once every worker has let it go).
        assert hvlab.eventually(lambda: held() == before, timeout=10), (held(), before)
        # Removed: their ports, interfaces and leases go.
        p("rm", "-f", "-t", "0", "c1", "c2")
        assert container_ports(t) == {}
        assert sorted(helpers.ports(t)) == ["a"]
        left = [f.name for f in (leases / "cpnet").iterdir() if f.name[0].isdigit()]
        assert left == [], left


@pytest.mark.skipif(not cri.available(), reason="containerd, crictl and podman: scripts/install-deps.sh installs them")
def test_cri_pods_on_the_switch_as_a_kubelet_asks(tmp_path):
    """containerd's CRI (the kubelet's path) calls hvnet-cni with
    Kubernetes' CNI_ARGS: pods reach each other and the topology's VMs,
    and stopping and removing them leaves nothing behind."""
    leases = tmp_path / "leases"
    with hvlab.Topology(tmp_path, [vm("a", "10.82.0.1")], prefix="cr") as t, cri.Cri("crnet", {
            "type": "hvnet-cni", "topology": t.name, "ipam": {
                "type": "host-local", "dataDir": str(leases),
                "ranges": [[{"subnet": "10.82.0.0/24", "rangeStart": "10.82.0.10", "gateway": "10.82.0.1"}]]}}) as c:
        pid = helpers.daemon_pid(t)
        held = lambda: (len(os.listdir(f"/proc/{pid}/fd")), len(os.listdir(f"/proc/{pid}/task")))  # noqa: E731
        before = held()
        id1, ip1, ns1 = c.run("pod1")
        id2, ip2, ns2 = c.run("pod2", namespace="web")
        mine = container_ports(t)
        assert sorted(mine) == sorted([id1, id2]) and all(m["link"] == "up" for m in mine.values()), mine
        # The pod as the kubelet's CNI_ARGS named it.
        assert (mine[id1]["container"]["pod"], mine[id2]["container"]["pod"]) == ("default/pod1", "web/pod2")
        for ns, peer in ((ns1, ip2), (ns2, ip1), (ns1, "10.82.0.1")):
            hvlab.run(["nsenter", f"--net={ns}", "ping", "-c", "1", "-W", "5", peer])
        t.sh("a", f"ping -c 1 -W 5 {ip2}")
        # A few more come and go while the first two stay.
        for i in range(5):
            c.run(f"churn{i}")
            c.rm(f"churn{i}")
        assert sorted(container_ports(t)) == sorted([id1, id2])
        c.rm("pod1")
        c.rm("pod2")
        assert container_ports(t) == {}
        assert sorted(helpers.ports(t)) == ["a"]
        left = [f.name for f in (leases / "crnet").iterdir() if f.name[0].isdigit()]
        assert left == [], left
        assert hvlab.eventually(lambda: held() == before, timeout=10), (held(), before)
