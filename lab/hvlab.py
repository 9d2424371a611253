"""The lab's host helpers, which the system tests import too: network
namespaces and topologies that always go away, the hvnet binary, CPU
groups, and waiting for readiness instead of sleeping."""

import contextlib
import os
import shutil
import signal
import subprocess
import threading
import time
import uuid

import tomli_w
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def hvnet_bin() -> str:
    """The hvnet binary under test (HVNET_BIN, else the release build)."""
    b = os.environ.get("HVNET_BIN") or str(ROOT / "target" / "release" / "hvnet")
    if not Path(b).exists():
        raise RuntimeError(f"{b} not built; run `cargo build --release` first")
    return b


@contextlib.contextmanager
def hvnet_binary(path: str):
    """Runs what is inside with `path` as the hvnet binary under test (a
    baseline build beside this one), then puts the previous one back."""
    old = os.environ.get("HVNET_BIN")
    os.environ["HVNET_BIN"] = path
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("HVNET_BIN", None)
        else:
            os.environ["HVNET_BIN"] = old


def run(cmd, check=True, **kw):
    """Runs a command (list or string), capturing output as text."""
    if isinstance(cmd, str):
        cmd = ["sh", "-c", cmd]
    return subprocess.run(cmd, check=check, capture_output=True, text=True, **kw)


def hvnet(*args, check=True):
    return run([hvnet_bin(), *map(str, args)], check=check)


def is_root() -> bool:
    return os.geteuid() == 0


def unique(prefix: str) -> str:
    """A namespace or interface name no other test run uses (<= 15 chars)."""
    return f"{prefix}{uuid.uuid4().hex[:8]}"[:15]


def wait_for_line(stream, text: str, timeout=30.0):
    """Reads lines from a process's output until one contains `text` (the
    process says it is ready), then keeps draining the stream in the
    background so the process never blocks on a full pipe."""
    found = threading.Event()

    def pump():
        for raw in iter(stream.readline, b"" if not hasattr(stream, "encoding") else ""):
            line = raw.decode(errors="replace") if isinstance(raw, bytes) else raw
            if text in line:
                found.set()
        found.set()

    threading.Thread(target=pump, daemon=True).start()
    if not found.wait(timeout):
        raise TimeoutError(f"no line with {text!r} within {timeout} s")


def wait_listening(ns_name: str, port: int, timeout=30.0):
    """Waits until a TCP socket listens on `port` in namespace `ns_name`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = run(["ip", "netns", "exec", ns_name, "ss", "-Hltn", f"sport = :{port}"], check=False).stdout
        if out.strip():
            return
        time.sleep(0.02)
    raise TimeoutError(f"nothing listens on port {port} in {ns_name} after {timeout} s")


def eventually(check, timeout=10.0, every=0.02):
    """Polls `check()` until it returns something true (returned) or the
    timeout passes (the last value is returned, for the assertion)."""
    deadline = time.monotonic() + timeout
    while True:
        v = check()
        if v or time.monotonic() > deadline:
            return v
        time.sleep(every)


def rss_bytes(pid) -> int:
    """Resident memory of process `pid` (VmRSS), in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise LookupError(f"no VmRSS for {pid}")


def stop_procs(procs):
    """Ends processes this test started, by their own handles (PIDs)."""
    for p in procs:
        if p.poll() is None:
            p.terminate()
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def interrupt_group(p, grace=20):
    """Ends the process group `p` leads (started with
    `start_new_session`) as Ctrl-C does, so that testpmd prints its
    statistics, and kills the group if it has not ended after `grace`
    seconds."""
    if p.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGINT)
        try:
            p.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


class Netns:
    """A network namespace that is deleted when the context exits, even on
    failure; processes started with `popen` are ended (by PID) first."""

    def __init__(self, prefix="hvt"):
        self.name = unique(prefix)
        self.procs = []

    def __enter__(self):
        run(["ip", "netns", "add", self.name])
        try:
            self.sh("ip link set lo up")
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc):
        stop_procs(self.procs)
        run(["ip", "netns", "del", self.name], check=False)
        return False

    def sh(self, cmd, check=True, timeout=120):
        return run(["ip", "netns", "exec", self.name, "sh", "-c", cmd], check=check, timeout=timeout)

    def popen(self, cmd, **kw):
        p = subprocess.Popen(["ip", "netns", "exec", self.name, "sh", "-c", f"exec {cmd}"], **kw)
        self.procs.append(p)
        return p


@contextlib.contextmanager
def netns_pair(prefix="hvt"):
    """Two namespaces joined by a veth pair: (a, b, ifname_a, ifname_b)."""
    with Netns(prefix) as a, Netns(prefix) as b:
        ia, ib = unique("va"), unique("vb")
        run(["ip", "link", "add", ia, "netns", a.name, "type", "veth", "peer", "name", ib, "netns", b.name])
        yield a, b, ia, ib


def have(tool: str) -> bool:
    return shutil.which(tool) is not None


class Topology:
    """A topology brought up with `hvnet up` and always brought down.

    `vms` is a list of dicts of per-VM settings (name, ipv4, and any of
    mtu, queues, lro, tso, csum, ring1, ring2, vlan, ipv6); `uplinks` and
    `hosts` the same for `[[uplink]]` and `[[host]]` entries (an uplink's
    device name is made unique here when it is given as ""); `switch` the
    `[switch]` table; `libvirt` the `[libvirt]` table; `tables` any other
    top-level tables (`[[mirror]]`, `[ipfix]`, `[[security_group]]`)."""

    def __init__(self, tmp: Path, vms, fdb_aging_secs=300, prefix="t", uplinks=(), hosts=(), up_args=(),
                 netns=None, frr=None, switch=None, libvirt=None, tables=None):
        self.name = unique(prefix)[:12]
        self.up_args = list(up_args)
        self.vms = vms
        # A team (devices = [..]) names its members itself.
        self.uplinks = [dict(u) if "devices" in u else dict(u, device=u.get("device") or unique("hvu"))
                        for u in uplinks]
        self.hosts = [dict(h) for h in hosts]
        doc = {"name": self.name, "fdb_aging_secs": fdb_aging_secs, "vm": [dict(vm) for vm in vms]}
        # The switch in a namespace of its own (a host on this machine),
        # and FRR for EVPN started with it.
        if netns:
            doc["netns"] = netns
        if frr:
            doc["frr"] = frr
        if switch:
            doc["switch"] = switch
        if libvirt is not None:
            doc["libvirt"] = libvirt
        doc.update(tables or {})
        if self.uplinks:
            doc["uplink"] = self.uplinks
        if self.hosts:
            doc["host"] = self.hosts
        self.file = tmp / f"{self.name}.toml"
        self.file.write_text(tomli_w.dumps(doc))
        self.procs = []

    def __enter__(self):
        try:
            hvnet("up", *self.up_args, self.file)
        except BaseException:
            # Interrupted or failed half-way: what was made is removed too.
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc):
        stop_procs(self.procs)
        run([hvnet_bin(), "down", self.name], check=False)
        for vm in self.vms + self.hosts:
            if vm.get("kind", "netns") == "netns":
                run(["ip", "netns", "del", self.ns(vm["name"])], check=False)
        return False

    def apply(self, check=True, **tables):
        """Runs `hvnet up` on the running topology with its file's tables
        replaced by `tables` (a table given as None is removed): what a
        running switch takes at run time (`[[mirror]]`, `[ipfix]`, ...).
        Returns the completed `hvnet up`; with `check`, raises if it
        failed."""
        import tomllib

        doc = tomllib.loads(self.file.read_text())
        for k, v in tables.items():
            if v is None:
                doc.pop(k, None)
            else:
                doc[k] = v
        self.file.write_text(tomli_w.dumps(doc))
        return hvnet("up", self.file, check=check)

    def device(self, uplink: str) -> str:
        """The interface of uplink `uplink`."""
        return next(u["device"] for u in self.uplinks if u["name"] == uplink)

    def ns(self, vm: str) -> str:
        """The namespace of a VM or an external host."""
        return f"{self.name}-{vm}"

    def kind(self, vm) -> str:
        """A VM's kind ("netns" for external hosts and by default)."""
        return next((v.get("kind", "netns") for v in self.vms if v["name"] == vm), "netns")

    def argv(self, vm, cmd):
        """The command line that runs shell command `cmd` in a VM of any
        kind (a real guest through `hvnet exec`) or an external host."""
        if self.kind(vm) == "netns":
            return ["ip", "netns", "exec", self.ns(vm), "sh", "-c", cmd]
        return [hvnet_bin(), "exec", "-t", self.name, vm, "--", "sh", "-c", cmd]

    def sh(self, vm, cmd, check=True, timeout=120):
        return run(self.argv(vm, cmd), check=check, timeout=timeout)

    def popen(self, vm, cmd, **kw):
        p = subprocess.Popen(self.argv(vm, f"exec {cmd}"), **kw)
        self.procs.append(p)
        return p

    def wait_listening(self, vm, port: int, timeout=60.0):
        """Waits until something in `vm` listens on TCP `port`."""
        if self.kind(vm) == "netns":
            return wait_listening(self.ns(vm), port, timeout)
        eventually(lambda: f":{port} " in self.sh(vm, "ss -Hltn").stdout, timeout=timeout, every=0.1)

    def thread(self, vm, role="delivery", queue=0):
        """The kernel thread id of a VM's port thread, from hvnet's own view
        (`hvnet port VM --json`): role "delivery" is the VM's "vCPU" for
        receive, "ingress" the worker reading what it sends."""
        import json as _json

        for t in _json.loads(self.hv("port", vm, "--json").stdout)["threads"]:
            if t["role"] == role and t["queue"] == queue:
                return t["tid"]
        raise LookupError(f"no {role} thread for queue {queue} of {vm}")

    def hv(self, *args, check=True):
        return hvnet(*args, "-t", self.name, check=check)

    def stats(self, path):
        import json

        return json.loads(self.hv("stats", path, "--json").stdout)

    def link_counters(self, vm):
        """rx/tx packets and bytes of the VM's eth0, from the kernel."""
        base = "/sys/class/net/eth0/statistics/"
        out = self.sh(vm, f"cat {base}rx_packets {base}rx_bytes {base}tx_packets {base}tx_bytes").stdout.split()
        return dict(zip(["rx_packets", "rx_bytes", "tx_packets", "tx_bytes"], map(int, out)))


class CpuLimit:
    """A cgroup-v1 cpu group holding tasks to a share of one core (an
    emulated CPU limit, not a hypervisor's scheduler). Tasks go back to the
    root group and the group is removed on exit."""

    ROOT = Path("/sys/fs/cgroup/cpu")

    def __init__(self, percent: int):
        self.path = self.ROOT / unique("hvcpu")
        self.percent = percent

    def __enter__(self):
        self.path.mkdir()
        (self.path / "cpu.cfs_period_us").write_text("100000")
        (self.path / "cpu.cfs_quota_us").write_text(str(1000 * self.percent))
        return self

    def add(self, tid: int):
        (self.path / "tasks").write_text(str(tid))

    def add_process(self, pid: int):
        """All of a process's threads (and what it forks from now on)."""
        (self.path / "cgroup.procs").write_text(str(pid))

    def __exit__(self, *exc):
        for tid in (self.path / "tasks").read_text().split():
            try:
                (self.ROOT / "tasks").write_text(tid)
            except OSError:
                pass
        self.path.rmdir()
        return False
