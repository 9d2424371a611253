"""The shared runners: one iperf3 run between two VMs with what it cost
(the machine's CPU, the receiver's NIC counters), and configurations run
interleaved (A, B, C, then C, B, A, ...), with more rounds for a comparison
still undecided."""

import os
from pathlib import Path

import hvlab

from . import measure
from .fabrics import A_IP, B_IP


def builds():
    """(label, binary): this build, and the baseline if one is given
    (`HVNET_LAB_BASELINE`), to run beside it."""
    out = [("hvnet", hvlab.hvnet_bin())]
    base = os.environ.get("HVNET_LAB_BASELINE")
    if base:
        out.append(("hvnet-base", str(Path(base).resolve())))
    return out


def link(f, vm):
    base = "/sys/class/net/eth0/statistics/"
    out = f.sh(vm, f"cat {base}rx_packets {base}rx_bytes {base}tx_packets {base}tx_bytes").stdout.split()
    return dict(zip(["rx_packets", "rx_bytes", "tx_packets", "tx_bytes"], map(int, out)))


def iperf(f, streams=1, write="128K", seconds=3, window=None, log=None, reverse=False):
    """One iperf3 run a -> b (b -> a when `reverse`) with machine CPU, the
    receiver's NIC counters and the sender's frames sent; the command is
    recorded in `log`."""
    # A fabric whose VMs are in two subnets (routed) names their addresses.
    a_ip, b_ip = getattr(f, "a_ip", A_IP), getattr(f, "b_ip", B_IP)
    src, dst, ip = ("b", "a", a_ip) if reverse else ("a", "b", b_ip)
    server = f.popen(dst, f"iperf3 -s -1 -B {ip}")
    f.wait_listening(dst, 5201)
    cmd = f"iperf3 -c {ip} -t {seconds} -P {streams} -l {write} -J" + (f" -w {window}" if window else "")
    try:
        a0, b0 = link(f, src), link(f, dst)
        with measure.Cpu() as cpu:
            out = f.sh(src, cmd, timeout=seconds + 60).stdout
        a1, b1 = link(f, src), link(f, dst)
    finally:
        try:
            server.wait(timeout=5)
        except Exception:
            server.terminate()
            server.wait()
    r = measure.iperf3(out)
    secs = r["seconds"] or seconds
    frames = b1["rx_packets"] - b0["rx_packets"]
    s = {
        "gbps": r["bps"] / 1e9,
        "busy_cores": cpu.cores,
        "gbps_per_core": cpu.gbit_per_core_second(r["bytes"]),
        "retransmits": r["retransmits"],
        "rx_frames_per_s": frames / secs,
        "rx_avg_frame": (b1["rx_bytes"] - b0["rx_bytes"]) / max(frames, 1),
        "tx_frames_sender": a1["tx_packets"] - a0["tx_packets"],
        "rx_frames": frames,
    }
    if log is not None:
        log.append({"command": f.command(src, cmd), **s})
    return s


def most_runs(reps):
    """The runs an undecided comparison may get: 5N, from N >= 3."""
    return 5 * reps if reps >= 3 else reps


def interleaved(configs, reps, run, settle=None, feeds=None):
    """Runs every configuration `reps` times, interleaved, every other
    round in reverse (A, B, C, C, B, A, ...), so that drift in the
    machine's speed hits all of them alike and none always follows the
    same one: a run right after another switch's (Open vSwitch with DPDK
    releasing its hugepages and cores, say) cost the configuration after
    it about 7 % in CPU per frame when the order never changed
    (`vhost-frames`, 2026-11-26).
    With `settle` (runs -> the labels of the points still undecided,
    `verdict.undecided`; empty once every verdict drawn from them is
    decided) and 3 or more repetitions, more rounds follow while a point
    is undecided, up to 5 * reps (the verdict module says why), each of
    only the configurations that `feeds(config, label)` says an
    undecided point is drawn from (every configuration without `feeds`,
    or when a figure cannot say which of its points are undecided): a
    point that needs 15 runs does not make the decided ones run 15 times.
    Returns {config: [run, ...]} with runs in repetition order."""
    runs = {c: [] for c in configs}
    rounds = 0

    def in_turn(cs):
        nonlocal rounds
        for c in (cs if rounds % 2 == 0 else cs[::-1]):
            runs[c].append(run(c))
        rounds += 1

    for _ in range(reps):
        in_turn(list(configs))
    most = most_runs(reps) if settle else reps
    while most > reps:
        pending = settle(runs)
        todo = [c for c in configs if feeds is None or None in pending or any(feeds(c, p) for p in pending)]
        have = max((len(runs[c]) for c in todo), default=most)
        if not pending or have >= most:
            break
        named = ", ".join(sorted(str(p) for p in pending if p is not None)) or "all points"
        # With one configuration (settings run at the same moment) every
        # repetition is a round of all of them.
        more = "one more round" if len(configs) == 1 else f"one more of {len(todo)} of {len(configs)} configurations"
        print(f"      undecided after {have} runs ({named}): {more} (at most {most} runs)", flush=True)
        in_turn(todo)
    return runs
