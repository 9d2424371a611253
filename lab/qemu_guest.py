"""A QEMU guest for the tests and benches: Debian's cloud kernel (its
virtio-net driver) and a busybox initramfs whose init configures eth0, runs
one shell command, prints its output and status on the serial console
between markers, and powers off. Host binaries the command needs (iperf3)
are copied in with their libraries. QEMU's own vhost-user front end attaches the NIC
to a socket. TCG here (no nested KVM); `-accel kvm` on a real host.

The kernel is Debian's cloud kernel package, unpacked into a cache
directory by scripts/install-deps.sh."""

import glob
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

CACHE = Path("/var/cache/hvnet/qemu-guest")
MODULES = ["virtio_ring", "virtio", "virtio_pci_modern_dev", "virtio_pci_legacy_dev", "virtio_pci",
           "failover", "net_failover", "virtio_net"]

INIT = """#!/bin/sh
export PATH=/bin:/usr/bin
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
for m in {modules}; do insmod /lib/$m.ko; done
n=0; while [ ! -e /sys/class/net/eth0 ] && [ $n -lt 200 ]; do sleep 0.1; n=$((n+1)); done
ip link set lo up
ip link set eth0 address {mac} up
ip addr add {ip} dev eth0
echo HVNET-BEGIN
sh -c '{cmd}' 2>&1
echo "HVNET-END $?"
poweroff -f
"""


def kernel() -> Path:
    """The cloud kernel's directory (vmlinuz and modules), as
    scripts/install-deps.sh unpacks it."""
    if not glob.glob(str(CACHE / "root/boot/vmlinuz-*")):
        raise RuntimeError(f"no guest kernel under {CACHE}; scripts/install-deps.sh fetches and unpacks it")
    return CACHE / "root"


def copy_binary(tree: Path, path: str):
    """`path` and the shared libraries it loads, at the same places."""
    out = subprocess.run(["ldd", path], capture_output=True, text=True).stdout
    libs = re.findall(r"(/\S+\.so[.\d]*)", out)
    for f in [path, *libs]:
        dst = tree / f.lstrip("/")
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(f, dst)


# 802.1Q sub-interfaces in a guest (`ip link add link eth0 name eth0.10
# type vlan id 10`): the module and what it needs, loaded in this order.
VLAN_MODULES = ["llc", "stp", "garp", "mrp", "8021q"]


def initramfs(work: Path, mac: str, ip: str, cmd: str, binaries=(), modules=()) -> Path:
    """A busybox initramfs whose init loads virtio-net (and `modules`
    after it), brings eth0 up with `mac` and `ip`, runs `cmd` and powers
    off; `binaries` are copied in with their libraries."""
    root = kernel()
    rel = next((root / "lib/modules").iterdir())
    tree = work / "initramfs"
    (tree / "bin").mkdir(parents=True)
    (tree / "lib").mkdir()
    for d in ("proc", "sys", "dev", "tmp"):
        (tree / d).mkdir()
    shutil.copy("/usr/bin/busybox", tree / "bin/busybox")
    for applet in ("sh", "mount", "insmod", "ip", "ping", "sleep", "poweroff", "echo", "cat", "seq", "wc", "head",
                   "nc", "sha256sum"):
        os.symlink("busybox", tree / "bin" / applet)
    for m in [*MODULES, *modules]:
        src = next(rel.rglob(f"{m}.ko*"))
        data = src.read_bytes()
        if src.suffix == ".xz":
            data = subprocess.run(["xz", "-dc", str(src)], capture_output=True, check=True).stdout
        (tree / "lib" / f"{m}.ko").write_bytes(data)
    for b in binaries:
        copy_binary(tree, b)
    init = tree / "init"
    init.write_text(INIT.format(modules=" ".join([*MODULES, *modules]), mac=mac, ip=ip, cmd=cmd.replace("'", "'\\''")))
    init.chmod(0o755)
    files = subprocess.run(["find", "."], cwd=tree, capture_output=True, text=True, check=True).stdout
    out = work / "initramfs.cpio"
    with open(out, "wb") as f:
        subprocess.run(["busybox", "cpio", "-o", "-H", "newc"], cwd=tree, input=files.encode(), stdout=f,
                       stderr=subprocess.DEVNULL, check=True)
    return out


def argv(sock: str = None, mac: str = "", initrd: Path = None, mem_mb=256, rx_queue_size=256, hotplug_mb=0,
         tap=None, packed=False, server=False) -> list:
    """QEMU's command line: the NIC on vhost-user socket `sock` (QEMU
    connects to the switch's, or with `server` listens on it for the
    switch to connect, again after the switch goes away), or on TAP
    device `tap` (QEMU's own virtio-net back end, vnet headers on);
    `hotplug_mb`: room for that much memory to be plugged in later
    (pc-dimm), as a hypervisor grows a guest; `packed`: packed virtqueues
    (QEMU's packed=on)."""
    vmlinuz = next((kernel() / "boot").glob("vmlinuz-*"))
    accel = "kvm" if os.environ.get("HVNET_QEMU_KVM") else "tcg"
    mem = f"{mem_mb}M" + (f",slots=2,maxmem={mem_mb + hotplug_mb}M" if hotplug_mb else "")
    return ["qemu-system-x86_64", "-accel", accel, "-cpu", "max", "-m", mem, "-nographic", "-nodefaults",
            "-serial", "stdio", "-no-reboot", "-kernel", str(vmlinuz), "-initrd", str(initrd),
            "-append", "console=ttyS0 quiet panic=-1",
            "-object", f"memory-backend-memfd,id=mem,size={mem_mb}M,share=on", "-numa", "node,memdev=mem",
            *(["-netdev", f"tap,id=n0,ifname={tap},script=no,downscript=no"] if tap else
              ["-chardev", f"socket,id=c0,path={sock}" + (",server=on,wait=off" if server else ""),
               "-netdev", "vhost-user,id=n0,chardev=c0"]),
            # vectors=0: QEMU 7.2 under TCG crashes starting a vhost-user
            # device with MSI-X (REFERENCE.md).
            "-device", f"virtio-net-pci,netdev=n0,mac={mac},romfile=,vectors=0,mrg_rxbuf=on,"
                       f"rx_queue_size={rx_queue_size}" + (",packed=on" if packed else "")]


class Qemu:
    """A QEMU process driven through its QMP monitor (a hypervisor's own
    QEMU: migration, device changes), its console to a file; `stop` ends
    it by PID."""

    def __init__(self, tmp: Path, name: str, argv: list):
        import time

        self.qmp_path = str(tmp / f"{name}.qmp")
        self.console = tmp / f"{name}.console"
        with open(self.console, "w") as out:
            self.proc = subprocess.Popen(argv + ["-qmp", f"unix:{self.qmp_path},server=on,wait=off"],
                                         stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while not os.path.exists(self.qmp_path) and self.proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        if not os.path.exists(self.qmp_path):
            self.stop()
            raise RuntimeError(f"QEMU {name} did not open its monitor:\n{self.text()[-2000:]}")

    def qmp(self, *commands):
        return qmp(self.qmp_path, *commands)

    def text(self) -> str:
        return self.console.read_text(errors="replace")

    def migration(self) -> dict:
        """QEMU's `query-migrate`: status, total time and downtime (ms)."""
        return self.qmp(("query-migrate", {}))[0]

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


def output(text: str) -> tuple:
    """(exit status, output) of the guest's command, from its console."""
    m = re.search(r"HVNET-BEGIN\r?\n(.*)HVNET-END (\d+)", text, re.S)
    if not m:
        raise RuntimeError(f"the QEMU guest did not run its command:\n{text[-3000:]}")
    return int(m.group(2)), m.group(1)


def run(sock: str, mac: str, ip: str, cmd: str, timeout=180, mem_mb=256) -> tuple:
    """Boots a guest on vhost-user socket `sock`, runs `cmd` in it; returns
    (exit status, output)."""
    with tempfile.TemporaryDirectory(prefix="hvnet-qemu-") as tmp:
        initrd = initramfs(Path(tmp), mac, ip, cmd)
        p = subprocess.run(argv(sock, mac, initrd, mem_mb), capture_output=True, text=True, timeout=timeout,
                           stdin=subprocess.DEVNULL)
        return output(p.stdout + p.stderr)


def qmp(path: str, *commands) -> list:
    """Runs QMP `commands` ((name, arguments) pairs) on QEMU's monitor
    socket `path`, in order; returns their results, raising on an error."""
    import json
    import socket

    with socket.socket(socket.AF_UNIX) as s:
        s.connect(path)
        f = s.makefile("rw")
        json.loads(f.readline())  # the greeting
        out = []
        for name, args in (("qmp_capabilities", {}),) + commands:
            f.write(json.dumps({"execute": name, "arguments": args}) + "\n")
            f.flush()
            while True:
                r = json.loads(f.readline())
                if "event" in r:
                    continue
                if "error" in r:
                    raise RuntimeError(f"QMP {name}: {r['error']}")
                out.append(r["return"])
                break
        return out[1:]
