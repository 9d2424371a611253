"""Flow export against a real collector: Debian's nfcapd receives hvnet's
IPFIX in a namespace of its own, nfdump reads what it stored, and the
frames and bytes of each VM's flows add up to that VM's port counters —
exactly with every frame metered, within the sampling's error at 1 in 10
(the collector scaling by the sampling the export's options say).
A tunnelled flow's VNI and outer addresses are read by tshark's IPFIX
dissector. A collector that does not exist costs nothing but the
records (counted as sent, the switch unaffected)."""

import csv
import io
import json
import os
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

import hvlab

pytestmark = pytest.mark.root

A, B = "198.18.50.1", "198.18.50.2"
COLL_HOST, COLL = "198.18.51.1", "198.18.51.2"


class Collector:
    """nfcapd in a namespace of its own, reached from the switch's
    namespace through a veth pair; `flows()` stops it (so it writes what
    it has) and returns nfdump's records."""

    def __init__(self):
        self.ns = hvlab.Netns("nf")
        self.host_end = hvlab.unique("hnf")
        self.dir = Path(tempfile.mkdtemp(prefix="hvnet-nfcapd-"))

    def __enter__(self):
        self.ns.__enter__()
        try:
            hvlab.run(["ip", "link", "add", self.host_end, "type", "veth", "peer", "name", "eth0",
                       "netns", self.ns.name])
            hvlab.run(f"ip addr add {COLL_HOST}/24 dev {self.host_end} && ip link set {self.host_end} up")
            self.ns.sh(f"ip addr add {COLL}/24 dev eth0 && ip link set eth0 up")
            self.ns.sh(f"nfcapd -D -w {self.dir} -b {COLL} -p 4739 -P {self.dir}/nfcapd.pid")
            assert hvlab.eventually(lambda: ":4739 " in self.ns.sh("ss -Hlun").stdout, timeout=30)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def stop(self):
        pid_file = self.dir / "nfcapd.pid"
        if pid_file.exists():
            pid = int(pid_file.read_text().strip())
            os.kill(pid, signal.SIGTERM)
            hvlab.eventually(lambda: not Path(f"/proc/{pid}").exists(), timeout=30)

    def flows(self):
        self.stop()
        out = hvlab.run(["nfdump", "-R", str(self.dir), "-q", "-o", "csv"]).stdout
        rows = list(csv.reader(io.StringIO(out)))
        if rows and rows[0] and rows[0][0] == "ts":
            head, rows = rows[0], rows[1:]
        else:
            head = None
        head = head or ["ts", "te", "td", "sa", "da", "sp", "dp", "pr", "flg", "fwd", "stos", "ipkt", "ibyt",
                        "opkt", "obyt", "in", "out"]
        return [dict(zip(head, r)) for r in rows if len(r) > 16 and r[0][:1].isdigit()]

    def __exit__(self, *exc):
        self.stop()
        hvlab.run(["ip", "link", "del", self.host_end], check=False)
        self.ns.__exit__(*exc)
        subprocess.run(["rm", "-rf", str(self.dir)], check=False)
        return False


def drained(t):
    """Waits until every flow's record is out (the cache empty)."""
    return hvlab.eventually(lambda: json.loads(t.hv("ipfix", "--json").stdout)["flows"] == 0, timeout=30)


def by_port(flows):
    """Frames and frame bytes per input interface (a port's number + 1):
    an IP flow's bytes are its IP packets', 14 more per frame."""
    out = {}
    for f in flows:
        n, b = int(f["ipkt"]), int(f["ibyt"])
        ip = f["pr"] not in ("0", "")  # nfdump's protocol column: 0 for a link-layer flow
        frames, l2 = out.get(int(f["in"]), (0, 0))
        out[int(f["in"])] = (frames + n, l2 + b + (14 * n if ip else 0))
    return out


def port_numbers(t):
    return {p["name"]: p["port"] for p in json.loads(t.hv("ports", "--json").stdout)}


def test_every_frame_adds_up_to_the_port_counters(tmp_path):
    """TCP and ping a -> b, every frame metered (flow export applied at
    run time): nfdump's frames and bytes per input interface are a's and
    b's port counters, exactly."""
    vms = [dict(name="a", ipv4=A + "/24"), dict(name="b", ipv4=B + "/24")]
    with Collector() as c, hvlab.Topology(tmp_path, vms, prefix="ix") as t:
        t.apply(ipfix=dict(targets=[f"{COLL}:4739"], cache_idle_timeout=1, cache_active_timeout=2))
        t.sh("a", f"ping -c 3 -i 0.2 -W 5 {B}")
        t.popen("b", f"iperf3 -s -B {B}", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        t.wait_listening("b", 5201)
        t.sh("a", f"iperf3 -c {B} -t 2")
        time.sleep(0.5)
        sent = {v: t.stats(f"/ports/{v}/tx_summary") for v in "ab"}
        assert drained(t)
        v = json.loads(t.hv("ipfix", "--json").stdout)
        assert v["counters"]["send_errors"] == 0 and v["counters"]["cache_full"] == 0, v
        got = by_port(c.flows())
        num = port_numbers(t)
        for vm in "ab":
            assert got[num[vm] + 1] == (sent[vm]["frames"], sent[vm]["bytes"]), (vm, got, sent[vm])


def test_one_in_ten_within_the_sampling_error(tmp_path):
    """1 in 10, UDP of one size a -> b: the export's sampling options
    (RFC 7011's options template, RFC 5477's interval and space) tell the
    collector, which scales what was metered by ten itself, as it does
    for Open vSwitch's and vSphere's exports: a's frames and bytes, within
    ten frames per queue (systematic sampling counts each queue's
    frames)."""
    vms = [dict(name="a", ipv4=A + "/24", queues=1), dict(name="b", ipv4=B + "/24", queues=1)]
    with Collector() as c, hvlab.Topology(tmp_path, vms, prefix="iy") as t:
        t.apply(ipfix=dict(targets=[f"{COLL}:4739"], sampling=10, cache_idle_timeout=1, cache_active_timeout=2))
        t.sh("a", f"ping -c 1 -W 5 {B}")
        t.popen("b", f"iperf3 -s -B {B}", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        t.wait_listening("b", 5201)
        t.sh("a", f"iperf3 -c {B} -u -b 50M -l 1000 -t 2")
        time.sleep(0.5)
        sent = t.stats("/ports/a/tx_summary")
        assert drained(t)
        frames, l2 = by_port(c.flows())[port_numbers(t)["a"] + 1]
        assert abs(frames - sent["frames"]) <= 10, (frames, sent)
        assert abs(l2 - sent["bytes"]) <= 0.02 * sent["bytes"], (l2, sent)


def test_a_collector_that_is_not_there_changes_nothing(tmp_path):
    """Records to an address nobody listens on: sent (or refused by the
    kernel, counted), and the VMs' traffic as before."""
    vms = [dict(name="a", ipv4=A + "/24"), dict(name="b", ipv4=B + "/24")]
    with hvlab.Topology(tmp_path, vms, prefix="iz") as t:
        t.apply(ipfix=dict(targets=["127.0.0.1:9"], cache_idle_timeout=1))
        t.sh("a", f"ping -c 3 -i 0.2 -W 5 {B}")
        assert drained(t)
        v = json.loads(t.hv("ipfix", "--json").stdout)
        assert v["counters"]["records"] + v["counters"]["send_errors"] > 0, v
        t.sh("a", f"ping -c 1 -W 5 {B}")
        # Removed at run time: flow export is off.
        t.apply(ipfix=None)
        assert json.loads(t.hv("ipfix", "--json").stdout) is None


def test_a_tunnelled_flow_says_its_vni_and_outer_addresses(tmp_path):
    """Pings from Linux's vxlan device on the wire into a VM behind a
    tunnel endpoint: their flow's record, read by tshark's IPFIX
    dissector, has the inner addresses, the VNI as RFC 7133's
    layer2SegmentId, and the outer addresses and UDP port in the VMware
    elements Open vSwitch exports."""
    from test_vxlan import EXT_IP, LOCAL, REMOTE, VM_IP, VNI, linux_vxlan, vxlan_topology

    with Collector() as c, vxlan_topology(tmp_path) as t:
        linux_vxlan(t)
        # Watched from before the exporter starts: its first message has
        # the templates.
        dump = c.ns.popen(f"tcpdump -i eth0 --immediate-mode -U -w {tmp_path}/ipfix.pcap udp port 4739",
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        hvlab.wait_for_line(dump.stderr, "listening on")
        t.apply(ipfix=dict(targets=[f"{COLL}:4739"], cache_idle_timeout=1))
        t.sh("ext", f"ping -c 3 -i 0.2 -W 5 {VM_IP}")
        assert drained(t)
        dump.send_signal(signal.SIGINT)
        dump.wait(timeout=30)
        out = hvlab.run(["tshark", "-r", f"{tmp_path}/ipfix.pcap", "-d", "udp.port==4739,cflow", "-V"]).stdout
        assert f"SrcAddr: {EXT_IP}" in out and f"DstAddr: {VM_IP}" in out, out[-3000:]
        hexed = lambda ip: " ".join(f"{int(x):02x}" for x in ip.split("."))  # noqa: E731
        # 0x01 (VXLAN) in the top byte, then the VNI.
        assert f"Layer2 Segment Id: {(1 << 56) | VNI}" in out, out[-3000:]
        # tunnelSource/DestinationIPv4Address: the outer source is the
        # far end, the destination this endpoint; the destination port 4789.
        assert f"Type 893: Value (hex bytes): {hexed(REMOTE)}" in out, out[-3000:]
        assert f"Type 894: Value (hex bytes): {hexed(LOCAL)}" in out, out[-3000:]
        assert "Type 897: Value (hex bytes): 12 b5" in out, out[-3000:]
        flows = [f for f in c.flows() if f["sa"] == EXT_IP]
        assert sum(int(f["ipkt"]) for f in flows) == 3, flows
