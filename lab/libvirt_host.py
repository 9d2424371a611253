"""libvirt's daemons for the tests and the lab, and the domain XML they
define.

This machine has no systemd: where no libvirtd serves the system socket,
virtlogd and libvirtd are started here and stopped by PID (and libvirtd
can be restarted, as an upgrade or a crash restarts it)."""

import contextlib
import os
import shutil
import signal
import socket
import subprocess
from pathlib import Path

import hvlab

SYSTEM_SOCKET = "/run/libvirt/libvirt-sock"
VIRSH = ["virsh", "-q", "-c", "qemu:///system"]



def available() -> bool:
    """libvirt's daemon and QEMU are installed (scripts/install-deps.sh)."""
    return bool(shutil.which("libvirtd") and shutil.which("qemu-system-x86_64"))

# A domain as a platform engineer writes one for hvnet: QEMU (TCG here)
# with its memory shared (memfd) for the vhost-user back end, the kernel
# and initramfs given, the serial console to a file.
DOMAIN = """<domain type='qemu' xmlns:qemu='http://libvirt.org/schemas/domain/qemu/1.0'>
  <name>{name}</name>
  <memory unit='MiB'>256</memory>
  <vcpu>1</vcpu>
  <memoryBacking><source type='memfd'/><access mode='shared'/></memoryBacking>
  <os>
    <type arch='x86_64' machine='pc'>hvm</type>
    <kernel>{kernel}</kernel>
    <initrd>{initrd}</initrd>
    <cmdline>console=ttyS0 quiet panic=-1{cmdline}</cmdline>
  </os>
  <features><acpi/></features>
  <cpu mode='maximum' migratable='off'/>
  <on_poweroff>destroy</on_poweroff>
  <on_reboot>destroy</on_reboot>
  <on_crash>destroy</on_crash>
  {metadata}
  <devices>
    <emulator>/usr/bin/qemu-system-x86_64</emulator>
    <controller type='usb' model='none'/>
    <serial type='file'><source path='{console}' append='off'/><target port='0'/></serial>
    <console type='file'><source path='{console}' append='off'/><target type='serial' port='0'/></console>
    {interfaces}
    <memballoon model='none'/>
  </devices>
  <qemu:override>
    {overrides}
  </qemu:override>
</domain>
"""

INTERFACE = """<interface type='vhostuser'>
      <mac address='{mac}'/>
      <source type='unix' path='{socket}' mode='{mode}'/>
      <model type='virtio'/>
      <driver queues='{queues}' rx_queue_size='256'><host mrg_rxbuf='on'/></driver>
      {target}<alias name='{alias}'/>
      <rom enabled='no'/>
    </interface>"""

# QEMU 7.2 under TCG crashes starting a vhost-user device with MSI-X
# (REFERENCE.md): each interface's alias gets vectors=0.
OVERRIDE = """<qemu:device alias='{alias}'>
      <qemu:frontend><qemu:property name='vectors' type='unsigned' value='0'/></qemu:frontend>
    </qemu:device>"""


def interface(mac, sock, mode="server", queues=1, target=None, alias="ua-net0"):
    return INTERFACE.format(mac=mac, socket=sock, mode=mode, queues=queues, alias=alias,
                            target=f"<target dev='{target}'/>" if target else "")


def domain(name, kernel, initrd, console, interfaces, aliases=("ua-net0",), metadata="", cmdline=""):
    return DOMAIN.format(name=name, kernel=kernel, initrd=initrd, console=console, interfaces=interfaces,
                         cmdline=f" {cmdline}" if cmdline else "",
                         metadata=f"<metadata>{metadata}</metadata>" if metadata else "",
                         overrides="\n".join(OVERRIDE.format(alias=a) for a in aliases))


def virsh(*args, check=True):
    return hvlab.run(VIRSH + list(args), check=check)


def alive(sock: str) -> bool:
    try:
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(sock)
        return True
    except OSError:
        return False


class Daemons:
    """The system libvirtd: one already running (`ours` false), or virtlogd
    and libvirtd started here in the foreground."""

    def __init__(self, logs: Path):
        self.logs = logs
        self.procs = {}
        self.ours = not alive(SYSTEM_SOCKET)

    def start(self):
        if not self.ours:
            return
        if "virtlogd" not in self.procs and not alive("/run/libvirt/virtlogd-sock"):
            self.procs["virtlogd"] = subprocess.Popen(["/usr/sbin/virtlogd"], stdout=subprocess.DEVNULL,
                                                      stderr=open(self.logs / "virtlogd.log", "a"))
        self.start_libvirtd()

    def start_libvirtd(self):
        env = dict(os.environ, LIBVIRT_LOG_OUTPUTS=f"3:file:{self.logs}/libvirtd.log")
        p = subprocess.Popen(["/usr/sbin/libvirtd"], env=env, stdout=subprocess.DEVNULL,
                             stderr=open(self.logs / "libvirtd.err", "a"))
        self.procs["libvirtd"] = p
        ok = hvlab.eventually(lambda: alive(SYSTEM_SOCKET) or p.poll() is not None, timeout=60, every=0.1)
        assert ok and alive(SYSTEM_SOCKET), (self.logs / "libvirtd.err").read_text()

    def restart_libvirtd(self):
        """libvirtd stopped (SIGTERM, by PID) and started again; its guests
        run on."""
        assert self.ours, "libvirtd is not this test's to restart"
        hvlab.stop_procs([self.procs.pop("libvirtd")])
        self.start_libvirtd()

    def stop(self):
        hvlab.stop_procs(list(self.procs.values()))
        self.procs.clear()
        # libvirt's cgroup partition for machines, if it left it empty.
        for c in Path("/sys/fs/cgroup").glob("*/machine"):
            try:
                c.rmdir()
            except OSError:
                pass


class SecondHost:
    """A second libvirt "host" on this machine, for live migration
    between two: virtlogd and libvirtd in a private mount namespace, with
    their own run, state, configuration (a host UUID of their own: libvirt
    refuses to migrate a guest to the host it runs on), log and cache
    directories under `root`, and no cgroups (the first host's machine
    cgroups would clash). `uri` reaches it from here."""

    MOUNTS = ("/run/libvirt", "/var/lib/libvirt", "/etc/libvirt", "/var/log/libvirt", "/var/cache/libvirt")

    def __init__(self, root: Path):
        import uuid

        self.root = root
        self.dirs = {m: root / m.strip("/").replace("/", "-") for m in self.MOUNTS}
        for m, d in self.dirs.items():
            d.mkdir(parents=True, exist_ok=True)
            if m in ("/etc/libvirt", "/var/lib/libvirt"):
                # Its configuration (and the hooks in it) and its state's
                # layout, the first host's.
                hvlab.run(["cp", "-a", f"{m}/.", str(d)])
        (self.dirs["/var/log/libvirt"] / "qemu").mkdir(exist_ok=True)
        for f in (self.dirs["/var/lib/libvirt"] / "qemu").rglob("*"):
            if f.is_file():
                f.unlink()  # the first host's domains' state, not this one's
        etc = self.dirs["/etc/libvirt"]
        with open(etc / "libvirtd.conf", "a") as f:
            f.write(f'\nhost_uuid = "{uuid.uuid4()}"\n')
        with open(etc / "qemu.conf", "a") as f:
            f.write("\ncgroup_controllers = [ ]\nmigration_port_min = 49400\nmigration_port_max = 49499\n")
        for qemu_dir in (etc / "qemu").glob("*.xml"):
            qemu_dir.unlink()  # the first host's persistent domains
        self.socket = self.dirs["/run/libvirt"] / "libvirt-sock"
        self.uri = f"qemu+unix:///system?socket={self.socket}"
        mounts = "; ".join(f"mount --bind {d} {m}" for m, d in self.dirs.items())
        script = (f"set -e; mount --make-rprivate /; {mounts}; "
                  f"/usr/sbin/virtlogd -p {root}/virtlogd.pid & "
                  f"LIBVIRT_LOG_OUTPUTS=3:file:{root}/libvirtd.log exec /usr/sbin/libvirtd -p {root}/libvirtd.pid")
        self.proc = subprocess.Popen(["unshare", "-m", "sh", "-c", script], stdout=subprocess.DEVNULL,
                                     stderr=open(root / "libvirtd.err", "w"), start_new_session=True)
        ok = hvlab.eventually(lambda: alive(str(self.socket)) or self.proc.poll() is not None, timeout=60, every=0.1)
        if not (ok and alive(str(self.socket))):
            self.stop()
            raise RuntimeError(f"the second libvirtd did not start: {(root / 'libvirtd.err').read_text()}")

    def virsh(self, *args, check=True):
        return hvlab.run(["virsh", "-q", "-c", self.uri, *args], check=check)

    def stop(self):
        """Its daemons ended (their process group, which this started)."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


def migrate(domain_name: str, dest: "SecondHost", dest_xml: Path):
    """`virsh migrate --live` to `dest`, the guest's XML there `dest_xml`
    (its sockets or bridges are the destination's)."""
    return hvlab.run(VIRSH + ["migrate", "--live", "--domain", domain_name, "--desturi", dest.uri,
                              "--migrateuri", "tcp://127.0.0.1", "--xml", str(dest_xml)], check=False)
