"""libvirt drives hvnet as it drives Open vSwitch: a domain whose
`<interface type='vhostuser'>` has its socket in the switch's `[libvirt]
sockets` directory gets its port when `virsh start` starts it, with no
port written in the topology, and loses it when the guest stops; an
interface attached to a running guest gets one and loses it when detached;
libvirtd and hvnet restarts leave a running guest on the network; a domain
that cannot work is refused in libvirt's own error with nothing made.

Real guests (Debian's cloud kernel and its virtio-net driver; TCG here),
QEMU run by libvirt as `libvirt-qemu`, libvirt's daemons started here where
none runs (docs/guide/libvirt.md)."""

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

import hvlab
from helpers import daemon_pid, ports
import libvirt_host
from libvirt_host import domain, interface, virsh

pytestmark = [pytest.mark.root,
              pytest.mark.skipif(not libvirt_host.available(),
                                 reason="needs libvirt-daemon-system and qemu-system-x86 (scripts/install-deps.sh)")]

PEER, GUEST = "198.18.62.1", "198.18.62.2"
PEER2, GUEST2 = "198.18.63.1", "198.18.63.2"


class Guest:
    """A domain defined from the guide's XML, always destroyed and
    undefined."""

    def __init__(self, tmp: Path, gdir: Path, mac: str, cmd: str, interfaces: str, aliases=("ua-net0",),
                 metadata="", cmdline="", ip=GUEST, modules=()):
        import qemu_guest  # lab/qemu_guest.py

        self.name = hvlab.unique("hvnet-lvp")
        work = tmp / self.name
        work.mkdir()
        initrd = qemu_guest.initramfs(work, mac, ip + "/24", cmd, modules=modules)
        self.kernel = gdir / "vmlinuz"
        if not self.kernel.exists():
            shutil.copy(next((qemu_guest.kernel() / "boot").glob("vmlinuz-*")), self.kernel)
        self.initrd = gdir / f"{self.name}.cpio"
        shutil.copy(initrd, self.initrd)
        for f in (self.kernel, self.initrd):
            f.chmod(0o644)
        self.console = gdir / f"{self.name}.log"
        self.xml = tmp / f"{self.name}.xml"
        self.xml.write_text(domain(self.name, self.kernel, self.initrd, self.console, interfaces, aliases,
                                   metadata, cmdline))

    def __enter__(self):
        virsh("define", str(self.xml))
        return self

    def __exit__(self, *exc):
        virsh("destroy", self.name, check=False)
        virsh("undefine", self.name, check=False)
        return False

    def start(self):
        return virsh("start", self.name, check=False)

    def text(self) -> str:
        return self.console.read_text(errors="replace") if self.console.exists() else ""

    def wait_for(self, what: str, timeout=300):
        ok = hvlab.eventually(lambda: what in self.text() or self.state() == "shut off", timeout=timeout, every=0.5)
        assert ok and what in self.text(), (what, self.state(), self.text()[-3000:])

    def state(self) -> str:
        return virsh("domstate", self.name, check=False).stdout.strip()


def footprint(t):
    """The daemon's threads and open descriptors, and the sockets of its
    libvirt directory."""
    pid = daemon_pid(t)
    return (len(os.listdir(f"/proc/{pid}/task")), len(os.listdir(f"/proc/{pid}/fd")),
            sorted(os.listdir(sockets(t))))


def sockets(t) -> Path:
    return Path(f"/run/hvnet-libvirt/{t.name}")


@pytest.mark.parametrize("mode,ending", [("server", "destroy"), ("client", "poweroff")])
def test_a_guest_gets_its_port_as_it_starts_and_loses_it_as_it_stops(tmp_path, libvirtd, guest_dir, mode, ending):
    """`mode='server'` (QEMU listens; the switch sees the socket libvirt
    binds) and `mode='client'` (the switch listens; libvirt's `prepare`
    hook asks for the port): the port is named by `<target dev>`, has the
    interface's MAC, queue pairs and `<bandwidth>`, and goes with the guest, whether
    `virsh destroy` ends it or it powers itself off (a shutdown). Nothing
    is left: no port, socket, thread or descriptor."""
    mac = "52:54:00:62:00:02"
    cmd = f"ping -c 3 -W 5 {PEER} && echo PING-OK; " + ("sleep 3600" if ending == "destroy" else "true")
    vms = [dict(name="n1", ipv4=PEER + "/24", queues=1)]
    with hvlab.Topology(tmp_path, vms, prefix="lvp", libvirt={}) as t:
        before = footprint(t)
        nic = interface(mac, sockets(t) / "web1.sock", mode=mode, queues=2, target="web1-eth0")
        # libvirt keeps <bandwidth> on a vhost-user interface without
        # applying it; the port takes it as its rates.
        nic = nic.replace("</interface>", "<bandwidth><inbound average='125000' burst='2048'/>"
                                          "<outbound average='62500'/></bandwidth></interface>")
        with Guest(tmp_path, guest_dir, mac, cmd, nic) as g:
            r = g.start()
            assert r.returncode == 0, r.stderr
            p = ports(t)["web1-eth0"]
            assert p["mac"] == mac and p["queues"] == 2, p
            s = json.loads(t.hv("port", "web1-eth0", "--json").stdout)
            assert (s["rx_rate"], s["rx_burst"], s["tx_rate"]) == ("1gbit", "2mb", "500mbit"), s
            g.wait_for("PING-OK")
            show = json.loads(t.hv("port", "web1-eth0", "--json").stdout)["vhost_user"]
            # (A guest that powers off may be gone already.)
            assert show["connections"] >= 1 and show["mode"] == ("client" if mode == "server" else "server"), show
            if ending == "destroy":
                virsh("destroy", g.name)
            else:
                assert hvlab.eventually(lambda: g.state() == "shut off", timeout=120, every=0.5), g.text()[-2000:]
            gone = lambda: "web1-eth0" not in ports(t) and footprint(t) == before  # noqa: E731
            assert hvlab.eventually(gone, timeout=30, every=0.2), (ports(t), footprint(t), before)
        log = Path(f"/run/hvnet/{t.name}/daemon.log").read_text()
        assert "libvirt: " in log and "port removed" in log or "guest released" in log, log[-3000:]


def test_an_interface_attached_to_a_running_guest_gets_a_port_and_loses_it_when_detached(
        tmp_path, libvirtd, guest_dir):
    """`virsh attach-device --live` of a vhost-user interface with
    `mode='server'`: QEMU binds its socket in the switch's directory and
    waits; the switch finds the interface in libvirt and connects; the
    guest brings the new NIC up and pings through it. `detach-device
    --live` takes the port away."""
    mac, mac2 = "52:54:00:62:00:02", "52:54:00:63:00:02"
    cmd = (f"ping -c 2 -W 5 {PEER} && echo PING0-OK; "
           "n=0; while [ ! -e /sys/class/net/eth1 ] && [ $n -lt 3000 ]; do sleep 0.1; n=$((n+1)); done; "
           f"ip link set eth1 address {mac2} up; ip addr add {GUEST2}/24 dev eth1; "
           f"ping -c 3 -W 5 {PEER2} && echo PING1-OK; sleep 3600")
    vms = [dict(name="n1", ipv4=PEER + "/24", queues=1), dict(name="n2", ipv4=PEER2 + "/24", queues=1)]
    with hvlab.Topology(tmp_path, vms, prefix="lvh", libvirt={}) as t:
        nic = interface(mac, sockets(t) / "db1.sock", target="db1-eth0")
        # libvirt applies <qemu:override> (vectors=0, which QEMU 7.2 under
        # TCG needs with MSI-X: REFERENCE.md) to the command line only,
        # not to a device hot-plugged: the guest's driver is kept from
        # MSI-X instead (pci=nomsi).
        with Guest(tmp_path, guest_dir, mac, cmd, nic, cmdline="pci=nomsi") as g:
            assert g.start().returncode == 0
            g.wait_for("PING0-OK")
            before = footprint(t)
            hot = tmp_path / "nic.xml"
            hot.write_text(interface(mac2, sockets(t) / "db1-1.sock", alias="ua-net1"))
            r = virsh("attach-device", g.name, str(hot), "--live", check=False)
            assert r.returncode == 0, r.stderr
            # Hot-plugged live only: no `<target dev>` in the domain's
            # configuration, so the socket names the port.
            assert ports(t)["db1-1"]["mac"] == mac2
            g.wait_for("PING1-OK")
            r = virsh("detach-device", g.name, str(hot), "--live", check=False)
            assert r.returncode == 0, r.stderr
            assert hvlab.eventually(lambda: "db1-1" not in ports(t), timeout=60, every=0.2), ports(t)
            assert "db1-eth0" in ports(t)
            assert hvlab.eventually(lambda: footprint(t) == before, timeout=10, every=0.2), (footprint(t), before)


def test_libvirtd_and_hvnet_restarts_leave_a_running_guest_on_the_network(tmp_path, libvirtd, guest_dir):
    """The guest pings every 0.1 s throughout: libvirtd restarted (its
    guests run on); the topology file applied again to the running switch
    (which leaves libvirt's guests' ports alone); then the switch's daemon
    stopped and `hvnet up` again (it re-attaches to the port libvirt's
    guest got, and connects to the socket QEMU still listens on). Pings
    answered after each."""
    if not libvirtd.ours:
        pytest.skip("a libvirtd this test did not start runs; it is not the test's to restart")
    mac = "52:54:00:62:00:02"
    vms = [dict(name="n1", ipv4=PEER + "/24", queues=1)]
    with hvlab.Topology(tmp_path, vms, prefix="lvr", libvirt={}) as t:
        nic = interface(mac, sockets(t) / "app1.sock", target="app1-eth0")
        with Guest(tmp_path, guest_dir, mac, f"ping -i 0.1 -W 1 {PEER}", nic) as g:
            assert g.start().returncode == 0
            replies = lambda: [int(s) for s in re.findall(r"seq=(\d+) ttl", g.text())]  # noqa: E731
            assert hvlab.eventually(lambda: len(replies()) > 5, timeout=300, every=0.5), g.text()[-2000:]
            libvirtd.restart_libvirtd()
            mark = max(replies())
            assert hvlab.eventually(lambda: max(replies()) > mark + 10, timeout=30, every=0.2), g.text()[-2000:]
            assert "app1-eth0" in ports(t)
            # `hvnet up FILE` on the running switch (the file has no such
            # port): libvirt's guest's port is libvirt's, and stays.
            hvlab.hvnet("up", t.file)
            assert "app1-eth0" in ports(t)
            # The port says whose it is (the domain, its UUID, the
            # interface's alias), as Open vSwitch's external_ids.
            ids = ports(t)["app1-eth0"]["external_ids"]
            uuid = virsh("domuuid", g.name).stdout.strip()
            assert ids == {"domain": g.name, "domain_uuid": uuid, "interface": "ua-net0"}, ids
            # A run-time change to libvirt's port outlives the switch's
            # restart (its XML set neither).
            t.hv("port", "app1-eth0", "set", "rx_rate=300mbit", "tx_rate=100mbit")
            os.kill(daemon_pid(t), signal.SIGTERM)
            assert hvlab.eventually(lambda: not Path(f"/run/hvnet/{t.name}/ctl.sock").exists(), timeout=30)
            hvlab.hvnet("up", t.file)
            mark = max(replies())
            assert hvlab.eventually(lambda: max(replies()) > mark + 10, timeout=60, every=0.2), g.text()[-2000:]
            assert ports(t)["app1-eth0"]["mac"] == mac
            kept = json.loads(t.hv("port", "app1-eth0", "--json").stdout)
            assert (kept["rx_rate"], kept["tx_rate"]) == ("300mbit", "100mbit"), kept
            assert kept["sources"]["rx_rate"] == "run-time" and kept["sources"]["ring1"] == "default", kept
            assert kept["external_ids"]["domain"] == g.name
            assert g.state() == "running"
            # A port removed by hand is not made again while its guest runs
            # on (as `ovs-vsctl del-port`).
            t.hv("vm", "del", "app1-eth0")
            log = Path(f"/run/hvnet/{t.name}/daemon.log")
            assert hvlab.eventually(lambda: "port removed by hand" in log.read_text(), timeout=10), log.read_text()[-2000:]
            assert "app1-eth0" not in ports(t)
            # ... nor by a restarted switch (the dismissal is in the state).
            state = Path(f"/run/hvnet/{t.name}/state.json")
            assert hvlab.eventually(lambda: json.loads(state.read_text())["dismissed_sockets"], timeout=10)
            os.kill(daemon_pid(t), signal.SIGTERM)
            assert hvlab.eventually(lambda: not Path(f"/run/hvnet/{t.name}/ctl.sock").exists(), timeout=30)
            hvlab.hvnet("up", t.file)
            # (A negative: the directory is looked at ten times a second.)
            time.sleep(3)
            assert "app1-eth0" not in ports(t)
            assert g.state() == "running"


def test_a_domain_that_cannot_work_is_refused_in_libvirts_error_and_nothing_is_made(
        tmp_path, libvirtd, guest_dir):
    """libvirt's `prepare` hook hands the domain to the switch before
    anything is made: a socket outside hvnet's directories (for an
    interface hvnet's metadata claims), a VLAN out of range, a MAC another
    port has — each refused with the reason in `virsh start`'s error and
    the daemon's log; no port, no socket."""
    vms = [dict(name="n1", ipv4=PEER + "/24", queues=1, mac="52:54:00:62:00:01")]
    meta = ("<hvnet:ports xmlns:hvnet='urn:hvnet:libvirt:1'><hvnet:port mac='{mac}'>{vlan}"
            "</hvnet:port></hvnet:ports>")
    with hvlab.Topology(tmp_path, vms, prefix="lvb", libvirt={}) as t:
        before = (sorted(ports(t)), footprint(t))
        cases = [
            ("52:54:00:62:00:02", guest_dir / "elsewhere.sock", "", "outside hvnet's directories"),
            ("52:54:00:62:00:03", sockets(t) / "v.sock", "<hvnet:vlan><hvnet:tag id='5000'/></hvnet:vlan>",
             "outside 1..4094"),
            ("52:54:00:62:00:01", sockets(t) / "dup.sock", "", "is VM n1's"),
        ]
        for mac, sock, vlan, why in cases:
            nic = interface(mac, sock, mode="client")
            with Guest(tmp_path, guest_dir, mac, "true", nic, metadata=meta.format(mac=mac, vlan=vlan)) as g:
                r = g.start()
                assert r.returncode != 0 and why in r.stderr, (why, r.stderr)
                assert g.state() == "shut off"
                assert (sorted(ports(t)), footprint(t)) == before
        log = Path(f"/run/hvnet/{t.name}/daemon.log").read_text()
        assert "outside 1..4094" in log and "is VM n1's" in log, log[-3000:]


def test_virsh_migrate_live_moves_the_port_to_the_destinations_switch(tmp_path, libvirtd, guest_dir):
    """Two hvnet hosts on this machine (their uplinks the ends of one veth
    pair; the second host's libvirtd in a mount namespace of its own):
    `virsh migrate --live` of a guest pinged every 10 ms. The destination
    switch's port exists before the destination's QEMU needs it (libvirt
    binds the socket in its directory), the source's goes after the guest
    has left, and the pings go on (the first switch learns the guest behind
    its uplink from the guest's announcement)."""
    from hvnet_lab.migration import veth_pair

    mac = "52:54:00:64:00:02"
    second = libvirt_host.SecondHost(tmp_path / "host-b")
    wire_a, wire_b = veth_pair("lvm")
    try:
        with hvlab.Topology(tmp_path, [dict(name="c", ipv4=PEER + "/24", queues=1)], prefix="lvma", libvirt={},
                            uplinks=[dict(name="up0", device=wire_a, queues=1)]) as a, \
             hvlab.Topology(tmp_path, [], prefix="lvmb", libvirt={"uri": second.uri},
                            uplinks=[dict(name="up0", device=wire_b, queues=1)]) as b:
            nic = interface(mac, sockets(a) / "mig1.sock", target="mig1-eth0")
            with Guest(tmp_path, guest_dir, mac, "sleep 3600", nic) as g:
                assert g.start().returncode == 0
                reaches = lambda: a.sh("c", f"ping -c 1 -W 1 {GUEST}", check=False).returncode == 0  # noqa: E731
                assert hvlab.eventually(reaches, timeout=300, every=0.2), g.text()[-2000:]
                there = tmp_path / "destination.xml"
                there.write_text(virsh("dumpxml", "--migratable", g.name).stdout
                                 .replace(str(sockets(a)), str(sockets(b))))
                ping = a.popen("c", f"ping -q -i 0.01 {GUEST}", stdout=subprocess.PIPE, text=True)
                try:
                    r = libvirt_host.migrate(g.name, second, there)
                    assert r.returncode == 0, r.stderr
                    assert second.virsh("domstate", g.name).stdout.strip() == "running"
                    assert hvlab.eventually(lambda: "mig1-eth0" not in ports(a), timeout=30, every=0.2), ports(a)
                    assert [p["mac"] for p in ports(b).values() if p["type"] == "vhost-user"] == [mac]
                    assert hvlab.eventually(reaches, timeout=30, every=0.2)
                finally:
                    ping.send_signal(signal.SIGINT)
                    out = ping.communicate(timeout=30)[0]
                    second.virsh("destroy", g.name, check=False)
                m = re.search(r"(\d+) packets transmitted, (\d+) received", out)
                assert m and int(m.group(2)) > 0, out
                print(f"pings lost during virsh migrate: {int(m.group(1)) - int(m.group(2))} of {m.group(1)}")
            assert hvlab.eventually(lambda: not any(p["type"] == "vhost-user" for p in ports(b).values()),
                                    timeout=30, every=0.2), ports(b)
    finally:
        hvlab.run(["ip", "link", "del", wire_a], check=False)
        second.stop()


TRUNK = ("<hvnet:ports xmlns:hvnet='urn:hvnet:libvirt:1'><hvnet:port mac='{mac}'><hvnet:vlan trunk='yes'>"
         "<hvnet:tag id='10'/><hvnet:tag id='20'/><hvnet:tag id='1' nativeMode='untagged'/>"
         "</hvnet:vlan></hvnet:port></hvnet:ports>")


def test_guests_tag_their_own_traffic_on_trunk_ports_from_the_domains_metadata(tmp_path, libvirtd, guest_dir):
    """Virtual guest tagging: two guests whose ports are trunks of VLANs
    10 and 20 with native VLAN 1 (hvnet's metadata in their domains, as
    libvirt's `<vlan>` writes it), each with an 802.1Q sub-interface made
    by its own kernel (`ip link add link eth0 name eth0.10 type vlan id
    10`). A SHA-256-checked file crosses VLAN 10 from one guest to the
    other in GSO frames (TSO at the sender, delivered whole: the
    receiving port's average frame is larger than the wire's); a namespace
    VM on an access port of VLAN 10 answers the guest untagged; the guests
    still reach each other untagged (the native VLAN); a VLAN the trunk
    does not carry (30) is dropped and counted."""
    import qemu_guest

    macs = {"a": "52:54:00:66:00:0a", "b": "52:54:00:66:00:0b"}
    vlan_ip = {"a": "198.18.66.2", "b": "198.18.66.3"}
    sub = ("ip link add link eth0 name eth0.{vid} type vlan id {vid} && ip addr add {ip}/24 dev eth0.{vid} && "
           "ip link set eth0.{vid} up")
    b_cmd = (sub.format(vid=10, ip=vlan_ip["b"]) + " && nc -l -p 5555 | sha256sum && echo B-DONE; sleep 3600")
    a_cmd = (sub.format(vid=10, ip=vlan_ip["a"]) + " && " + sub.format(vid=30, ip="198.18.67.2")
             + f" && until ping -c 1 -W 1 {vlan_ip['b']} > /dev/null; do :; done"
             + " && head -c 20000000 /dev/urandom > /tmp/f && sha256sum /tmp/f"
             + f" && nc -w 5 {vlan_ip['b']} 5555 < /tmp/f"
             + " && ping -c 3 -W 5 198.18.66.1 && echo ACCESS-OK"
             + " && ping -c 3 -W 5 198.18.62.3 && echo NATIVE-OK"
             + "; ping -c 3 -W 1 198.18.67.3; echo A-DONE; sleep 3600")
    vms = [dict(name="n10", ipv4="198.18.66.1/24", queues=1, vlan=10)]
    with hvlab.Topology(tmp_path, vms, prefix="lvt", libvirt={}) as t:
        guests = {}
        with contextlib.ExitStack() as stack:
            for g, cmd, ip in (("b", b_cmd, "198.18.62.3"), ("a", a_cmd, GUEST)):
                nic = interface(macs[g], sockets(t) / f"{g}.sock", target=f"trunk-{g}")
                guests[g] = stack.enter_context(Guest(tmp_path, guest_dir, macs[g], cmd, nic, ip=ip,
                                                      metadata=TRUNK.format(mac=macs[g]),
                                                      modules=qemu_guest.VLAN_MODULES))
                assert guests[g].start().returncode == 0
            show = json.loads(t.hv("port", "trunk-a", "--json").stdout)
            assert show["vlan_mode"] == "trunk" and show["native_vlan"] == 1, show
            guests["a"].wait_for("A-DONE")
            guests["b"].wait_for("B-DONE")
            a_out, b_out = guests["a"].text(), guests["b"].text()
            sent = re.search(r"([0-9a-f]{64})  /tmp/f", a_out)
            assert sent and f"{sent.group(1)}  -" in b_out, (a_out[-2000:], b_out[-2000:])
            assert "ACCESS-OK" in a_out and "NATIVE-OK" in a_out, a_out[-2000:]
            rx = t.stats("/ports/trunk-b/rx_summary")
            assert rx["avg_frame_bytes"] > 1518, rx  # GSO frames whole, tag and all
            tx = t.stats("/ports/trunk-a/tx_summary")
            assert tx["drop_vlan_not_allowed"] >= 3, tx  # VLAN 30: ARP requests at least
