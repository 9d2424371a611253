"""What a run writes: results.json, the summary that `report`, `compare`
and `stability` read, and beside it raw.json, each experiment's per-run
data (`samples`, `raw`); a directory with the summary alone is enough for
all three. Made by `hvnet lab run` with stand-in experiments, without root."""

import json
import sys
from pathlib import Path

import hvlab
from hvnet_lab import __main__ as lab
from hvnet_lab.figures import LRO_VMXNET3, figure, measured
from hvnet_lab.verdict import judge

LAB = Path(__file__).resolve().parents[1]


def cli(*args):
    return hvlab.run([sys.executable, "-m", "hvnet_lab", *map(str, args)], check=False, cwd=str(LAB))


def a_run(monkeypatch, out):
    """`hvnet lab run judged measured broken --repeat 3 --out OUT`: two
    stand-in experiments that log their commands and one that fails."""
    def judged(tmp, quick, reps, log):
        log += [{"command": "iperf3 -c b", "gbps": g} for g in (2.0, 2.1, 1.9)]
        fig = figure("judged-gain", "Gain", "x", "y", {"hvnet": [("a", 2.0)]}, {}, LRO_VMXNET3, "a gain",
                     judge([("a", [2.0, 2.1, 1.9])], "up"), "n")
        return [fig], {"hvnet": {"on": [{"gbps": 2.0}]}}

    def measure(tmp, quick, reps, log):
        log.append({"command": "hvnet port", "v": 3.0})
        runs = {("hvnet", "x"): [{"v": 3.0}, {"v": 1.0}, {"v": 2.0}]}
        return [measured("measured-size", "Size", "", "units", runs, "v", lambda c: c, "how big?", "2", "n")], [1, 2]

    def broken(tmp, quick, reps, log):
        log.append({"command": "hvnet up"})
        raise RuntimeError("boom")

    monkeypatch.setattr(lab.experiments, "EXPERIMENTS", [
        {"name": "judged", "reproduces": "LRO for VMXNET3 on Windows VMs", "workload": "w", "run": judged},
        {"name": "measured", "reproduces": "measurement", "workload": "w", "run": measure},
        {"name": "broken", "reproduces": "measurement", "workload": "w", "run": broken}])
    monkeypatch.setattr(lab.hvlab, "is_root", lambda: True)
    monkeypatch.setattr(lab.signal, "signal", lambda *a: None)
    monkeypatch.setattr(lab, "meta", lambda quick: {
        "date": "d", "host": "h", "kernel": "k", "cpu_model": "c", "cpus": 2, "git_revision": "r",
        "iperf3": "3", "quick": quick, "hvnet": "hvnet", "openvswitch": ""})
    return lab.main(["run", "judged", "measured", "broken", "--repeat", "3", "--out", str(out)])


def test_a_run_writes_the_summary_and_its_per_run_data_beside_it(tmp_path, monkeypatch, capsys):
    out = tmp_path / "run"
    assert a_run(monkeypatch, out) == 2  # broken: not run
    assert "raw.json" in capsys.readouterr().out
    res = json.loads((out / "results.json").read_text())
    assert [e["name"] for e in res["experiments"]] == ["judged", "measured", "broken"]
    for e in res["experiments"]:
        assert "samples" not in e and "raw" not in e, e
    assert res["experiments"][2]["error"] == "RuntimeError: boom"
    assert res["experiments"][0]["figures"][0]["judged_by"], "the per-run effects stability draws stay in the summary"
    raw = json.loads((out / "raw.json").read_text())
    assert raw == {"judged": {"samples": [{"command": "iperf3 -c b", "gbps": g} for g in (2.0, 2.1, 1.9)],
                              "raw": {"hvnet": {"on": [{"gbps": 2.0}]}}},
                   "measured": {"samples": [{"command": "hvnet port", "v": 3.0}], "raw": [1, 2]},
                   "broken": {"samples": [{"command": "hvnet up"}]}}
    assert (out / "report.md").exists() and (out / "fig-judged-gain.png").exists()


def test_report_compare_and_stability_need_only_the_summary(tmp_path, monkeypatch):
    out = tmp_path / "run"
    a_run(monkeypatch, out)
    full = {name: (out / name).read_text() for name in ("report.md", "report.html")}
    (out / "raw.json").unlink()
    (out / "report.md").unlink()
    r = cli("report", "--out", out)
    assert r.returncode == 0, r.stderr
    assert {name: (out / name).read_text() for name in full} == full
    r = cli("compare", out / "results.json", out / "results.json")
    assert r.returncode == 0 and "judged-gain" in r.stdout and "<- changed" not in r.stdout, r.stderr
    r = cli("stability", out / "results.json", "--draws", "20")
    assert r.returncode == 0 and "judged-gain" in r.stdout, r.stderr


def test_the_results_kept_in_the_repository_are_summaries():
    """lab/results keeps each run's summary; its per-run data is not
    tracked (lab/results/.gitignore)."""
    kept = [p for p in (LAB / "results").rglob("*.json") if "data" not in p.relative_to(LAB / "results").parts]
    assert kept
    for p in kept:
        res = json.loads(p.read_text())
        if isinstance(res, dict) and "experiments" in res:
            assert not [e["name"] for e in res["experiments"] if "samples" in e or "raw" in e], p
    assert "raw.json" in (LAB / "results" / ".gitignore").read_text().split()
