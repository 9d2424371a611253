"""Guests that come and go under libvirt: 20 domains (4 with --quick)
started with `virsh create`, each on a port hvnet makes as libvirt binds
its socket, pinging a namespace VM, then destroyed; 5 rounds (2 with
--quick). A measurement of issue 39's goals, with no reference beside it
(Open vSwitch with DPDK makes no port for libvirt's vhost-user guests: a
platform's agent makes them), so no verdict.

Per guest: the time from its init bringing eth0 up to its first answered
ping (the guest's own clock, /proc/uptime, 10 ms steps): the port must
exist before then, since QEMU waits for the switch before the guest
boots. Per round, after every guest has gone: the switch's ports, the
sockets in its directory, the daemon's threads and open descriptors,
against what they were before the first round."""

import os
import pwd
import re
import shutil
from pathlib import Path

import hvlab
import libvirt_host
import qemu_guest

from .figures import measured

PEER = "198.18.27.1"
NOTE = ("A measurement, not a study's reproduction: no verdict. QEMU guests (TCG, 256 MiB, Debian's cloud kernel) "
        "started by libvirt 9.0 on this machine's 2 cores, all at once; the time is the guest's own, from its init "
        "bringing eth0 up to the first answer to its ping.")


def footprint(t):
    state = Path(f"/run/hvnet/{t.name}/state.json").read_text()
    pid = int(re.search(r'"pid":\s*(\d+)', state).group(1))
    return {"ports": len(t.hv("ports", "--json").stdout.split('"port":')) - 1,
            "sockets": len(os.listdir(f"/run/hvnet-libvirt/{t.name}")),
            "threads": len(os.listdir(f"/proc/{pid}/task")), "fds": len(os.listdir(f"/proc/{pid}/fd"))}


def libvirt_churn(tmp, quick, reps, log):
    if not libvirt_host.available():
        raise RuntimeError("needs libvirt-daemon-system and qemu-system-x86 (scripts/install-deps.sh)")
    n, rounds = (4, 2) if quick else (20, 5)
    logs = tmp / "libvirt"
    logs.mkdir(exist_ok=True)
    daemons = libvirt_host.Daemons(logs)
    guest_dir = Path(hvlab.run(["mktemp", "-d", "/var/tmp/hvnet-lc-XXXXXX"]).stdout.strip())
    os.chown(guest_dir, pwd.getpwnam("libvirt-qemu").pw_uid, -1)
    guest_dir.chmod(0o755)
    kernel = guest_dir / "vmlinuz"
    shutil.copy(next((qemu_guest.kernel() / "boot").glob("vmlinuz-*")), kernel)
    kernel.chmod(0o644)
    runs = {}
    names = []
    try:
        daemons.start()
        with hvlab.Topology(tmp, [dict(name="n1", ipv4=PEER + "/16", queues=1)], prefix="lc", libvirt={}) as t:
            before = footprint(t)
            for rnd in range(1, rounds + 1):
                names = []
                consoles = []
                for i in range(n):
                    name = hvlab.unique(f"hvnet-lc{i}-")
                    mac = f"52:54:00:27:{rnd:02x}:{i + 16:02x}"
                    work = tmp / name
                    work.mkdir()
                    cmd = (f"t0=$(cut -d' ' -f1 /proc/uptime); until ping -c 1 -W 1 {PEER} >/dev/null; do :; done; "
                           "echo NET-READY $t0 $(cut -d' ' -f1 /proc/uptime); sleep 3600")
                    initrd = guest_dir / f"{name}.cpio"
                    shutil.copy(qemu_guest.initramfs(work, mac, f"198.18.27.{i + 16}/16", cmd), initrd)
                    initrd.chmod(0o644)
                    console = guest_dir / f"{name}.log"
                    sock = Path(f"/run/hvnet-libvirt/{t.name}") / f"g{i}.sock"
                    xml = work / "domain.xml"
                    xml.write_text(libvirt_host.domain(name, kernel, initrd, console,
                                                       libvirt_host.interface(mac, sock, target=f"lc-g{i}")))
                    r = libvirt_host.virsh("create", str(xml), check=False)
                    if r.returncode != 0:
                        raise RuntimeError(f"virsh create {name}: {r.stderr.strip()}")
                    names.append(name)
                    consoles.append(console)
                ready = lambda: all("NET-READY" in c.read_text(errors="replace") for c in consoles if c.exists())  # noqa: E731
                if not hvlab.eventually(lambda: all(c.exists() for c in consoles) and ready(), timeout=900, every=1):
                    raise RuntimeError(f"round {rnd}: not every guest reached the network")
                waits = []
                for c in consoles:
                    t0, t1 = map(float, re.search(r"NET-READY (\S+) (\S+)", c.read_text(errors="replace")).groups())
                    waits.append(t1 - t0)
                for name in names:
                    libvirt_host.virsh("destroy", name, check=False)
                names = []
                settled = lambda: footprint(t) == before  # noqa: E731
                hvlab.eventually(settled, timeout=60, every=0.5)
                after = footprint(t)
                left = {k: after[k] - before[k] for k in before}
                r = {"max_s": max(waits), "median_s": sorted(waits)[len(waits) // 2], "round": rnd, **left}
                runs[f"round {rnd}"] = [r]
                log.append({"command": f"virsh create x{n}, ping from each guest, virsh destroy x{n} (round {rnd})",
                            **r})
                print(f"      round {rnd}: {n} guests on the network, slowest {max(waits):.2f} s after eth0 up; "
                      f"left over after they went: {left}", flush=True)
    finally:
        for name in names:
            libvirt_host.virsh("destroy", name, check=False)
        daemons.stop()
        shutil.rmtree(guest_dir, ignore_errors=True)
    worst = max(r[0]["max_s"] for r in runs.values())
    leftovers = {k: max(r[0][k] for r in runs.values()) for k in ("ports", "sockets", "threads", "fds")}
    figs = [
        measured("libvirt-churn", f"{n} libvirt guests started, pinging, destroyed: eth0 up to first answer",
                 "", "seconds (slowest guest)", runs, "max_s", lambda c: ("hvnet (libvirt)", c),
                 f"is every one of {n} guests libvirt starts at once on the network within 1 s of bringing its NIC "
                 "up, and does nothing stay behind when they go?",
                 f"slowest guest {worst:.2f} s after eth0 up over {rounds} rounds; most left over after a round "
                 f"(against before the first): {leftovers}", NOTE),
    ]
    return figs, runs
