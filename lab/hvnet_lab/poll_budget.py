"""What each busy-poll budget costs and buys (datapath v4, adaptive
polling): a worker that emptied a real guest's queue under load watches
it for up to `[switch] busy_poll_max_us` before it asks the guest to
notify again and sleeps in `epoll`.

- `poll-budget`: a namespace VM pings a peer on a vhost-user port, for
  each budget in turn, interleaved: back to back (`ping -f`, the next
  request as soon as the answer came: transactions per second and the
  round trip), and spaced every 5 ms (a queue gone cold each time: the
  round trip). The daemon's CPU per transaction, and in % of a core,
  says what the watching costs. The peers, each a series of the figures:
  - testpmd: a DPDK testpmd front end (`--forward-mode=icmpecho`, which
    answers ARP and ICMP echo from its poll loop), on a `kind =
    "vhost-user"` VM; budgets 0, 10, 50 and 200 us;
  - uml: a User-Mode Linux guest (`kind = "uml"`) that hvnet starts,
    its own kernel answering; budgets 0, 50 and 200 us, a smaller flood;
  - qemu: a QEMU guest (`kind = "qemu"`, `accel = "tcg"`) that hvnet
    starts, Debian's cloud kernel and its virtio-net-pci driver
    answering; as uml.
  The daemon's CPU is its own threads (`/proc/PID/task/*/schedstat`):
  the guests hvnet starts are processes of their own (its children, in
  a process group of their own), not threads of the daemon, so they are
  not in it (checked every run). Then, once per budget (not per peer), a
  stream: `vhost-frames`' two testpmd front ends (txonly to rxonly, 64 B)
  through two vhost-user ports, the daemon's CPU per frame taken.
"""

import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import hvlab

from .fabrics import running
from .figures import measured
from .runners import interleaved
from .vhost_compare import HUGEPAGES, MAC_B, Pmd, hugepages, pin, run_hvnet, task_ns
from .verdict import median

IP_A, IP_B = "198.18.27.1", "198.18.27.2"
PEERS = ("testpmd", "uml", "qemu")
# Each peer's series in the figures, and what it needs on this machine.
SERIES = {"testpmd": "testpmd icmpecho", "uml": "UML guest", "qemu": "QEMU guest (TCG)"}
NEEDS = {"testpmd": "dpdk-testpmd", "uml": "/usr/bin/linux.uml", "qemu": "qemu-system-x86_64"}
STREAM = "testpmd txonly to rxonly, 64 B"


def rtt_stats(out):
    """min, avg, max and mdev of `ping -q`'s summary, in ms (NaN where it
    has none: nothing came back)."""
    m = re.search(r"rtt min/avg/max/mdev = ([\d.]+)/([\d.]+)/([\d.]+)/([\d.]+)", out)
    return tuple(float(x) for x in m.groups()) if m else (float("nan"),) * 4


def rtt_ms(out):
    """The average round trip of `ping -q`'s summary, in ms."""
    return rtt_stats(out)[1]


def received(out):
    m = re.search(r"(\d+) received", out)
    return int(m.group(1)) if m else 0


def daemon_pid(t):
    return json.loads(Path(f"/run/hvnet/{t.name}/state.json").read_text())["pid"]


def port_up(t, vm):
    return any(p["name"] == vm and p["link"] == "up" for p in json.loads(t.hv("ports", "--json").stdout))


def pings(t, pid, flood, alive, first_timeout=30):
    """From VM a to IP_B once the peer answers: `flood` back to back, then
    200 every 5 ms; the daemon's CPU (its own threads) over the flood."""
    hvlab.eventually(lambda: port_up(t, "b"), timeout=30)
    # The first answer (ARP, and the peer's start behind it).
    if not hvlab.eventually(lambda: t.sh("a", f"ping -c 1 -W 1 {IP_B}", check=False).returncode == 0,
                            timeout=first_timeout):
        raise RuntimeError(f"{IP_B} did not answer within {first_timeout} s")
    c0, w0 = task_ns(pid), time.monotonic()
    out = t.sh("a", f"ping -f -q -c {flood} {IP_B}", timeout=300).stdout
    c1, w1 = task_ns(pid), time.monotonic()
    got = received(out)
    spaced = t.sh("a", f"ping -q -c 200 -i 0.005 {IP_B}", timeout=60).stdout
    assert alive(), "the peer ended during the run"
    n = max(got, 1)
    lo, avg, hi, _ = rtt_stats(out)
    return dict(flood_rtt_us=avg * 1000, flood_rtt_min_us=lo * 1000, flood_rtt_max_us=hi * 1000,
                transactions_per_s=n / (w1 - w0), cpu_us_per_transaction=(c1 - c0) / 1e3 / n,
                cpu_pct=(c1 - c0) / 1e9 / (w1 - w0) * 100, spaced_rtt_us=rtt_ms(spaced) * 1000,
                spaced_lost=200 - received(spaced), lost=flood - got)


def one_budget(tmp, huge, budget, flood):
    """The testpmd peer: a namespace VM a and testpmd's icmpecho on the
    vhost-user VM b, testpmd on CPU 1."""
    vms = [dict(name="a", ipv4=f"{IP_A}/24", queues=1),
           dict(name="b", kind="vhost-user", mac=MAC_B)]
    with hvlab.Topology(tmp, vms, prefix="pb", switch={"busy_poll_max_us": budget}) as t:
        pid = daemon_pid(t)
        pin(pid, "0")
        sock = f"/run/hvnet/{t.name}/b.sock"
        b = Pmd("b", huge, f"net_virtio_user0,path={sock},mac={MAC_B},queue_size=1024", "icmpecho",
                ["--total-num-mbufs=16384"])
        try:
            return pings(t, pid, flood, lambda: b.proc.poll() is None)
        finally:
            b.stop()


def pin_guest(procs, cpus):
    """Pins a guest's processes (all their threads) to `cpus`; what they
    start later inherits it. A helper process that ended meanwhile (UML
    starts and ends user processes) is passed over; the guest's own
    process must be pinned."""
    for p in procs:
        subprocess.run(["taskset", "-a", "-p", "-c", cpus, str(p)], check=False,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def cpus_allowed(pid):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Cpus_allowed_list:"):
            return line.split(":", 1)[1].strip()
    return ""


def one_guest(tmp, kind, budget, flood):
    """A real guest as the peer: VM b of `kind` ("uml" or "qemu", QEMU
    under TCG), started by hvnet up (which returns once its eth0 is
    configured), its processes on CPU 1, the daemon on CPU 0."""
    b = dict(name="b", kind=kind, ipv4=f"{IP_B}/24")
    if kind == "qemu":
        b["accel"] = "tcg"
    vms = [dict(name="a", ipv4=f"{IP_A}/24", queues=1), b]
    with hvlab.Topology(tmp, vms, prefix="pb", switch={"busy_poll_max_us": budget}) as t:
        pid = daemon_pid(t)
        pin(pid, "0")
        guest = json.loads(t.hv("port", "b", "--json").stdout)["guest"]
        procs = [p["pid"] for p in guest["processes"]]
        pin_guest(procs, "1")
        if cpus_allowed(guest["pid"]) != "1":
            raise RuntimeError(f"could not pin the guest's process {guest['pid']} to CPU 1")
        # task_ns(pid) counts the daemon's threads only: the guest's
        # processes are not among them.
        mixed = {str(p) for p in procs} & set(os.listdir(f"/proc/{pid}/task"))
        if mixed:
            raise RuntimeError(f"the guest's processes {sorted(mixed)} are threads of the daemon {pid}")
        return pings(t, pid, flood, lambda: running(guest["pid"]), first_timeout=60)


def peers_here():
    """The peers this machine can run, and those it cannot with why."""
    have = lambda p: Path(NEEDS[p]).exists() if NEEDS[p].startswith("/") else shutil.which(NEEDS[p])  # noqa: E731
    return [p for p in PEERS if have(p)], {p: NEEDS[p] for p in PEERS if not have(p)}


def words(xs):
    """0, 50 and 200."""
    xs = [str(x) for x in xs]
    return xs[0] if len(xs) == 1 else f"{', '.join(xs[:-1])} and {xs[-1]}"


def said_text(runs, peers, budgets, missing=None):
    """What was measured, in words: each peer's budgets (a sentence per
    peer), then the stream."""
    get = lambda c, k: median([r[k] for r in runs[c]])  # noqa: E731
    parts = []
    for p in peers:
        each = "; ".join(f"{b} us: {get((p, b), 'transactions_per_s'):.0f} transactions/s, round trip "
                         f"{get((p, b), 'flood_rtt_us'):.0f} us back to back and {get((p, b), 'spaced_rtt_us'):.0f} us "
                         f"every 5 ms, {get((p, b), 'cpu_us_per_transaction'):.1f} us of the daemon's CPU per "
                         f"transaction ({get((p, b), 'cpu_pct'):.0f} % of a core)"
                         for b in budgets[p] if (p, b) in runs)
        parts.append(f"{SERIES[p]}: {each}")
    if "testpmd" in peers:
        parts.append(f"The stream ({STREAM}): " + "; ".join(
            f"{b} us: {get(('testpmd', b), 'stream_mpps'):.2f} Mpps at {get(('testpmd', b), 'stream_ns_per_frame'):.0f} "
            f"ns of the daemon's CPU per frame" for b in budgets["testpmd"] if ("testpmd", b) in runs))
    for p, need in (missing or {}).items():
        parts.append(f"{SERIES[p]}: not run (needs {need})")
    return ". ".join(parts)


def figures(runs, peers, budgets, floods, missing=None):
    """The four figures from runs {(peer, budget): [run]}: a series per
    peer; the stream's, a series of its own from the testpmd runs."""
    place = lambda c: (SERIES[c[0]], f"{c[1]} us")  # noqa: E731
    said = said_text(runs, peers, budgets, missing)
    guests = [p for p in peers if p != "testpmd"]
    note = ("The daemon pinned to CPU 0; testpmd, and each guest's processes (UML's kernel process and the user "
            "processes it runs; QEMU and its virtiofsd), to CPU 1; the namespace VM's ping wherever the kernel runs "
            "it. A transaction is one echo request and its answer, each crossing the switch once. The daemon's CPU "
            "is its own threads (/proc/PID/task/*/schedstat): the guests hvnet starts are processes of their own, "
            "not in it.")
    if guests:
        note += (f" The guests answer with their own kernel (one vCPU, 256 MiB; QEMU under TCG, accel = \"tcg\"), at "
                 f"busy_poll_max_us {words(budgets[guests[0]])} with a smaller flood "
                 f"({floods[guests[0]]:,} back to back against testpmd's {floods['testpmd']:,}); ping's average round "
                 f"trip holds the guests' rare slow answers (their min and max are in the samples).")
    stream = {c: rs for c, rs in runs.items() if c[0] == "testpmd"}
    return [
        measured("poll-budget-rtt", "Round trip by busy-poll budget (back to back)", "busy_poll_max_us", "us",
                 runs, "flood_rtt_us", place, "what latency does each polling budget buy?", said, note),
        measured("poll-budget-cpu", "The daemon's CPU per transaction by busy-poll budget", "busy_poll_max_us",
                 "us per transaction", runs, "cpu_us_per_transaction", place,
                 "what CPU does each polling budget cost?", said, note),
        measured("poll-budget-spaced", "Round trip by busy-poll budget (every 5 ms)", "busy_poll_max_us", "us",
                 runs, "spaced_rtt_us", place, "does the budget matter once the queue has gone cold?", said, note),
        measured("poll-budget-stream", "The daemon's CPU per frame of a 64 B stream by busy-poll budget",
                 "busy_poll_max_us", "ns per frame", stream, "stream_ns_per_frame", lambda c: (STREAM, f"{c[1]} us"),
                 "what does watching save on a stream?", said, note),
    ]


def poll_budget(tmp, quick, reps, log):
    peers, missing = peers_here()
    if "testpmd" not in peers:
        raise RuntimeError("needs dpdk-testpmd (scripts/install-deps.sh installs dpdk-dev)")
    for p, need in missing.items():
        print(f"      {p}: not run here (needs {need})", flush=True)
    guest_budgets = [0, 50] if quick else [0, 50, 200]
    budgets = {p: ([0, 50] if quick else [0, 10, 50, 200]) if p == "testpmd" else guest_budgets for p in peers}
    floods = {p: (5_000 if quick else 20_000) if p == "testpmd" else (1_000 if quick else 3_000) for p in peers}
    secs = 3 if quick else 5
    # Each peer's budgets side by side, the peers one after another.
    configs = [(p, b) for p in peers for b in budgets[p]]
    with hugepages(HUGEPAGES) as huge:
        def one(config):
            peer, budget = config
            flood = floods[peer]
            pings_cmd = f"ping -f -q -c {flood} and ping -c 200 -i 0.005 from a namespace VM to"
            if peer == "testpmd":
                r = one_budget(tmp, huge, budget, flood)
                s = run_hvnet(tmp, huge, 64, secs, switch={"busy_poll_max_us": budget})
                r.update(stream_mpps=s["mpps"], stream_ns_per_frame=s["ns_per_frame"])
                what = (f"{pings_cmd} testpmd --forward-mode=icmpecho on a vhost-user port; {STREAM}, {secs} s, "
                        f"through two vhost-user ports")
            else:
                r = one_guest(tmp, peer, budget, flood)
                what = f"{pings_cmd} a {SERIES[peer]} (kind = \"{peer}\") on a vhost-user port"
            log.append({"command": f"[switch] busy_poll_max_us = {budget}; {what}", "peer": peer,
                        "busy_poll_max_us": budget, **r})
            return r

        runs = interleaved(configs, reps, one)
    return figures(runs, peers, budgets, floods, missing), {f"{p} {b} us": rs for (p, b), rs in runs.items()}
