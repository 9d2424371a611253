"""What the lab reads, parsed: iperf3's JSON, nstat, /proc/stat,
per-thread schedstat, `perf stat -x,` and ping's replies. Each parser is
tested on real output captured from this machine (`lab/tests/data/`)."""

import json
import os
import re
import time
from pathlib import Path


def iperf3(text: str) -> dict:
    """Throughput (bits/s received), bytes, retransmits, and the sender's
    and receiver's CPU utilisation as iperf3 reports them."""
    r = json.loads(text)
    if "error" in r:
        raise ValueError(f"iperf3: {r['error']}")
    end = r["end"]
    return {
        "bps": float(end["sum_received"]["bits_per_second"]),
        "bytes": int(end["sum_received"]["bytes"]),
        "seconds": float(end["sum_received"]["seconds"]),
        "retransmits": int(end["sum_sent"].get("retransmits", 0)),
        "cpu_sender_pct": float(end.get("cpu_utilization_percent", {}).get("host_total", 0.0)),
        "cpu_receiver_pct": float(end.get("cpu_utilization_percent", {}).get("remote_total", 0.0)),
    }


def nstat(text: str) -> dict:
    """`nstat -az` counters: name -> absolute value."""
    out = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 2 and not line.startswith("#") and parts[1].isdigit():
            out[parts[0]] = int(parts[1])
    return out


def proc_stat(text: str) -> tuple:
    """(total jiffies, idle jiffies) of the aggregate `cpu` line."""
    for line in text.splitlines():
        if line.startswith("cpu "):
            v = list(map(int, line.split()[1:]))
            return sum(v[:8]), v[3] + v[4]
    raise ValueError("no aggregate cpu line in /proc/stat")


def busy_cores(before: tuple, after: tuple, ncpu: int) -> float:
    total, idle = after[0] - before[0], after[1] - before[1]
    return (total - idle) / max(total, 1) * ncpu


def schedstat(text: str) -> dict:
    """A task's /proc/.../schedstat: time on CPU and time waiting on a run
    queue (ns), and timeslices."""
    run, wait, slices = (int(x) for x in text.split()[:3])
    return {"run_ns": run, "wait_ns": wait, "timeslices": slices}


def perf_stat(text: str) -> dict:
    """`perf stat -x,` output: event -> count (None where not supported)."""
    out = {}
    for line in text.splitlines():
        f = line.split(",")
        if len(f) >= 3 and f[2]:
            event = f[2]
            try:
                out[event] = float(f[0])
            except ValueError:
                out[event] = None  # "<not supported>" / "<not counted>"
    return out


def ping_rtts(text: str) -> list:
    """The round trip of every reply ping printed (ms); lost probes print
    none."""
    return [float(m) for m in re.findall(r" time=([\d.]+) ms", text)]


class Cpu:
    """Machine-wide busy cores over a span (`cores`), and the CPU-seconds
    they add up to (`core_seconds`): the span holds a client's start-up
    and exit, which a tool's own rate leaves out, so work per CPU is
    counted as work done over CPU-seconds spent, both over the span."""

    def __enter__(self):
        self.before = proc_stat(Path("/proc/stat").read_text())
        self.t0 = time.monotonic()
        return self

    def __exit__(self, *exc):
        self.after = proc_stat(Path("/proc/stat").read_text())
        self.cores = busy_cores(self.before, self.after, os.cpu_count())
        self.core_seconds = self.cores * (time.monotonic() - self.t0)
        return False

    def gbit_per_core_second(self, nbytes):
        """Gbit carried (`nbytes` over the span) per CPU-second spent."""
        return nbytes * 8 / 1e9 / max(self.core_seconds, 1e-9)


def thread_schedstat(pid: int, tid: int) -> dict:
    return schedstat(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text())
