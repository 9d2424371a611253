"""One source of truth for a port's settings: each run-time change
(`hvnet port P set`) kept in the topology's state with its source, made
again by a restarted switch, and set back by `hvnet up FILE` for the
ports the file declares; a VM's access VLAN changed at run time."""

import json
import os
import signal
from pathlib import Path

import pytest

import hvlab
from helpers import daemon_pid, vm

pytestmark = pytest.mark.root

A, B, C = "198.18.91.1", "198.18.91.2", "198.18.91.3"


def show(t, port):
    return json.loads(t.hv("port", port, "--json").stdout)


def reaches(t, src, ip):
    return t.sh(src, f"ping -c 1 -W 2 {ip}", check=False).returncode == 0


def test_run_time_changes_survive_a_restart_until_the_file_is_applied(tmp_path):
    vms = [vm("a", A, queues=1, tx_rate="500mbit"), vm("b", B, queues=1), vm("c", C, queues=1, vlan=7)]
    with hvlab.Topology(tmp_path, vms, prefix="ss") as t:
        t.hv("vm", "add", "n", "ipv4=198.18.91.9/24", "queues=1")
        t.hv("port", "a", "set", "rx_rate=300mbit")
        t.hv("port", "n", "set", "tx_rate=100mbit")
        # Where each setting comes from.
        src = show(t, "a")["sources"]
        assert (src["tx_rate"], src["rx_rate"], src["ring1"]) == ("file", "run-time", "default"), src
        src = show(t, "n")["sources"]
        assert (src["tx_rate"], src["vlan"]) == ("run-time", "default"), src
        assert show(t, "c")["sources"]["vlan"] == "file"

        # The access VLAN at run time: b joins c's VLAN and leaves a's.
        assert reaches(t, "b", A) and not reaches(t, "b", C)
        s = show(t, "b")
        t.hv("port", "b", "set", "vlan=7")
        s = show(t, "b")
        assert (s["vlan"], s["sources"]["vlan"]) == (7, "run-time"), s
        assert hvlab.eventually(lambda: reaches(t, "b", C), timeout=10)
        assert not reaches(t, "b", A)
        r = t.hv("port", "b", "set", "vlan=5000", check=False)
        assert r.returncode != 0 and "0..4094" in r.stderr, r.stderr
        r = t.hv("port", "b", "set", "vlann=5", check=False)
        assert r.returncode != 0 and "vlan" in r.stderr.split("allowed")[-1], r.stderr

        # The switch stopped and started again: every change is made again.
        os.kill(daemon_pid(t), signal.SIGTERM)
        assert hvlab.eventually(lambda: not Path(f"/run/hvnet/{t.name}/ctl.sock").exists(), timeout=30)
        hvlab.hvnet("up", t.file)
        assert show(t, "a")["rx_rate"] == "300mbit"
        assert show(t, "a")["tx_rate"] == "500mbit"
        assert show(t, "n")["tx_rate"] == "100mbit"
        assert show(t, "b")["vlan"] == 7
        assert hvlab.eventually(lambda: reaches(t, "b", C), timeout=10)

        # The file applied: the ports it declares are what it says again,
        # and `up` says which it set back.
        out = json.loads(hvlab.hvnet("up", "--json", t.file).stdout)["applied"]
        assert sorted(out["reverted"]) == ["a", "b"], out
        a, b = show(t, "a"), show(t, "b")
        assert (a["rx_rate"], a["tx_rate"], a["sources"]["rx_rate"]) == (None, "500mbit", "default"), a
        assert (b["vlan"], b["sources"]["vlan"]) == (0, "default"), b
        assert hvlab.eventually(lambda: reaches(t, "b", A), timeout=10)
        assert not reaches(t, "b", C)
        state = json.loads(Path(f"/run/hvnet/{t.name}/state.json").read_text())
        assert set(state["port_changes"]) <= {"n"}, state["port_changes"]
        # Applied again: nothing left to set back.
        out = json.loads(hvlab.hvnet("up", "--json", t.file).stdout)["applied"]
        assert out["reverted"] == [], out
