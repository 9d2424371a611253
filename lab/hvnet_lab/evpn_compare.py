"""BGP EVPN, measured (no study publishes these: no verdict):

- `evpn-install`: how soon a VM that appears on one host is installed in
  the other hosts' FDBs, and how soon it is removed once it goes, against
  Linux + FRR doing the same for a VM of its own, in the same fabric and
  the same run: two hvnet hosts and two Linux VTEPs (`evpn_fabric`).
  Times come from the kernel's FDB events (`bridge -timestamp monitor
  fdb`) on each host: from the moment the source host has the VM locally
  (hvnet: its MAC written to the shadow; Linux: its bridge learned it from
  the VM's first frame) to the moment the destination has it from the
  fabric (the `vxlan` device's entry, which hvnet's endpoint takes from
  the same event); 20 samples each way (5 with --quick), median and worst.
"""

import calendar
import re
import subprocess
import time

import evpn_fabric as ef
import hvlab

from .figures import measured
from .verdict import median

NOTE = ("A measurement, not a study's reproduction: no verdict. Four hosts on one machine (2 cores), each a network "
        "namespace on one bridge: two hvnet hosts and two Linux VTEPs, FRR 8.4 on each (iBGP full mesh, "
        "advertise-all-vni). A hvnet VM appears when its port is connected (`hvnet port VM set connected=on`) and "
        "goes when it is disconnected; a Linux VM appears with its first frame on a new veth in the bridge and goes "
        "with the veth.")
MOBILE = "02:ee:00:00:00:07"


class Monitor:
    """`bridge -timestamp monitor fdb` in a namespace, parsed afterwards:
    [(epoch seconds, deleted, MAC, rest of the line)]."""

    def __init__(self, ns, path):
        self.path = path
        self.out = open(path, "w")
        self.p = subprocess.Popen(["ip", "netns", "exec", ns, "bridge", "-timestamp", "monitor", "fdb"],
                                  stdout=self.out, stderr=subprocess.STDOUT)

    def stop(self):
        hvlab.stop_procs([self.p])
        self.out.close()

    def events(self):
        ev, ts = [], None
        for line in self.path.read_text().splitlines():
            m = re.match(r"Timestamp: \w+ (\w+ +\d+ [\d:]+ \d+) (\d+) usec", line)
            if m:
                ts = calendar.timegm(time.strptime(m.group(1), "%b %d %H:%M:%S %Y")) + int(m.group(2)) / 1e6
                continue
            deleted = line.startswith("Deleted ")
            words = line.removeprefix("Deleted ").split()
            if ts is not None and words:
                ev.append((ts, deleted, words[0].lower(), " ".join(words[1:])))
        return ev


def first(events, mac, deleted, where, after):
    """The first event for `mac` (added or deleted) whose line has `where`,
    at or after `after`."""
    for ts, d, m, rest in events:
        if m == mac and d == deleted and where in rest and ts >= after:
            return ts
    return None


def evpn_install(tmp, quick, reps, log):
    samples = 5 if quick else 20
    h1_vms = [dict(name="a", ipv4=f"{ef.OVERLAY}.1/24"),
              dict(name="n", ipv4=f"{ef.OVERLAY}.7/24", mac=MOBILE, connected=False)]
    with ef.EvpnFabric(tmp, [h1_vms, [dict(name="b", ipv4=f"{ef.OVERLAY}.2/24")]], linux=2) as f:
        f.wait_established(timeout=120)
        h1, h2 = f.hvnet
        l1, l2 = f.linux
        mons = {h.ns: Monitor(h.ns, tmp / f"{h.ns}.fdb") for h in f.hosts()}
        time.sleep(0.5)
        windows = []
        try:
            for i in range(samples):
                # hvnet: the VM's port connected, then disconnected.
                t0 = time.time()
                h1.topo.hv("port", "n", "set", "connected=on")
                ef.wait_until(lambda: l1.fdb().get(MOBILE) == h1.vtep and h2.remote_macs().get(MOBILE) == h1.vtep)
                t1 = time.time()
                h1.topo.hv("port", "n", "set", "connected=off")
                ef.wait_until(lambda: MOBILE not in l1.fdb() and MOBILE not in h2.remote_macs())
                windows.append(("hvnet", MOBILE, t0, t1))
                # Linux: a new VM on L2 (a veth in its bridge, one ping), then its veth deleted.
                mac = f"02:42:00:00:99:{i + 1:02x}"
                vm = f"{l2.ns}-n"
                hvlab.run(["ip", "netns", "add", vm])
                try:
                    hvlab.run(["ip", "-n", l2.ns, "link", "add", "vn", "type", "veth", "peer", "name", "eth0",
                               "netns", vm])
                    ef.sh(vm, f"ip link set eth0 address {mac} && ip addr add {ef.OVERLAY}.99/24 dev eth0"
                              " && ip link set eth0 up")
                    s0 = time.time()
                    ef.sh(l2.ns, f"ip link set vn master br{ef.VNI} up")
                    ef.sh(vm, f"ping -c 1 -W 1 {ef.OVERLAY}.1", check=False)
                    ef.wait_until(lambda: l1.fdb().get(mac) == l2.vtep and h1.remote_macs().get(mac) == l2.vtep)
                    s1 = time.time()
                    hvlab.run(["ip", "-n", l2.ns, "link", "del", "vn"])
                    ef.wait_until(lambda: mac not in l1.fdb() and mac not in h1.remote_macs())
                finally:
                    hvlab.run(["ip", "netns", "del", vm], check=False)
                windows.append(("linux", mac, s0, s1))
            time.sleep(0.5)
        finally:
            for m in mons.values():
                m.stop()
        ev = {ns: m.events() for ns, m in mons.items()}
        runs = {}

        def add(config, a, b):
            if a is not None and b is not None:
                runs.setdefault(config, []).append({"ms": (b - a) * 1000})

        for src, mac, t0, t1 in windows:
            if src == "hvnet":
                born = first(ev[h1.ns], mac, False, f"dev hvp-{ef.VNI}", t0)
                gone = first(ev[h1.ns], mac, True, f"dev hvp-{ef.VNI}", t1)
                add(("hvnet VM", "installed at the Linux VTEP"), born, first(ev[l1.ns], mac, False, f"dst {h1.vtep}", t0))
                add(("hvnet VM", "installed at the other hvnet host"), born,
                    first(ev[h2.ns], mac, False, f"dst {h1.vtep}", t0))
                add(("hvnet VM", "removed at the Linux VTEP"), gone, first(ev[l1.ns], mac, True, f"dst {h1.vtep}", t1))
                add(("hvnet VM", "removed at the other hvnet host"), gone,
                    first(ev[h2.ns], mac, True, f"dst {h1.vtep}", t1))
                add(("hvnet VM", "connect command to installed at the Linux VTEP"), t0,
                    first(ev[l1.ns], mac, False, f"dst {h1.vtep}", t0))
            else:
                born = first(ev[l2.ns], mac, False, "dev vn", t0)
                gone = first(ev[l2.ns], mac, True, "dev vn", t1)
                add(("Linux VM", "installed at the Linux VTEP"), born, first(ev[l1.ns], mac, False, f"dst {l2.vtep}", t0))
                add(("Linux VM", "installed at the other hvnet host"), born,
                    first(ev[h1.ns], mac, False, f"dst {l2.vtep}", t0))
                add(("Linux VM", "removed at the Linux VTEP"), gone, first(ev[l1.ns], mac, True, f"dst {l2.vtep}", t1))
                add(("Linux VM", "removed at the other hvnet host"), gone,
                    first(ev[h1.ns], mac, True, f"dst {l2.vtep}", t1))
        log.append({"command": "hvnet port n set connected=on|off; ip link add vn ... master br42 + ping; "
                               "bridge -timestamp monitor fdb on every host", "windows": len(windows)})

    def said(what):
        parts = []
        for src in ("hvnet VM", "Linux VM"):
            ms = [r["ms"] for r in runs.get((src, what), [])]
            if ms:
                parts.append(f"{src}: median {median(ms):.1f} ms, worst {max(ms):.1f} ms ({len(ms)} samples)")
        return f"{what}: " + "; ".join(parts)

    figs = [measured("evpn-install", "A new VM installed in the other hosts' FDBs through BGP EVPN",
                     "", "ms", runs, "ms", lambda c: c,
                     "does a VM that appears on an hvnet host reach the other hosts' FDBs as soon as a VM that appears "
                     "on a Linux VTEP with FRR, and leave them as soon?",
                     " | ".join(said(w) for w in ("installed at the Linux VTEP", "installed at the other hvnet host",
                                                  "removed at the Linux VTEP", "removed at the other hvnet host",
                                                  "connect command to installed at the Linux VTEP")), NOTE)]
    return figs, runs
