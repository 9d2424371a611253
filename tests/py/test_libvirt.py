"""A guest defined in libvirt, as most people run QEMU: `<interface
type='vhostuser'>` on an hvnet port, with the guest's memory shared
(memfd), two queue pairs, and QEMU run by libvirt as its own unprivileged
user (`libvirt-qemu`), not root. Both socket modes: libvirt's
`mode='client'` connects to a socket hvnet serves (its owner set in the
topology so that QEMU may open it); `mode='server'` has QEMU serve the
socket and hvnet connect (`mode = "client"`). The guest (Debian's cloud
kernel, its virtio-net driver; TCG here) runs its own init: a ping and a
SHA-256-checked transfer each way with a namespace VM on the same switch.

libvirt's daemons are started here (this machine has no systemd) and
stopped by PID, unless a libvirtd already serves the system socket."""

import hashlib
import json
import os
import pwd
import shutil
import subprocess
from pathlib import Path

import pytest

import hvlab
from test_switch_e2e import XFER

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(not shutil.which("libvirtd") or not shutil.which("qemu-system-x86_64"),
                       reason="needs libvirt-daemon-system and qemu-system-x86 (scripts/install-deps.sh)"),
]

SYSTEM_SOCKET = "/run/libvirt/libvirt-sock"
VIRSH = ["virsh", "-q", "-c", "qemu:///system"]
PEER, GUEST = "198.18.61.1", "198.18.61.2"

DOMAIN = """<domain type='qemu' xmlns:qemu='http://libvirt.org/schemas/domain/qemu/1.0'>
  <name>{name}</name>
  <memory unit='MiB'>256</memory>
  <vcpu>1</vcpu>
  <memoryBacking><source type='memfd'/><access mode='shared'/></memoryBacking>
  <os>
    <type arch='x86_64' machine='pc'>hvm</type>
    <kernel>{kernel}</kernel>
    <initrd>{initrd}</initrd>
    <cmdline>console=ttyS0 quiet panic=-1</cmdline>
  </os>
  <features><acpi/></features>
  <cpu mode='maximum' migratable='off'/>
  <on_poweroff>destroy</on_poweroff>
  <on_reboot>destroy</on_reboot>
  <on_crash>destroy</on_crash>
  <devices>
    <emulator>/usr/bin/qemu-system-x86_64</emulator>
    <controller type='usb' model='none'/>
    <serial type='file'><source path='{console}' append='off'/><target port='0'/></serial>
    <console type='file'><source path='{console}' append='off'/><target type='serial' port='0'/></console>
    <interface type='vhostuser'>
      <mac address='{mac}'/>
      <source type='unix' path='{socket}' mode='{mode}'/>
      <model type='virtio'/>
      <driver queues='2' rx_queue_size='256'><host mrg_rxbuf='on'/></driver>
      <alias name='ua-net0'/>
      <rom enabled='no'/>
    </interface>
    <memballoon model='none'/>
  </devices>
  <qemu:override>
    <qemu:device alias='ua-net0'>
      <qemu:frontend>
        <!-- QEMU 7.2 under TCG crashes starting a vhost-user device with MSI-X (REFERENCE.md) -->
        <qemu:property name='vectors' type='unsigned' value='0'/>
      </qemu:frontend>
    </qemu:device>
  </qemu:override>
</domain>
"""


def virsh(*args, check=True):
    return hvlab.run(VIRSH + list(args), check=check)


def alive(sock: str) -> bool:
    import socket

    try:
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(sock)
        return True
    except OSError:
        return False


@pytest.fixture(scope="module")
def libvirtd(tmp_path_factory):
    """The system libvirtd: one already running, or virtlogd and libvirtd
    started here in the foreground and stopped by PID."""
    if alive(SYSTEM_SOCKET):
        yield
        return
    logs = tmp_path_factory.mktemp("libvirt")
    procs = []
    try:
        if not alive("/run/libvirt/virtlogd-sock"):
            procs.append(subprocess.Popen(["/usr/sbin/virtlogd"], stdout=subprocess.DEVNULL,
                                          stderr=open(logs / "virtlogd.log", "w")))
        env = dict(os.environ, LIBVIRT_LOG_OUTPUTS=f"3:file:{logs}/libvirtd.log")
        procs.append(subprocess.Popen(["/usr/sbin/libvirtd"], env=env, stdout=subprocess.DEVNULL,
                                      stderr=open(logs / "libvirtd.err", "w")))
        ok = hvlab.eventually(lambda: alive(SYSTEM_SOCKET) or any(p.poll() is not None for p in procs),
                              timeout=60, every=0.1)
        assert ok and alive(SYSTEM_SOCKET), (logs / "libvirtd.err").read_text()
        yield
    finally:
        hvlab.stop_procs(procs)
        # libvirt's cgroup partition for machines, if it left it empty.
        for c in Path("/sys/fs/cgroup").glob("*/machine"):
            try:
                c.rmdir()
            except OSError:
                pass


@pytest.fixture
def guest_dir():
    """Kernel, initramfs, console and sockets, where libvirt's QEMU (user
    libvirt-qemu) may read and create them."""
    d = Path(hvlab.run(["mktemp", "-d", "/var/tmp/hvnet-lv-XXXXXX"]).stdout.strip())
    qemu = pwd.getpwnam("libvirt-qemu")
    os.chown(d, qemu.pw_uid, qemu.pw_gid)
    d.chmod(0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.mark.parametrize("libvirt_mode", ["client", "server"])
def test_a_libvirt_guest_pings_and_moves_files_both_ways_through_hvnet(tmp_path, libvirtd, guest_dir, libvirt_mode):
    import qemu_guest  # lab/qemu_guest.py

    name = hvlab.unique("hvnet-lv")
    mac = "02:00:00:00:61:02"
    sock = guest_dir / "g1.sock"
    if libvirt_mode == "client":
        # hvnet serves the socket, opened to libvirt's QEMU user.
        port = dict(socket=str(sock), socket_owner="libvirt-qemu", socket_mode="0600")
    else:
        # QEMU serves it; hvnet connects (and again whenever it goes away).
        port = dict(mode="client", socket=str(sock))
    vms = [dict(name="n1", ipv4=PEER + "/24", queues=1),
           dict(name="g1", kind="vhost-user", mac=mac, queues=2, **port)]
    data = tmp_path / "to-guest"
    data.write_bytes(os.urandom(3 << 20))
    want_in = hashlib.sha256(data.read_bytes()).hexdigest()
    cmd = (f"ping -c 3 -W 5 {PEER} && nc -l -p 5555 | sha256sum && "
           "head -c 3000000 /dev/urandom > /tmp/f && sha256sum /tmp/f && "
           f"nc {PEER} 5556 < /tmp/f")
    initrd = qemu_guest.initramfs(tmp_path, mac, GUEST + "/24", cmd)
    kernel = guest_dir / "vmlinuz"
    shutil.copy(next((qemu_guest.kernel() / "boot").glob("vmlinuz-*")), kernel)
    shutil.copy(initrd, guest_dir / "initramfs.cpio")
    for f in (kernel, guest_dir / "initramfs.cpio"):
        f.chmod(0o644)
    console = guest_dir / "console.log"
    xml = tmp_path / "domain.xml"
    xml.write_text(DOMAIN.format(name=name, kernel=kernel, initrd=guest_dir / "initramfs.cpio", console=console,
                                 mac=mac, socket=sock, mode=libvirt_mode))
    with hvlab.Topology(tmp_path, vms, prefix="lv") as t:
        receiver = t.popen("n1", f"python3 {XFER} serve {PEER} 5556", stdout=subprocess.PIPE, text=True)
        t.wait_listening("n1", 5556)
        sender = t.popen("n1", f"python3 {XFER} paced {GUEST} 5555 {data} {64 << 20}",
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        virsh("define", str(xml))
        try:
            virsh("start", name)
            # QEMU runs as libvirt's user, not root.
            pid = int(Path(f"/run/libvirt/qemu/{name}.pid").read_text())
            assert os.stat(f"/proc/{pid}").st_uid == pwd.getpwnam("libvirt-qemu").pw_uid
            # The guest's init prints its command's status, then powers off.
            done = lambda: ("HVNET-END" in console.read_text(errors="replace")  # noqa: E731
                            or virsh("domstate", name).stdout.strip() == "shut off")
            assert hvlab.eventually(done, timeout=300, every=1), console.read_text(errors="replace")[-3000:]
        finally:
            virsh("destroy", name, check=False)
            virsh("undefine", name, check=False)
        text = console.read_text(errors="replace")
        rc, out = qemu_guest.output(text)
        assert rc == 0, out
        assert "3 packets received" in out, out
        assert f"{want_in}  -" in out, (want_in, out)
        sent, _ = sender.communicate(timeout=60)
        assert sender.returncode == 0, sent
        got = receiver.communicate(timeout=60)[0].split()
        assert f"{got[0]}  /tmp/f" in out and got[1] == "3000000", (got, out)
        show = json.loads(t.hv("port", "g1", "--json").stdout)["vhost_user"]
        assert show["connections"] >= 1 and show["mode"] == ("server" if libvirt_mode == "client" else "client")
