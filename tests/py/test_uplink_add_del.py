"""Uplinks added and removed while the switch runs (`hvnet up FILE` of an
edited file), as `ovs-vsctl add-port`/`del-port` of a physical NIC: the
uplink's device is a veth whose other end is in a namespace this test
makes (an external host, 198.18.9.0/24), and two other VMs talk through
all of it and must not notice."""

import hashlib
import json
import os
from pathlib import Path

import pytest

import hvlab
from helpers import daemon_pid, ports

pytestmark = pytest.mark.root

XFER = Path(__file__).with_name("xfer.py")
EXT_IP = "198.18.9.100"


def threads(pid):
    """The names of a process's threads."""
    names = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            names.append((task / "comm").read_text().strip())
        except FileNotFoundError:
            pass
    return names


def apply(t, text):
    t.file.write_text(text)
    return json.loads(hvlab.hvnet("up", "--json", t.file).stdout)["applied"]


def uplink(dev):
    return f'\n[[uplink]]\nname = "up0"\ndevice = "{dev}"\nqueues = 3\nlro = "off"\nnetqueue = "static"\n'


def test_an_uplink_comes_and_goes_and_the_other_vms_lose_nothing(tmp_path):
    data = tmp_path / "data"
    data.write_bytes(os.urandom(16 << 20))
    want = hashlib.sha256(data.read_bytes()).hexdigest()
    vms = [dict(name=n, ipv4=f"198.18.9.{i + 1}/24", queues=1) for i, n in enumerate("abc")]
    dev = hvlab.unique("hvu")
    with hvlab.Netns("uax") as ext:
        try:
            # The external host: the far end of the uplink's wire.
            hvlab.run(["ip", "link", "add", dev, "type", "veth", "peer", "name", "eth0", "netns", ext.name])
            hvlab.run(["sysctl", "-qw", f"net.ipv6.conf.{dev}.disable_ipv6=1"])
            ext.sh(f"ip addr add {EXT_IP}/24 dev eth0 && ip link set eth0 up")
            with hvlab.Topology(tmp_path, vms, prefix="ua") as t:
                changes_under_traffic(t, ext, dev, data, want)
        finally:
            # After the topology is down: no daemon holds it any more.
            hvlab.run(["ip", "link", "del", dev], check=False)


def changes_under_traffic(t, ext, dev, data, want):
    """The changes, under traffic between b and c."""
    base = t.file.read_text()
    more = base + uplink(dev)
    pid = daemon_pid(t)
    # b streams to c, and pings it, through every change.
    server = t.popen("c", f"{os.sys.executable} {XFER} serve 198.18.9.3 5555",
                     stdout=hvlab.subprocess.PIPE, text=True)
    t.wait_listening("c", 5555)
    sender = t.popen("b", f"{os.sys.executable} {XFER} paced 198.18.9.3 5555 {data} {4 << 20}")
    pings = t.popen("b", "ping -c 150 -i 0.02 -W 2 198.18.9.3", stdout=hvlab.subprocess.PIPE, text=True)

    out = apply(t, more)
    assert out["uplinks_added"] == ["up0"] and out["added"] == [] and out["removed"] == [], out
    assert daemon_pid(t) == pid, "the same daemon: nothing restarted"
    p = ports(t)
    assert p["up0"]["type"] == "uplink+af_packet" and p["up0"]["client"] == dev, p["up0"]
    # Its NetQueue filters, for every VM of its VLAN, as at `hvnet up`.
    f = t.stats("/uplinks/up0/filters")
    assert f["spread"] == "netqueue", f
    assert {e["mac"] for e in f["filters"]} == {p[n]["mac"] for n in "abc"}, f
    t.sh("a", f"ping -c 1 -W 5 {EXT_IP}")
    ext.sh("ping -c 1 -W 5 198.18.9.1")

    # Refused before anything changes: a device that is not there.
    bad = base + uplink(dev).replace(dev, hvlab.unique("hvn"))
    t.file.write_text(bad.replace('"up0"', '"up1"'))
    r = hvlab.hvnet("up", t.file, check=False)
    assert r.returncode != 0 and "no network interface named" in r.stderr, r.stderr
    assert sorted(ports(t)) == ["a", "b", "c", "up0"]

    # The file without it: the port goes, its device stays.
    out = apply(t, base)
    assert out["uplinks_removed"] == ["up0"] and out["uplinks"] == 0, out
    assert sorted(ports(t)) == ["a", "b", "c"]
    assert Path(f"/sys/class/net/{dev}").exists()
    fdb = json.loads(t.hv("fdb", "--json").stdout)
    assert not any(r["port"] == p["up0"]["port"] for r in fdb), fdb
    t.sh("a", "ping -c 1 -W 5 198.18.9.2")
    r = t.sh("a", f"ping -c 1 -W 1 {EXT_IP}", check=False)
    assert r.returncode != 0, "the external host is off the switch"

    sender.wait(timeout=120)
    digest, n = server.communicate(timeout=60)[0].split()
    assert (digest, int(n)) == (want, 16 << 20)
    summary = pings.communicate(timeout=60)[0]
    assert " 0% packet loss" in summary, summary
    for v in ["b", "c"]:
        acc = t.stats(f"/ports/{v}/accounting")
        assert acc["ingress"]["balanced"], acc
        assert acc["ingress"]["drops"] == 0 and acc["egress"]["drops"] == 0, acc

    # Added again, with Dynamic NetQueue (its balancer started with it),
    # it outlives a daemon restart, as VMs added do.
    dynamic = base + uplink(dev).replace('"static"', '"dynamic"')
    assert apply(t, dynamic)["uplinks_added"] == ["up0"]
    f = t.stats("/uplinks/up0/filters")
    assert f["balancer"]["mode"] == "dynamic", f
    assert {e["mac"] for e in f["filters"]} == {p[n]["mac"] for n in "abc"}, f
    os.kill(daemon_pid(t), 15)
    assert hvlab.eventually(lambda: not Path(f"/run/hvnet/{t.name}/ctl.sock").exists(), timeout=10)
    hvlab.hvnet("up", t.file)
    assert sorted(ports(t)) == ["a", "b", "c", "up0"]
    # The first echo after the re-attach is sometimes lost (in about one
    # run in three of this test, on builds before issue 42's too; not
    # understood yet): the path must come back, within seconds.
    assert hvlab.eventually(lambda: t.sh("a", f"ping -c 1 -W 1 {EXT_IP}", check=False).returncode == 0,
                            timeout=15)
    # Removed once more, its balancer's thread ends with it.
    assert apply(t, base)["uplinks_removed"] == ["up0"]
    assert "up0" not in ports(t)
    assert hvlab.eventually(lambda: "up0_balancer" not in threads(daemon_pid(t)), timeout=10)
    t.sh("a", "ping -c 1 -W 5 198.18.9.3")
