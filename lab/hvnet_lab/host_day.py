"""A host's day, compressed: what a host does at once for months, for
`HVNET_LAB_HOST_DAY_MINUTES` minutes (60 by default, 0.75 with --quick),
with nothing leaked or lost. A measurement with no reference beside it.

Two VMs that nothing touches (`keep-a` to `keep-b`) carry SHA-256-checked
transfers back to back, paced, the whole time. Meanwhile the host's work
goes round in cycles, each one of the first four kinds in turn, and the
last two once each (at two thirds and five sixths of the day):

- `vm`: namespace VMs added (`hvnet vm add`), pinged, and removed;
- `settings`: a port's rate set and cleared at run time (`hvnet port P
  set`), a VM's access VLAN moved and moved back;
- `policy`: a security group given to a VM and taken away again, and a
  mirror made and removed, through `hvnet up FILE` of the edited file;
- `capture`: a capture of the untouched ports' frames started and
  stopped (`hvnet capture -c`);
- `restart`: the switch stopped with SIGTERM and brought up again (it
  re-attaches to the VMs);
- `kill`: the switch killed with SIGKILL and brought up again.

Not in this day yet: libvirt's guests (started, hot-plugged, migrated,
destroyed), teams losing a member, FRR restarted under an EVPN fabric,
libvirtd restarted, an in-place upgrade.

At the end, against the start (after the host's work has settled): the
daemon's descriptors and threads, the namespaces and the host's network
devices, the switch's ports and its FDB, MDB and connection entries; the
first daemon's memory just before its stop against its memory a sixth of
the way in (40 and 10 minutes into an hour); every
transfer's digest; every port's counters balanced (frames in = forwarded
+ named drops) in the daemon that runs at the end."""

import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import hvlab

from .figures import measured

XFER = Path(__file__).resolve().parents[2] / "tests" / "py" / "xfer.py"
KINDS = ["vm", "settings", "policy", "capture", "restart", "kill"]
EVERY_CYCLE = KINDS[:4]
NET = "198.18.96"
KEEP_A, KEEP_B = f"{NET}.1", f"{NET}.2"
GROUP = {"name": "day", "rules": [{"direction": "in", "protocol": "icmp"}, {"direction": "out"}]}


def every_cycle():
    """The kinds each cycle goes round: all four, or those named in
    `HVNET_LAB_HOST_DAY_KINDS` (comma-separated; to find which one keeps
    memory, each alone in its own day)."""
    named = os.environ.get("HVNET_LAB_HOST_DAY_KINDS")
    if not named:
        return EVERY_CYCLE
    kinds = [k.strip() for k in named.split(",") if k.strip()]
    bad = [k for k in kinds if k not in EVERY_CYCLE]
    if bad or not kinds:
        raise ValueError(f"HVNET_LAB_HOST_DAY_KINDS: unknown kind {bad}; allowed: {', '.join(EVERY_CYCLE)}")
    return kinds


def minutes(quick):
    m = os.environ.get("HVNET_LAB_HOST_DAY_MINUTES")
    return float(m) if m else (0.75 if quick else 60.0)


class Transfers:
    """keep-a sends `data` to keep-b again and again, paced, until told to
    stop; each transfer's digest and size kept."""

    def __init__(self, t, data):
        self.t, self.data = t, data
        self.want = hashlib.sha256(data.read_bytes()).hexdigest()
        self.done, self.bad = 0, []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self):
        size = self.data.stat().st_size
        while not self.stop.is_set():
            server = self.t.popen("keep-b", f"{sys.executable} {XFER} serve {KEEP_B} 5555",
                                  stdout=subprocess.PIPE, text=True)
            try:
                self.t.wait_listening("keep-b", 5555)
                sender = self.t.popen("keep-a", f"{sys.executable} {XFER} paced {KEEP_B} 5555 {self.data} {size // 4}")
                sender.wait(timeout=600)
                digest, n = server.communicate(timeout=120)[0].split()
                if digest == self.want and int(n) == size:
                    self.done += 1
                else:
                    self.bad.append((digest, n))
            except Exception as e:  # a transfer that could not finish is a loss, said
                self.bad.append(("error", str(e)))
            finally:
                hvlab.stop_procs([server])

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        if self.thread.is_alive():
            self.thread.join(timeout=900)


def daemon_pid(t):
    return json.loads(Path(f"/run/hvnet/{t.name}/state.json").read_text())["pid"]


def footprint(t):
    """What the host holds for the topology now."""
    pid = daemon_pid(t)
    netns = [n.split()[0] for n in hvlab.run(["ip", "netns", "list"]).stdout.splitlines()]
    acl = json.loads(t.hv("acl", "--json").stdout)
    return {
        "fds": len(os.listdir(f"/proc/{pid}/fd")),
        "threads": len(os.listdir(f"/proc/{pid}/task")),
        "namespaces": len([n for n in netns if n.startswith(t.name)]),
        "host_devices": len(os.listdir("/sys/class/net")),
        "ports": len(json.loads(t.hv("ports", "--json").stdout)),
        "fdb": len(json.loads(t.hv("fdb", "--json").stdout)),
        "mdb": len(json.loads(t.hv("mdb", "--json").stdout).get("groups", [])),
        "conntrack": sum(p.get("connections", 0) for p in acl.get("ports", [])),
    }


def rss_kib(t):
    for line in Path(f"/proc/{daemon_pid(t)}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def balanced(t):
    """Ports whose counters do not balance in the daemon running now."""
    off = []
    for p in json.loads(t.hv("ports", "--json").stdout):
        kind = "uplinks" if p.get("type", "").startswith("uplink") else "ports"
        acc = t.stats(f"/{kind}/{p['name']}/accounting")
        if not (acc["ingress"]["balanced"] and acc["egress"]["balanced"]):
            off.append(p["name"])
    return off


def queue_failures(t):
    """Queue turns that panicked in the daemon running now (each one
    restarts its queue, and a port's fifth marks it failed), by port."""
    out = {}
    for p in json.loads(t.hv("ports", "--json").stdout):
        n = json.loads(t.hv("port", p["name"], "--json").stdout).get("thread_failures", 0)
        if n:
            out[p["name"]] = n
    return out


def wait_down(t):
    if not hvlab.eventually(lambda: not Path(f"/run/hvnet/{t.name}/ctl.sock").exists(), timeout=60, every=0.05):
        raise RuntimeError("the daemon did not stop")


def cycle(t, kind, n, failed):
    """One lifecycle event of `kind` (the `n`th cycle); a daemon's queue
    failures added to `failed` before it is stopped."""
    if kind == "vm":
        ip = f"{NET}.{100 + n % 100}"
        t.hv("vm", "add", f"x{n}", f"ipv4={ip}/24", "queues=1")
        if not hvlab.eventually(lambda: t.sh("keep-a", f"ping -c 1 -W 1 {ip}", check=False).returncode == 0,
                                timeout=20):
            raise RuntimeError(f"vm x{n} never answered")
        t.hv("vm", "del", f"x{n}")
    elif kind == "settings":
        t.hv("port", "moved", "set", "tx_rate=500mbit")
        t.hv("port", "moved", "set", "vlan=7")
        t.hv("port", "moved", "set", "tx_rate=off", "vlan=0")
    elif kind == "policy":
        vms = [dict(v, security_groups=["day"]) if v["name"] == "moved" else v for v in t.vms]
        t.apply(vm=vms, security_group=[GROUP],
                mirror=[{"name": "day", "select_src_port": ["moved"], "output_port": "watch"}])
        t.apply(vm=t.vms, security_group=None, mirror=None)
    elif kind == "capture":
        t.hv("capture", "keep-a", "-c", "20", "-w", f"/tmp/{t.name}-day.pcapng")
        Path(f"/tmp/{t.name}-day.pcapng").unlink(missing_ok=True)
    elif kind in ("restart", "kill"):
        for p, f in queue_failures(t).items():
            failed[p] = failed.get(p, 0) + f
        os.kill(daemon_pid(t), signal.SIGTERM if kind == "restart" else signal.SIGKILL)
        wait_down(t) if kind == "restart" else time.sleep(0.2)
        hvlab.hvnet("up", t.file)


def host_day(tmp, quick, reps, log):
    secs = minutes(quick) * 60
    data = Path(tmp) / "day-data"
    data.write_bytes(os.urandom(16 << 20))
    vms = [dict(name="keep-a", ipv4=f"{KEEP_A}/24", queues=1), dict(name="keep-b", ipv4=f"{KEEP_B}/24", queues=1),
           dict(name="moved", ipv4=f"{NET}.3/24", queues=1), dict(name="watch", queues=1)]
    kinds = every_cycle()
    counts = {k: 0 for k in KINDS}
    took = {k: [] for k in KINDS}
    with hvlab.Topology(Path(tmp), vms, prefix="day") as t:
        x = Transfers(t, data).__enter__()
        # The start: the transfers running (their addresses learned).
        hvlab.eventually(lambda: footprint(t)["fdb"] >= 2 + len(vms), timeout=30)
        before = footprint(t)
        start = time.monotonic()
        early_rss, late_rss = None, None
        rss = []  # (minutes, KiB) of the first daemon, every half minute
        failed = {}
        n = 0
        # The switch is stopped at two thirds of the day and killed at five
        # sixths; the first daemon's memory is read at a sixth of the day
        # and just before its stop (10 and 40 minutes of an hour).
        restarts = [(2 / 3, "restart"), (5 / 6, "kill")]
        try:
            while time.monotonic() - start < secs:
                at = (time.monotonic() - start) / secs
                if restarts and at >= restarts[0][0]:
                    kind = restarts.pop(0)[1]
                    if kind == "restart":
                        late_rss = rss_kib(t)
                else:
                    kind = kinds[n % len(kinds)]
                s = time.monotonic()
                cycle(t, kind, n, failed)
                took[kind].append(time.monotonic() - s)
                counts[kind] += 1
                n += 1
                if early_rss is None and at >= 1 / 6:
                    early_rss = rss_kib(t)
                if late_rss is None and (not rss or time.monotonic() - start >= rss[-1][0] * 60 + 30):
                    rss.append((round((time.monotonic() - start) / 60, 2), rss_kib(t)))
        finally:
            # The last transfer finishes: nothing is in flight when the
            # ports' counters are read.
            x.__exit__(None, None, None)
        hvlab.eventually(lambda: footprint(t) == before, timeout=60, every=1)
        after = footprint(t)
        end_rss = rss_kib(t)
        off = balanced(t)
        for p, f in queue_failures(t).items():
            failed[p] = failed.get(p, 0) + f
    left = {k: after[k] - before[k] for k in before}
    hours = secs / 3600
    per_hour = {k: round(v / hours) for k, v in counts.items()}
    r = {"minutes": round(secs / 60, 1), "cycles": n, "transfers": x.done, "transfers_bad": len(x.bad),
         "left_over": left, "unbalanced_ports": off, "queue_failures": failed, "per_hour": per_hour,
         "rss_early_kib": early_rss, "rss_late_kib": late_rss, "rss_end_kib": end_rss,
         "rss_ratio": round(late_rss / early_rss, 3) if early_rss and late_rss else None,
         "kinds": kinds, "rss_series_kib": rss,
         **{f"{k}_s": round(sum(v) / len(v), 2) for k, v in took.items() if v}}
    log.append({"command": f"{r['minutes']} min: {n} cycles of {', '.join(KINDS)} while keep-a sends 16 MiB to "
                           "keep-b again and again (SHA-256 checked)", **r})
    print(f"      {n} cycles ({per_hour} per hour); transfers {x.done} intact, {len(x.bad)} not; left over {left}; "
          f"unbalanced {off}; queues failed {failed or 'none'}; the first daemon's memory {early_rss} -> {late_rss} KiB", flush=True)
    runs = {"host day": [r]}
    said = (f"{r['minutes']} min, {n} cycles; per hour: " + ", ".join(f"{k} {v}" for k, v in per_hour.items())
            + f"; transfers intact {x.done} of {x.done + len(x.bad)}; left over against the start: {left}; ports "
            f"unbalanced: {off or 'none'}; queue turns that panicked: {failed or 'none'}; the first daemon's memory at two thirds of the day "
            f"{r['rss_ratio']}x its memory at a sixth ({early_rss} and {late_rss} KiB)")
    note = ("Namespace VMs behind TAPs on this machine's 2 cores. The switch restarts (SIGTERM and SIGKILL) are part "
            "of the day: counters start again with each daemon, so balance is judged in the last one.")
    figs = [measured("host-day", "A host's day: lifecycle events per hour with nothing left over", "", "cycles",
                     runs, "cycles", lambda c: ("hvnet", c),
                     "does a host that does everything at once leak or lose anything?", said, note)]
    return figs, runs
