"""A switch restarted under traffic: how long its VMs are cut off, hvnet
beside Open vSwitch userspace — a measurement (no study publishes it), so
its figure carries no verdict.

A QEMU guest (TCG here) whose NIC is a vhost-user port in client mode on
each switch (the guest's QEMU listens on the socket and the switch
connects to it, again after a restart, as Open vSwitch's
`dpdkvhostuserclient` ports do), and a namespace that pings the guest
every 10 ms through the same switch:

- hvnet: a `kind = "vhost-user"`, `mode = "client"` VM and a namespace VM
  (TAP); the restart is SIGTERM to the daemon, then `hvnet up FILE` once
  it is down (what `systemctl restart` does): the new daemon re-attaches
  to the TAP and connects to the guest's socket again.
- Open vSwitch with DPDK (`ovs-vswitchd-dpdk`, a `netdev` bridge, its
  poll-mode thread on core 0), in a namespace of its own: a
  `dpdkvhostuserclient` port and a veth port to the pinging namespace;
  the restart is `ovs-appctl exit`, then ovs-vswitchd started again on
  the same database (its ports kept there).

Gap = the longest run of unanswered pings in a row, in time (10 ms
each); lost = pings unanswered from one second before the restart to
two seconds after the guest answers again. The restart's own time (stop
asked to switch up again) is kept beside it."""

import contextlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import hvlab
import qemu_guest

from .fabrics import OvsDaemons, running
from .figures import measured
from .runners import interleaved
from .teams import ping_outage
from .verdict import median
from .vhost_compare import HUGEPAGES, OVS_DPDK, ensure_ovs_dpdk, hugepages

MAC = "02:00:00:00:27:01"
GUEST, PEER = "198.18.27.1", "198.18.27.3"
EVERY = 0.01
HVNET, OVS = "hvnet", "Open vSwitch with DPDK"
NOTE = ("A measurement, not a study's reproduction: no verdict. The guest is a QEMU machine (TCG, 256 MiB) running "
        "Debian's cloud kernel; the switch, the guest and the pinging namespace share this machine's 2 cores, Open "
        "vSwitch's poll-mode thread spinning on one of them.")


@contextlib.contextmanager
def hvnet_switch(tmp, sock):
    """hvnet with the guest's port (client mode) and the pinging VM:
    (ping argv, restart())."""
    vms = [dict(name="g", kind="vhost-user", mode="client", socket=str(sock), mac=MAC),
           dict(name="c", ipv4=f"{PEER}/24", queues=1)]
    with hvlab.Topology(tmp, vms, prefix="rg") as t:
        def restart():
            pid = json.loads(Path(f"/run/hvnet/{t.name}/state.json").read_text())["pid"]
            os.kill(pid, signal.SIGTERM)
            if not hvlab.eventually(lambda: not running(pid), timeout=60, every=0.01):
                raise RuntimeError("hvnet did not stop")
            hvlab.hvnet("up", t.file)

        yield ["ip", "netns", "exec", t.ns("c")], restart


@contextlib.contextmanager
def ovs_switch(tmp, sock):
    """Open vSwitch with DPDK in a namespace of its own, the guest's port
    a `dpdkvhostuserclient`, the pinging namespace behind a veth port:
    (ping argv, restart())."""
    ensure_ovs_dpdk()
    with hugepages(HUGEPAGES) as huge, hvlab.Netns("rgo") as sw, hvlab.Netns("rgc") as c:
        near = hvlab.unique("rgv")
        hvlab.run(["ip", "link", "add", near, "netns", sw.name, "type", "veth", "peer", "name", "eth0",
                   "netns", c.name])
        sw.sh(f"ip link set {near} up")
        # Open vSwitch's userspace datapath completes no checksum.
        c.sh(f"ip addr add {PEER}/24 dev eth0 && ethtool -K eth0 tx off >/dev/null && ip link set eth0 up")
        ovs = OvsDaemons(sw.name)
        try:
            ovs.start(config=["other_config:dpdk-init=true", "other_config:pmd-cpu-mask=0x1",
                              "other_config:dpdk-socket-mem=1024", "other_config:dpdk-socket-limit=1024",
                              f"other_config:dpdk-hugepage-dir={huge}",
                              f'other_config:dpdk-extra="--file-prefix=hvlrg{os.getpid()} --no-pci"'],
                      vswitchd=OVS_DPDK)
            ovs.vsctl("add-br", "br0", "--", "set", "bridge", "br0", "datapath_type=netdev")
            ovs.vsctl("add-port", "br0", near)
            ovs.vsctl("add-port", "br0", "g", "--", "set", "interface", "g", "type=dpdkvhostuserclient",
                      f"options:vhost-server-path={sock}")

            def restart():
                pid = ovs.pid("vswitchd")
                ovs.run("ovs-appctl", "-t", str(ovs.vswitchd_ctl()), "exit")
                if not hvlab.eventually(lambda: not running(pid), timeout=60, every=0.01):
                    raise RuntimeError("ovs-vswitchd did not stop")
                ovs.start_vswitchd(OVS_DPDK)

            yield ["ip", "netns", "exec", c.name], restart
        finally:
            with contextlib.suppress(subprocess.CalledProcessError):
                ovs.vsctl("--if-exists", "del-br", "br0")
            ovs.stop()


SWITCHES = {HVNET: hvnet_switch, OVS: ovs_switch}


def restart_once(tmp, switch, log):
    """One restart under pings: {gap_ms, lost, sent, restart_s}."""
    run_dir = tmp / hvlab.unique("r")
    run_dir.mkdir()
    sock = run_dir / "g.sock"
    initrd = qemu_guest.initramfs(run_dir, MAC, GUEST + "/24", "sleep 3600")
    guest = qemu_guest.Qemu(run_dir, "g", qemu_guest.argv(str(sock), MAC, initrd, server=True))
    try:
        with SWITCHES[switch](run_dir, sock) as (ns, restart):
            reaches = lambda: hvlab.run(ns + ["ping", "-c", "1", "-W", "1", GUEST], check=False).returncode == 0  # noqa: E731
            if not hvlab.eventually(reaches, timeout=300, every=0.2):
                raise RuntimeError(f"the guest never answered on {switch}:\n{guest.text()[-2000:]}")
            ping = subprocess.Popen(ns + ["ping", "-D", "-i", str(EVERY), GUEST], stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True)
            try:
                time.sleep(1)
                s = time.monotonic()
                restart()
                took = time.monotonic() - s
                if not hvlab.eventually(reaches, timeout=120, every=0.05):
                    raise RuntimeError(f"the guest is not reached after {switch} restarted")
                time.sleep(2)
            finally:
                ping.send_signal(signal.SIGINT)
                try:
                    out, _ = ping.communicate(timeout=30)
                except subprocess.TimeoutExpired:
                    ping.kill()
                    ping.communicate()
                    raise
    finally:
        guest.stop()
    o = ping_outage(out, EVERY)
    r = {"gap_ms": o["outage_ms"], "lost": o["lost"], "sent": o["sent"], "restart_s": round(took, 3)}
    log.append({"command": f"{switch}: " + " ".join(ns + ["ping", "-D", "-i", str(EVERY), GUEST])
                + " while the switch restarts", **r})
    print(f"      {switch}: gap {r['gap_ms']:g} ms, {r['lost']} of {r['sent']} pings lost, restart {took:.2f} s",
          flush=True)
    return r


def restart_gap(tmp, quick, reps, log):
    runs = interleaved(list(SWITCHES), reps, lambda s: restart_once(Path(tmp), s, log))
    gap = {s: median([r["gap_ms"] for r in runs[s]]) for s in SWITCHES}
    took = {s: median([r["restart_s"] for r in runs[s]]) for s in SWITCHES}
    said = (f"hvnet's VMs were cut off {gap[HVNET]:g} ms, Open vSwitch's {gap[OVS]:g} ms (medians of {reps} runs; "
            f"{gap[HVNET] / max(gap[OVS], 1e-9):.2f}x); the restart itself took {took[HVNET]:.2f} s and "
            f"{took[OVS]:.2f} s")
    figs = [measured("restart-gap", "A switch restarted under pings every 10 ms: the longest silence", "", "ms",
                     runs, "gap_ms", lambda s: (s, "gap"),
                     "are a switch's VMs cut off longer by an hvnet restart than by an Open vSwitch userspace "
                     "restart?", said, NOTE)]
    return figs, runs
