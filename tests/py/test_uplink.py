"""Uplinks end to end: an external host (a namespace whose eth0 is the far
end of a veth pair; its kernel's TCP stack on the wire) and VMs behind
hvnet, joined by an uplink on the near end (AF_PACKET with virtio-net
headers). Checked from the receivers' side, against the kernel's own
counters, and against hvnet's accounting."""

import hashlib
import json
import os
import socket
import struct
import time

import pytest

import hvlab
from helpers import ports
from test_switch_e2e import assert_accounted, transfer

pytestmark = pytest.mark.root

EXT_IP, VM_IP, VM2_IP = "198.18.7.100", "198.18.7.1", "198.18.7.2"


def topology(tmp_path, lro="hardware", tso="hardware", queues=2, vm_lro=True, host_tso=False, second_vm=False):
    vms = [dict(name="a", ipv4=VM_IP + "/24", ipv6="fd18:7::1/64", lro=vm_lro)]
    if second_vm:
        vms.append(dict(name="b", ipv4=VM2_IP + "/24"))
    return hvlab.Topology(
        tmp_path, vms, prefix="up",
        uplinks=[dict(name="up0", device="", queues=queues, lro=lro, tso=tso)],
        hosts=[dict(name="ext", uplink="up0", ipv4=EXT_IP + "/24", ipv6="fd18:7::100/64", tso=host_tso)])


def test_ping_both_ways_ipv4_and_ipv6_and_the_views(tmp_path):
    with topology(tmp_path) as t:
        t.sh("ext", f"ping -c 3 -i 0.2 -W 2 {VM_IP}")
        t.sh("a", "ping -6 -c 3 -i 0.2 -W 2 fd18:7::100")
        p = ports(t)
        assert p["up0"]["type"] == "uplink+af_packet" and p["up0"]["link"] == "up"
        assert p["up0"]["client"] == t.device("up0") and p["up0"]["queues"] == 2
        assert t.stats("/uplinks") == ["up0/"]
        assert "txqueues/" in t.stats("/uplinks/up0")
        rxq = [t.stats(f"/uplinks/up0/rxqueues/{q}/status")["counters"]["frames"] for q in range(2)]
        assert sum(rxq) >= 3, rxq
        fdb = json.loads(t.hv("fdb", "--json").stdout)
        ext_mac = t.sh("ext", "cat /sys/class/net/eth0/address").stdout.strip()
        assert any(r["mac"] == ext_mac and r["port"] == p["up0"]["port"] for r in fdb), fdb
        # An uplink's offloads are its topology's; its rings may change.
        r = t.hv("port", "up0", "set", "lro=on", check=False)
        assert r.returncode != 0 and "set in its topology" in r.stderr, r.stderr
        t.hv("port", "up0", "set", "ring1=512")
        assert_accounted(t, ["a", "up0"])


def wake_ups(t, port="up0"):
    """Frames and wake-ups over a port's receive queues."""
    qs = [t.stats(f"/uplinks/{port}/rxqueues/{q}/status") for q in range(2)]
    return (sum(q["counters"]["frames"] for q in qs), sum(q["counters"]["wakeups"] for q in qs),
            {q["frames_per_read"] for q in qs})


BLAST = """python3 -c '
import socket, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
end = time.monotonic() + 1.0
n = 0
while time.monotonic() < end:
    s.sendto(bytes(64), ("{ip}", 9)); n += 1
print(n)'"""


def test_wake_up_coalescing_bounds_how_often_a_queue_wakes(tmp_path):
    """`rx_usecs` (ethtool's interrupt moderation, for a queue's thread):
    two wake-ups are at least that far apart, so a burst is read in fewer,
    larger batches; changed at run time, refused outside its range."""
    with topology(tmp_path) as t:
        t.sh("ext", f"ping -c 2 -i 0.2 -W 2 {VM_IP}")
        r = t.hv("port", "up0", "set", "rx_usecs=20000", check=False)
        assert r.returncode != 0 and "0..10000" in r.stderr, r.stderr
        t.hv("port", "up0", "set", "rx_usecs=10000")
        assert json.loads(t.hv("port", "up0", "--json").stdout)["rx_usecs"] == 10000
        frames0, wakes0, per_read = wake_ups(t)
        assert per_read == {32}, per_read
        start = time.monotonic()
        sent = int(t.sh("ext", BLAST.format(ip=VM_IP)).stdout)
        t.sh("ext", f"ping -c 2 -i 0.2 -W 2 {VM_IP}")
        frames1, wakes1, _ = wake_ups(t)
        elapsed = time.monotonic() - start
        # At most one wake-up per 10 ms window (and one to start with),
        # whatever the machine's speed: the bound is the mechanism's.
        assert 0 < wakes1 - wakes0 <= elapsed / 0.010 + 2, (wakes1 - wakes0, elapsed)
        assert frames1 - frames0 >= sent, (frames1 - frames0, sent)
        t.hv("port", "up0", "set", "rx_usecs=0")
        t.sh("ext", f"ping -c 2 -i 0.2 -W 2 {VM_IP}")
        assert_accounted(t, ["a", "up0"])


CASES = [
    # uplink lro, uplink tso, VM lro, host tso
    ("hardware", "hardware", True, False),
    ("off", "hardware", True, False),
    ("hardware", "software", False, False),
    ("off", "software", False, True),
    ("software", "hardware", True, False),
    ("software", "software", False, False),
]


@pytest.mark.parametrize("lro,tso,vm_lro,host_tso", CASES,
                         ids=[f"lro-{c[0]}-tso-{c[1]}-vmlro{int(c[2])}-hosttso{int(c[3])}" for c in CASES])
def test_file_arrives_intact_both_ways(tmp_path, lro, tso, vm_lro, host_tso):
    data = tmp_path / "random.bin"
    data.write_bytes(os.urandom(24 << 20))
    want = (hashlib.sha256(data.read_bytes()).hexdigest(), 24 << 20)
    with topology(tmp_path, lro=lro, tso=tso, vm_lro=vm_lro, host_tso=host_tso) as t:
        before = t.stats("/uplinks/up0/tx_summary")
        assert transfer(t, "ext", "a", VM_IP, data) == want
        assert transfer(t, "a", "ext", EXT_IP, data, port=5556) == want
        up_in = t.stats("/uplinks/up0/tx_summary")
        up_out = t.stats("/uplinks/up0/rx_summary")
        # What the wire delivered: coalesced by the device's GRO only with
        # lro = "hardware" (a host with TSO sends GSO frames itself).
        coalesced = up_in["gso_frames"] - before["gso_frames"]
        if lro == "hardware" or host_tso:
            assert coalesced > 0, up_in
        else:
            assert coalesced == 0, up_in
        # With lro = "software", hvnet coalesced what the wire brought
        # before switching: several wire frames per forwarded frame.
        merged = up_in["lro_segments"] - before["lro_segments"]
        if lro == "software":
            assert up_in["lro_frames"] > 0 and merged > 2 * up_in["lro_frames"], up_in
            assert t.stats("/uplinks/up0/accounting")["ingress"]["lro_merged"] > 0
        else:
            assert up_in["lro_frames"] == 0, up_in
        # What went out: GSO frames whole with tso = "hardware", segmented
        # by hvnet with "software".
        if tso == "hardware":
            assert up_out["gso_intact_frames"] > 0 and up_out["segmented_frames"] == 0, up_out
        else:
            assert up_out["gso_intact_frames"] == 0 and up_out["segmented_frames"] > 0, up_out
        # The host's kernel saw no frame above the wire's MTU from hvnet
        # unless it was a GSO frame (the veth carries those whole).
        assert_accounted(t, ["a", "up0"])


def test_link_down_and_up_takes_the_uplink_down_and_back_not_the_switch(tmp_path):
    with topology(tmp_path, second_vm=True) as t:
        dev = t.device("up0")
        t.sh("ext", f"ping -c 1 -W 2 {VM_IP}")
        hvlab.run(["ip", "link", "set", dev, "down"])
        assert hvlab.eventually(lambda: ports(t)["up0"]["link"] == "down"), ports(t)
        # The VMs keep talking while the wire is down.
        t.sh("a", f"ping -c 3 -i 0.2 -W 2 {VM2_IP}")
        assert ports(t)["a"]["link"] == "up"
        hvlab.run(["ip", "link", "set", dev, "up"])
        assert hvlab.eventually(lambda: ports(t)["up0"]["link"] == "up", timeout=15), ports(t)
        assert hvlab.eventually(lambda: t.sh("ext", f"ping -c 1 -W 1 {VM_IP}", check=False).returncode == 0,
                                timeout=15)
        # The far end going down takes the carrier: the uplink goes down too.
        t.sh("ext", "ip link set eth0 down")
        assert hvlab.eventually(lambda: ports(t)["up0"]["link"] == "down"), ports(t)
        t.sh("ext", "ip link set eth0 up")
        assert hvlab.eventually(lambda: ports(t)["up0"]["link"] == "up", timeout=15), ports(t)
        assert hvlab.eventually(lambda: t.sh("ext", f"ping -c 1 -W 1 {VM_IP}", check=False).returncode == 0,
                                timeout=15)
        assert_accounted(t, ["a", "b", "up0"])


def test_a_deleted_device_takes_its_uplink_down_and_the_switch_goes_on(tmp_path):
    with topology(tmp_path, second_vm=True) as t:
        t.sh("ext", f"ping -c 1 -W 2 {VM_IP}")
        hvlab.run(["ip", "link", "del", t.device("up0")])
        assert hvlab.eventually(lambda: ports(t)["up0"]["link"] == "down"), ports(t)
        t.sh("a", f"ping -c 3 -i 0.2 -W 2 {VM2_IP}")
        # Frames for the wire are counted as dropped at a down port.
        t.sh("a", f"ping -c 2 -i 0.2 -W 1 {EXT_IP}", check=False)
        assert_accounted(t, ["a", "b", "up0"])


def wire_frame(dst, src, ethertype, payload):
    return dst + src + struct.pack("!H", ethertype) + payload


def test_bad_frames_from_the_wire_are_counted_and_the_rest_forwarded(tmp_path):
    with topology(tmp_path, lro="off") as t:
        vm_mac = bytes.fromhex(t.sh("a", "cat /sys/class/net/eth0/address").stdout.strip().replace(":", ""))
        ext_mac = bytes.fromhex(t.sh("ext", "cat /sys/class/net/eth0/address").stdout.strip().replace(":", ""))
        bad = [
            # An IPv4 header that claims 60 bytes in a 30-byte frame.
            wire_frame(vm_mac, ext_mac, 0x0800, bytes([0x4F]) + bytes(15)),
            # IPv6 with a payload length past the frame's end.
            wire_frame(vm_mac, ext_mac, 0x86DD, bytes([0x60, 0, 0, 0, 0x05, 0xdc, 6, 64]) + bytes(32)),
            # TCP whose data offset points past the frame.
            wire_frame(vm_mac, ext_mac, 0x0800,
                       bytes([0x45, 0, 0, 40, 0, 0, 0x40, 0, 64, 6, 0, 0]) + socket.inet_aton(EXT_IP)
                       + socket.inet_aton(VM_IP) + bytes(12) + bytes([0xF0]) + bytes(7)),
        ]
        send = (f"{os.sys.executable} -c \"import socket,sys; s=socket.socket(socket.AF_PACKET, socket.SOCK_RAW); "
                f"s.bind(('eth0', 0)); [s.send(bytes.fromhex(h)) for h in sys.argv[1:]]\" "
                + " ".join(f.hex() for f in bad * 10))
        t.sh("ext", send)
        assert hvlab.eventually(lambda: t.stats("/uplinks/up0/tx_summary")["drop_bad_frame"] >= 30), \
            t.stats("/uplinks/up0/tx_summary")
        t.sh("ext", f"ping -c 3 -i 0.2 -W 2 {VM_IP}")
        assert_accounted(t, ["a", "up0"])


def test_frames_the_kernel_drops_at_the_uplink_socket_are_counted(tmp_path):
    """Frames the kernel drops at an uplink's socket before hvnet reads
    them (here: its receive buffer overflows while the daemon is stopped)
    are counted in and dropped (`drop_kernel`), and the switch goes on."""
    import signal
    with topology(tmp_path, queues=1) as t:
        t.sh("ext", f"ping -c 1 -W 2 {VM_IP}")
        pid = json.loads(hvlab.Path(f"/run/hvnet/{t.name}/state.json").read_text())["pid"]
        before = t.stats("/uplinks/up0/tx_summary")
        frame = wire_frame(b"\x02" * 6, b"\x02\x00\x00\x00\x00\x99", 0x88B5, bytes(1400))
        os.kill(pid, signal.SIGSTOP)
        try:
            # 8 MiB of socket buffer hold a few thousand such frames.
            t.sh("ext", f"{os.sys.executable} -c \"import socket; s=socket.socket(socket.AF_PACKET, socket.SOCK_RAW); "
                        f"s.bind(('eth0', 0)); f=bytes.fromhex('{frame.hex()}'); [s.send(f) for _ in range(20000)]\"")
        finally:
            os.kill(pid, signal.SIGCONT)
        assert hvlab.eventually(lambda: t.stats("/uplinks/up0/tx_summary")["drop_kernel"] > before["drop_kernel"])
        t.sh("ext", f"ping -c 2 -i 0.2 -W 2 {VM_IP}")
        assert_accounted(t, ["a", "up0"])


def test_bad_uplinks_are_refused_before_anything_is_created(tmp_path):
    links = lambda: sorted(line.split()[0] for line in hvlab.run(["ip", "-br", "link"]).stdout.splitlines())  # noqa: E731
    before = links()
    t = hvlab.Topology(tmp_path, [dict(name="a", ipv4=VM_IP + "/24")], prefix="up",
                       uplinks=[dict(name="up0", device="hvnosuch0")])
    r = hvlab.run([hvlab.hvnet_bin(), "up", t.file], check=False)
    assert r.returncode != 0 and "no network interface named hvnosuch0" in r.stderr, r.stderr
    t = hvlab.Topology(tmp_path, [dict(name="a", ipv4=VM_IP + "/24")], prefix="up",
                       uplinks=[dict(name="up0", device="hvnosuch0", lro="sometimes")])
    r = hvlab.run([hvlab.hvnet_bin(), "up", t.file], check=False)
    assert r.returncode != 0 and '"hardware", "software", "off"' in r.stderr and f"{t.file}:" in r.stderr, r.stderr
    assert links() == before
    assert not (hvlab.Path("/run/netns") / t.ns("a")).exists()
    assert not hvlab.Path(f"/run/hvnet/.{t.name}.lock").exists()  # nothing left behind, not even a lock


def test_netqueue_filters_each_vms_frames_to_its_own_queue(tmp_path):
    """NetQueue: the kernel runs the uplink's filter program (a VM's MAC to
    its queue, the rest to queue 0) as frames arrive; hvnet's per-queue
    counters show where they went."""
    t = hvlab.Topology(
        tmp_path, [dict(name="a", ipv4=VM_IP + "/24"), dict(name="b", ipv4=VM2_IP + "/24")], prefix="up",
        uplinks=[dict(name="up0", device="", queues=3, lro="off", netqueue=True)],
        hosts=[dict(name="ext", uplink="up0", ipv4=EXT_IP + "/24")])
    with t:
        f = t.stats("/uplinks/up0/filters")
        macs = {n: p["mac"] for n, p in ports(t).items()}
        assert f["spread"] == "netqueue" and f["default_queue"] == 0
        assert {e["mac"]: e["queue"] for e in f["filters"]} == {macs["a"]: 1, macs["b"]: 2}, f

        def per_queue():
            return [t.stats(f"/uplinks/up0/rxqueues/{q}/status")["counters"]["frames"] for q in range(3)]

        t.sh("ext", f"ping -c 1 -W 2 {VM_IP} && ping -c 1 -W 2 {VM2_IP}")  # ARP resolved both ways
        q0 = per_queue()
        t.sh("ext", f"ping -c 20 -i 0.05 -W 2 {VM_IP}")
        q1 = per_queue()
        assert q1[1] - q0[1] >= 20 and q1[2] == q0[2], (q0, q1)
        t.sh("ext", f"ping -c 20 -i 0.05 -W 2 {VM2_IP}")
        q2 = per_queue()
        assert q2[2] - q1[2] >= 20 and q2[1] == q1[1], (q1, q2)
        # A broadcast has no filter: the default queue.
        t.sh("ext", f"ip neigh flush dev eth0 && ping -c 1 -W 2 {VM_IP}")
        assert per_queue()[0] > q2[0]
        # A VM added at run time gets the next queue in turn (1 again, of
        # the two spare ones), the others' filters unmoved; removed, it
        # loses its filter.
        mac_c = json.loads(t.hv("vm", "add", "c", "ipv4=198.18.7.3/24", "--json").stdout)["mac"]
        f = t.stats("/uplinks/up0/filters")
        assert {e["mac"]: e["queue"] for e in f["filters"]} == {macs["a"]: 1, macs["b"]: 2, mac_c: 1}, f
        t.sh("ext", "ping -c 1 -W 2 198.18.7.3")
        q3 = per_queue()
        t.sh("ext", "ping -c 10 -i 0.05 -W 2 198.18.7.3")
        assert per_queue()[1] - q3[1] >= 10, (q3, per_queue())
        t.hv("vm", "del", "c")
        assert mac_c not in {e["mac"] for e in t.stats("/uplinks/up0/filters")["filters"]}
        assert_accounted(t, ["a", "b", "up0"])


MS_KEY = bytes([
    0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67, 0x25, 0x3d, 0x43, 0xa3, 0x8f, 0xb0,
    0xd0, 0xca, 0x2b, 0xcb, 0xae, 0x7b, 0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3, 0x80, 0x30, 0xf2, 0x0c,
    0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac, 0x01, 0xfa])


def toeplitz(data):
    """Microsoft's Toeplitz hash, written from the RSS specification."""
    key = int.from_bytes(MS_KEY, "big")
    keybits = len(MS_KEY) * 8
    h = 0
    for i, byte in enumerate(data):
        for b in range(8):
            if byte & (0x80 >> b):
                h ^= (key >> (keybits - 32 - (i * 8 + b))) & 0xFFFFFFFF
    return h


def test_toeplitz_as_written_here_matches_microsofts_vectors():
    # The RSS specification's verification suite, IPv4 with TCP ports.
    ip = lambda s: socket.inet_aton(s)  # noqa: E731
    for src, dst, sport, dport, want in [("66.9.149.187", "161.142.100.80", 2794, 1766, 0x51ccc178),
                                         ("199.92.111.2", "65.69.140.83", 14230, 4739, 0xc626b0ea),
                                         ("24.19.198.95", "12.22.207.184", 12898, 38024, 0x5c2b394a)]:
        assert toeplitz(ip(src) + ip(dst) + struct.pack("!HH", sport, dport)) == want


def test_rss_at_the_uplink_puts_each_flow_on_its_toeplitz_queue(tmp_path):
    """RSS at the uplink: the kernel runs hvnet's Toeplitz program as
    frames arrive; each flow lands on queue (hash & 127) % 4, the queue
    Microsoft's hash names, computed here independently."""
    queues = 4
    t = hvlab.Topology(
        tmp_path, [dict(name="a", ipv4=VM_IP + "/24")], prefix="up",
        uplinks=[dict(name="up0", device="", queues=queues, lro="off", rss=True)],
        hosts=[dict(name="ext", uplink="up0", ipv4=EXT_IP + "/24")])
    with t:
        f = t.stats("/uplinks/up0/filters")
        assert f["spread"] == "rss" and f["hash"] == "toeplitz" and not f["inner"], f

        def per_queue():
            return [t.stats(f"/uplinks/up0/rxqueues/{q}/status")["counters"]["frames"] for q in range(queues)]

        t.sh("ext", f"ping -c 1 -W 2 {VM_IP}")  # ARP resolved both ways
        seen = set()
        for sport in range(40000, 40012):
            want = toeplitz(socket.inet_aton(EXT_IP) + socket.inet_aton(VM_IP) + struct.pack("!HH", sport, 9)) & 127
            want %= queues
            before = per_queue()
            send = (f"python3 -c \"import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); "
                    f"s.bind(('{EXT_IP}', {sport})); [s.sendto(b'x' * 64, ('{VM_IP}', 9)) for _ in range(20)]\"")
            t.sh("ext", send)
            hvlab.eventually(lambda: sum(per_queue()) - sum(before) >= 20)
            after = per_queue()
            grew = [q for q in range(queues) if after[q] - before[q] >= 20]
            assert grew == [want], (sport, want, before, after)
            seen.add(want)
        assert len(seen) >= 3, seen  # the flows spread
        assert_accounted(t, ["a", "up0"])
        # RSS and NetQueue both spread the queues: one or the other.
        bad = tmp_path / "both.toml"
        bad.write_text(t.file.read_text().replace("rss = true", "rss = true, netqueue = true"))
        r = hvlab.run([hvlab.hvnet_bin(), "up", bad], check=False)
        assert r.returncode != 0 and "choose one" in r.stderr, r.stderr


def test_dynamic_netqueue_spreads_busy_filters_and_packs_them_again(tmp_path):
    """Dynamic NetQueue: the filters start packed on one queue; under load
    (a low threshold here, 5 % of a core) the balancer gives one of them a
    queue of its own; once quiet, it packs them again. Its decisions and the
    queues' loads are in `hvnet stats /uplinks/U/filters`, the kernel
    follows the table (frames land where the filters say)."""
    t = hvlab.Topology(
        tmp_path, [dict(name="a", ipv4=VM_IP + "/24"), dict(name="b", ipv4=VM2_IP + "/24")], prefix="up",
        uplinks=[dict(name="up0", device="", queues=3, lro="off", netqueue="dynamic", netqueue_threshold=5)],
        hosts=[dict(name="ext", uplink="up0", ipv4=EXT_IP + "/24")])
    with t:
        def filters():
            return t.stats("/uplinks/up0/filters")

        f = filters()
        assert f["spread"] == "netqueue" and f["balancer"]["mode"] == "dynamic", f
        assert [e["queue"] for e in f["filters"]] == [1, 1] and f["balancer"]["queues_used"] == 1, f
        for vm, port in (("a", 5301), ("b", 5302)):
            t.popen(vm, f"iperf3 -s -1 -p {port}")
            t.wait_listening(vm, port)
        clients = [t.popen("ext", f"iperf3 -c {ip} -p {port} -t 20")
                   for ip, port in ((VM_IP, 5301), (VM2_IP, 5302))]
        spread = hvlab.eventually(lambda: filters()["balancer"]["queues_used"] == 2, timeout=18)
        f = filters()
        assert spread, f
        assert any(d["action"] == "spread" for d in f["balancer"]["decisions"]), f
        queue_of = {e["mac"]: e["queue"] for e in f["filters"]}
        assert sorted(queue_of.values()) == [1, 2], f
        # The kernel follows the new table: b's frames arrive on b's queue.
        mac_b = ports(t)["b"]["mac"]
        q = queue_of[mac_b]
        before = t.stats(f"/uplinks/up0/rxqueues/{q}/status")["counters"]["frames"]
        t.sh("ext", f"ping -c 5 -i 0.05 -W 2 {VM2_IP}")
        assert t.stats(f"/uplinks/up0/rxqueues/{q}/status")["counters"]["frames"] - before >= 5
        for c in clients:
            c.kill()
            c.wait()
        packed = hvlab.eventually(lambda: filters()["balancer"]["queues_used"] == 1, timeout=20)
        f = filters()
        assert packed and f["balancer"]["decisions"][-1]["action"] == "pack", f
        assert "netqueue balancer" in hvlab.Path(f"/run/hvnet/{t.name}/daemon.log").read_text()
        # A VM added at run time gets its filter at once, and the kernel
        # steers its frames by it; removed, its filter goes.
        mac_c = json.loads(t.hv("vm", "add", "c", "ipv4=198.18.7.3/24", "--json").stdout)["mac"]
        queue_of = {e["mac"]: e["queue"] for e in filters()["filters"]}
        assert queue_of.get(mac_c, 0) >= 1, queue_of
        q = queue_of[mac_c]
        before = t.stats(f"/uplinks/up0/rxqueues/{q}/status")["counters"]["frames"]
        t.sh("ext", "ping -c 5 -i 0.05 -W 2 198.18.7.3")
        assert t.stats(f"/uplinks/up0/rxqueues/{q}/status")["counters"]["frames"] - before >= 5
        t.hv("vm", "del", "c")
        assert mac_c not in {e["mac"] for e in filters()["filters"]}
        assert_accounted(t, ["a", "b", "up0"])
