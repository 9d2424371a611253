"""Captures of real Linux TCP traffic, and what is in them: shared by the
tests and the demo."""

import time
from collections import defaultdict
from pathlib import Path

from scapy.layers.inet import IP, TCP
from scapy.layers.inet6 import IPv6
from scapy.utils import rdpcap

import hvlab


def capture_iperf(out: Path, nbytes="4M", mtu=1500, offloads_off=True, tries=3):
    """Runs iperf3 between two fresh namespaces over a veth pair and
    captures the receiver's side to `out`. With offloads off (TSO, GSO, GRO)
    the capture holds wire-sized segments. The capture is the input of the
    tests that use it, so it must be complete: one with a hole or without
    the closing FIN (tcpdump can lose frames on a busy 2-core machine) is
    taken again."""
    for attempt in range(tries):
        _capture_once(out, nbytes, mtu, offloads_off)
        try:
            tcp_streams(out)
        except ValueError:
            if attempt == tries - 1:
                raise
            continue
        if any(TCP in p and p[TCP].flags.F for p in rdpcap(str(out))) or attempt == tries - 1:
            return out
    return out


def _capture_once(out: Path, nbytes, mtu, offloads_off):
    with hvlab.netns_pair("hvcap") as (a, b, ia, ib):
        # With offloads off (checksum included) the capture holds what a
        # wire would: MTU-sized segments with complete checksums.
        a.sh(f"ip addr add 10.77.0.1/24 dev {ia}; ip link set {ia} mtu {mtu} up")
        b.sh(f"ip addr add 10.77.0.2/24 dev {ib}; ip link set {ib} mtu {mtu} up")
        if offloads_off:
            for ns, i in ((a, ia), (b, ib)):
                ns.sh(f"ethtool -K {i} tx off tso off gso off gro off >/dev/null 2>&1 || true")
        # --immediate-mode: frames reach the file as they arrive, not when a
        # ring block retires (up to a second later, lost at SIGINT).
        dump = b.popen(f"tcpdump -i {ib} -s 0 -B 262144 --immediate-mode -U -w {out} tcp", stderr=hvlab.subprocess.PIPE)
        # Ready when it says it is listening, not after a guessed delay.
        hvlab.wait_for_line(dump.stderr, "listening on", timeout=30)
        server = b.popen("iperf3 -s -1 -B 10.77.0.2", stdout=hvlab.subprocess.DEVNULL)
        hvlab.wait_listening(b.name, 5201)
        # Paced so that tcpdump keeps up and the capture is complete.
        a.sh(f"iperf3 -c 10.77.0.2 -n {nbytes} -l 64K -b 400M -J > /dev/null", timeout=60)
        server.wait(timeout=10)
        # tcpdump drops what it has not read yet when it is stopped: wait
        # until the file stops growing first.
        last, stable = -1, 0
        while stable < 3:
            time.sleep(0.2)
            size = out.stat().st_size if out.exists() else 0
            stable = stable + 1 if size == last else 0
            last = size
        dump.send_signal(hvlab.signal.SIGINT)
        dump.wait(timeout=10)


def tcp_streams(path: Path):
    """The TCP payload byte stream of each direction, rebuilt by sequence
    number (duplicates and retransmissions collapse)."""
    segs = defaultdict(dict)
    for p in rdpcap(str(path)):
        if TCP not in p:
            continue
        ip = p[IP] if IP in p else p[IPv6]
        key = (ip.src, p[TCP].sport, ip.dst, p[TCP].dport)
        data = bytes(p[TCP].payload)
        if IP in p:
            # Trim link padding by the IP length.
            data = data[: max(0, p[IP].len - p[IP].ihl * 4 - p[TCP].dataofs * 4)]
        if data:
            segs[key][p[TCP].seq] = data
    streams = {}
    for key, by_seq in segs.items():
        out = bytearray()
        start = min(by_seq)
        for seq in sorted(by_seq):
            off = seq - start
            chunk = by_seq[seq]
            if off > len(out):
                raise ValueError(f"capture misses bytes {len(out)}..{off} of {key}")
            if off + len(chunk) > len(out):
                out[off:] = chunk[len(out) - off :]
        streams[key] = bytes(out)
    return streams


def bad_checksums(path: Path):
    """Frames whose IPv4 or TCP checksum does not verify, recomputed by
    scapy independently of hvnet."""
    bad = []
    for i, p in enumerate(rdpcap(str(path))):
        if IP not in p or TCP not in p:
            continue
        q = p.copy()
        del q[IP].chksum
        del q[TCP].chksum
        q = q.__class__(bytes(q))
        if q[IP].chksum != p[IP].chksum or q[TCP].chksum != p[TCP].chksum:
            bad.append(i)
    return bad


def bad_frames(path: Path):
    """The frames (as bytes) whose checksums do not verify."""
    frames = rdpcap(str(path))
    return {bytes(frames[i]) for i in bad_checksums(path)}


def frame_sizes(path: Path):
    return [len(p) for p in rdpcap(str(path))]
