"""`hvnet diagnose VM` against faults planted as an operator would make
them by mistake (hvnet_lab.planted_faults: one at a time, with real
traffic — iperf3, ping, raw tagged frames — on namespace VMs): each is
named as the first finding, with the setting that causes it; a healthy VM
under iperf3 with 4 streams gets no finding; `hvnet top` marks the row."""

import csv
import io
import json

import pytest

import hvlab
from helpers import vm
from hvnet_lab import planted_faults as pf

pytestmark = pytest.mark.root


def test_each_planted_fault_is_the_first_finding_with_its_setting(tmp_path):
    with pf.single_host(tmp_path) as t:
        v = pf.healthy(t)
        assert v["findings"] == [] and v["healthy"], v
        assert v["figures"]["received_frames_per_sec"] > 0 and v["guest_threads"] >= 1, v
        for fault in pf.SINGLE:
            name, _, want = fault[:3]
            v = pf.plant(t, fault)
            assert pf.first(v) == want, (name, v)
            if want[0] == "source_guard":
                assert f"{pf.NET}.99" in v["findings"][0]["finding"], v
            if want[0] == "vlan_not_allowed":
                assert "30" in v["findings"][0]["finding"], v
        v = pf.held_guest(t)
        assert pf.first(v) == ("guest_cpu_quota", "cpu.cfs_quota_us=10000"), v
        # `hvnet top` marks a's row with the policer, b's with nothing (a
        # UDP flood: the policer drops in every interval, where TCP backs
        # off).
        t.hv("port", "a", "set", "tx_rate=10mbit")
        with pf.iperf(t, "a", f"{pf.NET}.2", "-u", "-b", "100M", seconds=10):
            assert hvlab.eventually(lambda: t.stats("/ports/a/tx_summary")["drop_policed"] > 0, timeout=10)
            rows = list(csv.DictReader(io.StringIO(t.hv("top", "-b", "-d", "1", "-n", "2").stdout)))
        t.hv("port", "a", "set", "tx_rate=none")
        last = {r["port"]: r["finding"] for r in rows[len(rows) // 2:]}
        assert last["a"] == "tx_rate" and last["b"] == "", last
        assert pf.first(pf.guest_gone(t)) == ("link_down", None)


def test_a_team_member_down_and_a_missing_tunnel_peer_are_found(tmp_path):
    with pf.uplink_host(tmp_path) as t:
        v = pf.team_member_down(t)
        assert pf.first(v) == ("team_degraded", None) and t.member_down in v["findings"][0]["finding"], v
        # A frame to the wire: the trace names the member it leaves by
        # (not the one down) and the team's reason.
        f = json.loads(t.hv("trace", "a", "dmac=02:00:00:00:00:99", "--json").stdout)["frames"][0]
        team = [s["text"] for s in f["stages"] if s["stage"] == "team"]
        assert team and "active-backup" in team[0] and "by member " in team[0], f
        assert t.member_down not in team[0].split("(")[0], f
        # t's neighbour behind the tunnel is asked for and nobody answers:
        # the finding names the tunnel and its peers (the team, not in
        # t's VLAN, is not on its way).
        v = pf.missing_peer(t)
        assert pf.first(v) == ("neighbour_unknown", None) and "vx0 with 1 peers" in v["findings"][0]["finding"], v


def test_bad_arguments_are_refused(tmp_path):
    with hvlab.Topology(tmp_path, [vm("a", f"{pf.NET}.11")], prefix="dg") as t:
        r = t.hv("diagnose", "nosuch", check=False)
        assert r.returncode != 0 and "nosuch" in r.stderr and "a" in r.stderr, r.stderr
        r = t.hv("diagnose", "a", "-w", "0", check=False)
        assert r.returncode != 0 and "more than 0" in r.stderr, r.stderr
        v = pf.diagnose(t, "a", window=0.3)
        assert v["healthy"] and v["vm"] == "a", v
        assert "no finding" in t.hv("diagnose", "a", "-w", "0.3").stdout
