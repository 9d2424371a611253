"""`hvnet capture` against the receivers' own view: the frames a port
copies at `in`, `offload`, `out` and `drop` beside what the kernels at
either end saw (tcpdump on a namespace VM's eth0, on the wire's far end,
on Linux's own vxlan device), read back with tshark, tcpdump and scapy;
bounded when its reader stalls; bad requests refused by name with the
switch unaffected. A QEMU guest's port is captured in test_guards.py."""

import json
import signal
import subprocess
import threading

import pytest

import hvlab
from test_vxlan import EXT_IP as VX_EXT_IP, linux_vxlan, vxlan_topology

pytestmark = pytest.mark.root

A, B = "198.18.46.1", "198.18.46.2"


class Capture:
    """`hvnet capture PORT -w PATH ARGS…` in the background; `stop()`
    ends it as Ctrl-C does and returns what it said on stderr."""

    def __init__(self, t, port, path, *args):
        self.path = path
        self.p = subprocess.Popen([hvlab.hvnet_bin(), "capture", "-t", t.name, port, "-w", str(path), *args],
                                  stderr=subprocess.PIPE, text=True)
        t.procs.append(self.p)
        self.err, started = [], threading.Event()

        def pump():
            for line in self.p.stderr:
                self.err.append(line)
                if "capturing on port" in line:
                    started.set()
            started.set()

        self.pump = threading.Thread(target=pump, daemon=True)
        self.pump.start()
        assert started.wait(30) and self.p.poll() is None, "".join(self.err)

    def stop(self):
        self.p.send_signal(signal.SIGINT)
        self.p.wait(timeout=30)
        self.pump.join(10)
        assert self.p.returncode == 0, "".join(self.err)
        return "".join(self.err)


class Tcpdump:
    """tcpdump on a namespace's eth0 (or `dev`), writing pcap."""

    def __init__(self, t, ns, path, expr, dev="eth0"):
        self.p = t.popen(ns, f"tcpdump -i {dev} --immediate-mode -U -n -w {path} {expr}", stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True)
        hvlab.wait_for_line(self.p.stderr, "listening on")

    def stop(self):
        self.p.send_signal(signal.SIGINT)
        self.p.wait(timeout=30)


def frames(path):
    """The frames of a capture file, as bytes, in order (scapy reads pcap
    and pcapng)."""
    import scapy.layers.l2  # noqa: F401 (Ethernet frames read as such)
    from scapy.utils import rdpcap

    return [bytes(p) for p in rdpcap(str(path))]


def fields(path, *names, display=""):
    """tshark's fields of each frame of a capture file."""
    cmd = ["tshark", "-r", str(path), "-T", "fields", "-E", "separator=|"]
    if display:
        cmd += ["-Y", display]
    for n in names:
        cmd += ["-e", n]
    out = hvlab.run(cmd).stdout
    return [line.split("|") for line in out.splitlines()]


def icmp_type(frame):
    return frame[14 + 20] if frame[12:14] == b"\x08\x00" and frame[14 + 9] == 1 else None


def test_a_namespace_vms_frames_at_each_point_are_what_the_kernels_saw(tmp_path):
    """Echo requests of three sizes from a to b: as a's kernel sent them,
    as hvnet took them at a (`in`), as it wrote them to b (`out`) and as
    b's kernel received them — the same bytes, in the same order. The
    comments and direction flags say where each was taken; a snap length
    cuts the copy, not the length; a TCP stream into b (LRO on) shows
    coalesced frames at `offload` and `out`; drops show their reasons."""
    vms = [dict(name="a", ipv4=A + "/24"), dict(name="b", ipv4=B + "/24")]
    with hvlab.Topology(tmp_path, vms, prefix="cp") as t:
        t.sh("a", f"ping -c 1 -W 5 {B}")
        ka = Tcpdump(t, "a", tmp_path / "a.pcap", "icmp")
        kb = Tcpdump(t, "b", tmp_path / "b.pcap", "icmp")
        at_a = Capture(t, "a", tmp_path / "a-in.pcapng", "--point", "in", "icmp")
        at_b = Capture(t, "b", tmp_path / "b-out.pcapng", "--point", "out", "icmp[icmptype] == icmp-echo")
        every = Capture(t, "b", tmp_path / "b-all.pcapng", "--point", "in,out", "-s", "96")
        for size in (56, 1000, 1400):
            t.sh("a", f"ping -c 2 -i 0.2 -W 5 -s {size} {B}")
        # The kernels write what they saw before they end.
        for c in (at_a, at_b, every, ka, kb):
            c.stop()

        sent = [f for f in frames(tmp_path / "a.pcap") if icmp_type(f) == 8]
        got = [f for f in frames(tmp_path / "b.pcap") if icmp_type(f) == 8]
        assert len(sent) == 6 and got == sent
        assert frames(tmp_path / "a-in.pcapng") == sent
        assert frames(tmp_path / "b-out.pcapng") == sent

        comments = {c for (c,) in fields(tmp_path / "a-in.pcapng", "frame.comment")}
        assert comments == {"point=in queue=0"}, comments
        assert {i for (i,) in fields(tmp_path / "a-in.pcapng", "frame.interface_name")} == {"a"}
        # epb_flags: inbound (from the port) at `in`, outbound at `out`.
        ways = fields(tmp_path / "b-all.pcapng", "frame.comment", "frame.packet_flags_direction", "frame.len",
                      "frame.cap_len", display="icmp")
        assert {(c.split()[0], int(d, 16)) for c, d, _, _ in ways} == {("point=in", 1), ("point=out", 2)}, ways
        assert all(int(cap) <= 96 for _, _, _, cap in ways)
        assert max(int(n) for _, _, n, _ in ways) == 1442

        # LRO into b: the offload stage's coalesced frames, as written.
        assert json.loads(t.hv("port", "b", "--json").stdout)["lro"] is True
        t.popen("b", f"iperf3 -s -B {B}", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        t.wait_listening("b", 5201)
        lro = Capture(t, "b", tmp_path / "b-lro.pcapng", "--point", "offload,out", "-s", "128", "tcp")
        t.sh("a", f"iperf3 -c {B} -t 1")
        lro.stop()
        seen = fields(tmp_path / "b-lro.pcapng", "frame.comment", "frame.len")
        longest = {}
        for c, n in seen:
            longest[c.split()[0]] = max(longest.get(c.split()[0], 0), int(n))
        assert longest["point=offload"] > 1514 and longest["point=out"] > 1514, longest

        # Drops, with their reasons: a's cable pulled, then its policer.
        drops = Capture(t, "a", tmp_path / "a-drop.pcapng", "--point", "drop")
        t.hv("port", "a", "set", "connected=off")
        t.sh("a", f"ping -c 2 -i 0.2 -W 1 {B}", check=False)
        t.hv("port", "a", "set", "connected=on", "tx_rate=1mbit", "tx_burst=65kb")
        t.sh("a", f"ping -f -c 300 -s 1400 -W 1 {B}", check=False)
        drops.stop()
        reasons = {c.split()[1] for (c,) in fields(tmp_path / "a-drop.pcapng", "frame.comment")}
        assert reasons == {"reason=disconnected", "reason=policed"}, reasons
        t.hv("port", "a", "set", "tx_rate=off")
        t.sh("a", f"ping -c 1 -W 5 {B}")


def test_live_to_tcpdump_bounded_when_stalled_and_bad_requests_refused(tmp_path):
    """`-w - | tcpdump -r -` reads the stream as it comes; `-c` ends it. A
    capture whose reader stops loses copies (said at the end) while the
    transfer it watches completes. A filter that does not compile, an
    unknown point or port, a snap length too long: refused by name, and
    the switch forwards on."""
    vms = [dict(name="a", ipv4=A + "/24"), dict(name="b", ipv4=B + "/24")]
    with hvlab.Topology(tmp_path, vms, prefix="cl") as t:
        t.sh("a", f"ping -c 1 -W 5 {B}")
        live = subprocess.Popen(f"{hvlab.hvnet_bin()} capture -t {t.name} b -c 3 -w - icmp | tcpdump -n -r -",
                                shell=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        t.procs.append(live)
        assert hvlab.eventually(lambda: json.loads(t.hv("port", "b", "--json").stdout)["captures"] == 1,
                                timeout=30)
        t.sh("a", f"ping -c 3 -i 0.2 -W 5 {B}")
        out, err = live.communicate(timeout=30)
        assert out.count("ICMP echo") == 3, (out, err)

        t.popen("b", f"iperf3 -s -B {B}", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        t.wait_listening("b", 5201)
        stalled = Capture(t, "b", tmp_path / "stalled.pcapng", "--point", "in,out")
        stalled.p.send_signal(signal.SIGSTOP)
        t.sh("a", f"iperf3 -c {B} -t 2")
        stalled.p.send_signal(signal.SIGCONT)
        err = stalled.stop()
        assert "copies lost" in err, err
        assert json.loads(t.hv("port", "b", "--json").stdout)["captures"] == 0

        bad = [(["b", "tcp port"], "does not compile"),
               (["b", "--point", "inn"], "in, offload, out or drop"),
               (["nosuch"], "no port named"),
               (["b", "-s", "999999"], "snaplen")]
        for args, says in bad:
            r = t.hv("capture", *args, check=False)
            assert r.returncode == 1 and says in r.stderr, (args, r.stderr)
        t.sh("a", f"ping -c 1 -W 5 {B}")


def test_an_uplink_and_a_tunnel_endpoint_are_captured_as_the_far_kernels_saw(tmp_path):
    """An uplink's `out` is what the host on the wire received, its `in`
    what that host sent; a VXLAN endpoint's are the inner frames Linux's
    own vxlan device at the far end sent and received."""
    with vxlan_topology(tmp_path) as t:
        linux_vxlan(t)
        t.sh("a", f"ping -c 1 -W 5 {VX_EXT_IP}")
        far = Tcpdump(t, "ext", tmp_path / "vx.pcap", "icmp", dev="vx42")
        wire = Tcpdump(t, "ext", tmp_path / "wire.pcap", "udp port 4789")
        cap = Capture(t, "up0", tmp_path / "up0.pcapng", "--point", "in,out", "icmp")
        t.sh("a", f"ping -c 3 -i 0.2 -W 5 {VX_EXT_IP}")
        for c in (cap, far, wire):
            c.stop()
        seen_far = frames(tmp_path / "vx.pcap")
        by_point = {}
        for f, (c,) in zip(frames(tmp_path / "up0.pcapng"), fields(tmp_path / "up0.pcapng", "frame.comment")):
            by_point.setdefault(c.split()[0], []).append(f)
        # What hvnet wrote into the tunnel is what came out of it at the
        # far end; what came in from it is what the far end sent.
        assert by_point["point=out"] == [f for f in seen_far if icmp_type(f) == 8]
        assert by_point["point=in"] == [f for f in seen_far if icmp_type(f) == 0]
        assert len(by_point["point=out"]) == 3
        # ...and on the wire, each inside VXLAN.
        assert len(frames(tmp_path / "wire.pcap")) >= 6


def test_an_uplinks_frames_are_what_the_host_on_the_wire_saw_and_its_lro_is_seen_at_offload(tmp_path):
    """An uplink's `out` is what the host on the wire received and its
    `in` what that host sent, byte for byte; with software LRO, the
    frames it coalesced are seen at `offload`, longer than the wire's."""
    from test_uplink import EXT_IP as UP_EXT_IP, VM_IP as UP_VM_IP, topology

    with topology(tmp_path, lro="software") as t:
        t.sh("a", f"ping -c 1 -W 5 {UP_EXT_IP}")
        far = Tcpdump(t, "ext", tmp_path / "ext.pcap", "icmp")
        cap = Capture(t, "up0", tmp_path / "up0.pcapng", "--point", "in,out", "icmp")
        t.sh("a", f"ping -c 3 -i 0.2 -W 5 -s 1200 {UP_EXT_IP}")
        for c in (cap, far):
            c.stop()
        by_point = {}
        for f, (c,) in zip(frames(tmp_path / "up0.pcapng"), fields(tmp_path / "up0.pcapng", "frame.comment")):
            by_point.setdefault(c.split()[0], []).append(f)
        seen = frames(tmp_path / "ext.pcap")
        assert by_point["point=out"] == [f for f in seen if icmp_type(f) == 8]
        assert by_point["point=in"] == [f for f in seen if icmp_type(f) == 0]
        assert len(by_point["point=in"]) == 3

        t.popen("a", f"iperf3 -s -B {UP_VM_IP}", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        t.wait_listening("a", 5201)
        lro = Capture(t, "up0", tmp_path / "lro.pcapng", "--point", "in,offload", "-s", "128", "tcp")
        t.sh("ext", f"iperf3 -c {UP_VM_IP} -t 1")
        lro.stop()
        longest = {}
        for c, n in fields(tmp_path / "lro.pcapng", "frame.comment", "frame.len"):
            longest[c.split()[0]] = max(longest.get(c.split()[0], 0), int(n))
        assert longest["point=in"] <= 1514 < longest["point=offload"], longest
