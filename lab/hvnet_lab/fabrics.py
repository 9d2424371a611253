"""The fabrics two VMs can be joined by, each a context manager giving
`sh(vm, cmd)` and `popen(vm, cmd)` in the VMs a and b:
- Hvnet: `hvnet up`, TAP ports with virtio-net headers;
- HvnetUring: the same with io_uring TAP writes;
- Bridge: veth pairs into a Linux bridge in a namespace of its own;
- Ovs: Open vSwitch's userspace datapath with userspace TSO, its own
  ovsdb-server and ovs-vswitchd in a private run directory (stopped by
  their pidfiles).
"""

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import hvlab

A_IP, B_IP = "10.98.0.1", "10.98.0.2"
# The VXLAN network the tunnel fabrics use (wire_fabrics, Open vSwitch's endpoint).
VNI = 42

def running(pid):
    """True while `pid` runs (a zombie waiting to be reaped does not)."""
    try:
        return "\nState:\tZ" not in Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False


def link_exists(dev):
    return hvlab.run(["ip", "link", "show", dev], check=False).returncode == 0


class Fabric:
    name = "?"

    def __enter__(self):
        try:
            return self._up()
        except BaseException:
            # A half-built fabric is taken down too (also on Ctrl-C): its
            # namespaces, devices and daemons must not outlive a failed start.
            self.__exit__(None, None, None)
            raise

    def _up(self):
        raise NotImplementedError

    def ns(self, vm):
        raise NotImplementedError

    def sh(self, vm, cmd, **kw):
        return hvlab.run(["ip", "netns", "exec", self.ns(vm), "sh", "-c", cmd], **kw)

    def popen(self, vm, cmd):
        return subprocess.Popen(["ip", "netns", "exec", self.ns(vm), "sh", "-c", f"exec {cmd}"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def wait_listening(self, vm, port):
        hvlab.wait_listening(self.ns(vm), port)

    def command(self, vm, cmd):
        """How `cmd` is run in `vm`, as the report records it."""
        return f"ip netns exec {self.ns(vm)} {cmd}"


class Hvnet(Fabric):
    name = "hvnet"
    env = {}

    def __init__(self, tmp, mtu, kind="netns", **vm_settings):
        """`kind`: what the VMs are, "netns" (namespaces behind TAPs), "uml"
        or "qemu" (real guests on vhost-user ports; `hvnet lab run --vms`)."""
        a = dict(vm_settings.get("a", {}))
        b = dict(vm_settings.get("b", {}))
        vms = [dict(name="a", ipv4=A_IP + "/24", mtu=mtu, **a), dict(name="b", ipv4=B_IP + "/24", mtu=mtu, **b)]
        if kind != "netns":
            for vm in vms:
                vm["kind"] = kind
                if kind == "qemu":
                    # A QEMU guest's ring is its receive virtqueue (QEMU
                    # sets it up with 256 to 1024 entries) and it has no
                    # ring 2.
                    vm.pop("ring2", None)
                    if "ring1" in vm:
                        vm["ring1"] = min(max(vm["ring1"], 256), 1024)
        self.t = hvlab.Topology(Path(tmp), vms, prefix="bh")

    def __enter__(self):
        saved = {k: os.environ.get(k) for k in self.env}
        os.environ.update(self.env)
        try:
            self.t.__enter__()
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        # A real guest's driver uses one queue pair per vCPU until told to
        # use the others (as on a hypervisor: ethtool -L in the guest).
        for vm in self.t.vms:
            if vm.get("kind", "netns") != "netns" and vm.get("queues", 1) > 1:
                self.t.sh(vm["name"], f"ethtool -L eth0 combined {vm['queues']}")
        return self

    def __exit__(self, *e):
        return self.t.__exit__(*e)

    def ns(self, vm):
        return self.t.ns(vm)

    # Commands run in VMs of any kind (a real guest's through `hvnet exec`).
    def sh(self, vm, cmd, **kw):
        return self.t.sh(vm, cmd, **kw)

    def popen(self, vm, cmd):
        return self.t.popen(vm, cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def wait_listening(self, vm, port):
        self.t.wait_listening(vm, port)

    def command(self, vm, cmd):
        if self.t.kind(vm) == "netns":
            return super().command(vm, cmd)
        return f"hvnet exec -t {self.t.name} {vm} -- {cmd}"


def baseline():
    """hvnet from another binary (`HVNET_LAB_BASELINE`, e.g. a build of an
    earlier commit) as fabric "hvnet-base", or None: the measurements run
    it beside this build, interleaved."""
    binary = os.environ.get("HVNET_LAB_BASELINE")
    if not binary:
        return None

    class Base(Hvnet):
        name = "hvnet-base"
        env = {"HVNET_BIN": str(Path(binary).resolve())}

    return Base


class HvnetUring(Hvnet):
    """hvnet with io_uring for TAP writes (HVNET_IO_WRITE)."""

    name = "hvnet-uring"
    env = {"HVNET_IO_WRITE": "uring"}


class Bridge(Fabric):
    name = "bridge"

    def __init__(self, tmp, mtu, **_):
        self.mtu = mtu
        self.nss = {k: hvlab.Netns("bb") for k in ("a", "b", "sw")}

    def _up(self):
        for n in self.nss.values():
            n.__enter__()
        sw = self.nss["sw"]
        sw.sh("ip link add br0 type bridge && ip link set br0 up")
        for vm, ip in (("a", A_IP), ("b", B_IP)):
            hvlab.run(["ip", "link", "add", "eth0", "netns", self.nss[vm].name, "type", "veth",
                       "peer", "name", f"p{vm}", "netns", sw.name])
            sw.sh(f"ip link set p{vm} mtu {self.mtu} master br0 up")
            self.nss[vm].sh(f"ip link set eth0 mtu {self.mtu} up && ip addr add {ip}/24 dev eth0")
        return self

    def __exit__(self, *e):
        for n in self.nss.values():
            n.__exit__(*e)

    def ns(self, vm):
        return self.nss[vm].name


class Ovs(Fabric):
    """Open vSwitch userspace datapath with userspace TSO, in a private run
    directory; its daemons are stopped by their pidfiles."""

    name = "ovs"

    def __init__(self, tmp, mtu, **_):
        self.mtu = mtu
        self.daemons = OvsDaemons(None)
        self.nss = {k: hvlab.Netns("bo") for k in ("a", "b")}
        self.br = hvlab.unique("obr")[:12]
        # Each VM's port (its TAP's name on the bridge).
        self.taps = {}

    def vsctl(self, *args):
        return self.daemons.vsctl(*args)

    def _up(self):
        # The userspace datapath's device: ours to remove only if it was
        # not there before (another Open vSwitch may own it).
        self.had_netdev = link_exists("ovs-netdev")
        for n in self.nss.values():
            n.__enter__()
        self.daemons.start(config=["other_config:userspace-tso-enable=true"])
        self.vsctl("add-br", self.br, "--", "set", "bridge", self.br, "datapath_type=netdev")
        for vm, ip in (("a", A_IP), ("b", B_IP)):
            tap = hvlab.unique(f"ot{vm}")[:12]
            self.taps[vm] = tap
            self.vsctl("add-port", self.br, tap, "--", "set", "Interface", tap, "type=tap", f"mtu_request={self.mtu}")
            for _ in range(50):
                if hvlab.run(["ip", "link", "show", tap], check=False).returncode == 0:
                    break
                time.sleep(0.1)
            hvlab.run(["ip", "link", "set", tap, "netns", self.nss[vm].name])
            self.nss[vm].sh(f"ip link set {tap} name eth0 && ip link set eth0 mtu {self.mtu} up && ip addr add {ip}/24 dev eth0")
        return self

    def __exit__(self, *e):
        for n in self.nss.values():
            n.__exit__(*e)
        # The bridge first, while ovs-vswitchd still runs to remove its
        # devices; then the daemons, by their pidfiles; then any device they
        # left behind (ovs-vswitchd killed mid-way leaves them all).
        try:
            self.vsctl("--if-exists", "del-br", self.br)
        except subprocess.CalledProcessError:
            pass
        self.daemons.stop()
        for dev in [self.br] + ([] if self.had_netdev else ["ovs-netdev"]):
            if link_exists(dev):
                hvlab.run(["ip", "link", "del", dev], check=False)

    def ns(self, vm):
        return self.nss[vm].name


class OvsDaemons:
    """ovsdb-server and ovs-vswitchd in a private run directory, inside
    network namespace `ns` (or this one, for None); stopped by their
    pidfiles. Open vSwitch's devices (its bridges' internal ports,
    `ovs-netdev`) are that namespace's."""

    def __init__(self, ns):
        self.ns = ns
        self.dir = Path(tempfile.mkdtemp(prefix="hvnet-ovs-"))
        self.env = dict(os.environ, OVS_RUNDIR=str(self.dir), OVS_LOGDIR=str(self.dir), OVS_DBDIR=str(self.dir))
        self.db = f"unix:{self.dir}/db.sock"

    def run(self, *args):
        inside = ["ip", "netns", "exec", self.ns] if self.ns else []
        return subprocess.run([*inside, *args], check=True, capture_output=True, text=True, env=self.env)

    def sh(self, cmd):
        return self.run("sh", "-c", cmd)

    def vsctl(self, *args):
        return self.run("ovs-vsctl", f"--db={self.db}", "--timeout=10", *args)

    def start(self, config=(), vswitchd="ovs-vswitchd"):
        """Starts the daemons; `config`: `Open_vSwitch` table settings
        (`other_config:KEY=VALUE`) made before ovs-vswitchd reads them;
        `vswitchd`: the switch's binary (its DPDK build, say)."""
        d = self.dir
        self.run("ovsdb-tool", "create", f"{d}/conf.db", "/usr/share/openvswitch/vswitch.ovsschema")
        self.run("ovsdb-server", f"--remote=punix:{d}/db.sock", f"--pidfile={d}/ovsdb.pid", "--detach",
                 f"--log-file={d}/ovsdb.log", f"{d}/conf.db")
        self.vsctl("--no-wait", "init")
        if config:
            self.vsctl("--no-wait", "set", "Open_vSwitch", ".", *config)
        self.start_vswitchd(vswitchd)

    def start_vswitchd(self, vswitchd="ovs-vswitchd"):
        """ovs-vswitchd on the database (again, after it exited: its
        bridges and ports are kept there)."""
        d = self.dir
        self.run(vswitchd, self.db, f"--pidfile={d}/vswitchd.pid", "--detach", f"--log-file={d}/vswitchd.log")

    def vswitchd_ctl(self):
        """ovs-vswitchd's control socket, for `ovs-appctl -t` (named after
        its binary: ovs-vswitchd-dpdk.PID.ctl for the DPDK build)."""
        return next(self.dir.glob(f"ovs-vswitchd*.{self.pid('vswitchd')}.ctl"))

    def pid(self, daemon):
        """The PID of `daemon` ("vswitchd" or "ovsdb")."""
        return int((self.dir / f"{daemon}.pid").read_text().strip())

    def vxlan_endpoint(self, wire, local, remote, overlay_ip, mtu, vni=VNI):
        """Open vSwitch's VXLAN endpoint (userspace native tunnelling): a
        physical bridge over `wire` holding the underlay address `local`,
        an integration bridge with a VXLAN port to `remote` (VNI `vni`),
        and `overlay_ip` on the integration bridge's own port unless None."""
        self.sh(f"ip addr flush dev {wire} && ip link set {wire} up")
        self.vsctl("add-br", "br-phy", "--", "set", "bridge", "br-phy", "datapath_type=netdev")
        self.vsctl("add-port", "br-phy", wire)
        self.sh(f"ip addr add {local}/24 dev br-phy && ip link set br-phy mtu {mtu + 50} up")
        self.vsctl("add-br", "br-int", "--", "set", "bridge", "br-int", "datapath_type=netdev")
        self.vsctl("add-port", "br-int", "vx0", "--", "set", "interface", "vx0", "type=vxlan",
                   f"options:remote_ip={remote}", f"options:key={vni}", "options:dst_port=4789")
        if overlay_ip:
            self.sh(f"ip addr add {overlay_ip}/24 dev br-int && ip link set br-int mtu {mtu} up")
            # Its userspace datapath segments nothing and completes no
            # checksum (userspace TSO off): the stack must send it whole,
            # checksummed frames.
            self.sh("ethtool -K br-int tx off tso off gso off >/dev/null")

    def stop(self):
        pids = []
        for name in ("vswitchd.pid", "ovsdb.pid"):
            try:
                pid = int((self.dir / name).read_text().strip())
                os.kill(pid, 15)
                pids.append(pid)
            except (OSError, ValueError, ProcessLookupError):
                pass
        deadline = time.monotonic() + 10
        while any(running(pid) for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.02)
        shutil.rmtree(self.dir, ignore_errors=True)
