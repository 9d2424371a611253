"""containerd's CRI for the tests and the lab: the path a kubelet takes to
CNI, without a kubelet. A private containerd (its own root, state and
socket) with one CNI network; crictl asks it for pod sandboxes as a
kubelet would (`K8S_POD_*` in CNI_ARGS), from a local busybox "pause"
image (no registry); everything it made is removed at the end."""

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import hvlab

CRICTL = shutil.which("crictl") or "/usr/local/bin/crictl"


def available():
    """containerd, crictl, ctr, podman (to build the image) and runc."""
    return all(shutil.which(b) for b in ("containerd", "ctr", "podman", "runc")) and os.path.exists(CRICTL)


class Cri:
    """containerd with a private root, state and socket, one CNI network
    (`plugin`, a plugin's configuration, named `network`), and crictl.
    Its CNI plugins come from one directory (containerd 1.6 takes one):
    links to hvnet-cni beside this build's hvnet and to the reference
    plugins."""

    def __init__(self, network, plugin):
        w = self.w = Path(tempfile.mkdtemp(prefix="hvcr", dir="/tmp"))
        self.had = {d: Path(d).exists() for d in ("/var/lib/cni", "/run/containerd", "/var/lib/containers")}
        for d in ("net.d", "bin", "rootfs/bin", "rootfs/proc", "rootfs/sys", "rootfs/dev", "rootfs/tmp", "pods"):
            (w / d).mkdir(parents=True, exist_ok=True)
        for src in ("/usr/lib/cni", "/opt/cni/bin"):
            for f in Path(src).glob("*") if Path(src).is_dir() else ():
                if not (w / "bin" / f.name).exists():
                    (w / "bin" / f.name).symlink_to(f)
        # This build's plugin, never an older one installed elsewhere.
        ours = Path(hvlab.hvnet_bin()).parent / "hvnet-cni"
        if not ours.exists():
            shutil.rmtree(w, ignore_errors=True)
            raise RuntimeError(f"{ours} is not built: cargo build --release -p hvnet-cni")
        (w / "bin" / "hvnet-cni").unlink(missing_ok=True)
        (w / "bin" / "hvnet-cni").symlink_to(ours)
        self.network = network
        (w / "net.d" / f"10-{network}.conflist").write_text(
            json.dumps({"cniVersion": "1.0.0", "name": network, "plugins": [plugin]}))
        self.image = "localhost/hvnet-cri-pause:1"
        # restrict_oom_score_adj and disable_hugetlb_controller: runc fails
        # in this machine's sandbox without them.
        (w / "config.toml").write_text(f"""version = 2
root = "{w}/root"
state = "{w}/state"
[grpc]
  address = "{w}/containerd.sock"
[ttrpc]
  address = "{w}/containerd.sock.ttrpc"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{self.image}"
  restrict_oom_score_adj = true
  disable_hugetlb_controller = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{w}/bin"
    conf_dir = "{w}/net.d"
    max_conf_num = 1
""")
        self.sock = f"unix://{w}/containerd.sock"
        self.proc = None
        self.pods = {}

    def crictl(self, *args, timeout=120, check=True):
        r = subprocess.run([CRICTL, "-r", self.sock, "-i", self.sock, "-t", "60s", *args],
                           capture_output=True, text=True, timeout=timeout)
        if check and r.returncode != 0:
            raise AssertionError(f"crictl {' '.join(args)}: {r.stderr}")
        return r

    def __enter__(self):
        w = self.w
        self.log = open(w / "containerd.log", "w")
        self.proc = subprocess.Popen(["containerd", "--config", str(w / "config.toml")], stdout=self.log,
                                     stderr=subprocess.STDOUT)
        try:
            if not hvlab.eventually(lambda: (w / "containerd.sock").exists(), timeout=60):
                raise RuntimeError("containerd did not start: " + (w / "containerd.log").read_text()[-2000:])
            self._pause_image()
            # The CRI plugin is ready once it has read the CNI network
            # (its NetworkReady condition true).
            if not hvlab.eventually(self.network_ready, timeout=60):
                raise RuntimeError("containerd's CRI did not take the CNI network: "
                                   + self.crictl("info", check=False).stdout[-2000:])
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def network_ready(self):
        r = self.crictl("info", check=False)
        try:
            conditions = json.loads(r.stdout)["status"]["conditions"]
        except (ValueError, KeyError, TypeError):
            return False
        return any(c.get("type") == "NetworkReady" and c.get("status") for c in conditions)

    def _pause_image(self):
        """busybox `sleep` as the sandbox image, built with podman in a
        private store and imported with ctr."""
        w, root = self.w, self.w / "rootfs"
        shutil.copy("/bin/busybox", root / "bin/busybox")
        (root / "bin/sleep").symlink_to("busybox")
        conf = w / "containers.conf"
        conf.write_text(f'[engine]\nruntime = "runc"\ncgroup_manager = "cgroupfs"\nevents_logger = "file"\n'
                        f'tmp_dir = "{w}/ptmp"\n')
        env = dict(os.environ, CONTAINERS_CONF=str(conf))
        pm = ["podman", "--root", str(w / "pstore"), "--runroot", str(w / "prun")]
        tar = subprocess.run(["tar", "-C", str(root), "-cf", "-", "."], capture_output=True, check=True).stdout
        subprocess.run([*pm, "import", "-q", "--change", 'ENTRYPOINT ["/bin/sleep","100000"]', "-", self.image],
                       input=tar, env=env, capture_output=True, check=True, timeout=120)
        subprocess.run([*pm, "save", "-q", "--format", "docker-archive", "-o", str(w / "pause.tar"), self.image],
                       env=env, capture_output=True, check=True, timeout=120)
        subprocess.run([*pm, "rmi", "-a", "-f"], env=env, capture_output=True, timeout=120)
        subprocess.run(["ctr", "-a", f"{w}/containerd.sock", "-n", "k8s.io", "image", "import", str(w / "pause.tar")],
                       capture_output=True, check=True, timeout=120)

    def run(self, name, namespace="default"):
        """A pod sandbox (RunPodSandbox: CNI ADD) named `name`: its ID, IP
        and network namespace's path."""
        spec = self.w / "pods" / f"{name}.json"
        spec.write_text(json.dumps({"metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}",
                                                 "attempt": 1}, "log_directory": str(self.w / "pods"),
                                    "linux": {}}))
        pod = self.crictl("runp", str(spec)).stdout.strip()
        self.pods[name] = pod
        d = json.loads(self.crictl("inspectp", pod).stdout)
        return pod, d["status"]["network"]["ip"], f"/proc/{d['info']['pid']}/ns/net"

    def rm(self, name):
        """The pod stopped and removed (StopPodSandbox: CNI DEL)."""
        pod = self.pods.pop(name)
        self.crictl("stopp", pod)
        self.crictl("rmp", pod)

    def __exit__(self, *exc):
        for name in list(self.pods):
            try:
                self.rm(name)
            except (AssertionError, subprocess.TimeoutExpired):
                pass
        if self.proc:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.log.close()
        mounts = hvlab.run(["findmnt", "-rn", "-o", "TARGET"]).stdout.split()
        for m in sorted((m for m in mounts if m.startswith(f"{self.w}/")), reverse=True):
            hvlab.run(["umount", "-l", m], check=False)
        for d, had in self.had.items():
            if not had:
                shutil.rmtree(d, ignore_errors=True)
        shutil.rmtree(self.w, ignore_errors=True)
        return False
