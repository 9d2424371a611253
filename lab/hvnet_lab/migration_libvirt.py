"""Frames lost while libvirt live-migrates a guest to another host
(`virsh migrate --live`), hvnet's ports against QEMU's own virtio-net on a
Linux bridge, both driven by libvirt as a platform would drive them: a
measurement beside `migration-loss` (which drives QEMU directly), with no
verdict.

Two libvirt hosts on this machine: the system's libvirtd and a second one
in a mount namespace of its own (`libvirt_host.SecondHost`). On each
host's side:

- hvnet: a switch with `[libvirt]`; the guest's interface is
  `type='vhostuser'` with `mode='server'` in the switch's socket directory,
  so each switch makes its port as libvirt binds the socket (the
  destination's before its QEMU needs it) and drops it when the guest has
  left; the switches' uplinks are the ends of one veth pair.
- bridge: `type='bridge'` on a Linux bridge, `<driver name='qemu'/>` (QEMU's
  own virtio-net back end on the TAP libvirt makes, as `migration-loss`'s);
  two bridges joined by a veth pair.

A namespace on the first host pings the guest every 10 ms from one second
before `virsh migrate` to two seconds after it returns."""

import contextlib
import os
import pwd
import shutil
import signal
import subprocess
import time
from pathlib import Path

import hvlab
import libvirt_host
import qemu_guest

from .figures import measured
from .migration import GUEST, PEER, joined_bridges, pings, veth_pair
from .runners import interleaved
from .verdict import median

MAC = "52:54:00:26:00:01"
HVNET, BRIDGE = "hvnet (vhost-user, libvirt)", "Linux bridge (QEMU virtio-net on TAP, libvirt)"
NOTE = ("A measurement, not a study's reproduction: no verdict. libvirt 9.0 starts and migrates a QEMU guest (TCG, "
        "256 MiB, Debian's cloud kernel); both hosts' libvirtd and QEMU, the switches and the pinging namespace share "
        "this machine's 2 cores; the second host's libvirtd runs in a mount namespace of its own; the wire is a veth "
        "pair.")


@contextlib.contextmanager
def hvnet_hosts(tmp, second):
    """Two switches with `[libvirt]`, the pinging VM on the first: the
    guest's interface, what its XML says on the destination in place of
    what (the switch's socket directory), and the ping's argv."""
    wire_a, wire_b = veth_pair("lx")
    try:
        with hvlab.Topology(tmp, [dict(name="c", ipv4=PEER + "/24", queues=1)], prefix="lxa", libvirt={},
                            uplinks=[dict(name="up0", device=wire_a, queues=1)]) as a, \
             hvlab.Topology(tmp, [], prefix="lxb", libvirt={"uri": second.uri},
                            uplinks=[dict(name="up0", device=wire_b, queues=1)]) as b:
            dirs = [f"/run/hvnet-libvirt/{t.name}" for t in (a, b)]
            yield (libvirt_host.interface(MAC, Path(dirs[0]) / "q.sock"), tuple(dirs),
                   ["ip", "netns", "exec", a.ns("c")])
    finally:
        hvlab.run(["ip", "link", "del", wire_a], check=False)


BRIDGED = """<interface type='bridge'>
      <mac address='{mac}'/>
      <source bridge='{bridge}'/>
      <model type='virtio'/>
      <driver name='qemu'/>
    </interface>"""


@contextlib.contextmanager
def bridged_hosts(tmp, second):
    """Two Linux bridges joined by a veth pair, the pinging namespace on
    the first: as `hvnet_hosts` (the bridge in place of the bridge)."""
    with joined_bridges("lx") as (bridges, ns, _):
        yield BRIDGED.format(mac=MAC, bridge=bridges[0]), (f"'{bridges[0]}'", f"'{bridges[1]}'"), ns


BACKENDS = {HVNET: hvnet_hosts, BRIDGE: bridged_hosts}


def migrate_once(tmp, backend, second, guest_dir, log):
    """One `virsh migrate --live` under pings: {lost, sent, total_ms,
    downtime_ms}."""
    run_dir = tmp / hvlab.unique("x")
    run_dir.mkdir()
    name = hvlab.unique("hvnet-lx")
    with BACKENDS[backend](run_dir, second) as (nic, (here, there_), ns):
        initrd = guest_dir / f"{name}.cpio"
        shutil.copy(qemu_guest.initramfs(run_dir, MAC, GUEST + "/24", "sleep 3600"), initrd)
        initrd.chmod(0o644)
        xml = run_dir / "domain.xml"
        xml.write_text(libvirt_host.domain(name, guest_dir / "vmlinuz", initrd, guest_dir / f"{name}.log", nic,
                                           aliases=("ua-net0",) if backend == HVNET else ()))
        try:
            made = libvirt_host.virsh("create", str(xml), check=False)
            if made.returncode != 0:
                raise RuntimeError(f"virsh create on {backend}: {made.stderr.strip()}")
            reaches = lambda: hvlab.run(ns + ["ping", "-c", "1", "-W", "1", GUEST], check=False).returncode == 0  # noqa: E731
            if not hvlab.eventually(reaches, timeout=300, every=0.2):
                raise RuntimeError(f"the guest never answered on {backend}")
            there = run_dir / "destination.xml"
            there.write_text(libvirt_host.virsh("dumpxml", "--migratable", name).stdout.replace(here, there_))
            ping = subprocess.Popen(ns + ["ping", "-q", "-i", "0.01", GUEST], stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True)
            try:
                time.sleep(1)
                r = libvirt_host.migrate(name, second, there)
                if r.returncode != 0:
                    raise RuntimeError(f"virsh migrate on {backend}: {r.stderr.strip()}")
                time.sleep(2)
            finally:
                ping.send_signal(signal.SIGINT)
                out, _ = ping.communicate(timeout=30)
            sent, answered = pings(out)
            job = second.virsh("domjobinfo", name, "--completed", check=False).stdout
            if not reaches():
                raise RuntimeError(f"the guest is not reached after its move on {backend}")
        finally:
            second.virsh("destroy", name, check=False)
            libvirt_host.virsh("destroy", name, check=False)
    field = lambda label: next((float(line.split(":")[1].split()[0]) for line in job.splitlines()  # noqa: E731
                                if line.startswith(label)), 0.0)
    r = {"lost": sent - answered, "sent": sent, "total_ms": field("Time elapsed"),
         "downtime_ms": field("Total downtime")}
    log.append({"command": f"{backend}: " + " ".join(ns + ["ping", "-q", "-i", "0.01", GUEST])
                + f" during virsh migrate --live --desturi {second.uri} --migrateuri tcp://127.0.0.1", **r})
    return r


def libvirt_migration_loss(tmp, quick, reps, log):
    if not libvirt_host.available():
        raise RuntimeError("needs libvirt-daemon-system and qemu-system-x86 (scripts/install-deps.sh)")
    first = libvirt_host.Daemons(tmp / "libvirt-a")
    (tmp / "libvirt-a").mkdir(exist_ok=True)
    guest_dir = Path(hvlab.run(["mktemp", "-d", "/var/tmp/hvnet-lx-XXXXXX"]).stdout.strip())
    os.chown(guest_dir, pwd.getpwnam("libvirt-qemu").pw_uid, -1)
    guest_dir.chmod(0o755)
    shutil.copy(next((qemu_guest.kernel() / "boot").glob("vmlinuz-*")), guest_dir / "vmlinuz")
    (guest_dir / "vmlinuz").chmod(0o644)
    second = None
    try:
        first.start()
        second = libvirt_host.SecondHost(tmp / "libvirt-b")
        runs = interleaved(list(BACKENDS), reps, lambda b: migrate_once(tmp, b, second, guest_dir, log))
    finally:
        if second:
            second.stop()
        first.stop()
        shutil.rmtree(guest_dir, ignore_errors=True)
    hv, br = (median([r["lost"] for r in runs[b]]) for b in (HVNET, BRIDGE))
    figs = [
        measured("migration-libvirt", "Pings lost (10 ms apart) while libvirt live-migrates a guest to another host",
                 "", "pings lost", runs, "lost", lambda b: (b, "pings lost"),
                 "does `virsh migrate --live` lose more frames with the guest on hvnet (ports made and removed as "
                 "libvirt binds and drops the sockets) than on QEMU's own virtio-net on a Linux bridge?",
                 f"hvnet lost {hv:g} pings, the bridge {br:g} (medians of {reps} runs): "
                 + ("more" if hv > br else "no more") + "; downtime "
                 + ", ".join(f"{b}: {median([r['downtime_ms'] for r in runs[b]]):g} ms" for b in BACKENDS), NOTE),
    ]
    return figs, runs
