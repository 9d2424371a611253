"""hvnet run as a service: signals stop the daemon cleanly, a restarted
daemon re-attaches to its VMs without them losing their NICs, the control
plane deletes only what it created, `up`/`down` of one topology do not
race, and the control socket keeps answering while a client floods or
stalls it."""

import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import threading
import time
from pathlib import Path

import pytest

import hvlab
from helpers import daemon_pid, vm

pytestmark = pytest.mark.root


def state(t):
    return json.loads(Path(f"/run/hvnet/{t.name}/state.json").read_text())


def test_sigterm_stops_the_daemon_and_up_reattaches_without_the_vms_losing_their_nics(tmp_path):
    with hvlab.Topology(tmp_path, [vm("a", "198.18.71.1"), vm("b", "198.18.71.2")]) as t:
        t.sh("a", "ping -c 1 -W 2 198.18.71.2")
        mac_before = t.sh("a", "cat /sys/class/net/eth0/address").stdout
        # A ping that runs across the restart: 0.1 s apart, 15 s at most.
        ping = t.popen("a", "ping -i 0.1 -w 15 198.18.71.2", stdout=subprocess.PIPE, text=True)
        hvlab.eventually(lambda: t.stats("/ports/a/tx_summary")["frames"] >= 3)
        pid = daemon_pid(t)
        os.kill(pid, signal.SIGTERM)
        hvlab.eventually(lambda: not Path(f"/proc/{pid}").exists(), timeout=10)
        s = state(t)
        assert s["pid"] == 0 and not s["ready"], s
        assert not Path(f"/run/hvnet/{t.name}/ctl.sock").exists()
        log = Path(f"/run/hvnet/{t.name}/daemon.log").read_text()
        assert "signal received: stopping" in log and "stopped" in log, log
        # The VMs keep their NICs and addresses while no daemon runs.
        addr = t.sh("a", "ip -br addr show eth0").stdout
        assert "198.18.71.1/24" in addr, addr
        r = t.hv("ports", check=False)
        assert r.returncode == 1 and "re-attaches" in r.stderr, r.stderr
        up = hvlab.hvnet("up", t.file)
        assert "re-attached" in up.stdout, up.stdout
        assert t.sh("a", "cat /sys/class/net/eth0/address").stdout == mac_before
        t.sh("a", "ping -c 2 -i 0.2 -W 2 198.18.71.2")
        # Counters start from zero with the new daemon, and it says so.
        assert "counters start again from zero" in Path(f"/run/hvnet/{t.name}/daemon.log").read_text()
        out, _ = ping.communicate(timeout=30)
        seqs = [int(w.split("=")[1]) for line in out.splitlines() for w in line.split() if w.startswith("icmp_seq=")]
        assert seqs and max(seqs) > 30, out  # answered after the restart too
        assert state(t)["restarts"] == 1
        # A re-attached VM that disappears (its namespace deleted) takes its
        # port down, as a fresh one does; the switch goes on for the others.
        hvlab.run(["ip", "netns", "del", t.ns("b")])

        def link(name):
            ports = json.loads(t.hv("ports", "--json").stdout)
            return next(p["link"] for p in ports if p["name"] == name)
        hvlab.eventually(lambda: link("b") != "up", timeout=10)
        assert link("a") == "up"
        hvlab.eventually(lambda: "the VM's namespace was deleted" in Path(f"/run/hvnet/{t.name}/daemon.log").read_text())


def running(pid) -> bool:
    """The process exists and is not a zombie (init reaps a guest whose
    daemon is gone in its own time)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def uptime(t, vm) -> float:
    return float(t.sh(vm, "cut -d' ' -f1 /proc/uptime").stdout)


@pytest.mark.skipif(not shutil.which("qemu-system-x86_64"), reason="needs qemu-system-x86 (scripts/install-deps.sh)")
def test_a_stopped_or_killed_daemon_leaves_its_qemu_guests_running_and_takes_them_over(tmp_path):
    """A switch restart does not reboot the guests hvnet started: QEMU runs
    on while no daemon does (its NIC's socket reconnects each second), and
    `hvnet up` takes it over; `down` still ends it."""
    with hvlab.Topology(tmp_path, [vm("q", "198.18.72.1", kind="qemu"), vm("c", "198.18.72.3")]) as t:
        t.sh("c", "ping -c 1 -W 5 198.18.72.1")
        qemu = state(t)["kept_guests"][0]["pid"]
        for sig in (signal.SIGTERM, signal.SIGKILL):
            before = uptime(t, "q")
            pid = daemon_pid(t)
            os.kill(pid, sig)
            hvlab.eventually(lambda: not Path(f"/proc/{pid}").exists(), timeout=10)
            assert running(qemu), f"QEMU ran on after {sig.name}"
            up = hvlab.hvnet("up", t.file)
            ready = time.monotonic()
            assert "re-attached" in up.stdout, up.stdout
            assert "QEMU guest kept running: taken over" in Path(f"/run/hvnet/{t.name}/daemon.log").read_text()
            # Pings resume once QEMU's NIC has reconnected.
            assert hvlab.eventually(lambda: t.sh("c", "ping -c 1 -W 1 198.18.72.1", check=False).returncode == 0,
                                    timeout=30, every=0.05)
            print(f"{sig.name}: pings resumed {time.monotonic() - ready:.2f} s after the daemon was ready")
            assert uptime(t, "q") > before, "not rebooted"
            assert state(t)["kept_guests"][0]["pid"] == qemu
    assert not running(qemu), "down ends the guest"


def test_daemon_in_the_foreground_exits_0_on_sigterm_and_sigint(tmp_path):
    for sig in (signal.SIGTERM, signal.SIGINT):
        t = hvlab.Topology(tmp_path, [vm("a", "198.18.72.1"), vm("b", "198.18.72.2")])
        try:
            # As a service manager runs it: `hvnet daemon FILE`, logging to stderr.
            d = subprocess.Popen([hvlab.hvnet_bin(), "daemon", str(t.file)], stderr=subprocess.PIPE, text=True)
            hvlab.eventually(lambda: Path(f"/run/hvnet/{t.name}/state.json").exists() and state(t)["ready"], timeout=30)
            t.sh("a", "ping -c 1 -W 2 198.18.72.2")
            d.send_signal(sig)
            _, err = d.communicate(timeout=20)
            assert d.returncode == 0, err
            assert "topology up" in err and "stopped" in err, err
        finally:
            t.__exit__(None, None, None)
        assert t.ns("a") not in hvlab.run(["ip", "netns", "list"]).stdout


def test_down_leaves_a_namespace_it_did_not_create(tmp_path):
    t = hvlab.Topology(tmp_path, [vm("a", "198.18.73.1"), vm("b", "198.18.73.2")])
    foreign = None
    try:
        with t:
            pid = daemon_pid(t)
            os.kill(pid, signal.SIGKILL)
            hvlab.eventually(lambda: not Path(f"/proc/{pid}").exists())
            # Someone else's namespace now has the name of VM b's.
            hvlab.run(["ip", "netns", "del", t.ns("b")])
            hvlab.eventually(lambda: t.ns("b") not in hvlab.run(["ip", "netns", "list"]).stdout)
            hvlab.run(["ip", "netns", "add", t.ns("b")])
            foreign = t.ns("b")
            r = hvlab.hvnet("down", t.name)
            assert f"left untouched: network namespace {foreign}" in r.stdout, r.stdout
            netns = hvlab.run(["ip", "netns", "list"]).stdout
            assert foreign in netns and t.ns("a") not in netns
    finally:
        if foreign:
            hvlab.run(["ip", "netns", "del", foreign], check=False)


def test_up_refuses_a_name_clash_and_touches_nothing(tmp_path):
    t = hvlab.Topology(tmp_path, [vm("a", "198.18.74.1")])
    hvlab.run(["ip", "netns", "add", t.ns("a")])
    try:
        r = hvlab.hvnet("up", t.file, check=False)
        assert r.returncode == 1 and "exists already and is not hvnet's" in r.stderr, r.stderr
        assert t.ns("a") in hvlab.run(["ip", "netns", "list"]).stdout
        assert not Path(f"/run/hvnet/{t.name}").exists()
    finally:
        hvlab.run(["ip", "netns", "del", t.ns("a")], check=False)


def test_two_concurrent_ups_of_one_topology(tmp_path):
    t = hvlab.Topology(tmp_path, [vm("a", "198.18.75.1"), vm("b", "198.18.75.2")])
    try:
        ups = [subprocess.Popen([hvlab.hvnet_bin(), "up", str(t.file)], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True) for _ in range(2)]
        results = [(p.wait(timeout=60), p.stderr.read()) for p in ups]
        codes = sorted(c for c, _ in results)
        assert codes == [0, 1], results
        err = next(e for c, e in results if c == 1)
        assert "being brought up or down" in err or "already up" in err, err
        t.sh("a", "ping -c 1 -W 2 198.18.75.2")
        assert len(state(t)["namespaces"]) == 2
        lock = Path(f"/run/hvnet/.{t.name}.lock")
        assert lock.exists()
        # Two concurrent downs: one removes, the other is refused or finds
        # nothing; the lock file goes with the topology.
        downs = [subprocess.Popen([hvlab.hvnet_bin(), "down", t.name], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for _ in range(2)]
        results = [(p.wait(timeout=60), p.stdout.read() + p.stderr.read()) for p in downs]
        assert 0 in [c for c, _ in results], results
        hvlab.hvnet("down", t.name)
        assert not lock.exists() and not Path(f"/run/hvnet/{t.name}").exists()
    finally:
        t.__exit__(None, None, None)


def test_the_control_socket_answers_while_clients_flood_and_stall_it(tmp_path):
    with hvlab.Topology(tmp_path, [vm("a", "198.18.76.1"), vm("b", "198.18.76.2")]) as t:
        sock_path = f"/run/hvnet/{t.name}/ctl.sock"
        # Root's only, from its creation: the directory and the socket.
        assert stat.S_IMODE(os.stat(f"/run/hvnet/{t.name}").st_mode) == 0o700
        assert stat.S_IMODE(os.stat(sock_path).st_mode) & 0o077 == 0
        stalled = []
        for _ in range(4):  # connect and say nothing
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(sock_path)
            stalled.append(s)
        flood = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        flood.connect(sock_path)
        answer = []

        def send_flood():
            try:
                flood.sendall(b"x" * (4 << 20))  # 4 MiB, no newline
            except OSError:
                pass
            try:
                answer.append(flood.recv(4096))
            except OSError:
                pass

        th = threading.Thread(target=send_flood)
        th.start()
        for _ in range(5):
            ports = json.loads(t.hv("ports", "--json").stdout)
            assert [p["client"] for p in ports] == ["a", "b"]
        th.join(timeout=30)
        assert answer and b"request larger than" in answer[0], answer
        for s in stalled + [flood]:
            s.close()
        t.sh("a", "ping -c 1 -W 2 198.18.76.2")


def test_drop_privileges_leaves_no_thread_with_root_or_a_capability(tmp_path):
    with hvlab.Topology(tmp_path, [vm("a", "198.18.79.1"), vm("b", "198.18.79.2")],
                        up_args=["--drop-privileges"]) as t:
        t.sh("a", "ping -c 2 -i 0.2 -W 2 198.18.79.2")
        pid = daemon_pid(t)
        # The daemon says it is ready, then gives up root.
        hvlab.eventually(lambda: "privileges dropped" in Path(f"/run/hvnet/{t.name}/daemon.log").read_text())
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
        assert len(tasks) > 3
        for task in tasks:
            status = dict(line.split(":\t", 1) for line in (task / "status").read_text().splitlines() if ":\t" in line)
            assert status["Uid"].split() == ["65534"] * 4, (task, status["Uid"])
            for cap in ("CapEff", "CapPrm", "CapInh", "CapAmb"):
                assert int(status[cap], 16) == 0, (task, cap, status[cap])
        # The switch still does its work, and says what it cannot do now.
        t.hv("port", "b", "set", "ring1=512", "lro=off")
        r = t.hv("port", "b", "set", "mtu=1400", check=False)
        assert r.returncode == 1 and "--drop-privileges" in r.stderr, r.stderr
        t.sh("a", "ping -c 2 -i 0.2 -W 2 198.18.79.2")
        # Stopped, it is re-attached to by a daemon that keeps root.
        os.kill(pid, signal.SIGTERM)
        hvlab.eventually(lambda: not Path(f"/proc/{pid}").exists(), timeout=10)
        assert "re-attached" in hvlab.hvnet("up", t.file).stdout
        t.sh("a", "ping -c 1 -W 2 198.18.79.2")


def test_drop_privileges_refuses_guests_hvnet_must_manage_as_root(tmp_path):
    f = tmp_path / "uml.toml"
    name = hvlab.unique("tu")[:12]
    f.write_text(f'name = "{name}"\n[[vm]]\nname = "a"\nkind = "uml"\nipv4 = "198.18.79.9/24"\n')
    r = hvlab.hvnet("up", "--drop-privileges", f, check=False)
    assert r.returncode == 1 and "uml guest" in r.stderr, r.stderr
    assert not Path(f"/run/hvnet/{name}").exists()
