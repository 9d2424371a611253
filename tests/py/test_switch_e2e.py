"""The live switch end to end: VMs (network namespaces behind TAP devices
hvnet holds) exchanging real traffic through hvnet, checked from the
receivers' side and against hvnet's own counters."""

import json
import os
import time
from pathlib import Path

import pytest

import hvlab
from helpers import vm

pytestmark = pytest.mark.root

XFER = Path(__file__).with_name("xfer.py")


def assert_accounted(t, vms):
    """Every frame accounted for, per port, once traffic has stopped."""
    for v in vms:
        deadline = time.time() + 3
        while True:
            a = t.stats(f"/ports/{v}/accounting")
            if a["egress"]["in_flight"] == 0 or time.time() > deadline:
                break
            time.sleep(0.1)
        assert a["ingress"]["balanced"], a
        assert a["egress"]["in_flight"] == 0, a
        assert a["egress"]["offered"] == a["egress"]["delivered_source_frames"] + a["egress"]["drops"], a


def transfer(t, src, dst, dst_ip, path, port=5555):
    server = t.popen(dst, f"{os.sys.executable} {XFER} serve {dst_ip} {port}", stdout=hvlab.subprocess.PIPE, text=True)
    hvlab.wait_listening(t.ns(dst), port)
    t.sh(src, f"{os.sys.executable} {XFER} send {dst_ip} {port} {path}", timeout=60)
    out, _ = server.communicate(timeout=30)
    digest, n = out.split()
    return digest, int(n)


def test_ping_ipv4_and_ipv6(tmp_path):
    with hvlab.Topology(tmp_path, [vm("a", "10.61.0.1", ipv6="fd61::1/64"), vm("b", "10.61.0.2", ipv6="fd61::2/64")]) as t:
        t.sh("a", "ping -c 3 -i 0.2 -W 2 10.61.0.2")
        t.sh("a", "ping -6 -c 3 -i 0.2 -W 2 fd61::2")
        ports = json.loads(t.hv("ports", "--json").stdout)
        assert [p["client"] for p in ports] == ["a", "b"]
        assert all(p["link"] == "up" for p in ports)
        fdb = json.loads(t.hv("fdb", "--json").stdout)
        assert {r["port"] for r in fdb} == {0, 1}
        assert_accounted(t, ["a", "b"])


CASES = [
    # lro, tso, mtu, queues
    (True, True, 1500, 1),
    (False, True, 1500, 1),
    (True, False, 1500, 1),
    (False, False, 1500, 1),
    (True, True, 9000, 1),
    (True, False, 9000, 4),
    (False, True, 1500, 4),
    (True, True, 1500, 4),
]


@pytest.mark.parametrize("lro,tso,mtu,queues", CASES, ids=[f"lro{int(c[0])}-tso{int(c[1])}-mtu{c[2]}-q{c[3]}" for c in CASES])
def test_file_arrives_intact_both_ways(tmp_path, lro, tso, mtu, queues):
    data = tmp_path / "random.bin"
    data.write_bytes(os.urandom(24 << 20))
    import hashlib

    want = hashlib.sha256(data.read_bytes()).hexdigest()
    settings = dict(lro=lro, tso=tso, mtu=mtu, queues=queues)
    with hvlab.Topology(tmp_path, [vm("a", "10.62.0.1", **settings), vm("b", "10.62.0.2", **settings)]) as t:
        assert transfer(t, "a", "b", "10.62.0.2", data) == (want, 24 << 20)
        assert transfer(t, "b", "a", "10.62.0.1", data, port=5556) == (want, 24 << 20)
        rx = t.stats("/ports/b/rx_summary")
        if lro and not tso:
            assert rx["lro_frames"] > 0, rx
        if not lro:
            assert rx["lro_frames"] == 0 and rx["gso_intact_frames"] == 0, rx
        if tso and not lro:
            assert rx["segmented_frames"] > 0, rx
        assert_accounted(t, ["a", "b"])


def test_lro_seen_from_the_receiver(tmp_path):
    """Sender with TSO off puts wire-sized frames on the switch. With LRO on
    the receiving VM's interface counts far fewer, larger frames than were
    sent, and its tcpdump shows frames larger than the MTU; with LRO off,
    none is larger than the MTU."""
    with hvlab.Topology(tmp_path, [vm("a", "10.63.0.1", tso=False), vm("b", "10.63.0.2")]) as t:
        t.popen("b", "iperf3 -s -B 10.63.0.2", stdout=hvlab.subprocess.DEVNULL)
        hvlab.wait_listening(t.ns("b"), 5201)
        results = {}
        for lro in (True, False):
            t.hv("port", "b", "set", f"lro={'on' if lro else 'off'}")
            dump = t.popen("b", "tcpdump -i eth0 -n -s 96 -c 2000 --immediate-mode -w /dev/stdout tcp and src host 10.63.0.1", stdout=hvlab.subprocess.PIPE, stderr=hvlab.subprocess.PIPE)
            hvlab.wait_for_line(dump.stderr, "listening on")
            a0, b0 = t.link_counters("a"), t.link_counters("b")
            t.sh("a", "iperf3 -c 10.63.0.2 -t 2 -l 64K > /dev/null")
            a1, b1 = t.link_counters("a"), t.link_counters("b")
            pcap, _ = dump.communicate(timeout=20)
            sent = a1["tx_packets"] - a0["tx_packets"]
            got = b1["rx_packets"] - b0["rx_packets"]
            avg = (b1["rx_bytes"] - b0["rx_bytes"]) / max(got, 1)
            results[lro] = (sent, got, avg, max_frame_len(pcap))
        sent, got, avg, biggest = results[True]
        assert got < sent / 3, results
        assert avg > 3000 and biggest > 1514, results
        sent, got, avg, biggest = results[False]
        assert biggest <= 1514 and avg <= 1514, results
        assert_accounted(t, ["a", "b"])


def max_frame_len(pcap: bytes) -> int:
    """Largest original frame length in a pcap stream (record headers)."""
    import struct

    off, biggest = 24, 0
    while off + 16 <= len(pcap):
        _, _, incl, orig = struct.unpack("<IIII", pcap[off : off + 16])
        biggest = max(biggest, orig)
        off += 16 + incl
    return biggest


def raw_send(t, vmname, frame: bytes, count=3):
    code = (
        "import socket,sys;s=socket.socket(socket.AF_PACKET,socket.SOCK_RAW);s.bind(('eth0',0));"
        f"[s.send(bytes.fromhex('{frame.hex()}')) for _ in range({count})]"
    )
    t.sh(vmname, f"{os.sys.executable} -c \"{code}\"")


def test_broadcast_and_unknown_unicast_flood(tmp_path):
    vms = [vm("a", "10.64.0.1"), vm("b", "10.64.0.2"), vm("c", "10.64.0.3")]
    with hvlab.Topology(tmp_path, vms) as t:
        a_mac = next(p["mac"] for p in json.loads(t.hv("ports", "--json").stdout) if p["client"] == "a")
        src = bytes.fromhex(a_mac.replace(":", ""))
        before = {v: t.stats(f"/ports/{v}/rx_summary")["offered"] for v in "abc"}
        bcast = b"\xff" * 6 + src + b"\x88\xb5" + b"hvnet-flood-test".ljust(46, b"\0")
        unknown = bytes.fromhex("02aabbccddee") + src + b"\x88\xb5" + b"unknown-unicast".ljust(46, b"\0")
        raw_send(t, "a", bcast)
        raw_send(t, "a", unknown)
        offered = lambda: {v: t.stats(f"/ports/{v}/rx_summary")["offered"] for v in "abc"}  # noqa: E731
        after = hvlab.eventually(lambda: (lambda o: o if o["c"] - before["c"] >= 6 else None)(offered())) or offered()
        # IPv6 neighbour discovery may add a few frames; ours are 6 per port.
        assert after["b"] - before["b"] >= 6 and after["c"] - before["c"] >= 6
        assert after["a"] - before["a"] < 6
        tx = t.stats("/ports/a/tx_summary")
        assert tx["flooded"] >= 6
        assert_accounted(t, ["a", "b", "c"])


def test_learned_macs_age_out_and_own_macs_are_static(tmp_path):
    with hvlab.Topology(tmp_path, [vm("a", "10.65.0.1"), vm("b", "10.65.0.2")], fdb_aging_secs=2) as t:
        t.sh("a", "ping -c 1 -W 2 10.65.0.2")
        rows = json.loads(t.hv("fdb", "--json").stdout)
        assert sorted(r["kind"] for r in rows) == ["static", "static"], rows
        t.hv("port", "a", "set", "allow_forged_transmits=on")
        frame = b"\xff" * 6 + bytes.fromhex("02deadbeef02") + b"\x88\xb5" + b"learn".ljust(46, b"\0")
        raw_send(t, "a", frame, count=1)
        deadline = time.time() + 5
        while time.time() < deadline:
            rows = json.loads(t.hv("fdb", "--json").stdout)
            if any(r["kind"] == "learned" for r in rows):
                break
            time.sleep(0.05)
        assert [r["mac"] for r in rows if r["kind"] == "learned"] == ["02:de:ad:be:ef:02"]
        time.sleep(3.5)
        rows = json.loads(t.hv("fdb", "--json").stdout)
        assert sorted(r["kind"] for r in rows) == ["static", "static"], "learned entries age, static ones stay"


def test_a_guest_cannot_take_over_another_ports_mac(tmp_path):
    """With forged transmits allowed, a sends from b's address: the FDB
    refuses to move b's static entry, and traffic to b still reaches b."""
    with hvlab.Topology(tmp_path, [vm("a", "10.65.1.1"), vm("b", "10.65.1.2"), vm("c", "10.65.1.3")]) as t:
        t.hv("port", "a", "set", "allow_forged_transmits=on")
        b_mac = next(p["mac"] for p in json.loads(t.hv("ports", "--json").stdout) if p["client"] == "b")
        frame = b"\xff" * 6 + bytes.fromhex(b_mac.replace(":", "")) + b"\x88\xb5" + b"steal".ljust(46, b"\0")
        raw_send(t, "a", frame, count=3)
        deadline = time.time() + 5
        while time.time() < deadline and t.stats("/ports/a/tx_summary")["fdb_learn_refused"] == 0:
            time.sleep(0.05)
        assert t.stats("/ports/a/tx_summary")["fdb_learn_refused"] >= 1
        t.sh("c", "ping -c 2 -i 0.2 -W 2 10.65.1.2")
        assert_accounted(t, ["a", "b", "c"])


def test_forged_source_mac_is_dropped_by_policy(tmp_path):
    with hvlab.Topology(tmp_path, [vm("a", "10.66.0.1"), vm("b", "10.66.0.2")]) as t:
        forged = b"\xff" * 6 + bytes.fromhex("02deadbeef01") + b"\x88\xb5" + b"forged".ljust(46, b"\0")
        raw_send(t, "a", forged, count=4)
        hvlab.eventually(lambda: t.stats("/ports/a/tx_summary")["drop_policy"] >= 4)
        assert t.stats("/ports/a/tx_summary")["drop_policy"] == 4
        t.hv("port", "a", "set", "allow_forged_transmits=on")
        frames = t.stats("/ports/a/tx_summary")["frames"]
        raw_send(t, "a", forged, count=2)
        hvlab.eventually(lambda: t.stats("/ports/a/tx_summary")["frames"] >= frames + 2)
        assert t.stats("/ports/a/tx_summary")["drop_policy"] == 4
        assert_accounted(t, ["a", "b"])


def test_guest_that_disappears_takes_down_its_port_only(tmp_path):
    vms = [vm("a", "10.67.0.1"), vm("b", "10.67.0.2"), vm("c", "10.67.0.3")]
    with hvlab.Topology(tmp_path, vms) as t:
        t.sh("a", "ping -c 1 -W 2 10.67.0.2")
        hvlab.run(["ip", "netns", "del", t.ns("b")])
        deadline = time.time() + 5
        while time.time() < deadline:
            links = {p["client"]: p["link"] for p in json.loads(t.hv("ports", "--json").stdout)}
            if links["b"] == "down":
                break
            time.sleep(0.1)
        assert links == {"a": "up", "b": "down", "c": "up"}
        t.sh("a", "ping -c 3 -i 0.2 -W 2 10.67.0.3")


def test_run_time_ring_and_mtu_changes(tmp_path):
    with hvlab.Topology(tmp_path, [vm("a", "10.68.0.1"), vm("b", "10.68.0.2")]) as t:
        s = json.loads(t.hv("port", "b", "set", "ring1=4096", "ring2=4096", "--json").stdout)
        assert (s["ring1"], s["ring2"]) == (4096, 4096)
        st = t.stats("/ports/b/rxqueues/0/status")
        assert st["rings"]["ring1_size"] == 4096
        assert s["ring_memory_bytes"] == s["queues"] * (4096 * 1536 + 4096 * 4096)
        bad = t.hv("port", "b", "set", "ring1=8192", check=False)
        assert bad.returncode == 1 and "ring1=8192: ring1 takes a number (32..4096)" in bad.stderr, bad.stderr
        t.hv("port", "a", "set", "mtu=9000")
        t.hv("port", "b", "set", "mtu=9000")
        t.sh("a", "ping -c 2 -i 0.2 -W 2 -M do -s 8972 10.68.0.2")


def test_oversized_frame_is_dropped_not_truncated(tmp_path):
    with hvlab.Topology(tmp_path, [vm("a", "10.69.0.1", mtu=9000, tso=False), vm("b", "10.69.0.2", mtu=1500)]) as t:
        t.sh("a", "ping -c 1 -W 2 10.69.0.2")
        t.sh("a", "ping -c 2 -i 0.2 -W 1 -M do -s 4000 10.69.0.2", check=False)
        assert t.stats("/ports/b/rx_summary")["drop_mtu_exceeded"] >= 2


def test_bad_topology_is_refused_with_line_before_anything_is_created(tmp_path):
    f = tmp_path / "bad.toml"
    f.write_text('name = "badtopo"\n[[vm]]\nname = "a"\nipv4 = "10.1.0.1/24"\nmtu = 10000\n')
    r = hvlab.hvnet("up", f, check=False)
    assert r.returncode == 1
    assert f"{f}:2:" in r.stderr and "mtu 10000" in r.stderr, r.stderr
    assert not Path("/run/hvnet/badtopo").exists()
    assert "badtopo-a" not in hvlab.run(["ip", "netns", "list"]).stdout


def test_down_after_a_crash_removes_everything(tmp_path):
    t = hvlab.Topology(tmp_path, [vm("a", "10.70.0.1"), vm("b", "10.70.0.2")])
    with t:
        state = json.loads(Path(f"/run/hvnet/{t.name}/state.json").read_text())
        os.kill(state["pid"], 9)
        hvlab.eventually(lambda: not Path(f"/proc/{state['pid']}").exists())
        r = t.hv("ports", check=False)
        assert r.returncode == 1 and "not running" in r.stderr
        hvlab.hvnet("down", t.name)
        assert t.ns("a") not in hvlab.run(["ip", "netns", "list"]).stdout
        assert not Path(f"/run/hvnet/{t.name}").exists()


@pytest.mark.parametrize("lro", [True, False], ids=["lro1", "lro0"])
def test_file_arrives_intact_with_io_uring(tmp_path, monkeypatch, lro):
    """The io_uring TAP writer (HVNET_IO_WRITE=uring, used by delivery
    threads) moves the same bytes as plain system calls."""
    monkeypatch.setenv("HVNET_IO_WRITE", "uring")
    import hashlib

    data = tmp_path / "random.bin"
    data.write_bytes(os.urandom(16 << 20))
    want = hashlib.sha256(data.read_bytes()).hexdigest()
    settings = dict(lro=lro, tso=False, delivery="thread")
    with hvlab.Topology(tmp_path, [vm("a", "10.72.0.1", **settings), vm("b", "10.72.0.2", **settings)]) as t:
        assert transfer(t, "a", "b", "10.72.0.2", data) == (want, 16 << 20)
        assert transfer(t, "b", "a", "10.72.0.1", data, port=5556) == (want, 16 << 20)
        if lro:
            assert t.stats("/ports/b/rx_summary")["lro_frames"] > 0
        assert_accounted(t, ["a", "b"])


def test_port_view_names_its_threads(tmp_path):
    """`hvnet port VM --json` lists the port's threads with their kernel
    ids, so tools (the lab's CPU groups, top -H) need no thread names: the
    worker that owns each queue, and with `delivery = "thread"` each
    queue's delivery thread."""
    with hvlab.Topology(tmp_path, [vm("a", "10.74.0.1", queues=2),
                                   vm("b", "10.74.0.2", queues=2, delivery="thread")]) as t:
        pid = json.loads(Path(f"/run/hvnet/{t.name}/state.json").read_text())["pid"]
        for name, want in [("a", [("worker", 0), ("worker", 1)]),
                           ("b", [("delivery", 0), ("delivery", 1), ("worker", 0), ("worker", 1)])]:
            threads = json.loads(t.hv("port", name, "--json").stdout)["threads"]
            assert sorted((th["role"], th["queue"]) for th in threads) == want, threads
            for th in threads:
                comm = Path(f"/proc/{pid}/task/{th['tid']}/comm").read_text().strip()
                assert comm == th["name"], th
