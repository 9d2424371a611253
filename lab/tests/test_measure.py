"""What the lab reads, parsed: each parser on real output captured from
this machine (data/)."""

from pathlib import Path

import pytest

from hvnet_lab import measure

DATA = Path(__file__).with_name("data")


def test_iperf3_json_parser():
    r = measure.iperf3((DATA / "iperf3.json").read_text())
    assert r["bps"] > 1e8 and r["bytes"] > 0 and r["seconds"] > 0.5
    assert r["retransmits"] >= 0
    with pytest.raises(ValueError):
        measure.iperf3('{"error": "unable to connect to server"}')


def test_nstat_parser():
    n = measure.nstat((DATA / "nstat.txt").read_text())
    assert n["IpInReceives"] > 0
    assert "TcpRetransSegs" in n and "TcpOutSegs" in n
    assert all(isinstance(v, int) for v in n.values())


def test_ping_parser():
    rtts = measure.ping_rtts((DATA / "ping.txt").read_text())
    assert rtts == [0.145, 0.017, 0.040, 0.022, 0.020]


def test_proc_stat_parser_and_busy_cores():
    total, idle = measure.proc_stat((DATA / "proc_stat.txt").read_text())
    assert total > idle > 0
    assert measure.busy_cores((100, 50), (300, 150), 2) == 1.0
    cpu = measure.Cpu()
    cpu.core_seconds = 2.0
    assert cpu.gbit_per_core_second(250_000_000) == 1.0


def test_schedstat_parser():
    s = measure.schedstat((DATA / "schedstat.txt").read_text())
    assert s["run_ns"] > 0 and s["wait_ns"] >= 0 and s["timeslices"] > 0


def test_perf_stat_parser():
    p = measure.perf_stat((DATA / "perf_stat.txt").read_text())
    assert p["cycles"] > 0 and p["instructions"] > 0
    assert measure.perf_stat("<not supported>,,cycles,0,100.00,,\n")["cycles"] is None
