"""Real Linux TCP traffic through `hvnet pcap gro` and back through
`hvnet pcap gso`: the byte stream is unchanged, frames are fewer and larger
after GRO and MTU-sized again after GSO, and every checksum verifies with
scapy and tshark."""

import json

import pytest

import capture_lab
import hvlab

pytestmark = pytest.mark.root


@pytest.fixture(scope="module")
def iperf_capture(tmp_path_factory):
    out = tmp_path_factory.mktemp("cap") / "iperf.pcap"
    return capture_lab.capture_iperf(out)


def test_gro_then_gso_preserves_stream(iperf_capture, tmp_path):
    gro = tmp_path / "gro.pcap"
    gso = tmp_path / "gso.pcap"
    r = hvlab.hvnet("pcap", "gro", iperf_capture, gro, "--json")
    summary = json.loads(r.stdout)
    assert summary["frames_in"] > 1000
    assert summary["coalesced_frames"] > 0
    # Most of the stream's ~2,900 data segments end in coalesced frames of
    # many segments each. (Not frames out against frames in: the ACKs the
    # receiver sent, one per segment or two depending on how loaded the
    # machine was while it captured, pass through as they are.)
    assert summary["coalesced_segments"] > 2000, summary
    assert summary["coalesced_segments"] >= 10 * summary["coalesced_frames"], summary
    hvlab.hvnet("pcap", "gso", gro, gso, "--mtu", 1500)

    original = capture_lab.tcp_streams(iperf_capture)
    # The data connection carried 4 MiB after iperf3's 37-byte cookie, and
    # the capture has no holes (tcp_streams raises on one).
    assert max(len(s) for s in original.values()) == (4 << 20) + 37
    assert capture_lab.tcp_streams(gro) == original
    assert capture_lab.tcp_streams(gso) == original

    sizes_in = capture_lab.frame_sizes(iperf_capture)
    sizes_gro = capture_lab.frame_sizes(gro)
    sizes_gso = capture_lab.frame_sizes(gso)
    assert max(sizes_in) <= 1514
    assert max(sizes_gro) > 10000
    assert max(sizes_gso) <= 1514
    assert len(sizes_gso) == len(sizes_in), "GSO back to MTU gives the original frame count"

    # hvnet computes every checksum it writes; a frame that arrived with a
    # bad checksum (the capturing kernel occasionally emits one) is passed on
    # unchanged, never "fixed".
    bad_in = capture_lab.bad_frames(iperf_capture)
    assert capture_lab.bad_frames(gro) <= bad_in
    assert capture_lab.bad_frames(gso) <= bad_in


@pytest.mark.skipif(not hvlab.have("tshark"), reason="tshark not installed")
def test_tshark_finds_no_new_bad_checksums(iperf_capture, tmp_path):
    gro = tmp_path / "gro.pcap"
    hvlab.hvnet("pcap", "gro", iperf_capture, gro)

    def statuses(path):
        r = hvlab.run(
            [
                "tshark", "-n", "-r", str(path),
                "-o", "ip.check_checksum:TRUE", "-o", "tcp.check_checksum:TRUE",
                "-T", "fields", "-e", "ip.checksum.status", "-e", "tcp.checksum.status",
            ]
        )
        return [line.split("\t") for line in r.stdout.splitlines() if line]

    out, inp = statuses(gro), statuses(iperf_capture)
    assert out, "tshark read no frames"
    # 1 = good, 0 = bad, 2 = unverified
    assert all(s[0] == "1" for s in out)
    bad = lambda ss: sum(1 for s in ss if s != ["1", "1"])  # noqa: E731
    assert bad(out) <= bad(inp), [s for s in out if s != ["1", "1"]][:5]
