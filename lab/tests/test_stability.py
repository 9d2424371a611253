"""`hvnet lab stability`: which verdicts can flip from one run to the next,
from runs' own per-run effects drawn again through the rule."""

import json
import sys
from pathlib import Path

import hvlab

LAB = Path(__file__).resolve().parents[1]


def test_stability_predicts_which_verdicts_can_flip(tmp_path):
    """Effects clear of every edge come out the same in every drawn run;
    effects that straddle the 5% edge do not, and the table says which."""
    from hvnet_lab import stability
    from hvnet_lab.figures import figure
    from hvnet_lab.verdict import judge, both

    def run(clear, edge):
        figs = [figure("clear", "t", "x", "y", {}, {}, "s", "c", judge([("x", clear)], "up"), "n"),
                figure("edge", "t", "x", "y", {}, {}, "s", "c",
                       both(judge([("a", edge)], "up"), judge([("b", clear)], "up")), "n"),
                figure("unjudged", "t", "x", "y", {}, {}, "s", "c", ("inconclusive", "why"), "n")]
        return json.loads(json.dumps({"meta": {"date": "d", "git_revision": "r", "repeat": 3, "most": 9},
                                      "experiments": [{"figures": figs}]}))
    runs = [run([2.0, 2.1, 1.9], [0.98, 1.05, 1.12]), run([2.05, 1.95, 2.2], [1.02, 1.08, 1.0, 1.06, 1.1, 1.04])]
    # A figure the older run judged and the newest run's experiment no
    # longer does has no verdict today: it is not drawn.
    runs[0]["experiments"][0]["figures"].append(
        json.loads(json.dumps(figure("gone", "t", "x", "y", {}, {}, "s", "c", judge([("x", [0.98, 1.05])], "up"), "n"))))
    rows = {fid: (chance, shares) for fid, chance, shares in stability.predict(runs, draws=300)}
    assert set(rows) == {"clear", "edge"}
    assert rows["clear"] == (0.0, {"reproduced": 1.0})
    assert rows["edge"][0] > 0.3 and len(rows["edge"][1]) >= 2, rows["edge"]
    out = stability.table(runs, draws=300)
    assert out.index("edge") < out.index("clear") and "2 run(s) pooled" in out and "up to 15" in out
    assert "of the 2 drawn again (2 figures not judged" in out and "no longer by the newest, are left out" in out, out
    # Each run's own effects in order: the clear figure reproduced in both;
    # the edge one still undecided where each run stopped, short of the
    # runs today's rule wants (+).
    lines = {line.split()[0]: line for line in out.splitlines() if line.startswith(("clear ", "edge "))}
    assert lines["clear"].split()[2:4] == ["R", "R"] and lines["edge"].split()[2:4] == ["I+", "I+"], out
    (tmp_path / "r.json").write_text(json.dumps(runs[0]))
    cli = hvlab.run([sys.executable, "-m", "hvnet_lab", "stability", str(tmp_path / "r.json"),
                     str(tmp_path / "none.json")], check=False, cwd=str(LAB))
    assert cli.returncode == 1 and "none.json does not exist" in cli.stderr, cli.stderr
    cli = hvlab.run([sys.executable, "-m", "hvnet_lab", "stability", str(tmp_path / "r.json"), "--draws", "50"],
                    check=False, cwd=str(LAB))
    assert cli.returncode == 0 and "expected figures differing between two runs" in cli.stdout, cli.stderr


def test_stability_draws_points_of_one_experiment_with_one_label_from_the_same_runs():
    """Two figures judged on the same runs (one experiment, one label) are
    drawn by the same repetitions: given the same effects they can never
    differ, however near the edge; under other labels, or with pools of
    other lengths (not the same runs), they are drawn apart and do."""
    import random
    from hvnet_lab import stability
    from hvnet_lab.figures import figure
    from hvnet_lab.verdict import judge
    edge = [0.98, 1.05, 1.12, 1.02, 1.08, 1.0, 1.06, 1.04, 1.1]

    def run(second_label, second):
        figs = [figure("thr", "t", "x", "y", {}, {}, "s", "c", judge([("256", edge)], "up"), "n"),
                figure("eff", "t", "x", "y", {}, {}, "s", "c", judge([(second_label, second)], "up"), "n")]
        return json.loads(json.dumps({"meta": {"date": "d", "git_revision": "r", "repeat": 3},
                                      "experiments": [{"name": "lro-local", "figures": figs}]}))
    rng = random.Random(3)
    for second_label, second, apart in (("256", edge, False), ("16K", edge, True), ("256", edge + [1.07], True)):
        figs = stability.pooled([run(second_label, second)])["lro-local"]
        verdicts = [stability.one_run(figs, 3, 15, rng) for _ in range(200)]
        differ = sum(v["thr"] != v["eff"] for v in verdicts)
        assert (differ > 0) == apart, (second_label, len(second), differ)


def test_a_runs_own_effects_replayed_through_todays_rule():
    """In the order measured: a point decided at its 4th run is decided
    there; one whose run stopped short of what today's rule wants is
    marked so (the 2026-11-23 runs stopped at 3)."""
    from hvnet_lab import stability
    from hvnet_lab.figures import figure
    from hvnet_lab.verdict import judge

    def exp(name, effects):
        return {"name": name, "figures": [figure(name, "t", "x", "y", {}, {}, "s", "c", judge([("x", effects)], "up"), "n")]}
    res = json.loads(json.dumps({"meta": {"date": "d", "git_revision": "r", "repeat": 3}, "experiments": [
        exp("grew", [1.3, 0.9, 1.3, 1.25, 0.5]), exp("short", [1.3, 0.9, 1.3]), exp("clear", [2.0, 2.1, 1.9])]}))
    assert stability.replay(res) == {"grew": ("reproduced", False), "short": ("inconclusive", True),
                                     "clear": ("reproduced", False)}
