"""The offline tool's contract and its errors, on scapy-built captures."""

import json
import struct

from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.l2 import Ether
from scapy.utils import rdpcap, wrpcap

import hvlab


def frames(n=6, mss=1000):
    return [
        Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
        / IP(src="10.0.0.1", dst="10.0.0.2", flags="DF", id=i)
        / TCP(sport=40000, dport=5201, seq=1 + i * mss, ack=1, flags="A")
        / (bytes([i]) * mss)
        for i in range(n)
    ]


def test_missing_file_is_a_clear_error(tmp_path):
    r = hvlab.hvnet("pcap", "gro", tmp_path / "nope.pcap", tmp_path / "o.pcap", check=False)
    assert r.returncode == 1
    assert "cannot read" in r.stderr and "nope.pcap" in r.stderr


def test_non_ethernet_link_type_is_refused(tmp_path):
    p = tmp_path / "raw.pcap"
    wrpcap(str(p), [IP(dst="10.0.0.2") / UDP()], linktype=101)
    r = hvlab.hvnet("pcap", "gro", p, tmp_path / "o.pcap", check=False)
    assert r.returncode == 1
    assert "link type" in r.stderr and "Ethernet" in r.stderr


def test_truncated_capture_keeps_good_frames_and_reports_offset(tmp_path):
    p = tmp_path / "t.pcap"
    wrpcap(str(p), frames(), linktype=1)
    data = p.read_bytes()
    cut = len(data) - 300
    p.write_bytes(data[:cut])
    out = tmp_path / "o.pcap"
    r = hvlab.hvnet("pcap", "gro", p, out, "--json", check=False)
    assert r.returncode == 2
    rec = 16 + len(frames()[0])
    damaged_at = 24 + 5 * rec
    assert f"byte offset {damaged_at}" in r.stderr
    assert json.loads(r.stdout)["damaged_at"] == damaged_at
    got = rdpcap(str(out))
    assert len(got) == 1 and len(got[0][TCP].payload) == 5000


def test_rss_contract_matches_microsoft_vector(tmp_path):
    p = tmp_path / "r.pcap"
    pkt = Ether() / IP(src="66.9.149.187", dst="161.142.100.80") / TCP(sport=2794, dport=1766)
    wrpcap(str(p), [pkt, Ether() / b"\x00" * 50], linktype=1)
    r = hvlab.hvnet("pcap", "rss", p, "--queues", 4)
    lines = [json.loads(x) for x in r.stdout.splitlines()]
    assert lines[0] == {"frame": 0, "hash": "0x51ccc178", "queue": (0x51CCC178 & 127) % 4, "type": "tcp_ipv4"}
    assert lines[1]["frame"] == 1 and lines[1]["type"] == "none"
    bad = hvlab.hvnet("pcap", "rss", p, "--key", "abcd", check=False)
    assert bad.returncode == 64 and "40 or 52 bytes" in bad.stderr


def test_vxlan_encap_decap_round_trip(tmp_path):
    src, enc, dec = tmp_path / "s.pcap", tmp_path / "e.pcap", tmp_path / "d.pcap"
    orig = frames(3)
    wrpcap(str(src), orig, linktype=1)
    hvlab.hvnet("pcap", "vxlan", "encap", src, enc, "--vni", 4242, "--udp-csum")
    outer = rdpcap(str(enc))
    assert all(p[UDP].dport == 4789 for p in outer)
    hvlab.hvnet("pcap", "vxlan", "decap", enc, dec)
    assert [bytes(p) for p in rdpcap(str(dec))] == [bytes(p) for p in orig]


def test_gso_refuses_tiny_mtu_flag(tmp_path):
    r = hvlab.hvnet("pcap", "gso", "a", "b", "--mtu", 20, check=False)
    assert r.returncode == 2 and "68" in r.stderr


def test_snaplen_global_header_is_ok(tmp_path):
    # A big-endian pcap header is read too.
    p = tmp_path / "be.pcap"
    hdr = struct.pack(">IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1)
    f = bytes(frames(1)[0])
    rec = struct.pack(">IIII", 1, 0, len(f), len(f)) + f
    p.write_bytes(hdr + rec)
    out = tmp_path / "o.pcap"
    hvlab.hvnet("pcap", "gro", p, out)
    assert bytes(rdpcap(str(out))[0]) == f
