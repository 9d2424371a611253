"""Frames lost while a real guest moves to another host: a measurement,
not a study's reproduction (no study publishes it), so its figure carries
no verdict, only the two back ends side by side.

A QEMU guest (TCG here) is live-migrated between two "hosts" on this
machine while a namespace VM on the first pings it every 10 ms:

- hvnet: two switches (two topologies) whose uplinks are the ends of one
  veth pair; the guest's NIC on a vhost-user port of each. hvnet logs the
  pages it writes while QEMU copies memory, and announces the guest on
  the destination (SEND_RARP); the first switch learns it behind its
  uplink. Once on split virtqueues, once on packed ones (QEMU's
  packed=on).
- QEMU's own virtio-net on a TAP, joined by a Linux bridge: two bridges
  joined by a veth pair, a TAP of each QEMU in its host's bridge; QEMU
  announces the guest itself.

Lost = pings sent - pings answered, from one second before `migrate` to
two seconds after QEMU reports it completed; QEMU's total time and
downtime are kept beside it."""

import contextlib
import functools
import re
import signal
import subprocess
import time

import hvlab
import qemu_guest

from .figures import measured
from .runners import interleaved
from .verdict import median

MAC = "02:00:00:00:26:01"
GUEST, PEER = "198.18.26.1", "198.18.26.3"
NOTE = ("A measurement, not a study's reproduction: no verdict. The guest is a QEMU machine (TCG, 256 MiB) running "
        "Debian's cloud kernel; source and destination QEMU, both switches and the pinging namespace share this "
        "machine's 2 cores; the two hosts' wire is a veth pair.")


def veth_pair(prefix):
    a, b = hvlab.unique(prefix + "a"), hvlab.unique(prefix + "b")
    hvlab.run(["ip", "link", "add", a, "type", "veth", "peer", "name", b])
    for d in (a, b):
        hvlab.run(["ip", "link", "set", d, "up"])
    return a, b


@contextlib.contextmanager
def two_switches(tmp, mac, peer_ip, prefix="lm"):
    """Two hvnet "hosts": switch a (a vhost-user port q for the guest, a
    namespace VM c with `peer_ip`) and switch b (port q), their uplinks the
    two ends of one veth pair (the wire between them): (a, b), topologies."""
    wire_a, wire_b = veth_pair(prefix)
    try:
        with hvlab.Topology(tmp, [dict(name="q", kind="vhost-user", mac=mac),
                                  dict(name="c", ipv4=peer_ip + "/24", queues=1)],
                            prefix=prefix + "a", uplinks=[dict(name="up0", device=wire_a, queues=1)]) as a, \
             hvlab.Topology(tmp, [dict(name="q", kind="vhost-user", mac=mac)],
                            prefix=prefix + "b", uplinks=[dict(name="up0", device=wire_b, queues=1)]) as b:
            yield a, b
    finally:
        hvlab.run(["ip", "link", "del", wire_a], check=False)


@contextlib.contextmanager
def hvnet_hosts(tmp, packed=False):
    """The guest's ports on two switches, the pinging VM on the first:
    (sockets (source, destination), ping argv); `packed`: the guest's
    NIC on packed virtqueues (QEMU's packed=on)."""
    with two_switches(tmp, MAC, PEER) as (a, b):
        yield (dict(sock=f"/run/hvnet/{a.name}/q.sock", packed=packed),
               dict(sock=f"/run/hvnet/{b.name}/q.sock", packed=packed)), \
            ["ip", "netns", "exec", a.ns("c")]


@contextlib.contextmanager
def joined_bridges(prefix="lm"):
    """Two Linux bridges joined by a veth pair (two hosts' switches and
    the wire between them), the pinging namespace on the first: (bridges,
    ping argv, the devices made, to which a caller adds its own: all are
    deleted at the end)."""
    made = []
    try:
        bridges = []
        for _ in range(2):
            br = hvlab.unique(prefix + "br")
            hvlab.run(["ip", "link", "add", br, "type", "bridge"])
            made.append(br)
            hvlab.run(["ip", "link", "set", br, "up"])
            bridges.append(br)
        wire_a, wire_b = veth_pair(prefix + "w")
        made.append(wire_a)
        for br, wire in zip(bridges, (wire_a, wire_b)):
            hvlab.run(["ip", "link", "set", wire, "master", br])
        with hvlab.Netns(prefix + "c") as c:
            outside = hvlab.unique(prefix + "v")
            hvlab.run(["ip", "link", "add", outside, "type", "veth", "peer", "name", "eth0", "netns", c.name])
            made.append(outside)
            hvlab.run(["ip", "link", "set", outside, "master", bridges[0], "up"])
            c.sh(f"ip addr add {PEER}/24 dev eth0 && ip link set eth0 up")
            yield bridges, ["ip", "netns", "exec", c.name], made
    finally:
        for dev in reversed(made):
            hvlab.run(["ip", "link", "del", dev], check=False)


@contextlib.contextmanager
def bridged_hosts(tmp):
    """`joined_bridges` with a TAP for the guest in each (QEMU's own
    virtio-net back end, vnet headers on): (TAPs (source, destination),
    ping argv)."""
    with joined_bridges() as (bridges, ns, made):
        taps = []
        for br in bridges:
            tap = hvlab.unique("lmt")
            hvlab.run(["ip", "tuntap", "add", "dev", tap, "mode", "tap", "vnet_hdr"])
            made.append(tap)
            hvlab.run(["ip", "link", "set", tap, "master", br, "up"])
            taps.append(dict(tap=tap))
        yield tuple(taps), ns


HVNET, BRIDGE = "hvnet (vhost-user)", "Linux bridge (QEMU virtio-net on TAP)"
BACKENDS = {HVNET: hvnet_hosts, "hvnet (vhost-user, packed)": functools.partial(hvnet_hosts, packed=True),
            BRIDGE: bridged_hosts}


def pings(text):
    m = re.search(r"(\d+) packets transmitted, (\d+) (?:packets )?received", text)
    if not m:
        raise RuntimeError(f"ping printed no summary:\n{text[-1000:]}")
    return int(m.group(1)), int(m.group(2))


def migrate_once(tmp, backend, log):
    """One migration under pings: {lost, sent, total_ms, downtime_ms}."""
    run_dir = tmp / hvlab.unique("m")
    run_dir.mkdir()
    with BACKENDS[backend](run_dir) as (nics, ns):
        initrd = qemu_guest.initramfs(run_dir, MAC, GUEST + "/24", "sleep 3600")
        mig = run_dir / "migrate.sock"
        guests = []
        try:
            src = qemu_guest.Qemu(run_dir, "src", qemu_guest.argv(initrd=initrd, mac=MAC, **nics[0]))
            guests.append(src)
            dst = qemu_guest.Qemu(run_dir, "dst", qemu_guest.argv(initrd=initrd, mac=MAC, **nics[1])
                                  + ["-incoming", f"unix:{mig}"])
            guests.append(dst)
            reaches = lambda: hvlab.run(ns + ["ping", "-c", "1", "-W", "1", GUEST], check=False).returncode == 0  # noqa: E731
            if not hvlab.eventually(reaches, timeout=300, every=0.2):
                raise RuntimeError(f"the guest never answered on {backend}:\n{src.text()[-2000:]}")
            ping = subprocess.Popen(ns + ["ping", "-q", "-i", "0.01", GUEST], stdout=subprocess.PIPE,
                                          stderr=subprocess.STDOUT, text=True)
            try:
                time.sleep(1)
                src.qmp(("migrate", {"uri": f"unix:{mig}"}))
                done = lambda: src.migration().get("status") in ("completed", "failed", "cancelled")  # noqa: E731
                hvlab.eventually(done, timeout=180, every=0.05)
                status = src.migration()
                if status.get("status") != "completed":
                    raise RuntimeError(f"migration on {backend} did not complete: {status}")
                time.sleep(2)
            finally:
                ping.send_signal(signal.SIGINT)
                out, _ = ping.communicate(timeout=30)
            sent, answered = pings(out)
            if not reaches():
                raise RuntimeError(f"the guest is not reached after its move on {backend}")
        finally:
            for g in guests:
                g.stop()
    r = {"lost": sent - answered, "sent": sent, "total_ms": status.get("total-time", 0),
         "downtime_ms": status.get("downtime", 0)}
    log.append({"command": f"{backend}: " + " ".join(ns + ["ping", "-q", "-i", "0.01", GUEST])
                + " during QMP migrate", **r})
    return r


def migration_loss(tmp, quick, reps, log):
    runs = interleaved(list(BACKENDS), reps, lambda b: migrate_once(tmp, b, log))
    hv, br = (median([r["lost"] for r in runs[b]]) for b in (HVNET, BRIDGE))
    times = {(b, label): [{"ms": r[k]} for r in runs[b]]
             for b in BACKENDS for k, label in (("downtime_ms", "downtime"), ("total_ms", "total"))}
    figs = [
        measured("migration-loss", "Pings lost (10 ms apart) while a guest migrates to another host", "",
                 "pings lost", runs, "lost", lambda b: (b, "pings lost"),
                 "does a live migration lose more frames on hvnet than on QEMU's own virtio-net on a TAP joined by a "
                 "Linux bridge?",
                 f"hvnet lost {hv:g} pings, the bridge with QEMU's own back end {br:g} (medians of {reps} runs): "
                 + ("more" if hv > br else "no more"), NOTE),
        measured("migration-time", "QEMU's migration time and downtime, per back end", "", "ms", times, "ms",
                 lambda c: c, "does the back end lengthen the migration or its downtime?",
                 "; ".join(f"{b}: downtime {median([r['downtime_ms'] for r in runs[b]]):g} ms, total "
                           f"{median([r['total_ms'] for r in runs[b]]):g} ms" for b in BACKENDS), NOTE),
    ]
    return figs, runs
