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
- `evpn-scale`: a fabric's worth of routes (1,000 MAC/IP behind 100
  VTEPs) from a BGP speaker to an hvnet host and a Linux VTEP at once:
  time to install and remove, memory, and throughput with them installed
  against the static set-up.
- `evpn-segments`: the same routes spread over 100 VNIs (one VTEP per
  VNI), to an hvnet host whose uplink carries the 100 segments and a
  Linux VTEP with a bridge and a vxlan device per VNI: time to install,
  and the memory each host's processes grow by.
"""

import calendar
import json
import re
import subprocess
import time

import evpn_fabric as ef
import hvlab

from . import measure
from .figures import measured
from .runners import interleaved
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


def settled(check):
    """Waits for `check` without crowding the 2 cores while the fabric
    works: the times come from the kernel's event stamps, not from this."""
    time.sleep(0.3)
    ef.wait_until(check, every=0.05)


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
            # Sample 0 warms the fabric up (BGP's first updates after its
            # sessions came up wait for their update groups) and is not kept.
            for i in range(samples + 1):
                # hvnet: the VM's port connected, then disconnected.
                t0 = time.time()
                h1.topo.hv("port", "n", "set", "connected=on")
                settled(lambda: l1.fdb().get(MOBILE) == h1.vtep and h2.remote_macs().get(MOBILE) == h1.vtep)
                t1 = time.time()
                h1.topo.hv("port", "n", "set", "connected=off")
                settled(lambda: MOBILE not in l1.fdb() and MOBILE not in h2.remote_macs())
                if i:
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
                    settled(lambda: l1.fdb().get(mac) == l2.vtep and h1.remote_macs().get(mac) == l2.vtep)
                    s1 = time.time()
                    hvlab.run(["ip", "-n", l2.ns, "link", "del", "vn"])
                    settled(lambda: mac not in l1.fdb() and mac not in h1.remote_macs())
                finally:
                    hvlab.run(["ip", "netns", "del", vm], check=False)
                if i:
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

        # Per source: its host, where the VM's own entry is, and its VTEP;
        # the destinations, by the name each figure point has.
        sources = {"hvnet": ("hvnet VM", h1, f"dev hvp-{ef.VNI}", h1.vtep, {"Linux VTEP": l1, "other hvnet host": h2}),
                   "linux": ("Linux VM", l2, "dev vn", l2.vtep, {"Linux VTEP": l1, "other hvnet host": h1})}
        for src, mac, t0, t1 in windows:
            name, host, own, vtep, dests = sources[src]
            born = first(ev[host.ns], mac, False, own, t0)
            gone = first(ev[host.ns], mac, True, own, t1)
            for where, d in dests.items():
                add((name, f"installed at the {where}"), born, first(ev[d.ns], mac, False, f"dst {vtep}", t0))
                add((name, f"removed at the {where}"), gone, first(ev[d.ns], mac, True, f"dst {vtep}", t1))
            if src == "hvnet":
                add((name, "connect command to installed at the Linux VTEP"), t0,
                    first(ev[l1.ns], mac, False, f"dst {vtep}", t0))
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
    return figs, {" / ".join(c): r for c, r in runs.items()}


def vm_iperf(src_ns, dst_ns, dst_ip, seconds, log):
    """One iperf3 stream between two VMs of any hosts: Gbit/s."""
    server = subprocess.Popen(["ip", "netns", "exec", dst_ns, "iperf3", "-s", "-1", "-B", dst_ip],
                              stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    try:
        hvlab.wait_listening(dst_ns, 5201)
        cmd = f"iperf3 -c {dst_ip} -t {seconds} -J"
        out = ef.sh(src_ns, cmd, timeout=seconds + 60).stdout
    finally:
        hvlab.stop_procs([server])
    gbps = measure.iperf3(out)["bps"] / 1e9
    log.append({"command": f"ip netns exec {src_ns} {cmd}", "gbps": gbps})
    return {"gbps": gbps}


def evpn_scale(tmp, quick, reps, log):
    """1,000 MAC/IP routes behind 100 VTEPs (quick: 100 behind 20),
    advertised by a GoBGP speaker to an hvnet host and a Linux VTEP at
    once: time until each has installed them all (and removed them all
    once withdrawn), the hvnet daemon's memory with them; then VM-to-VM
    throughput across two hvnet hosts with them installed against the
    static set-up (two hosts with each other's `remotes`), interleaved."""
    vteps, per = (20, 5) if quick else (100, 10)
    vms = [[dict(name="a", ipv4=f"{ef.OVERLAY}.1/24")], [dict(name="b", ipv4=f"{ef.OVERLAY}.2/24")]]
    (tmp / "evpn").mkdir(exist_ok=True)
    (tmp / "static").mkdir(exist_ok=True)
    with ef.EvpnFabric(tmp / "evpn", vms, linux=1, injector=True) as f, \
            ef.EvpnFabric(tmp / "static", vms, linux=0, evpn=False) as s:
        f.wait_established(timeout=120)
        h1, lin, inj = f.hvnet[0], f.linux[0], f.injector
        vtep_ips, macs = inj.advertise(vteps, per)
        want = set(macs)
        rss0 = hvlab.rss_bytes(h1.pid())

        def counts():
            v = h1.vxlan()
            hv_macs = {m["mac"] for m in v["remote_macs"] if m["origin"] == "evpn"} & want
            hv_vteps = set(v["flood_list"]) & set(vtep_ips)
            lin_fdb = lin.fdb()
            return len(hv_macs), len(hv_vteps), len(want & set(lin_fdb)), len(v["remote_ips"])

        installs = {("hvnet", "installed"): [], ("Linux + FRR", "installed"): [],
                    ("hvnet", "removed"): [], ("Linux + FRR", "removed"): []}
        rss = []
        for _ in range(reps):
            t0 = time.monotonic()
            for host in (h1, lin):
                inj.enable(host.ip)
            done = {}
            while len(done) < 2 and time.monotonic() - t0 < 300:
                n_hv, n_vt, n_lin, _ = counts()
                if "hvnet" not in done and n_hv == len(want) and n_vt == len(vtep_ips):
                    done["hvnet"] = time.monotonic() - t0
                if "lin" not in done and n_lin == len(want):
                    done["lin"] = time.monotonic() - t0
                time.sleep(0.02)
            if len(done) < 2:
                raise RuntimeError(f"not all installed within 300 s: {counts()} of {len(want)} MACs, {vteps} VTEPs")
            installs[("hvnet", "installed")].append({"s": done["hvnet"]})
            installs[("Linux + FRR", "installed")].append({"s": done["lin"]})
            rss.append(hvlab.rss_bytes(h1.pid()))
            ips = counts()[3]
            t0 = time.monotonic()
            for host in (h1, lin):
                inj.gobgp("neighbor", host.ip, "disable")
            gone = {}
            while len(gone) < 2 and time.monotonic() - t0 < 300:
                n_hv, n_vt, n_lin, _ = counts()
                if "hvnet" not in gone and n_hv == 0 and n_vt == 0:
                    gone["hvnet"] = time.monotonic() - t0
                if "lin" not in gone and n_lin == 0:
                    gone["lin"] = time.monotonic() - t0
                time.sleep(0.02)
            installs[("hvnet", "removed")].append({"s": gone.get("hvnet", float("nan"))})
            installs[("Linux + FRR", "removed")].append({"s": gone.get("lin", float("nan"))})
        # Throughput with everything installed, against the static set-up.
        for host in (h1, lin):
            inj.enable(host.ip)
        ef.wait_until(lambda: counts()[0] == len(want), timeout=300)
        a, b = (h.topo.ns(v) for h, v in zip(f.hvnet, ("a", "b")))
        sa, sb = (h.topo.ns(v) for h, v in zip(s.hvnet, ("a", "b")))
        ef.sh(a, f"ping -c 2 -i 0.2 -W 2 {ef.OVERLAY}.2")
        ef.sh(sa, f"ping -c 2 -i 0.2 -W 2 {ef.OVERLAY}.2")
        seconds = 2 if quick else 4
        configs = {"EVPN, routes installed": (a, b), "static remotes": (sa, sb)}
        tput = interleaved(list(configs), reps,
                           lambda c: vm_iperf(*configs[c], f"{ef.OVERLAY}.2", seconds, log))
    med = {k: median([r["s"] for r in v]) for k, v in installs.items()}
    ratio = median([r["gbps"] for r in tput["EVPN, routes installed"]]) / median(
        [r["gbps"] for r in tput["static remotes"]])
    figs = [
        measured("evpn-scale-install", f"{len(want)} MAC/IP routes behind {vteps} VTEPs: time to install and remove",
                 "", "s", installs, "s", lambda c: c,
                 "does hvnet install a fabric's worth of routes as fast as Linux + FRR, with bounded memory?",
                 f"installed: hvnet {med[('hvnet', 'installed')]:.2f} s, Linux + FRR "
                 f"{med[('Linux + FRR', 'installed')]:.2f} s; removed: hvnet {med[('hvnet', 'removed')]:.2f} s, "
                 f"Linux + FRR {med[('Linux + FRR', 'removed')]:.2f} s (medians of {reps}); hvnet's daemon "
                 f"{rss0 / 2**20:.1f} MiB before, {max(rss) / 2**20:.1f} MiB with them; {ips} remote IPs installed",
                 NOTE + " The routes come from a GoBGP speaker on the same underlay, to both at once."),
        measured("evpn-scale-throughput", "VM to VM across two hvnet hosts: with the routes installed vs static remotes",
                 "", "Gbit/s", {(c, "Gbit/s"): r for c, r in tput.items()}, "gbps", lambda c: c,
                 "does forwarding slow down with a fabric's routes installed?",
                 f"EVPN with {len(want)} MACs and {vteps} VTEPs installed / static remotes: {ratio:.3f} "
                 f"(medians of {reps}, one iperf3 stream, {seconds} s)", NOTE),
    ]
    return figs, {"installs": {" / ".join(c): r for c, r in installs.items()}, "throughput": tput}


def rss_of(pids):
    """Resident memory of processes `pids`, summed (bytes)."""
    return sum(hvlab.rss_bytes(p) for p in pids)


def evpn_segments(tmp, quick, reps, log):
    """1,000 MAC/IP routes behind 100 VTEPs in 100 VNIs (quick: 100 behind
    20 in 10), from a GoBGP speaker to an hvnet host carrying the VNIs as
    segments of one uplink and to a Linux VTEP with a bridge and a vxlan
    device per VNI, at once: time until each has installed every route in
    its VNI (MACs, and each VTEP in its VNI's flood list) from its session
    with the speaker up (to within the 50 ms or so of a poll), and the growth
    of each host's processes (hvnet's daemon and its FRR; Linux's FRR)."""
    n_vnis, vteps, per = (10, 20, 5) if quick else (100, 100, 10)
    own_vlan, first_vni = 1000, 6000
    vnis = [first_vni + k for k in range(n_vnis)]
    vxlan = dict(vni=first_vni, vlans={str(own_vlan + k): first_vni + k for k in range(1, n_vnis)})
    vms = [[dict(name="a", ipv4=f"{ef.OVERLAY}.1/24", vlan=own_vlan)]]
    t0 = time.monotonic()
    with ef.EvpnFabric(tmp, vms, linux=1, injector=True, vxlan=vxlan, uplink=dict(vlan=own_vlan),
                       linux_vnis={v: None for v in vnis}) as f:
        f.wait_established(timeout=180)
        bring_up = time.monotonic() - t0
        h1, lin, inj = f.hvnet[0], f.linux[0], f.injector
        vtep_ips, macs = inj.advertise(vteps, per, vnis=vnis)
        want = set(macs)
        floods = {(vnis[v % n_vnis], ip) for v, ip in enumerate(vtep_ips)}
        hv_frr = h1.frr_pids()

        def memory():
            return {"hvnet": hvlab.rss_bytes(h1.pid()), "hvnet's FRR": rss_of(hv_frr),
                    "Linux + FRR": rss_of(lin.frr_pids())}

        def counts():
            v = h1.vxlan()
            hv_macs = {(m["vni"], m["mac"]) for m in v["remote_macs"] if m["origin"] == "evpn"} & want
            hv_floods = {(s["vni"], r) for s in v["segments"] for r in s["flood_list"]} & floods
            fdb = lin.fdb_all()
            shadow = {(vni, m) for vni, m, _ in h1.shadow_fdb()} & want
            lin_macs = {(vni, m) for vni, m, _ in fdb} & want
            lin_floods = {(vni, dst) for vni, m, dst in fdb if m == "00:00:00:00:00:00"} & floods
            return len(hv_macs), len(hv_floods), len(lin_macs), len(lin_floods), len(shadow)

        def established():
            """The injector's sessions that are up now, by neighbour."""
            peers = json.loads(inj.gobgp("neighbor", "-j").stdout or "[]")
            return {p["state"]["neighbor_address"] for p in peers if p["state"].get("session_state") == 6}

        installs = {("hvnet", "installed"): [], ("hvnet's shadow", "installed by its zebra"): [],
                    ("Linux + FRR", "installed"): []}
        mem, polls = [], []
        for _ in range(reps):
            before = memory()
            t0 = time.monotonic()
            for host in (h1, lin):
                inj.enable(host.ip)
            # Each from its session with the speaker up: how soon a
            # disabled session comes back is GoBGP's, not the host's.
            up, done = {}, {}
            while len(done) < 3 and time.monotonic() - t0 < 300:
                now = time.monotonic()
                if len(up) < 2:
                    ready = established()
                    for name, host in (("hvnet", h1), ("lin", lin)):
                        if name not in up and host.ip in ready:
                            up[name] = now
                n_hv, n_hf, n_lin, n_lf, n_sh = counts()
                now = time.monotonic()
                if "shadow" not in done and n_sh == len(want):
                    done["shadow"] = now
                if "hvnet" not in done and (n_hv, n_hf) == (len(want), len(floods)):
                    done["hvnet"] = now
                if "lin" not in done and (n_lin, n_lf) == (len(want), len(floods)):
                    done["lin"] = now
                time.sleep(0.01)
            # The resolution: one look at both hosts' tables.
            t1 = time.monotonic()
            counts()
            polls.append(time.monotonic() - t1 + 0.01)
            if len(done) < 3 or len(up) < 2:
                raise RuntimeError(f"not all installed within 300 s: {counts()} of {len(want)} MACs and "
                                   f"{len(floods)} flood entries")
            installs[("hvnet", "installed")].append({"s": done["hvnet"] - up["hvnet"]})
            installs[("hvnet's shadow", "installed by its zebra")].append({"s": done["shadow"] - up["hvnet"]})
            installs[("Linux + FRR", "installed")].append({"s": done["lin"] - up["lin"]})
            after = memory()
            mem.append({k: {"before": before[k], "after": after[k]} for k in before})
            for host in (h1, lin):
                inj.gobgp("neighbor", host.ip, "disable")
            ef.wait_until(lambda: counts() == (0, 0, 0, 0, 0), timeout=300, every=0.1)
    med = {k: median([r["s"] for r in v]) for k, v in installs.items()}
    growth = {k: median([(m[k]["after"] - m[k]["before"]) / 2**20 for m in mem]) for k in mem[0]}
    total = {k: median([m[k]["after"] / 2**20 for m in mem]) for k in mem[0]}
    frr_growth = growth["hvnet's FRR"]
    shadow_med = med[("hvnet's shadow", "installed by its zebra")]
    hv_growth = growth["hvnet"] + frr_growth
    hv_total = total["hvnet"] + total["hvnet's FRR"]
    figs = [
        measured("evpn-segments-install",
                 f"{len(want)} MAC/IP routes behind {vteps} VTEPs in {n_vnis} VNIs: time to install",
                 "", "s", installs, "s", lambda c: c,
                 "does hvnet install a fabric of many segments as fast as a Linux VTEP with FRR, with no more memory?",
                 f"installed: hvnet {med[('hvnet', 'installed')]:.2f} s (its shadow by its zebra "
                 f"{shadow_med:.2f} s), Linux + FRR "
                 f"{med[('Linux + FRR', 'installed')]:.2f} s from each one's session with the speaker up, each look at both "
                 f"hosts' tables taking {median(polls) * 1000:.0f} ms (hvnet / Linux "
                 f"{med[('hvnet', 'installed')] / med[('Linux + FRR', 'installed')]:.2f}, medians of {reps}); "
                 f"memory grown with them (MiB, median): hvnet's daemon {growth['hvnet']:.1f} and its FRR "
                 f"{frr_growth:.1f} (together {hv_growth:.1f}) against Linux's FRR "
                 f"{growth['Linux + FRR']:.1f}; resident with them: hvnet's daemon and its FRR {hv_total:.1f} MiB, "
                 f"Linux's FRR {total['Linux + FRR']:.1f} MiB (the kernel's tables, the Linux VTEP's FDB and hvnet's "
                 f"shadows alike, not counted); the fabric up in {bring_up:.0f} s",
                 NOTE.split(" Four hosts")[0] + f" Three hosts on one machine (2 cores): an hvnet host whose uplink "
                 f"carries {n_vnis} VNIs, a Linux VTEP with a bridge and a vxlan device per VNI, and a GoBGP speaker "
                 f"advertising to both at once, FRR 8.4 on the first two (advertise-all-vni)."),
    ]
    return figs, {"installs": {" / ".join(c): r for c, r in installs.items()}, "memory": mem, "bring_up_s": bring_up,
                  "poll_s": polls}
