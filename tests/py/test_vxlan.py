"""VXLAN tunnel endpoints end to end, against the real thing: a VM behind
hvnet and a host using Linux's own `vxlan` device; two hvnet hosts (two
daemons, two topologies) over one underlay; and lies from the wire."""

import hashlib
import json
import os
import socket
import struct

import pytest

import hvlab
from hvnet_lab.fabrics import OvsDaemons
from test_switch_e2e import assert_accounted, transfer

pytestmark = pytest.mark.root

VNI = 42
LOCAL, REMOTE = "198.18.9.1", "198.18.9.2"
VM_IP, EXT_IP = "10.79.0.1", "10.79.0.100"


def vxlan_topology(tmp_path, udp_csum=False, vm=None, mtu=1550, lro="hardware", port=4789, host_tso=False,
                   vxlan=None, **uplink):
    return hvlab.Topology(
        tmp_path, [dict(name="a", ipv4=VM_IP + "/24", **(vm or {}))], prefix="vx",
        uplinks=[dict(name="up0", device="", mtu=mtu, lro=lro,
                      vxlan=dict(vni=VNI, local=LOCAL + "/24", remotes=[REMOTE], port=port, udp_csum=udp_csum,
                                 **(vxlan or {})),
                      **uplink)],
        hosts=[dict(name="ext", uplink="up0", ipv4=REMOTE + "/24", tso=host_tso)])


def linux_vxlan(t, udp_csum=False, port=4789):
    """The external host's own VXLAN device, on the same VNI."""
    csum = "udpcsum" if udp_csum else "noudpcsum"
    t.sh("ext", f"ip link add vx{VNI} type vxlan id {VNI} local {REMOTE} remote {LOCAL} dstport {port} dev eth0 {csum}"
                f" && ip addr add {EXT_IP}/24 dev vx{VNI} && ip link set vx{VNI} up")


def random_file(tmp_path):
    data = tmp_path / "random.bin"
    data.write_bytes(os.urandom(24 << 20))
    return data, (hashlib.sha256(data.read_bytes()).hexdigest(), 24 << 20)


def rx_counters(t, vm, dev="eth0"):
    """(packets, bytes) the device `dev` of `vm` has received."""
    out = t.sh(vm, f"cat /sys/class/net/{dev}/statistics/rx_packets /sys/class/net/{dev}/statistics/rx_bytes")
    return tuple(int(x) for x in out.stdout.split())


@pytest.mark.parametrize("tso,udp_csum,gso", [(True, False, "kernel"), (False, False, "kernel"),
                                              (True, True, "kernel"), (True, False, "software")],
                         ids=["tso-on", "tso-off", "tso-on-udpcsum", "tso-on-software-gso"])
def test_tcp_with_linux_vxlan_both_ways(tmp_path, tso, udp_csum, gso):
    data, want = random_file(tmp_path)
    with vxlan_topology(tmp_path, udp_csum, vm=dict(tso=tso), vxlan=dict(gso=gso)) as t:
        linux_vxlan(t, udp_csum)
        t.sh("a", f"ping -c 2 -i 0.2 -W 2 {EXT_IP}")
        before = rx_counters(t, "ext")
        assert transfer(t, "a", "ext", EXT_IP, data) == want
        packets, nbytes = (a - b for a, b in zip(rx_counters(t, "ext"), before))
        assert transfer(t, "ext", "a", VM_IP, data, port=5556) == want
        v = t.stats("/uplinks/up0/vxlan")
        assert v["vni"] == VNI and v["remotes"][0]["mac"], v
        ext_mac = t.sh("ext", f"cat /sys/class/net/vx{VNI}/address").stdout.strip()
        assert any(m["mac"] == ext_mac and m["remote"] == REMOTE for m in v["remote_macs"]), v
        up_in = t.stats("/uplinks/up0/tx_summary")
        assert up_in["decapsulated"] > 1000 and up_in["drop_bad_vxlan"] == 0, up_in
        out = t.stats("/uplinks/up0/rx_summary")
        whole = tso and gso == "kernel"
        # The VM's TSO frames cross the tunnel whole to the endpoint. With
        # the kernel's tunnel GSO (Linux >= 6.17) they go on whole, one
        # write each into the endpoint's TAP, and reach the peer's veth
        # whole; else the endpoint segments them.
        assert (out["segmented_frames"] > 0) == (tso and not whole), out
        kg = v["kernel_gso"]
        assert (kg is not None) == (gso == "kernel"), v
        if kg:
            assert (kg["gso_frames"] > 0) == tso and kg["errors"] == 0, kg
        # What the peer's NIC received, frames larger than its MTU where
        # they crossed whole.
        assert (nbytes / packets > 3000) == whole, (nbytes, packets)
        # The inner frames were coalesced for the VM (its LRO).
        assert t.stats("/ports/a/rx_summary")["lro_frames"] > 0
        assert_accounted(t, ["a", "up0"])


@pytest.mark.parametrize("udp_csum", [False, True], ids=["noudpcsum", "udpcsum"])
def test_linux_vxlan_peer_with_its_default_offloads(tmp_path, udp_csum):
    """The peer's NIC keeps TSO on, as users leave it: its `vxlan` device
    hands the veth tunnelled GSO frames (UDP tunnel + TCP), which a packet
    socket with a virtio-net header cannot express. They arrive whole and
    are forwarded; nothing the kernel drops at the socket goes uncounted."""
    data, want = random_file(tmp_path)
    with vxlan_topology(tmp_path, udp_csum, host_tso=True) as t:
        linux_vxlan(t, udp_csum)
        t.sh("a", f"ping -c 2 -i 0.2 -W 2 {EXT_IP}")
        assert transfer(t, "ext", "a", VM_IP, data) == want
        assert transfer(t, "a", "ext", EXT_IP, data, port=5556) == want
        up_in = t.stats("/uplinks/up0/tx_summary")
        # Tunnelled GSO frames came whole and went to the VM as GSO frames.
        assert up_in["gso_frames"] > 0 and up_in["drop_kernel"] == 0, up_in
        assert t.stats("/ports/a/rx_summary")["gso_intact_frames"] > 0
        assert_accounted(t, ["a", "up0"])


def test_an_ipv6_underlay_with_a_linux_peer_at_its_default_offloads(tmp_path):
    """VXLAN over IPv6 (`local = "2001:db8::1/64"`), against Linux's own
    vxlan device over IPv6 with its defaults (outer UDP checksums made and
    required, its NIC's TSO on): the endpoint resolves the peer with
    neighbour discovery and answers its solicitations; TCP both ways,
    byte-exact; the VM's TSO frames leave whole as tunnelled GSO frames,
    the peer's arrive whole."""
    local6, remote6 = "2001:db8:9::1", "2001:db8:9::2"
    data, want = random_file(tmp_path)
    with hvlab.Topology(
            tmp_path, [dict(name="a", ipv4=VM_IP + "/24")], prefix="v6",
            uplinks=[dict(name="up0", device="", mtu=1570,
                          vxlan=dict(vni=VNI, local=local6 + "/64", remotes=[remote6]))],
            hosts=[dict(name="ext", uplink="up0", ipv6=remote6 + "/64", tso=True)]) as t:
        t.sh("ext", f"ip link add vx{VNI} type vxlan id {VNI} local {remote6} remote {local6} dstport 4789 dev eth0"
                    f" && ip addr add {EXT_IP}/24 dev vx{VNI} && ip link set vx{VNI} up")
        assert hvlab.eventually(lambda: t.sh("a", f"ping -c 1 -W 1 {EXT_IP}", check=False).returncode == 0,
                                timeout=30)
        before = rx_counters(t, "ext")
        assert transfer(t, "a", "ext", EXT_IP, data) == want
        packets, nbytes = (a - b for a, b in zip(rx_counters(t, "ext"), before))
        assert transfer(t, "ext", "a", VM_IP, data, port=5556) == want
        v = t.stats("/uplinks/up0/vxlan")
        assert v["local"] == local6 + "/64" and v["remotes"][0]["mac"], v
        assert v["kernel_gso"]["gso_frames"] > 0 and v["kernel_gso"]["errors"] == 0, v
        assert nbytes / packets > 3000, (nbytes, packets)
        up_in = t.stats("/uplinks/up0/tx_summary")
        assert up_in["decapsulated"] > 100 and up_in["gso_frames"] > 0 and up_in["drop_bad_vxlan"] == 0, up_in
        assert t.stats("/ports/a/rx_summary")["gso_intact_frames"] > 0
        # The peer forgets the endpoint's MAC and asks again: the endpoint
        # answers its neighbour solicitation (as it must its reachability
        # probes, or the peer marks it failed).
        replies = v["arp_replies_sent"]
        t.sh("ext", f"ip -6 neigh del {local6} dev eth0")
        t.sh("a", f"ping -c 2 -i 0.2 -W 2 {EXT_IP}")
        assert "REACHABLE" in t.sh("ext", f"ip -6 neigh show {local6} dev eth0").stdout
        assert t.stats("/uplinks/up0/vxlan")["arp_replies_sent"] > replies
        assert_accounted(t, ["a", "up0"])


def test_a_tunnel_endpoint_added_again_gets_its_tap_again(tmp_path):
    """A VXLAN uplink removed while the switch runs takes its TAP (the
    kernel's way for tunnelled GSO frames) with it at once, so the same
    uplink added again makes its own and sends whole frames again."""
    dev = hvlab.unique("hvu")
    with hvlab.Netns("vxa") as ext:
        try:
            hvlab.run(["ip", "link", "add", dev, "mtu", "1600", "type", "veth", "peer", "name", "eth0", "netns",
                       ext.name])
            with hvlab.Topology(tmp_path, [dict(name="a", ipv4=VM_IP + "/24")], prefix="vr") as t:
                base = t.file.read_text()
                up = (f'\n[[uplink]]\nname = "up0"\ndevice = "{dev}"\nmtu = 1550\n\n[uplink.vxlan]\nvni = {VNI}\n'
                      f'local = "{LOCAL}/24"\nremotes = ["{REMOTE}"]\n')
                for _ in range(2):
                    t.file.write_text(base + up)
                    assert json.loads(hvlab.hvnet("up", "--json", t.file).stdout)["applied"]["uplinks_added"] == ["up0"]
                    tap = t.stats("/uplinks/up0/vxlan")["kernel_gso"]["device"]
                    assert os.path.exists(f"/sys/class/net/{tap}")
                    t.file.write_text(base)
                    assert json.loads(hvlab.hvnet("up", "--json", t.file).stdout)["applied"]["uplinks_removed"] == ["up0"]
                    assert not os.path.exists(f"/sys/class/net/{tap}")
        finally:
            hvlab.run(["ip", "link", "del", dev], check=False)


def test_frames_a_tunnel_endpoint_sends_do_not_come_back_to_it(tmp_path):
    """A tunnel endpoint sends through sockets of its own, outside its
    receive queues' fanout group: the group must still be told to ignore
    outgoing frames, or every frame sent on the device comes back to one
    of the queues (counted as not for the tunnel, and read for nothing)."""
    with vxlan_topology(tmp_path, queues=2) as t:
        linux_vxlan(t)
        t.sh("a", f"ping -c 2 -i 0.2 -W 2 {EXT_IP}")
        before = t.stats("/uplinks/up0/tx_summary")["drop_not_tunnel"]
        sent_before = t.stats("/uplinks/up0/rx_summary")["delivered_frames"]
        t.sh("a", f"""python3 -c '
import socket, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
end, n = time.monotonic() + 1.0, 0
while time.monotonic() < end:
    s.sendto(bytes(64), ("{EXT_IP}", 9)); n += 1
print(n)'""")
        sent = t.stats("/uplinks/up0/rx_summary")["delivered_frames"] - sent_before
        assert sent > 1000, sent
        t.sh("a", f"ping -c 1 -W 2 {EXT_IP}")
        came_back = t.stats("/uplinks/up0/tx_summary")["drop_not_tunnel"] - before
        # The host's own IPv6 chatter may reach the uplink; the frames sent may not.
        assert came_back < sent // 10, (came_back, sent)
        assert_accounted(t, ["a", "up0"])


def test_tcp_with_linux_vxlan_on_another_udp_port(tmp_path):
    """VXLAN on 8472 (Linux's port before IANA's): the VM's TSO frames
    across the tunnel whole, the inner frames coalesced, RSS over the
    inner flow on two queues, each read one frame per system call
    (`batch = 1`); frames to 4789 are no longer ours."""
    data, want = random_file(tmp_path)
    with vxlan_topology(tmp_path, port=8472, queues=2, rss=True, batch=1) as t:
        assert t.stats("/uplinks/up0/rxqueues/1/status")["frames_per_read"] == 1
        linux_vxlan(t, port=8472)
        t.sh("a", f"ping -c 2 -i 0.2 -W 2 {EXT_IP}")
        assert transfer(t, "a", "ext", EXT_IP, data) == want
        assert transfer(t, "ext", "a", VM_IP, data, port=5556) == want
        assert t.stats("/uplinks/up0/vxlan")["port"] == 8472
        assert t.stats("/uplinks/up0/vxlan")["kernel_gso"]["gso_frames"] > 0
        assert t.stats("/ports/a/rx_summary")["lro_frames"] > 0
        up_mac = bytes.fromhex(t.stats("/uplinks/up0/vxlan")["mac"].replace(":", ""))
        ext_mac = bytes.fromhex(t.sh("ext", "cat /sys/class/net/eth0/address").stdout.strip().replace(":", ""))
        before = t.stats("/uplinks/up0/tx_summary")["drop_not_tunnel"]
        frame = vxlan_frame(up_mac, ext_mac, bytes(64), dport=4789)
        t.sh("ext", f"{os.sys.executable} -c \"import socket,sys; s=socket.socket(socket.AF_PACKET, socket.SOCK_RAW); "
                    f"s.bind(('eth0', 0)); [s.send(bytes.fromhex(sys.argv[1])) for _ in range(5)]\" {frame.hex()}")
        assert hvlab.eventually(lambda: t.stats("/uplinks/up0/tx_summary")["drop_not_tunnel"] - before >= 5)
        assert_accounted(t, ["a", "up0"])


def ipv4_header(src, dst, payload_len, proto=17):
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + payload_len, 0, 0x4000, 64, proto, 0,
                     socket.inet_aton(src), socket.inet_aton(dst))
    s = sum(struct.unpack("!10H", ip))
    s = (s & 0xffff) + (s >> 16)
    return ip[:10] + struct.pack("!H", ~((s & 0xffff) + (s >> 16)) & 0xffff) + ip[12:]


def test_software_checksums_at_a_tunnel_endpoint(tmp_path):
    """`csum = "software"`: every inner checksum from the wire checked by
    hvnet (a wrong one passed on unvouched, so the VM's kernel drops it),
    every inner checksum to the wire complete (tshark verifies them)."""
    data, want = random_file(tmp_path)
    with vxlan_topology(tmp_path, csum="software") as t:
        linux_vxlan(t)
        t.sh("a", f"ping -c 2 -i 0.2 -W 2 {EXT_IP}")
        assert transfer(t, "ext", "a", VM_IP, data, port=5556) == want
        rx = t.stats("/uplinks/up0/tx_summary")
        assert rx["csum_verified"] > 1000 and rx["csum_bad"] == 0, rx
        path = tmp_path / "wire.pcap"
        cap = t.popen("ext", f"tcpdump -i eth0 -U -w {path} -c 400 udp dst port 4789",
                      stderr=hvlab.subprocess.PIPE, text=True)
        hvlab.eventually(lambda: path.exists() and path.stat().st_size > 0, timeout=10)
        assert transfer(t, "a", "ext", EXT_IP, data) == want
        cap.wait(timeout=30)
        status = hvlab.run(["tshark", "-r", str(path), "-o", "tcp.check_checksum:TRUE", "-T", "fields",
                            "-e", "tcp.checksum.status", "-Y", "tcp && tcp.len > 0"]).stdout.split()
        assert len(status) > 100 and set(status) == {"1"}, status[:20]
        assert t.stats("/uplinks/up0/rx_summary")["segmented_frames"] > 0
        # Inner UDP with a wrong checksum: counted, and dropped by the VM.
        up_mac = bytes.fromhex(t.stats("/uplinks/up0/vxlan")["mac"].replace(":", ""))
        ext_mac = bytes.fromhex(t.sh("ext", "cat /sys/class/net/eth0/address").stdout.strip().replace(":", ""))
        vm_mac = bytes.fromhex(t.sh("a", "cat /sys/class/net/eth0/address").stdout.strip().replace(":", ""))
        udp = struct.pack("!HHHH", 41000, 9999, 8 + 32, 0x1234) + bytes(32)
        inner = vm_mac + bytes.fromhex("020000000077") + b"\x08\x00" + ipv4_header(EXT_IP, VM_IP, len(udp)) + udp
        errors = lambda: measure_nstat(t, "a").get("UdpInCsumErrors", 0)  # noqa: E731
        before, bad0 = errors(), rx["csum_bad"]
        t.sh("ext", f"{os.sys.executable} -c \"import socket,sys; s=socket.socket(socket.AF_PACKET, socket.SOCK_RAW); "
                    f"s.bind(('eth0', 0)); [s.send(bytes.fromhex(sys.argv[1])) for _ in range(5)]\" "
                    + vxlan_frame(up_mac, ext_mac, inner).hex())
        assert hvlab.eventually(lambda: t.stats("/uplinks/up0/tx_summary")["csum_bad"] - bad0 >= 5)
        assert hvlab.eventually(lambda: errors() - before >= 5)
        assert_accounted(t, ["a", "up0"])


def measure_nstat(t, vm):
    from hvnet_lab import measure
    return measure.nstat(t.sh(vm, "nstat -az").stdout)


def test_software_lro_at_a_tunnel_endpoint_coalesces_the_inner_frames(tmp_path):
    """lro = "software": the endpoint coalesces the decapsulated inner
    frames before switching; a VM without LRO gets them segmented again,
    byte-exact."""
    data, want = random_file(tmp_path)
    with vxlan_topology(tmp_path, vm=dict(lro=False), lro="software") as t:
        linux_vxlan(t)
        t.sh("a", f"ping -c 2 -i 0.2 -W 2 {EXT_IP}")
        assert transfer(t, "ext", "a", VM_IP, data) == want
        up_in = t.stats("/uplinks/up0/tx_summary")
        assert up_in["lro_frames"] > 0 and up_in["lro_segments"] > 2 * up_in["lro_frames"], up_in
        assert t.stats("/ports/a/rx_summary")["segmented_frames"] > 0
        assert_accounted(t, ["a", "up0"])


def test_outer_headers_as_linux_builds_them(tmp_path):
    """What hvnet puts on the underlay, read by tshark: VXLAN to 4789 with
    the I flag and the VNI, outer source ports spread by the inner flow."""
    with vxlan_topology(tmp_path) as t:
        linux_vxlan(t)
        cap = t.popen("ext", "tcpdump -i eth0 -U -w - --immediate-mode udp dst port 4789",
                      stdout=hvlab.subprocess.PIPE, stderr=hvlab.subprocess.PIPE)
        hvlab.wait_for_line(cap.stderr, "listening on")
        for port in (7001, 7002, 7003, 7004):
            t.sh("a", f"{os.sys.executable} -c \"import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); "
                      f"[s.sendto(b'x'*100, ('{EXT_IP}', {port})) for _ in range(3)]\"")
        assert hvlab.eventually(lambda: t.stats("/uplinks/up0/rx_summary")["delivered_frames"] >= 12)
        cap.terminate()
        pcap, _ = cap.communicate(timeout=10)
        path = tmp_path / "underlay.pcap"
        path.write_bytes(pcap)
        rows = hvlab.run(["tshark", "-r", str(path), "-d", "udp.port==4789,vxlan", "-T", "fields",
                          "-e", "udp.srcport", "-e", "vxlan.flags", "-e", "vxlan.vni", "-e", "udp.dstport",
                          "-e", "udp.port", "-Y", "vxlan && udp"]).stdout.split("\n")
        rows = [r.split("\t") for r in rows if r.strip()]
        assert len(rows) >= 12, rows
        assert all(r[2] == str(VNI) and int(r[1], 16) & 0x0800 for r in rows), rows
        assert len({r[0] for r in rows}) >= 2, "the outer source port follows the inner flow"


def test_two_hvnet_hosts_over_one_underlay(tmp_path):
    """Two daemons, two topologies, one underlay (a veth pair between their
    uplinks' devices): VM to VM across the tunnel, both ways."""
    data, want = random_file(tmp_path)
    da, db = hvlab.unique("hvua"), hvlab.unique("hvub")
    hvlab.run(["ip", "link", "add", da, "mtu", "1550", "type", "veth", "peer", "name", db, "mtu", "1550"])
    try:
        def side(name, dev, local, remote, ip):
            return hvlab.Topology(
                tmp_path, [dict(name=name, ipv4=ip + "/24")], prefix="vx",
                uplinks=[dict(name="up0", device=dev, mtu=1550,
                              vxlan=dict(vni=VNI, local=local + "/24", remotes=[remote]))])
        with side("a", da, LOCAL, REMOTE, "10.79.1.1") as ta, side("b", db, REMOTE, LOCAL, "10.79.1.2") as tb:
            ta.sh("a", "ping -c 3 -i 0.2 -W 2 10.79.1.2")
            server = tb.popen("b", f"{os.sys.executable} {hvlab.Path(__file__).with_name('xfer.py')} serve 10.79.1.2 5555",
                              stdout=hvlab.subprocess.PIPE, text=True)
            hvlab.wait_listening(tb.ns("b"), 5555)
            ta.sh("a", f"{os.sys.executable} {hvlab.Path(__file__).with_name('xfer.py')} send 10.79.1.2 5555 {data}",
                  timeout=60)
            out, _ = server.communicate(timeout=30)
            digest, n = out.split()
            assert (digest, int(n)) == want
            for t, peer in ((ta, REMOTE), (tb, LOCAL)):
                v = t.stats("/uplinks/up0/vxlan")
                assert [r["ip"] for r in v["remotes"] if r["mac"]] == [peer], v
                assert_accounted(t, ["up0"])
    finally:
        hvlab.run(["ip", "link", "del", da], check=False)


def vxlan_frame(dst_mac, src_mac, inner, vni=VNI, flags=0x08, dport=4789, dst_ip=LOCAL, vx_len=8):
    vx = struct.pack("!B3xI", flags, vni << 8)[:vx_len]
    udp_len = 8 + len(vx) + len(inner)
    udp = struct.pack("!HHHH", 40000, dport, udp_len, 0)
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + udp_len, 0, 0x4000, 64, 17, 0,
                     socket.inet_aton(REMOTE), socket.inet_aton(dst_ip))
    s = sum(struct.unpack("!10H", ip))
    s = (s & 0xffff) + (s >> 16)
    ip = ip[:10] + struct.pack("!H", ~((s & 0xffff) + (s >> 16)) & 0xffff) + ip[12:]
    return dst_mac + src_mac + b"\x08\x00" + ip + udp + vx + inner


def test_vxlan_lies_from_the_wire_are_counted_and_the_tunnel_goes_on(tmp_path):
    with vxlan_topology(tmp_path) as t:
        linux_vxlan(t)
        t.sh("a", f"ping -c 1 -W 2 {EXT_IP}")
        mac = lambda ns, dev: bytes.fromhex(t.sh(ns, f"cat /sys/class/net/{dev}/address").stdout.strip().replace(":", ""))  # noqa: E731
        up_mac = bytes.fromhex(t.stats("/uplinks/up0/vxlan")["mac"].replace(":", ""))
        ext_mac, vm_mac = mac("ext", "eth0"), mac("a", "eth0")
        good_inner = vm_mac + b"\x02\x00\x00\x00\x00\x77" + b"\x08\x00" + struct.pack(
            "!BBHHHBBH4s4s", 0x45, 0, 28, 0, 0, 64, 17, 0, socket.inet_aton(EXT_IP), socket.inet_aton(VM_IP)) + bytes(8)
        lying_inner = vm_mac + b"\x02\x00\x00\x00\x00\x77" + b"\x08\x00" + bytes([0x4F]) + bytes(20)
        cases = {
            "drop_bad_vxlan": [vxlan_frame(up_mac, ext_mac, good_inner, flags=0x00),   # no I flag
                               vxlan_frame(up_mac, ext_mac, b"", vx_len=4),          # truncated header
                               vxlan_frame(up_mac, ext_mac, lying_inner)],            # inner IPv4 header lies
            "drop_vni": [vxlan_frame(up_mac, ext_mac, good_inner, vni=43)],
            "drop_not_tunnel": [vxlan_frame(up_mac, ext_mac, good_inner, dport=4790),  # another UDP port
                                vxlan_frame(up_mac, ext_mac, good_inner, dst_ip="198.18.9.9")],
        }
        before = t.stats("/uplinks/up0/tx_summary")
        frames = [f for fs in cases.values() for f in fs]
        t.sh("ext", f"{os.sys.executable} -c \"import socket,sys; s=socket.socket(socket.AF_PACKET, socket.SOCK_RAW); "
                    f"s.bind(('eth0', 0)); [s.send(bytes.fromhex(h)) for h in sys.argv[1:]]\" "
                    + " ".join(f.hex() for f in frames * 5))

        def counted():
            now = t.stats("/uplinks/up0/tx_summary")
            return all(now[k] - before[k] >= 5 * len(fs) for k, fs in cases.items()) and now

        assert hvlab.eventually(counted), (before, t.stats("/uplinks/up0/tx_summary"))
        t.sh("a", f"ping -c 3 -i 0.2 -W 2 {EXT_IP}")
        assert_accounted(t, ["a", "up0"])


def test_an_underlay_mtu_without_room_for_vxlan_is_said(tmp_path):
    t = vxlan_topology(tmp_path, mtu=1500)
    with t:
        r = t.hv("ports")
        up = hvlab.run([hvlab.hvnet_bin(), "stats", "-t", t.name, "/uplinks/up0/vxlan", "--json"])
        assert json.loads(up.stdout)["vni"] == VNI
        log = (hvlab.Path("/run/hvnet") / t.name / "daemon.log").read_text()
        assert "VXLAN adds 50 bytes" in log and "mtu = 1550" in log, log
        assert r.returncode == 0


def test_netqueue_at_a_tunnel_endpoint_filters_on_the_inner_destination(tmp_path):
    from test_observe import free_port, scrape
    metrics = free_port()
    t = hvlab.Topology(
        tmp_path, [dict(name="a", ipv4=VM_IP + "/24")], prefix="vx",
        uplinks=[dict(name="up0", device="", mtu=1550, queues=2, netqueue=True,
                      vxlan=dict(vni=VNI, local=LOCAL + "/24", remotes=[REMOTE]))],
        hosts=[dict(name="ext", uplink="up0", ipv4=REMOTE + "/24")],
        up_args=[f"--metrics=127.0.0.1:{metrics}"])
    with t:
        linux_vxlan(t)
        f = t.stats("/uplinks/up0/filters")
        assert f["tunnel"] and [e["queue"] for e in f["filters"]] == [1], f
        t.sh("ext", f"ping -c 1 -W 2 {VM_IP}")
        q0 = [t.stats(f"/uplinks/up0/rxqueues/{q}/status")["counters"]["decapsulated"] for q in range(2)]
        t.sh("ext", f"ping -c 20 -i 0.05 -W 2 {VM_IP}")
        q1 = [t.stats(f"/uplinks/up0/rxqueues/{q}/status")["counters"]["decapsulated"] for q in range(2)]
        assert q1[1] - q0[1] >= 20 and q1[0] == q0[0], (q0, q1)
        assert_accounted(t, ["a", "up0"])
        # The endpoint and its filters in the metrics, as `hvnet stats` has them.
        _, m = scrape(metrics)
        up = (("kind", "uplink"), ("port", "up0"))
        assert m[("hvnet_netqueue_filters_known", tuple(sorted(up + (("queue", "1"),))))] == 1
        v = t.stats("/uplinks/up0/vxlan")
        assert m[("hvnet_vxlan_remotes_known", up)] == len(v["remotes"]) >= 1
        assert m[("hvnet_vxlan_remote_macs_known", up)] == len(v["remote_macs"]) >= 1
        assert m[("hvnet_vxlan_remote_macs_refused_total", up)] == v["remote_macs_refused"] == 0


def test_rss_at_a_tunnel_endpoint_spreads_by_the_inner_flow(tmp_path):
    """Many overlay flows between the same two hosts share one outer
    address pair: RSS at the endpoint hashes the inner flow (Toeplitz,
    computed here independently) and spreads them."""
    from test_uplink import toeplitz
    queues = 4
    t = hvlab.Topology(
        tmp_path, [dict(name="a", ipv4=VM_IP + "/24")], prefix="vx",
        uplinks=[dict(name="up0", device="", mtu=1550, queues=queues, rss=True,
                      vxlan=dict(vni=VNI, local=LOCAL + "/24", remotes=[REMOTE]))],
        hosts=[dict(name="ext", uplink="up0", ipv4=REMOTE + "/24")])
    with t:
        linux_vxlan(t)
        assert t.stats("/uplinks/up0/filters")["inner"]
        t.sh("ext", f"ping -c 1 -W 2 {VM_IP}")

        def per_queue():
            return [t.stats(f"/uplinks/up0/rxqueues/{q}/status")["counters"]["decapsulated"] for q in range(queues)]

        seen = set()
        for sport in range(41000, 41010):
            inner = socket.inet_aton(EXT_IP) + socket.inet_aton(VM_IP) + struct.pack("!HH", sport, 9)
            want = (toeplitz(inner) & 127) % queues
            before = per_queue()
            t.sh("ext", f"python3 -c \"import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); "
                        f"s.bind(('{EXT_IP}', {sport})); [s.sendto(b'x' * 64, ('{VM_IP}', 9)) for _ in range(20)]\"")
            hvlab.eventually(lambda: sum(per_queue()) - sum(before) >= 20)
            after = per_queue()
            assert [q for q in range(queues) if after[q] - before[q] >= 20] == [want], (sport, want, before, after)
            seen.add(want)
        assert len(seen) >= 3, seen
        assert_accounted(t, ["a", "up0"])


def test_tcp_with_open_vswitch_vxlan(tmp_path):
    """hvnet's tunnel endpoint against Open vSwitch's (userspace datapath,
    native tunnelling): the external host runs ovs-vswitchd in its own
    namespace, its NIC in a physical bridge that holds the underlay
    address, a VXLAN port on an integration bridge whose internal port
    holds the overlay address. TCP both ways, byte-exact."""
    if not hvlab.have("ovs-vswitchd"):
        pytest.skip("Open vSwitch is not installed")
    data, want = random_file(tmp_path)
    with vxlan_topology(tmp_path) as t:
        ovs = OvsDaemons(t.ns("ext"))
        try:
            # A NIC completes checksums on the wire; a veth would hand the
            # tunnelled frames' partial inner checksums on to Open vSwitch,
            # whose AF_PACKET ports take them as they are. So the near end
            # completes them (tx checksumming off: the kernel's fallback).
            hvlab.run(["ethtool", "-K", t.device("up0"), "tx", "off"])
            ovs.start()
            ovs.vxlan_endpoint("eth0", REMOTE, LOCAL, EXT_IP, 1500, vni=VNI)
            hvlab.eventually(lambda: t.sh("ext", f"ping -c 1 -W 1 {VM_IP}", check=False).returncode == 0,
                             timeout=20)
            t.sh("a", f"ping -c 2 -i 0.2 -W 2 {EXT_IP}")
            assert transfer(t, "ext", "a", VM_IP, data) == want
            assert transfer(t, "a", "ext", EXT_IP, data, port=5556) == want
            ovs_mac = t.sh("ext", "cat /sys/class/net/br-int/address").stdout.strip()
            v = t.stats("/uplinks/up0/vxlan")
            assert any(m["mac"] == ovs_mac and m["remote"] == REMOTE for m in v["remote_macs"]), v
            assert t.stats("/uplinks/up0/tx_summary")["drop_bad_vxlan"] == 0
            assert_accounted(t, ["a", "up0"])
        finally:
            ovs.stop()


def test_a_tunnel_carries_several_vlans_each_in_its_vni(tmp_path):
    """`[uplink.vxlan] vlans = { 10 = 5010, 20 = 5020 }` on an uplink of
    VLAN 5 (its own VNI, 42): against three of Linux's vxlan devices on
    the external host, one per VNI. VMs on access ports of VLANs 5, 10 and
    20 each reach theirs; a file crosses VNI 5010 both ways (TSO frames of
    VLAN 10, tagged inside the switch, untagged in the tunnel); a trunk
    VM's tagged frames of VLAN 20 arrive in VNI 5020 untagged and come back
    tagged; nothing crosses from one VNI to another."""
    import os
    import subprocess

    probe = os.path.join(os.path.dirname(__file__), "vlan_probe.py")
    vms = [dict(name="a5", ipv4="10.79.0.1/24", vlan=5), dict(name="a10", ipv4="10.79.10.1/24", vlan=10),
           dict(name="a20", ipv4="10.79.20.1/24", vlan=20),
           dict(name="t", ipv4="10.79.30.1/24", queues=1, vlan_mode="trunk", vlans=[20])]
    data, want = random_file(tmp_path)
    with hvlab.Topology(
            tmp_path, vms, prefix="vv",
            uplinks=[dict(name="up0", device="", mtu=1550, vlan=5,
                          vxlan=dict(vni=VNI, local=LOCAL + "/24", remotes=[REMOTE], vlans={"10": 5010, "20": 5020}))],
            hosts=[dict(name="ext", uplink="up0", ipv4=REMOTE + "/24")]) as t:
        for vni, net in ((VNI, "10.79.0"), (5010, "10.79.10"), (5020, "10.79.20")):
            t.sh("ext", f"ip link add vx{vni} type vxlan id {vni} local {REMOTE} remote {LOCAL} dstport 4789 dev eth0 "
                        f"&& ip addr add {net}.100/24 dev vx{vni} && ip link set vx{vni} up")
        show = json.loads(t.hv("port", "up0", "--json").stdout)
        assert (show["vlan_mode"], show["vlans"], show["native_vlan"]) == ("trunk", "10,20", 5), show
        for vm, net in (("a5", "10.79.0"), ("a10", "10.79.10"), ("a20", "10.79.20")):
            t.sh(vm, f"ping -c 2 -i 0.2 -W 2 {net}.100")
        assert transfer(t, "a10", "ext", "10.79.10.100", data) == want
        assert transfer(t, "ext", "a10", "10.79.10.1", data, port=5556) == want
        # A trunk VM's own tags: VLAN 20 leaves in VNI 5020, untagged.
        recv = t.popen("ext", f"{os.sys.executable} {probe} recv vx5020 tok", stdout=subprocess.PIPE, text=True)
        assert recv.stdout.readline().strip() == "ready"
        t.sh("t", f"{os.sys.executable} {probe} send eth0 ff:ff:ff:ff:ff:ff 20 tok v20 end")
        out, _ = recv.communicate(timeout=60)
        assert json.loads(out.strip().splitlines()[-1]) == [{"label": "v20", "vlan": None}]
        # And back: VNI 5020 to the trunk, tagged 20.
        recv = t.popen("t", f"{os.sys.executable} {probe} recv eth0 tok2", stdout=subprocess.PIPE, text=True)
        assert recv.stdout.readline().strip() == "ready"
        t.sh("ext", f"{os.sys.executable} {probe} send vx5020 ff:ff:ff:ff:ff:ff - tok2 w20 end")
        out, _ = recv.communicate(timeout=60)
        assert json.loads(out.strip().splitlines()[-1]) == [{"label": "w20", "vlan": 20}]
        # Each VNI's traffic stayed in its VLAN: a5 and a20 saw none of
        # VLAN 10's stream.
        for vm in ("a5", "a20"):
            assert t.stats(f"/ports/{vm}/rx_summary")["delivered_frames"] < 100, vm
        assert t.stats("/uplinks/up0/tx_summary")["drop_vni"] == 0
        assert_accounted(t, ["a10", "up0"])
