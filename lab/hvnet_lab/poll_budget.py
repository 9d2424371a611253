"""What each busy-poll budget costs and buys (datapath v4, adaptive
polling): a worker that emptied a real guest's queue under load watches
it for up to `[switch] busy_poll_max_us` before it asks the guest to
notify again and sleeps in `epoll`.

- `poll-budget`: a namespace VM pings a DPDK testpmd front end on a
  vhost-user port (`--forward-mode=icmpecho`, which answers ARP and ICMP
  echo from its poll loop), for each budget in turn, interleaved:
  back to back (`ping -f`, the next request as soon as the answer came:
  transactions per second and the round trip), and spaced every 5 ms (a
  queue gone cold each time: the round trip). The daemon's CPU per
  transaction, and in % of a core, says what the watching costs. Then a
  stream: `vhost-frames`' two testpmd front ends (txonly to rxonly, 64 B)
  through two vhost-user ports, the daemon's CPU per frame taken.
"""

import json
import re
import time
from pathlib import Path

import hvlab

from .figures import measured
from .runners import interleaved
from .vhost_compare import HUGEPAGES, MAC_B, Pmd, hugepages, pin, run_hvnet, task_ns
from .verdict import median

IP_A, IP_B = "198.18.27.1", "198.18.27.2"


def rtt_ms(out):
    """The average round trip of `ping -q`'s summary, in ms."""
    m = re.search(r"rtt min/avg/max/mdev = [\d.]+/([\d.]+)/", out)
    return float(m.group(1)) if m else float("nan")


def one_budget(tmp, huge, budget, flood):
    vms = [dict(name="a", ipv4=f"{IP_A}/24", queues=1),
           dict(name="b", kind="vhost-user", mac=MAC_B)]
    with hvlab.Topology(tmp, vms, prefix="pb", switch={"busy_poll_max_us": budget}) as t:
        pid = json.loads(Path(f"/run/hvnet/{t.name}/state.json").read_text())["pid"]
        pin(pid, "0")
        sock = f"/run/hvnet/{t.name}/b.sock"
        b = Pmd("b", huge, f"net_virtio_user0,path={sock},mac={MAC_B},queue_size=1024", "icmpecho",
                ["--total-num-mbufs=16384"])
        try:
            up = lambda: any(p["name"] == "b" and p["link"] == "up"  # noqa: E731
                             for p in json.loads(t.hv("ports", "--json").stdout))
            hvlab.eventually(up, timeout=30)
            # The first answer (ARP and the front end's start behind it).
            hvlab.eventually(lambda: t.sh("a", f"ping -c 1 -W 1 {IP_B}", check=False).returncode == 0,
                             timeout=30)
            c0, w0 = task_ns(pid), time.monotonic()
            out = t.sh("a", f"ping -f -q -c {flood} {IP_B}", timeout=300).stdout
            c1, w1 = task_ns(pid), time.monotonic()
            got = int(re.search(r"(\d+) received", out).group(1))
            spaced = t.sh("a", f"ping -q -c 200 -i 0.005 {IP_B}", timeout=60).stdout
            assert b.proc.poll() is None, "testpmd ended during the run"
        finally:
            b.stop()
    n = max(got, 1)
    return dict(flood_rtt_us=rtt_ms(out) * 1000, transactions_per_s=n / (w1 - w0),
                cpu_us_per_transaction=(c1 - c0) / 1e3 / n, cpu_pct=(c1 - c0) / 1e9 / (w1 - w0) * 100,
                spaced_rtt_us=rtt_ms(spaced) * 1000, lost=flood - got)


def poll_budget(tmp, quick, reps, log):
    budgets = [0, 50] if quick else [0, 10, 50, 200]
    flood = 5_000 if quick else 20_000
    secs = 3 if quick else 5
    with hugepages(HUGEPAGES) as huge:
        def one(budget):
            r = one_budget(tmp, huge, budget, flood)
            s = run_hvnet(tmp, huge, 64, secs, switch={"busy_poll_max_us": budget})
            r.update(stream_mpps=s["mpps"], stream_ns_per_frame=s["ns_per_frame"])
            log.append({"command": f"[switch] busy_poll_max_us = {budget}; ping -f -q -c {flood} and ping -c 200 "
                                   f"-i 0.005 from a namespace VM to testpmd --forward-mode=icmpecho on a vhost-user "
                                   f"port; testpmd txonly to rxonly, 64 B, {secs} s, through two vhost-user ports",
                        "busy_poll_max_us": budget, **r})
            return r

        runs = interleaved(budgets, reps, one)
    place = lambda c: ("hvnet", f"{c} us")  # noqa: E731
    get = lambda c, k: median([r[k] for r in runs[c]])  # noqa: E731
    said = "; ".join(f"{c} us: {get(c, 'transactions_per_s'):.0f} transactions/s, round trip "
                     f"{get(c, 'flood_rtt_us'):.0f} us back to back and {get(c, 'spaced_rtt_us'):.0f} us every 5 ms, "
                     f"{get(c, 'cpu_us_per_transaction'):.1f} us of the daemon's CPU per transaction "
                     f"({get(c, 'cpu_pct'):.0f} % of a core); a 64 B stream {get(c, 'stream_mpps'):.2f} Mpps at "
                     f"{get(c, 'stream_ns_per_frame'):.0f} ns of the daemon's CPU per frame" for c in budgets)
    note = ("The daemon pinned to CPU 0, testpmd to CPU 1, the namespace VM's ping wherever the kernel runs it; "
            "a transaction is one echo request and its answer, each crossing the switch once.")
    figs = [
        measured("poll-budget-rtt", "Round trip by busy-poll budget (back to back)", "busy_poll_max_us", "us",
                 runs, "flood_rtt_us", place, "what latency does each polling budget buy?", said, note),
        measured("poll-budget-cpu", "The daemon's CPU per transaction by busy-poll budget", "busy_poll_max_us",
                 "us per transaction", runs, "cpu_us_per_transaction", place,
                 "what CPU does each polling budget cost?", said, note),
        measured("poll-budget-spaced", "Round trip by busy-poll budget (every 5 ms)", "busy_poll_max_us", "us",
                 runs, "spaced_rtt_us", place, "does the budget matter once the queue has gone cold?", said, note),
        measured("poll-budget-stream", "The daemon's CPU per frame of a 64 B stream by busy-poll budget",
                 "busy_poll_max_us", "ns per frame", runs, "stream_ns_per_frame", place,
                 "what does watching save on a stream?", said, note),
    ]
    return figs, {f"{c} us": rs for c, rs in runs.items()}
