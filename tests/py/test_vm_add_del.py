"""VMs added and removed while the switch runs (`hvnet vm add|del`), with
traffic between two other VMs that must not notice; and the datapath's
fixed pool of workers (`[switch] cpus`, `hvnet workers`)."""

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest

import hvlab
import helpers
from helpers import daemon_pid, vm

pytestmark = pytest.mark.root

XFER = Path(__file__).with_name("xfer.py")


def ports(t):
    return helpers.ports(t, key="client")


def test_vms_come_and_go_under_traffic_and_the_others_lose_nothing(tmp_path):
    data = tmp_path / "data"
    data.write_bytes(os.urandom(24 << 20))
    want = hashlib.sha256(data.read_bytes()).hexdigest()
    with hvlab.Topology(tmp_path, [vm("a", "10.77.0.1", queues=1), vm("b", "10.77.0.2", queues=1)], prefix="va") as t:
        server = t.popen("b", f"{os.sys.executable} {XFER} serve 10.77.0.2 5555", stdout=hvlab.subprocess.PIPE, text=True)
        hvlab.wait_listening(t.ns("b"), 5555)
        # Paced, so that the stream runs through all the churn.
        sender = t.popen("a", f"{os.sys.executable} {XFER} paced 10.77.0.2 5555 {data} {8 << 20}")
        for i in range(12):
            name, ip = f"n{i}", f"10.77.0.{10 + i}"
            out = json.loads(t.hv("vm", "add", name, f"ipv4={ip}/24", "queues=1", "--json").stdout)
            assert out["vm"] == name and out["kind"] == "netns", out
            # Reachable at once: the first ping is answered.
            t.sh("a", f"ping -c 1 -W 5 {ip}")
            if i >= 2:
                gone = f"n{i - 2}"
                t.hv("vm", "del", gone)
                assert gone not in ports(t)
                assert not Path(f"/run/netns/{t.ns(gone)}").exists()
        sender.wait(timeout=120)
        digest, n = server.communicate(timeout=60)[0].split()
        assert (digest, int(n)) == (want, 24 << 20)
        assert sorted(ports(t)) == ["a", "b", "n10", "n11"]
        for p in ["a", "b"]:
            acc = t.stats(f"/ports/{p}/accounting")
            assert acc["ingress"]["balanced"], acc
            assert acc["ingress"]["drops"] == 0 and acc["egress"]["drops"] == 0, acc
        # Refused with the setting named; nothing changes.
        r = t.hv("vm", "add", "bad", "ipv4=10.77.0.99/24", "mtu=99999", check=False)
        assert r.returncode != 0 and "mtu=99999" in r.stderr, r.stderr
        r = t.hv("vm", "add", "a", "ipv4=10.77.0.98/24", check=False)
        assert r.returncode != 0 and "runs already" in r.stderr, r.stderr
        r = t.hv("vm", "del", "nope", check=False)
        assert r.returncode != 0 and "no VM named" in r.stderr, r.stderr
        assert sorted(ports(t)) == ["a", "b", "n10", "n11"]
        # A file VM removed, and a daemon restart keeps what runs now.
        t.hv("vm", "del", "a")
        os.kill(daemon_pid(t), 15)
        assert hvlab.eventually(lambda: not Path(f"/run/hvnet/{t.name}/ctl.sock").exists(), timeout=10)
        up = hvlab.hvnet("up", t.file).stdout
        assert sorted(ports(t)) == ["b", "n10", "n11"]
        # It says what it re-attached to: what ran, not only the file.
        assert "re-attached to its 3 VMs" in up and "n10" in up and "  a " not in up, up
        t.sh("n10", "ping -c 1 -W 5 10.77.0.2")
    for i in range(12):
        assert not Path(f"/run/netns/{t.ns(f'n{i}')}").exists()


def test_a_vhost_user_port_comes_and_goes(tmp_path):
    with hvlab.Topology(tmp_path, [vm("a", "10.78.0.1")], prefix="vv") as t:
        t.hv("vm", "add", "g", "kind=vhost-user", "mac=02:00:00:00:78:0a")
        sock = Path(f"/run/hvnet/{t.name}/g.sock")
        assert sock.exists()
        assert ports(t)["g"]["type"].startswith("vhost-user")
        t.hv("vm", "del", "g")
        assert not sock.exists()
        assert "g" not in ports(t)


def test_a_fixed_pool_of_workers_whatever_the_ports(tmp_path):
    cpu = sorted(os.sched_getaffinity(0))[0]
    vms = [vm(f"v{i}", f"10.79.0.{i + 1}", queues=2) for i in range(12)]
    with hvlab.Topology(tmp_path, vms, prefix="vw", switch={"cpus": f"{cpu}"}) as t:
        workers = json.loads(t.hv("workers", "--json").stdout)
        assert [w["cpu"] for w in workers] == [cpu]
        owned = sorted((q["port"], q["queue"]) for q in workers[0]["queues"])
        assert owned == sorted((f"v{i}", q) for i in range(12) for q in range(2))
        tasks = os.listdir(f"/proc/{daemon_pid(t)}/task")
        # One worker, and a few threads of the control plane; none per port.
        assert len(tasks) <= 1 + 6, len(tasks)
        names = {Path(f"/proc/{daemon_pid(t)}/task/{x}/comm").read_text().strip() for x in tasks}
        assert "worker0" in names and not any(n.endswith("_q0") or n.endswith("_rx0") for n in names), names
        t.sh("v0", "ping -c 2 -i 0.2 -W 2 10.79.0.12")
        out = t.hv("workers").stdout
        assert "worker0 (cpu" in out and "port v0" in out


def test_up_of_an_edited_file_applies_the_difference(tmp_path):
    t = hvlab.Topology(tmp_path, [vm("a", "10.76.0.1")], prefix="vf")
    table = '[[vm]]\nname = "{}"\nipv4 = "10.76.0.{}/24"\nqueues = 1\n'
    base = f'name = "{t.name}"\n\n' + table.format("a", 1) + "\n" + table.format("b", 2)
    more = base + "\n" + table.format("c", 3) + "lro = false\n"
    t.file.write_text(base)
    with t:
        pid = daemon_pid(t)
        t.file.write_text(more)
        out = json.loads(hvlab.hvnet("up", "--json", t.file).stdout)
        assert out["applied"]["added"] == ["c"] and out["applied"]["removed"] == [], out
        assert daemon_pid(t) == pid, "the same daemon: nothing restarted"
        t.sh("c", "ping -c 1 -W 5 10.76.0.1")
        # A kept VM's port setting changes; a change beyond them, or to
        # another section, is refused before anything changes.
        t.file.write_text(more.replace("lro = false", "lro = true"))
        out = json.loads(hvlab.hvnet("up", "--json", t.file).stdout)
        assert out["applied"]["changed"] == ["c"], out
        assert json.loads(t.hv("port", "c", "--json").stdout)["lro"] is True
        for bad, why in [(more.replace('"10.76.0.3/24"', '"10.76.0.9/24"'), "changed beyond its port settings"),
                         (more.replace("\n\n", "\nfdb_aging_secs = 7\n\n", 1), "fdb_aging_secs differs"),
                         (more + "\n" + table.format("d", 4) + "mtu = 99999\n", "99999")]:
            t.file.write_text(bad)
            r = hvlab.hvnet("up", t.file, check=False)
            assert r.returncode != 0 and why in r.stderr, r.stderr
            assert sorted(ports(t)) == ["a", "b", "c"]
        # The file without c: c goes, the others stay.
        t.file.write_text(base)
        out = json.loads(hvlab.hvnet("up", "--json", t.file).stdout)
        assert out["applied"]["removed"] == ["c"], out
        assert sorted(ports(t)) == ["a", "b"]
        assert not Path(f"/run/netns/{t.ns('c')}").exists()
        t.sh("a", "ping -c 1 -W 5 10.76.0.2")


@pytest.mark.parametrize("kind", [
    pytest.param("uml", marks=pytest.mark.skipif(not os.path.exists("/usr/bin/linux.uml"),
                                                 reason="needs user-mode-linux (scripts/install-deps.sh)")),
    pytest.param("qemu", marks=pytest.mark.skipif(not shutil.which("qemu-system-x86_64"),
                                                  reason="needs qemu-system-x86 (scripts/install-deps.sh)")),
])
def test_a_real_guest_comes_and_goes(tmp_path, kind):
    with hvlab.Topology(tmp_path, [vm("a", "10.75.0.1", queues=1)], prefix="vg") as t:
        out = json.loads(t.hv("vm", "add", "g", f"kind={kind}", "ipv4=10.75.0.2/24", "--json").stdout)
        assert out["kind"] == kind and out["pid"] > 0, out
        t.sh("a", "ping -c 2 -i 0.2 -W 5 10.75.0.2")
        assert "10.75.0.2" in hvlab.hvnet("exec", "-t", t.name, "g", "--", "ip", "-br", "addr").stdout
        t.hv("vm", "del", "g")
        assert "g" not in ports(t)
        assert not Path(f"/proc/{out['pid']}").exists() or hvlab.eventually(
            lambda: not Path(f"/proc/{out['pid']}").exists(), timeout=20)
