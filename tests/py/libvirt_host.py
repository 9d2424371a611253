"""libvirt's daemons for the tests, and the domain XML they define.

This machine has no systemd: where no libvirtd serves the system socket,
virtlogd and libvirtd are started here and stopped by PID (and libvirtd
can be restarted, as an upgrade or a crash restarts it)."""

import os
import shutil
import socket
import subprocess
from pathlib import Path

import pytest

import hvlab

SYSTEM_SOCKET = "/run/libvirt/libvirt-sock"
VIRSH = ["virsh", "-q", "-c", "qemu:///system"]

needs_libvirt = pytest.mark.skipif(
    not shutil.which("libvirtd") or not shutil.which("qemu-system-x86_64"),
    reason="needs libvirt-daemon-system and qemu-system-x86 (scripts/install-deps.sh)")

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
