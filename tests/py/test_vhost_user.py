"""Real guests on vhost-user ports, started by `hvnet up` beside a
namespace VM on the same switch: User-Mode Linux kernels (this machine's
`linux.uml`) and QEMU machines (Debian's cloud kernel, its virtio-net-pci
driver; TCG here), each with its own TCP stack and virtio-net driver.
Commands run inside them through `hvnet exec`."""

import grp
import hashlib
import json
import os
import shutil
import subprocess
import tempfile

import pytest

import hvlab
from helpers import ports
from test_switch_e2e import XFER, assert_accounted

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(not os.path.exists("/usr/bin/linux.uml"), reason="needs user-mode-linux (scripts/install-deps.sh)"),
]

A, B, C = "198.18.9.1", "198.18.9.2", "198.18.9.3"

needs_qemu = pytest.mark.skipif(not shutil.which("qemu-system-x86_64"),
                                reason="needs qemu-system-x86 (scripts/install-deps.sh)")
# VM a's kind: every kind of real guest on the same switch as a UML guest
# (b) and a namespace VM (c).
KINDS = ["uml", pytest.param("qemu", marks=needs_qemu)]


def topology(tmp_path, kind="uml", **a_settings):
    if kind == "qemu-packed":
        # A QEMU guest started with packed=on: packed virtqueues.
        kind, a_settings = "qemu", dict(a_settings, packed=True)
    vms = [
        dict(name="a", kind=kind, ipv4=A + "/24", ipv6="fd18:9::1/64", **a_settings),
        dict(name="b", kind="uml", ipv4=B + "/24", ipv6="fd18:9::2/64"),
        dict(name="c", ipv4=C + "/24", queues=1),
    ]
    return hvlab.Topology(tmp_path, vms, prefix="vu")


@pytest.fixture
def shared_dir():
    """A directory the guests see: their root is the host's file system,
    read-only, with their own /tmp and /run."""
    d = tempfile.mkdtemp(prefix="hvnet-vu-", dir="/var/tmp")
    shutil.copy(XFER, d)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def transfer(t, src, dst, dst_ip, path, port=5555):
    xfer = os.path.join(os.path.dirname(path), "xfer.py")
    server = t.popen(dst, f"python3 {xfer} serve {dst_ip} {port}", stdout=subprocess.PIPE, text=True)
    t.wait_listening(dst, port)
    t.sh(src, f"python3 {xfer} send {dst_ip} {port} {path}", timeout=120)
    out, _ = server.communicate(timeout=60)
    digest, n = out.split()
    return digest, int(n)


@pytest.mark.parametrize("kind", KINDS)
def test_guests_ping_each_other_and_a_namespace_vm(tmp_path, kind):
    with topology(tmp_path, kind) as t:
        t.sh("a", f"ping -c 3 -i 0.2 -W 2 {B}")
        t.sh("a", f"ping -c 3 -i 0.2 -W 2 {C}")
        t.sh("c", f"ping -c 3 -i 0.2 -W 2 {B}")
        t.sh("b", "ping -6 -c 3 -i 0.2 -W 2 fd18:9::1")
        p = ports(t)
        assert p["a"]["type"] == "vhost-user" and p["a"]["link"] == "up", p["a"]
        assert p["c"]["type"] == "tap+vnet_hdr"
        # The guest's own kernel and driver: its eth0 is virtio_net, with
        # the MAC and MTU the topology gave.
        drv = t.sh("a", "readlink /sys/class/net/eth0/device/driver").stdout
        assert drv.strip().endswith("virtio_net"), drv
        assert t.sh("a", "cat /sys/class/net/eth0/address").stdout.strip() == p["a"]["mac"]
        # The views: what the driver accepted, its virtqueues, the guest's
        # processes (its CPU, for top and a CPU limit).
        show = json.loads(t.hv("port", "a", "--json").stdout)
        vu = show["vhost_user"]
        assert vu["connected"] and vu["guest_offloads"] == {"csum": True, "tso": True, "mergeable": True}, vu
        assert vu["virtqueues"][0]["rx"] > 0 and vu["virtqueues"][0]["tx"] > 0, vu
        pids = [x["pid"] for x in show["guest"]["processes"]]
        # (UML's user-space helpers come and go with the guest's processes.)
        assert show["guest"]["pid"] in pids and os.path.exists(f"/proc/{show['guest']['pid']}"), pids
        vcpus = show["guest"]["vcpus"]
        assert len(vcpus) == 1 and os.path.exists(f"/proc/{show['guest']['pid']}/task/{vcpus[0]['tid']}"), vcpus
        if kind == "qemu":
            # QEMU's vCPU thread, named as QEMU names it; the guest's root
            # is the host's, and read-only.
            assert vcpus[0]["name"] in ("CPU 0/TCG", "CPU 0/KVM"), vcpus
            r = t.sh("a", "touch /var/tmp/hvnet-guest-wrote-here", check=False)
            assert r.returncode != 0 and "Read-only" in r.stderr, r
            assert not os.path.exists("/var/tmp/hvnet-guest-wrote-here")
        assert t.stats("/ports/b/rxqueues/0/status")["virtqueue_size"] == vu["virtqueues"][0]["rx"]
        assert_accounted(t, ["a", "b", "c"])


@pytest.mark.parametrize("kind", KINDS)
def test_exec_passes_output_status_and_input_through(tmp_path, kind):
    with topology(tmp_path, kind) as t:
        r = t.hv("exec", "a", "--", "sh", "-c", "echo out; echo err >&2; exit 7", check=False)
        assert (r.returncode, r.stdout, r.stderr) == (7, "out\n", "err\n"), r
        data = os.urandom(1 << 20)
        r = subprocess.run([hvlab.hvnet_bin(), "exec", "-t", t.name, "-i", "a", "--", "sha256sum"],
                           input=data, capture_output=True, check=True)
        assert r.stdout.split()[0].decode() == hashlib.sha256(data).hexdigest()
        # Namespace VMs too, with the same command.
        r = t.hv("exec", "c", "--", "sh", "-c", "exit 3", check=False)
        assert r.returncode == 3
        r = t.hv("exec", "nosuch", "--", "true", check=False)
        assert r.returncode != 0 and "no VM named" in r.stderr


# Offloads off with UML's guest only, and packed rings with the offloads on
# only: the same virtio-net driver runs in both guests, the rings do not
# see what the frames carry, and the suite's time is short.
@pytest.mark.parametrize("offloads,kind", [*(pytest.param(o, k, marks=[needs_qemu] if k != "uml" else [])
                                             for o in ("on", "off") for k in ("uml", "qemu", "qemu-packed")
                                             if o == "on" or k == "uml")])
def test_file_arrives_intact_both_ways(tmp_path, shared_dir, offloads, kind):
    # 64 MiB with the offloads on; 24 MiB of wire-sized frames without
    # them (the suite's time).
    size = (64 if offloads == "on" else 24) << 20
    data = os.path.join(shared_dir, "random.bin")
    blob = os.urandom(size)
    with open(data, "wb") as f:
        f.write(blob)
    want = (hashlib.sha256(blob).hexdigest(), size)
    with topology(tmp_path, kind) as t:
        layout = json.loads(t.hv("port", "a", "--json").stdout)["vhost_user"]["ring_layout"]
        assert layout == ("packed" if kind == "qemu-packed" else "split")
        if offloads == "off":
            # The guests' own drivers stop offering TSO and checksum
            # offload: every frame is wire-sized and fully checksummed.
            for vm in ("a", "b"):
                t.sh(vm, "ethtool -K eth0 tso off gso off tx off")
        # The guests see the host's files (read-only): the file is sent
        # from where the test wrote it.
        assert transfer(t, "a", "b", B, data) == want
        assert transfer(t, "b", "a", A, data, port=5556) == want
        assert transfer(t, "a", "c", C, data, port=5557) == want
        assert transfer(t, "c", "a", A, data, port=5558) == want
        rx = t.stats("/ports/b/rx_summary")
        if offloads == "on":
            assert rx["gso_intact_frames"] > 0, rx
            # Guest to guest, a GSO frame is copied once: from the
            # sender's buffers straight into the receiver's.
            assert rx["one_copy_frames"] > 0, rx
            assert t.stats("/ports/a/tx_summary")["payloads_left"] > 0
        else:
            assert rx["gso_intact_frames"] == 0, rx
        assert_accounted(t, ["a", "b", "c"])


@pytest.mark.parametrize("kind", KINDS)
def test_a_killed_guest_takes_down_its_port_and_comes_back(tmp_path, kind):
    with topology(tmp_path, kind) as t:
        t.sh("a", f"ping -c 1 -W 2 {B}")
        t.hv("kill", "a")
        assert hvlab.eventually(lambda: ports(t)["a"]["link"] == "down", timeout=10)
        # The others go on.
        t.sh("c", f"ping -c 3 -i 0.2 -W 2 {B}")
        t.hv("restart", "a")
        assert ports(t)["a"]["link"] == "up" or hvlab.eventually(lambda: ports(t)["a"]["link"] == "up", timeout=10)
        t.sh("a", f"ping -c 3 -i 0.2 -W 2 {B}")
        t.sh("a", f"ping -c 3 -i 0.2 -W 2 {C}")
        # A guest that dies from outside (its process killed, as a crash
        # would end it): port down, exec says so, restart brings it back.
        pid = json.loads(t.hv("port", "a", "--json").stdout)["guest"]["pid"]
        os.kill(pid, 9)
        assert hvlab.eventually(lambda: ports(t)["a"]["link"] == "down", timeout=10)

        def exec_refused():
            # Until the daemon has reaped the guest, exec may find the
            # guest's agent gone instead.
            r = t.hv("exec", "a", "--", "true", check=False)
            return r if r.returncode != 0 and "not running" in r.stderr else None

        r = hvlab.eventually(exec_refused, timeout=10)
        assert r and "not running" in r.stderr, r
        t.hv("restart", "a")
        t.sh("a", f"ping -c 2 -i 0.2 -W 2 {B}")


class Pmd:
    """DPDK testpmd with a `net_virtio_user` front end on a vhost-user
    socket: a second, independent virtio driver (a poll-mode one)."""

    def __init__(self, name, sock, mac, mode, extra=(), server=False, packed=False, devargs=""):
        self.log = tempfile.NamedTemporaryFile("w+", prefix=f"testpmd-{name}-", suffix=".log")
        # server: the front end listens on `sock` (and waits there for the
        # back end before it starts forwarding), as a hypervisor serving
        # the socket does. packed: packed virtqueues (virtio 1.1).
        # devargs: more of the front end's (",mrg_rxbuf=0,in_order=0").
        vdev = (f"net_virtio_user0,path={sock},mac={mac}" + (",server=1" if server else "")
                + (",packed_vq=1" if packed else "") + devargs)
        # Line-buffered, so that its statistics can be read while it runs.
        self.proc = subprocess.Popen(
            ["stdbuf", "-oL", "dpdk-testpmd", "--no-huge", "-m", "512", "--no-pci", f"--file-prefix=hvt{os.getpid()}{name}",
             "-l", "0,1", f"--vdev={vdev}", "--",
             f"--forward-mode={mode}", "--auto-start", "--total-num-mbufs=16384", *extra],
            stdin=subprocess.PIPE, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)

    def text(self) -> str:
        self.log.seek(0)
        return self.log.read()

    def stop(self) -> str:
        """Ends testpmd (it prints its port statistics) and returns its log."""
        hvlab.interrupt_group(self.proc)
        self.log.seek(0)
        return self.log.read()


def pmd_count(log: str, what: str, nic: bool = False) -> int:
    """The last `RX-packets:` / `TX-packets:` testpmd printed: of its
    forward statistics (what it prints last, at exit: since forwarding
    started), or with `nic` of the port's own statistics (the last
    `--stats-period` block: since the port started, as hvnet counts what
    it puts on the ring; frames the port took before forwarding started,
    a few hundred at times, are in these and not in the others)."""
    import re

    if nic:
        # The first count after the last block's heading: the forward
        # statistics come after it at exit.
        block = log.split("NIC statistics for port")[-1] if "NIC statistics for port" in log else ""
        return int(re.findall(rf"{what}-packets:\s+(\d+)", block)[0])
    return int(re.findall(rf"{what}-packets:\s+(\d+)", log)[-1])


@pytest.mark.skipif(not shutil.which("dpdk-testpmd"), reason="needs dpdk-testpmd (scripts/install-deps.sh)")
# DPDK's virtio front end at its defaults (mergeable receive buffers and
# in-order use both on), and with each turned the other way.
@pytest.mark.parametrize("layout,devargs", [
    ("split", ""), ("packed", ""), ("split", ",mrg_rxbuf=0,in_order=0"), ("packed", ",mrg_rxbuf=0,in_order=0"),
], ids=["split", "packed", "split-no-mrg-no-in-order", "packed-no-mrg-no-in-order"])
def test_testpmd_virtio_user_front_ends_exchange_frames(tmp_path, layout, devargs):
    mac_a, mac_b = "02:00:00:00:18:0a", "02:00:00:00:18:0b"
    vms = [dict(name="a", kind="vhost-user", mac=mac_a), dict(name="b", kind="vhost-user", mac=mac_b)]
    packed = layout == "packed"
    with hvlab.Topology(tmp_path, vms, prefix="vp") as t:
        sock = lambda vm: f"/run/hvnet/{t.name}/{vm}.sock"  # noqa: E731
        rx = Pmd("b", sock("b"), mac_b, "rxonly", ["--stats-period=1"], packed=packed, devargs=devargs)
        tx = None
        try:
            assert hvlab.eventually(lambda: ports(t)["b"]["link"] == "up", timeout=30)
            tx = Pmd("a", sock("a"), mac_a, "txonly", ["--eth-peer=0," + mac_b], packed=packed, devargs=devargs)
            # Each front end negotiated the layout it was given, and
            # mergeable buffers (bit 15) and in-order use (bit 35) as asked.
            show = lambda vm: json.loads(t.hv("port", vm, "--json").stdout)["vhost_user"]  # noqa: E731
            negotiated = lambda vm: show(vm)["connected"] and int(show(vm)["acked_features"], 16) != 0  # noqa: E731
            assert hvlab.eventually(lambda: negotiated("a") and negotiated("b"), timeout=30)
            assert show("a")["ring_layout"] == layout == show("b")["ring_layout"]
            for vm in "ab":
                acked = int(show(vm)["acked_features"], 16)
                assert bool(acked & 1 << 15) == ("mrg_rxbuf=0" not in devargs), (vm, hex(acked))
                assert bool(acked & 1 << 35) == ("in_order=0" not in devargs), (vm, hex(acked))
            assert hvlab.eventually(lambda: t.stats("/ports/b/rx_summary")["delivered_frames"] > 10000, timeout=30)
        finally:
            tx_log = tx.stop() if tx else ""
            hvlab.eventually(lambda: t.stats("/ports/b/accounting")["egress"]["in_flight"] == 0, timeout=5)
            # testpmd b has taken from its ring all hvnet put there (its
            # once-a-second statistics say so) before it is stopped.
            delivered = t.stats("/ports/b/rx_summary")["delivered_frames"]
            hvlab.eventually(lambda: "NIC statistics" in rx.text()
                             and pmd_count(rx.text(), "RX", nic=True) >= delivered, timeout=30, every=0.2)
            rx_log = rx.stop()
        sent, got = pmd_count(tx_log, "TX"), pmd_count(rx_log, "RX", nic=True)
        a_in = t.stats("/ports/a/accounting")["ingress"]
        b_out = t.stats("/ports/b/rx_summary")
        # What testpmd a sent was read by hvnet, but for what was still on
        # its transmit ring when it left (testpmd counts a frame when it
        # puts it there; at most the ring's 256); everything hvnet
        # delivered into b's virtqueue testpmd b received.
        assert 0 <= sent - a_in["frames_in"] <= 256 and a_in["balanced"], (sent, a_in)
        assert b_out["delivered_frames"] == got > 10000, (got, b_out, rx_log[-1500:])
        assert b_out["delivered_frames"] + b_out["drop_virtqueue_full"] == a_in["forwarded"], b_out
        # testpmd is gone: its port is down, the switch is up.
        show = json.loads(t.hv("port", "a", "--json").stdout)["vhost_user"]
        assert not show["connected"] and show["connections"] == 1, show
        assert hvlab.eventually(lambda: ports(t)["a"]["link"] == "down", timeout=5)


@pytest.mark.skipif(not shutil.which("dpdk-testpmd"), reason="needs dpdk-testpmd (scripts/install-deps.sh)")
def test_client_ports_connect_to_the_hypervisors_sockets_and_either_side_may_restart(tmp_path):
    """`mode = "client"`: the front ends listen (testpmd's virtio_user with
    `server=1`, as libvirt's `mode='server'` or Open vSwitch's
    dpdkvhostuserclient ports have it) and hvnet connects to them. A front
    end that restarts is connected to again; so is every front end after
    the switch restarts, with neither front end restarted."""
    import signal

    mac_a, mac_b = "02:00:00:00:1a:0a", "02:00:00:00:1a:0b"
    socks = {vm: str(tmp_path / f"front-{vm}.sock") for vm in "ab"}
    pmds = {}

    def front(vm):
        if os.path.exists(socks[vm]):
            os.unlink(socks[vm])
        if vm == "a":
            return Pmd("a", socks["a"], mac_a, "txonly", ["--eth-peer=0," + mac_b], server=True)
        return Pmd("b", socks["b"], mac_b, "rxonly", server=True)

    vms = [dict(name=vm, kind="vhost-user", mac=mac, mode="client", socket=socks[vm])
           for vm, mac in (("a", mac_a), ("b", mac_b))]
    try:
        pmds["b"], pmds["a"] = front("b"), front("a")
        with hvlab.Topology(tmp_path, vms, prefix="vc") as t:
            def delivered():
                return t.stats("/ports/b/rx_summary")["delivered_frames"]

            def flows(since=0):
                assert hvlab.eventually(lambda: delivered() > since + 10000, timeout=60), delivered()

            assert hvlab.eventually(lambda: all(p["link"] == "up" for p in ports(t).values()), timeout=60)
            flows()
            show = json.loads(t.hv("port", "a", "--json").stdout)["vhost_user"]
            assert show["mode"] == "client" and show["socket"] == socks["a"] and show["connections"] == 1, show
            # The front end restarts: its port goes down, then hvnet
            # connects to the new one.
            pmds["a"].stop()
            assert hvlab.eventually(lambda: ports(t)["a"]["link"] == "down", timeout=10)
            pmds["a"] = front("a")
            assert hvlab.eventually(lambda: ports(t)["a"]["link"] == "up", timeout=60)
            flows(delivered())
            show = json.loads(t.hv("port", "a", "--json").stdout)["vhost_user"]
            assert show["connections"] == 2 and show["connected"], show
            # The switch restarts (stopped as systemd stops it); the front
            # ends wait for it and are connected again.
            state = json.loads(hvlab.Path(f"/run/hvnet/{t.name}/state.json").read_text())
            os.kill(state["pid"], signal.SIGTERM)
            assert hvlab.eventually(lambda: not os.path.exists(f"/proc/{state['pid']}"), timeout=20)
            hvlab.hvnet("up", t.file)
            assert hvlab.eventually(lambda: all(p["link"] == "up" for p in ports(t).values()), timeout=60)
            flows()
        # hvnet leaves the hypervisors' sockets where they are.
        assert all(os.path.exists(s) for s in socks.values())
        assert all(p.proc.poll() is None for p in pmds.values()), "a front end died"
    finally:
        for p in pmds.values():
            p.stop()


@pytest.mark.skipif(not shutil.which("dpdk-testpmd"), reason="needs dpdk-testpmd (scripts/install-deps.sh)")
def test_a_server_sockets_owner_group_and_mode_are_the_topologys(tmp_path):
    """A hypervisor that does not run as root (libvirt's QEMU runs as
    `libvirt-qemu`) needs a socket it may open: its path, group and mode
    are set in the topology, and a front end connects there."""
    import stat

    sock = tmp_path / "open.sock"
    vms = [dict(name="a", kind="vhost-user", mac="02:00:00:00:1c:0a", socket=str(sock),
                socket_group="nogroup", socket_mode="0660")]
    with hvlab.Topology(tmp_path, vms, prefix="vo") as t:
        st = os.stat(sock)
        assert stat.S_ISSOCK(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o660, oct(st.st_mode)
        assert st.st_gid == grp.getgrnam("nogroup").gr_gid and st.st_uid == 0, st
        pmd = Pmd("a", str(sock), "02:00:00:00:1c:0a", "rxonly")
        try:
            assert hvlab.eventually(lambda: ports(t)["a"]["link"] == "up", timeout=30)
        finally:
            pmd.stop()
    # The switch's own socket goes with it.
    assert not sock.exists()


@pytest.mark.skipif(not shutil.which("dpdk-testpmd"), reason="needs dpdk-testpmd (scripts/install-deps.sh)")
def test_a_front_end_that_never_reads_fills_its_ring_and_nobody_else_suffers(tmp_path):
    # b's front end only sends (testpmd txonly never polls its receive
    # queue): its receive virtqueue fills, frames for it are dropped and
    # counted (rx_overflow = "drop"), and a namespace VM beside it keeps
    # its traffic.
    mac_a, mac_b = "02:00:00:00:19:0a", "02:00:00:00:19:0b"
    vms = [dict(name="a", kind="vhost-user", mac=mac_a),
           dict(name="b", kind="vhost-user", mac=mac_b, rx_overflow="drop"),
           dict(name="c", ipv4="198.18.19.3/24", queues=1),
           dict(name="d", ipv4="198.18.19.4/24", queues=1)]
    with hvlab.Topology(tmp_path, vms, prefix="vq") as t:
        sock = lambda vm: f"/run/hvnet/{t.name}/{vm}.sock"  # noqa: E731
        deaf = Pmd("b", sock("b"), mac_b, "txonly", ["--eth-peer=0,02:00:00:00:19:ff", "--txpkts=64"])
        talker = None
        try:
            assert hvlab.eventually(lambda: ports(t)["b"]["link"] == "up", timeout=30)
            talker = Pmd("a", sock("a"), mac_a, "txonly", ["--eth-peer=0," + mac_b])
            assert hvlab.eventually(lambda: t.stats("/ports/b/rx_summary")["drop_virtqueue_full"] > 1000, timeout=30)
            t.sh("c", "ping -c 5 -i 0.2 -W 2 198.18.19.4")
        finally:
            if talker:
                talker.stop()
            deaf.stop()
        rx = t.stats("/ports/b/rx_summary")
        # The ring held what the guest posted and no more.
        assert rx["delivered_frames"] <= 4096, rx
        assert_accounted(t, ["a", "b", "c", "d"])


@pytest.mark.parametrize("kind", KINDS)
def test_the_guest_sets_its_queue_pairs_and_offloads_on_its_control_queue(tmp_path, kind):
    vms = [dict(name="a", kind="uml", queues=2, ipv4=A + "/24"), dict(name="b", kind=kind, queues=2, ipv4=B + "/24")]
    with hvlab.Topology(tmp_path, vms, prefix="vc") as t:
        # The guest's driver uses one pair per vCPU (the guests have one)
        # until told otherwise; `ethtool -L` asks hvnet for both.
        t.sh("b", "ethtool -L eth0 combined 2")
        assert "Combined:\t2" in t.sh("b", "ethtool -l eth0").stdout.split("Current")[1]
        t.sh("b", "iperf3 -s -D")
        t.wait_listening("b", 5201)
        t.sh("a", f"iperf3 -c {B} -t 2 -P 8 -J > /dev/null")
        per_queue = [t.stats(f"/ports/b/rxqueues/{q}/status")["counters"]["delivered_frames"] for q in (0, 1)]
        assert all(n > 0 for n in per_queue), per_queue
        if kind == "qemu":
            # QEMU keeps the control queue: it enables the pairs the guest
            # asks for (above), but vhost-user has no message for the
            # guest's offload changes, so they stay in QEMU.
            assert_accounted(t, ["a", "b"])
            return
        # LRO into the guest follows its driver: off with rx-gro-hw off
        # (hvnet segments for it), on again after.
        before = t.stats("/ports/b/rx_summary")
        t.sh("b", "ethtool -K eth0 rx-gro-hw off")
        assert json.loads(t.hv("port", "b", "--json").stdout)["effective"]["lro"] is False
        t.sh("a", f"iperf3 -c {B} -t 2 -J > /dev/null")
        after = t.stats("/ports/b/rx_summary")
        assert after["segmented_frames"] > before["segmented_frames"], (before, after)
        assert after["gso_intact_frames"] == before["gso_intact_frames"], (before, after)
        t.sh("b", "ethtool -K eth0 rx-gro-hw on")
        assert json.loads(t.hv("port", "b", "--json").stdout)["effective"]["lro"] is True
        assert_accounted(t, ["a", "b"])


@needs_qemu
def test_a_qemu_guest_attaches_as_a_hypervisor_would(tmp_path):
    # QEMU's own vhost-user front end (a third, independent one) and the
    # guest's virtio-net driver in Debian's cloud kernel; TCG here.
    import qemu_guest  # lab/qemu_guest.py

    mac = "02:00:00:00:23:01"
    vms = [dict(name="q", kind="vhost-user", mac=mac), dict(name="c", ipv4="198.18.23.3/24", queues=1)]
    with hvlab.Topology(tmp_path, vms, prefix="vk") as t:
        rc, out = qemu_guest.run(f"/run/hvnet/{t.name}/q.sock", mac, "198.18.23.1/24",
                                 "ping -c 3 -W 5 198.18.23.3 && ping -c 2 -s 3000 -W 5 198.18.23.3")
        assert rc == 0, out
        assert "3 packets received" in out and "2 packets received" in out, out
        show = json.loads(t.hv("port", "q", "--json").stdout)["vhost_user"]
        assert show["connections"] == 1
        assert_accounted(t, ["q", "c"])


def test_a_memory_table_that_changes_under_traffic(tmp_path):
    """QEMU plugs 128 MiB into a running guest (a pc-dimm, as a hypervisor
    grows a VM) while the guest pings through hvnet: the front end sends a
    new memory table mid-traffic; hvnet maps it and forwarding goes on."""
    import qemu_guest  # lab/qemu_guest.py

    mac, peer = "02:00:00:00:24:01", "198.18.24.3"
    vms = [dict(name="q", kind="vhost-user", mac=mac), dict(name="c", ipv4=peer + "/24", queues=1)]
    with hvlab.Topology(tmp_path, vms, prefix="vm") as t:
        monitor = str(tmp_path / "qmp.sock")
        initrd = qemu_guest.initramfs(tmp_path, mac, "198.18.24.1/24", f"ping -c 80 -i 0.1 -W 5 {peer}")
        argv = qemu_guest.argv(f"/run/hvnet/{t.name}/q.sock", mac, initrd, hotplug_mb=128) \
            + ["-qmp", f"unix:{monitor},server=on,wait=off"]
        guest = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                 text=True)
        try:
            vu = lambda: json.loads(t.hv("port", "q", "--json").stdout)["vhost_user"]  # noqa: E731
            frames = lambda: t.stats("/ports/q/tx_summary")["frames"]  # noqa: E731
            # The guest's pings are flowing.
            assert hvlab.eventually(lambda: frames() >= 5, timeout=150, every=0.2), vu()
            before, tables = vu(), frames()
            qemu_guest.qmp(monitor, ("object-add", {"qom-type": "memory-backend-memfd", "id": "plug",
                                                    "size": 128 << 20, "share": True}),
                           ("device_add", {"driver": "pc-dimm", "id": "dimm", "memdev": "plug"}))
            assert hvlab.eventually(lambda: vu()["memory_tables"] > before["memory_tables"], timeout=30), vu()
            after = vu()
            assert after["memory_bytes"] == before["memory_bytes"] + (128 << 20), (before, after)
            assert after["connections"] == before["connections"] == 1
            out, _ = guest.communicate(timeout=180)
        finally:
            if guest.poll() is None:
                guest.kill()
                guest.communicate()
        rc, text = qemu_guest.output(out)
        assert rc == 0 and "80 packets received" in text, text
        assert frames() - tables >= 40, "pings went on under the new table"
        assert_accounted(t, ["q", "c"])
