"""podman for the tests and the lab: a private store, configuration and
CNI directory, the CNI network backend, and a local busybox image (no
registry); everything it made removed at the end."""

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import hvlab


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
