"""A host's switch: many ports, and ports that come and go (datapath v4).

- `port-scale`: N namespace VMs of one queue each on one switch, nothing
  sent: the daemon's threads, its idle CPU, its memory per port, and how
  long `hvnet up` and `hvnet down` take; then one VM sends broadcasts
  (ICMP echo to the subnet's broadcast address, which Linux does not
  answer), each copied to every other port: the daemon's CPU per copy.
  With `HVNET_LAB_BASELINE` another build beside this one (where it takes
  that many VMs). The Linux bridge beside them: as many namespaces, each
  behind a veth on one bridge, the same broadcasts; the whole machine's
  CPU per copy for every switch (the daemon's alone is only hvnet's),
  and beside them the same broadcasts written into as many TAPs by a
  loop that does nothing else (the kernel's cost of a copy written into
  a TAP: the floor under a switch that writes each copy).
- `port-churn`: two VMs carry an iperf3 stream and a file checked by
  SHA-256 while VMs are added one by one (`hvnet vm add`, each pinged until
  it answers) and removed again (`hvnet vm del`), against the same traffic
  with no churn, interleaved: retransmits, drops, and the time from `vm
  add` returning to the new VM's first ping answered.
- `port-load`: 64 namespace VMs in pairs, each sending 64 B UDP as fast
  as iperf3 can: the frames forwarded per second, all together, beside
  the baseline build (`HVNET_LAB_BASELINE`), interleaved.
"""

import fcntl
import hashlib
import json
import os
import struct
import subprocess
import sys
import time
from pathlib import Path

import hvlab
from hostile_traffic import csum

from .figures import measured
from .measure import proc_stat
from .runners import builds, interleaved
from .verdict import median

XFER = Path(__file__).resolve().parents[2] / "tests" / "py" / "xfer.py"


def daemon(t):
    return json.loads(Path(f"/run/hvnet/{t.name}/state.json").read_text())["pid"]


def cpu_ticks(pid):
    f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(f[11]) + int(f[12])


def resident_kib(pid):
    return next(int(line.split()[1]) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                if line.startswith("VmRSS"))


def one_scale(tmp, binary, n, idle_secs):
    """Brings up `n` VMs with `binary`, measures, brings them down."""
    with hvlab.hvnet_binary(binary):
        vms = [dict(name=f"v{i}", ipv4=f"198.18.{i // 250}.{i % 250 + 1}/16", queues=1) for i in range(n)]
        t0 = time.time()
        t = hvlab.Topology(tmp, vms, prefix="ps")
        with t:
            up = time.time() - t0
            pid = daemon(t)
            threads = len(os.listdir(f"/proc/{pid}/task"))
            time.sleep(2)
            c0, w0 = cpu_ticks(pid), time.time()
            time.sleep(idle_secs)
            c1, w1 = cpu_ticks(pid), time.time()
            mem = resident_kib(pid)
            bcast = broadcast(t, pid, n)
            t1 = time.time()
        down = time.time() - t1
    return dict(threads=threads, idle_pct=(c1 - c0) / os.sysconf("SC_CLK_TCK") / (w1 - w0) * 100,
                kib_per_port=mem / n, resident_mib=mem / 1024, up_s=up, down_s=down, **bcast)


BROADCASTS = 500
BRIDGE = "linux-bridge"
FLOOR = "tap-writes-alone"


def machine_busy_s():
    """Seconds of CPU the whole machine spent busy so far, all cores."""
    total, idle = proc_stat(Path("/proc/stat").read_text())
    return (total - idle) / os.sysconf("SC_CLK_TCK")


def send_broadcasts(sh, flooded, n, pid=None):
    """v0 sends `BROADCASTS` broadcast frames, 2 ms apart (`sh` runs a
    command in v0): each goes to the n - 1 other ports. The whole
    machine's CPU per copy, less what it spent before at rest (the sender's
    own work is in it, the same for every switch), and with `pid` the
    daemon's own (all its threads)."""
    b0, w0 = machine_busy_s(), time.time()
    time.sleep(3)
    rest = (machine_busy_s() - b0) / (time.time() - w0)
    f0, c0, b0, w0 = flooded(), cpu_ticks(pid) if pid else 0, machine_busy_s(), time.time()
    sh(f"ping -q -b -c {BROADCASTS} -i 0.002 -W 1 198.18.255.255")
    time.sleep(0.5)
    machine = machine_busy_s() - b0 - rest * (time.time() - w0)
    frames = flooded() - f0
    copies = max(frames * (n - 1), 1)
    out = dict(bcast_frames=frames, bcast_copies=copies, bcast_machine_ns_per_copy=max(machine, 0) * 1e9 / copies)
    if pid:
        out["bcast_ns_per_copy"] = (cpu_ticks(pid) - c0) / os.sysconf("SC_CLK_TCK") * 1e9 / copies
    return out


def broadcast(t, pid, n):
    flooded = lambda: t.stats("/ports/v0/tx_summary")["flooded"]  # noqa: E731
    return send_broadcasts(lambda cmd: t.sh("v0", cmd, check=False, timeout=120), flooded, n, pid)


def one_bridge(n, settle):
    """`n` namespaces, each behind a veth on one Linux bridge (in a
    namespace of its own), addressed as the hvnet VMs are; the same
    broadcasts. Every namespace is deleted, even on failure."""
    base = hvlab.unique("lb")[:9]
    names = [f"{base}{i}" for i in range(n)]
    made = []
    with hvlab.Netns("lbs") as sw:
        try:
            sw.sh("ip link add br0 type bridge && ip link set br0 up")
            for ns in names:
                hvlab.run(["ip", "netns", "add", ns])
                made.append(ns)
            links = "".join(f"link add p{i} type veth peer name eth0 netns {ns}\nlink set p{i} master br0 up\n"
                            for i, ns in enumerate(names))
            hvlab.run(["ip", "-n", sw.name, "-batch", "-"], input=links)
            for i, ns in enumerate(names):
                cmds = (f"addr add 198.18.{i // 250}.{i % 250 + 1}/16 dev eth0\nlink set eth0 up\n"
                        "link set lo up\n")
                hvlab.run(["ip", "-n", ns, "-batch", "-"], input=cmds)
            stats = "/sys/class/net/eth0/statistics/tx_packets"
            flooded = lambda: int(hvlab.run(["ip", "netns", "exec", names[0], "cat", stats]).stdout)  # noqa: E731
            sh = lambda cmd: hvlab.run(["ip", "netns", "exec", names[0], "sh", "-c", cmd],  # noqa: E731
                                       check=False, timeout=120)
            # Until every port forwards (a new bridge port listens, then
            # learns, for no time with STP off, but the links come up one
            # by one).
            hvlab.eventually(lambda: all(link.get("operstate") == "UP" for link in json.loads(
                hvlab.run(["ip", "-n", sw.name, "-j", "link", "show", "master", "br0"]).stdout)),
                timeout=60, every=0.2)
            # As long as hvnet's VMs rest before theirs (new links'
            # IPv6 address checks and router solicitations are over).
            time.sleep(settle)
            return send_broadcasts(sh, flooded, n)
        finally:
            for ns in made:
                hvlab.run(["ip", "netns", "del", ns], check=False)


TUNSETIFF = 0x400454CA
IFF_TAP, IFF_NO_PI = 0x0002, 0x1000


def broadcast_frame():
    """The broadcast hvnet's v0 sends: an ICMP echo (56 bytes of data)
    from 198.18.0.1 to 198.18.255.255, Ethernet to ff:ff:ff:ff:ff:ff."""
    icmp = bytearray(b"\x08\x00\x00\x00\x00\x01\x00\x01" + bytes(range(56)))
    icmp[2:4] = struct.pack("!H", 0xFFFF - csum(bytes(icmp)))
    ip = bytearray(b"\x45\x00" + (20 + len(icmp)).to_bytes(2, "big") + b"\x00\x01\x40\x00\x40\x01\x00\x00"
                   + bytes([198, 18, 0, 1, 198, 18, 255, 255]))
    ip[10:12] = struct.pack("!H", 0xFFFF - csum(bytes(ip)))
    return b"\xff" * 6 + b"\x02\x00\x00\x00\x00\x01" + b"\x08\x00" + bytes(ip) + bytes(icmp)


def one_tap_floor(n, settle):
    """The floor under any switch that writes each copy into a TAP: `n - 1`
    namespaces, each behind a TAP this process holds, addressed as the
    VMs are, and the same broadcasts written into every TAP, one `write`
    per copy, 2 ms apart, by a loop that does nothing else. Every
    namespace is deleted, even on failure."""
    base = hvlab.unique("tf")[:9]
    made, fds = [], []
    try:
        for i in range(1, n):
            ns, dev = f"{base}{i}", f"{base}t{i}"
            hvlab.run(["ip", "netns", "add", ns])
            made.append(ns)
            fd = os.open("/dev/net/tun", os.O_RDWR | os.O_CLOEXEC)
            fds.append(fd)
            fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH22x", dev.encode(), IFF_TAP | IFF_NO_PI))
            hvlab.run(["ip", "link", "set", dev, "netns", ns])
            hvlab.run(["ip", "-n", ns, "-batch", "-"],
                      input=f"addr add 198.18.{i // 250}.{i % 250 + 1}/16 dev {dev}\nlink set {dev} up\n"
                            "link set lo up\n")
        time.sleep(settle)
        frame = broadcast_frame()
        sent = [0]

        def send(_cmd):
            for _ in range(BROADCASTS):
                t0 = time.monotonic()
                for fd in fds:
                    os.write(fd, frame)
                sent[0] += 1
                time.sleep(max(0.0, 0.002 - (time.monotonic() - t0)))
        return send_broadcasts(send, lambda: sent[0], n)
    finally:
        for fd in fds:
            os.close(fd)
        for ns in made:
            hvlab.run(["ip", "netns", "del", ns], check=False)


def port_scale(tmp, quick, reps, log):
    sizes = [64, 256] if quick else [64, 256, 1000]
    idle_secs = 5 if quick else 10

    def one(c):
        (label, binary), n = c
        if label == BRIDGE:
            r = one_bridge(n, 2 + idle_secs)
            log.append({"command": f"Linux bridge: {n} namespaces behind veths, {BROADCASTS} broadcasts from the "
                                   "first", "build": label, "vms": n, **r})
            return r
        if label == FLOOR:
            r = one_tap_floor(n, 2 + idle_secs)
            log.append({"command": f"TAP writes alone: {n - 1} namespaces behind TAPs, {BROADCASTS} broadcasts "
                                   "written into each TAP by a loop doing nothing else", "build": label, "vms": n, **r})
            return r
        r = one_scale(tmp, binary, n, idle_secs)
        log.append({"command": f"{label}: hvnet up of {n} namespace VMs (1 queue), {idle_secs} s idle, "
                               f"{BROADCASTS} broadcasts from v0, hvnet down",
                    "build": label, "vms": n, **r})
        return r

    # The baseline takes at most 64 VMs.
    configs = [(b, n) for n in sizes for b in builds() if b[0] == "hvnet" or n <= 64]
    switches = configs + [((BRIDGE, None), n) for n in sizes] + [((FLOOR, None), n) for n in sizes]
    runs = interleaved(switches, reps, one)
    bridge = {c: rs for c, rs in runs.items() if c[0][0] == BRIDGE}
    floor = {c: rs for c, rs in runs.items() if c[0][0] == FLOOR}
    runs = {c: rs for c, rs in runs.items() if c[0][0] not in (BRIDGE, FLOOR)}
    place = lambda c: (c[0][0], f"{c[1]} VMs")  # noqa: E731
    per = lambda c, k: median([r[k] for r in runs[c]])  # noqa: E731
    said = "; ".join(f"{c[0][0]}, {c[1]} VMs: {per(c, 'threads'):.0f} threads, {per(c, 'idle_pct'):.2f} % of a core "
                     f"idle, {per(c, 'kib_per_port'):.0f} KiB per port, up {per(c, 'up_s'):.1f} s, down "
                     f"{per(c, 'down_s'):.1f} s, {per(c, 'bcast_ns_per_copy'):.0f} ns of CPU per broadcast copy"
                     for c in configs)
    note = ("Namespace VMs with one queue each, nothing sent; the daemon's threads from /proc/PID/task, its CPU over "
            f"{idle_secs} s after 2 s of rest, its resident memory divided by the ports.")
    figs = [
        measured("port-scale-threads", "The daemon's threads by VMs", "VMs", "threads", runs, "threads", place,
                 "does the thread count grow with ports?", said, note),
        measured("port-scale-idle", "The idle daemon's CPU by VMs", "VMs", "% of a core", runs, "idle_pct", place,
                 "what does an idle switch cost as ports grow?", said, note),
        measured("port-scale-memory", "The daemon's memory per port", "VMs", "KiB per port", runs, "kib_per_port",
                 place, "how much memory does a port take?", said, note),
        measured("port-scale-bringup", "hvnet up of N VMs", "VMs", "seconds", runs, "up_s", place,
                 "how long does hvnet up of many VMs take?", said, note),
        measured("port-scale-broadcast", "The daemon's CPU per broadcast copy by VMs", "VMs", "ns per copy", runs,
                 "bcast_ns_per_copy", place, "what does flooding to every port cost per copy?", said,
                 note + f" Broadcasts: {BROADCASTS} ICMP echoes to 198.18.255.255 from v0, 2 ms apart."),
    ]
    both = {**runs, **bridge, **floor}
    per_all = lambda c: median([r["bcast_machine_ns_per_copy"] for r in both[c]])  # noqa: E731
    vs = "; ".join(
        f"{n} ports: hvnet {per_all(h):.0f} ns, the Linux bridge {per_all(b):.0f} ns per copy "
        f"({per_all(h) / max(per_all(b), 1e-9):.2f}x), TAP writes alone {per_all(f):.0f} ns "
        f"(hvnet {per_all(h) / max(per_all(f), 1e-9):.2f}x)"
        for n in sizes
        for h in [next(c for c in runs if c[0][0] == "hvnet" and c[1] == n)]
        for b in [next(c for c in bridge if c[1] == n)]
        for f in [next(c for c in floor if c[1] == n)])
    figs.append(measured(
        "port-scale-broadcast-machine", "The whole machine's CPU per broadcast copy: hvnet and the Linux bridge",
        "ports", "ns per copy", both, "bcast_machine_ns_per_copy", place,
        "what does flooding cost per copy beside the Linux bridge?", vs,
        f"{BROADCASTS} ICMP echoes to 198.18.255.255 from the first VM, 2 ms apart, to every other port: hvnet's "
        "namespace VMs behind TAPs, or namespaces behind veths on one Linux bridge (in a namespace of its own, STP "
        "off). The machine's busy CPU from /proc/stat less its rate at rest in the 3 s before; the sender's "
        "own work and each receiving stack's are in it for both. 'TAP writes alone': the same broadcast written "
        "into N - 1 TAPs (each in its namespace, addressed as the VMs are) by a Python loop that does nothing "
        "else, one write per copy, 2 ms apart: what the kernel spends on a copy written into a TAP, the floor "
        "under a switch that writes each copy into its port's TAP (the loop's own interpreter time in it)."))
    return figs, {f"{c[0][0]} {c[1]}": rs for c, rs in both.items()}


def retransmits(t, vm):
    out = t.sh(vm, "nstat -az TcpRetransSegs", check=False).stdout.split()
    return int(out[out.index("TcpRetransSegs") + 1]) if "TcpRetransSegs" in out else 0


def one_churn(tmp, n, churn, data, want, secs):
    vms = [dict(name="a", ipv4="198.18.0.1/16", queues=1), dict(name="b", ipv4="198.18.0.2/16", queues=1)]
    with hvlab.Topology(tmp, vms, prefix="pc") as t:
        t.popen("b", "iperf3 -s -1 -p 5201", stdout=subprocess.DEVNULL)
        t.wait_listening("b", 5201)
        server = t.popen("b", f"{sys.executable} {XFER} serve 198.18.0.2 5555", stdout=subprocess.PIPE, text=True)
        t.wait_listening("b", 5555)
        r0 = retransmits(t, "a")
        iperf = t.popen("a", f"iperf3 -c 198.18.0.2 -p 5201 -t {secs} -b 2G -J", stdout=subprocess.PIPE, text=True)
        rate = data.stat().st_size // max(secs - 5, 1)
        sender = t.popen("a", f"{sys.executable} {XFER} paced 198.18.0.2 5555 {data} {rate}")
        lat = []
        if churn:
            for i in range(n):
                ip = f"198.18.{1 + i // 250}.{i % 250 + 1}"
                t.hv("vm", "add", f"c{i}", f"ipv4={ip}/16", "queues=1")
                s = time.time()
                while t.sh("a", f"ping -c 1 -W 1 {ip}", check=False).returncode != 0:
                    pass
                lat.append((time.time() - s) * 1000)
            for i in range(n):
                t.hv("vm", "del", f"c{i}")
        sender.wait(timeout=secs + 300)
        digest, size = server.communicate(timeout=60)[0].split()
        ip = json.loads(iperf.communicate(timeout=secs + 60)[0])
        drops = sum(t.stats(f"/ports/{p}/accounting")[w]["drops"] for p in ("a", "b") for w in ("ingress", "egress"))
        return dict(retransmits=retransmits(t, "a") - r0, iperf_retransmits=ip["end"]["sum_sent"].get("retransmits", 0),
                    drops=drops, sha_ok=int(digest == want and int(size) == data.stat().st_size),
                    ping_ms_median=median(lat) if lat else 0.0, ping_ms_worst=max(lat) if lat else 0.0)


def port_churn(tmp, quick, reps, log):
    n = 50 if quick else 200
    secs = 20 if quick else 60
    data = Path(tmp) / "churn-data"
    data.write_bytes(os.urandom((16 if quick else 64) << 20))
    want = hashlib.sha256(data.read_bytes()).hexdigest()

    def one(churn):
        r = one_churn(tmp, n, churn, data, want, secs)
        log.append({"command": f"iperf3 -b 2G -t {secs} and a paced SHA-256 transfer between two VMs; "
                               + (f"{n} VMs added and removed meanwhile" if churn else "no churn"),
                    "churn": churn, **r})
        return r

    runs = interleaved([False, True], reps, one)
    place = lambda c: ("with churn" if c else "without churn", "a to b")  # noqa: E731
    get = lambda c, k: median([r[k] for r in runs[c]])  # noqa: E731
    said = (f"retransmits at a: {get(False, 'retransmits'):.0f} without churn, {get(True, 'retransmits'):.0f} with "
            f"{n} VMs added and removed; hvnet's drops at a and b {get(True, 'drops'):.0f}; SHA-256 intact in "
            f"{sum(r['sha_ok'] for rs in runs.values() for r in rs)} of {sum(len(rs) for rs in runs.values())} runs; "
            f"vm add to first ping answered: median {get(True, 'ping_ms_median'):.1f} ms, worst "
            f"{max(r['ping_ms_worst'] for r in runs[True]):.1f} ms")
    note = "Both VMs and the switch on this machine's cores; each new VM pinged from a until it answers."
    figs = [
        measured("port-churn-retransmits", "TCP retransmits while VMs come and go", "", "retransmits", runs,
                 "retransmits", place, "do ports added and removed disturb another VM's traffic?", said, note),
        measured("port-churn-ping", "vm add to the new VM's first ping answered", "", "ms (median of a run)",
                 {True: runs[True]}, "ping_ms_median", place, "how soon is a new VM on the network?", said, note),
    ]
    return figs, {("churn" if c else "none"): rs for c, rs in runs.items()}


def one_load(tmp, binary, n, secs):
    """`n` VMs in pairs, each even one sending 64 B UDP to the next as fast
    as iperf3 can for `secs`: the frames the switch forwarded per second,
    all pairs together, and the daemon's CPU."""
    ip = lambda i: f"198.18.{i // 250}.{i % 250 + 1}"  # noqa: E731
    with hvlab.hvnet_binary(binary):
        vms = [dict(name=f"v{i}", ipv4=f"{ip(i)}/16", queues=1) for i in range(n)]
        with hvlab.Topology(tmp, vms, prefix="pl") as t:
            pid = daemon(t)
            for i in range(1, n, 2):
                t.popen(f"v{i}", "iperf3 -s -1 -p 5201", stdout=subprocess.DEVNULL)
            for i in range(1, n, 2):
                t.wait_listening(f"v{i}", 5201)
            senders = [f"v{i}" for i in range(0, n, 2)]
            forwarded = lambda: sum(t.stats(f"/ports/{v}/tx_summary")["forwarded"] for v in senders)  # noqa: E731
            clients = [t.popen(v, f"iperf3 -u -b 0 -l 64 -t {secs} -c {ip(i + 1)} -p 5201", stdout=subprocess.DEVNULL)
                       for i, v in zip(range(0, n, 2), senders)]
            # Past the start of every client, and done before the last ends.
            time.sleep(2)
            f0, c0, w0 = forwarded(), cpu_ticks(pid), time.time()
            time.sleep(secs - 4)
            f1, c1, w1 = forwarded(), cpu_ticks(pid), time.time()
            for c in clients:
                c.wait(timeout=secs + 60)
    wall = w1 - w0
    return dict(aggregate_mpps=(f1 - f0) / wall / 1e6,
                cpu_pct=(c1 - c0) / os.sysconf("SC_CLK_TCK") / wall * 100)


def port_load(tmp, quick, reps, log):
    n = 16 if quick else 64
    secs = 8 if quick else 12

    def one(c):
        label, binary = c
        r = one_load(tmp, binary, n, secs)
        log.append({"command": f"{label}: {n} namespace VMs in {n // 2} pairs, iperf3 -u -b 0 -l 64 -t {secs} "
                               f"each; frames forwarded from the senders over the middle {secs - 4} s",
                    "build": label, "vms": n, **r})
        return r

    configs = builds()
    runs = interleaved(configs, reps, one)
    place = lambda c: (c[0], f"{n} VMs")  # noqa: E731
    per = lambda c, k: median([r[k] for r in runs[c]])  # noqa: E731
    said = "; ".join(f"{c[0]}: {per(c, 'aggregate_mpps'):.3f} M frames/s forwarded, the daemon at "
                     f"{per(c, 'cpu_pct'):.0f} % of a core" for c in configs)
    note = (f"{n // 2} iperf3 UDP senders (64 B, unlimited) and {n // 2} receivers in namespace VMs, all on this "
            "machine's cores with the switch; the frames the senders' ports forwarded per second, all together.")
    figs = [measured("port-load", f"Frames forwarded per second, {n} VMs each pair sending", "", "M frames/s",
                     runs, "aggregate_mpps", place, "do many ports sending at once get at least what they did?",
                     said, note)]
    return figs, {c[0]: rs for c, rs in runs.items()}
