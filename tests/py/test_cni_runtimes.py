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
import tempfile
from pathlib import Path

import pytest

import hvlab
import helpers
from helpers import vm

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(not (shutil.which("podman") and shutil.which("runc")),
                       reason="podman and runc: scripts/install-deps.sh installs them"),
]

XFER = Path(__file__).with_name("xfer.py")


class Podman:
    """podman with a private store, configuration and CNI directory in a
    directory of its own (a short path: podman refuses a run root longer
    than 50 characters), the CNI backend and runc (crun refuses this
    host's cgroup layout); everything it made is removed at the end."""

    def __init__(self):
        w = self.w = Path(tempfile.mkdtemp(prefix="hvpm", dir="/tmp"))
        self.had_containers = Path("/var/lib/containers").exists()
        self.had_cni = Path("/var/lib/cni").exists()
        for d in ("tmp", "net.d", "rootfs/bin", "rootfs/proc", "rootfs/sys", "rootfs/dev", "rootfs/tmp"):
            (w / d).mkdir(parents=True, exist_ok=True)
        plugins = [str(Path(hvlab.hvnet_bin()).parent), "/usr/lib/cni", "/opt/cni/bin"]
        (w / "containers.conf").write_text(f"""[containers]
default_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]
[network]
network_backend = "cni"
network_config_dir = "{w}/net.d"
cni_plugin_dirs = {json.dumps(plugins)}
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
tmp_dir = "{w}/tmp"
""")
        self.env = dict(os.environ, CONTAINERS_CONF=str(w / "containers.conf"))
        self.image = "localhost/hvnet-cni-busybox:1"

    def __call__(self, *args, check=True, timeout=120):
        argv = ["podman", "--root", str(self.w / "storage"), "--runroot", str(self.w / "run"), *args]
        r = subprocess.run(argv, env=self.env, capture_output=True, text=True, timeout=timeout)
        if check and r.returncode != 0:
            raise AssertionError(f"{' '.join(args)}: {r.stderr}")
        return r

    def __enter__(self):
        root = self.w / "rootfs"
        shutil.copy("/bin/busybox", root / "bin/busybox")
        for a in ("sh", "ping", "ip", "sleep", "cat"):
            (root / "bin" / a).symlink_to("busybox")
        tar = subprocess.run(["tar", "-C", str(root), "-cf", "-", "."], capture_output=True, check=True).stdout
        subprocess.run(["podman", "--root", str(self.w / "storage"), "--runroot", str(self.w / "run"), "import", "-q",
                        "-", self.image], input=tar, env=self.env, capture_output=True, check=True, timeout=120)
        return self

    def __exit__(self, *exc):
        self("rm", "-a", "-f", "-t", "0", check=False)
        self("rmi", "-a", "-f", check=False)
        mounts = hvlab.run(["findmnt", "-rn", "-o", "TARGET"]).stdout.split()
        for m in sorted((m for m in mounts if m.startswith(f"{self.w}/")), reverse=True):
            hvlab.run(["umount", "-l", m], check=False)
        if not self.had_containers:
            shutil.rmtree("/var/lib/containers", ignore_errors=True)
        if not self.had_cni:
            shutil.rmtree("/var/lib/cni", ignore_errors=True)
        shutil.rmtree(self.w, ignore_errors=True)
        return False

    def network(self, name, plugin):
        (self.w / "net.d" / f"{name}.conflist").write_text(
            json.dumps({"cniVersion": "1.0.0", "name": name, "plugins": [plugin]}))

    def run(self, name, network):
        self("run", "-d", "--network", network, "--name", name, self.image, "sleep", "600")
        info = json.loads(self("inspect", name).stdout)[0]
        return info["Id"], info["NetworkSettings"]["Networks"][network]["IPAddress"], \
            info["NetworkSettings"]["SandboxKey"]


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
        # Removed: their ports, interfaces and leases go.
        p("rm", "-f", "-t", "0", "c1", "c2")
        assert container_ports(t) == {}
        assert sorted(helpers.ports(t)) == ["a"]
        left = [f.name for f in (leases / "cpnet").iterdir() if f.name[0].isdigit()]
        assert left == [], left
