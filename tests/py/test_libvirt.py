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

import libvirt_host
from libvirt_host import domain, interface, virsh

pytestmark = [pytest.mark.root,
              pytest.mark.skipif(not libvirt_host.available(),
                                 reason="needs libvirt-daemon-system and qemu-system-x86 (scripts/install-deps.sh)")]

PEER, GUEST = "198.18.61.1", "198.18.61.2"


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
    xml.write_text(domain(name, kernel, guest_dir / "initramfs.cpio", console,
                          interface(mac, sock, mode=libvirt_mode, queues=2)))
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
