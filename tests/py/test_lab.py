"""The lab: its parsers on real output captured from this machine, and one
--quick experiment end to end with its report checked."""

import json
import math
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "lab"))

import hvlab  # noqa: E402
from hvnet_lab import cpu_and_rings, measure, report  # noqa: E402

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


def test_verdicts_need_the_effect_beyond_the_spread():
    from hvnet_lab.verdict import INCONCLUSIVE, NOT_REPRODUCED, REPRODUCED, both, judge, summarize
    assert judge([("a", [1.2, 1.4]), ("b", [1.05, 1.1])], "up")[0] == REPRODUCED
    v, why = judge([("a", [1.2, 1.4]), ("b", [0.9, 1.1])], "up")
    assert v == INCONCLUSIVE and "b" in why and "0.9–1.1" in why
    v, why = judge([("a", [1.2, 1.4]), ("b", [0.8, 0.9])], "up")
    assert v == NOT_REPRODUCED and "b" in why
    assert judge([("x", [0.5, 0.7])], "down")[0] == REPRODUCED
    # An effect of about nothing beside a large published one is "not
    # reproduced" whichever way the noise leans, not a flip.
    v, why = judge([("x", [0.98, 1.11])], "down", published=3 / 7)
    assert v == NOT_REPRODUCED and "no effect at x" in why and "a quarter of the published 0.43" in why, why
    assert judge([("x", [0.6, 0.7])], "down", published=3 / 7)[0] == REPRODUCED
    # Runs that lean either way around no change get the same verdict (the
    # 2026-11-23 pairs of runs flipped here): inside the band, no effect;
    # across its edge, undecided until more runs narrow the interval.
    for runs in ([0.93, 0.99, 1.04], [1.0, 1.02, 1.13]):
        assert judge([("x", runs)], "up", published=1.76)[0] == NOT_REPRODUCED, runs
    v, why = judge([("x", [0.958, 1.05, 1.16])], "up", published=1.76)
    assert v == INCONCLUSIVE and "covers the threshold" in why, why
    more = [0.958, 1.05, 1.16, 1.0, 1.02, 1.1, 1.06]
    assert judge([("x", more)], "up", published=1.76)[0] == NOT_REPRODUCED
    # An effect that is there, but maybe smaller than a quarter of the
    # published one: undecided, and said so.
    v, why = judge([("x", [1.08, 1.2, 1.35])], "up", published=1.52)
    assert v == INCONCLUSIVE and ("past the threshold 1 but covers 1.11, the edge of no effect (a quarter of the "
                                  "published 1.52)") in why, why
    assert judge([("x", [1.12, 1.2, 1.35])], "up", published=1.52)[0] == REPRODUCED
    # A published effect per point: no effect where a gain was published,
    # a clear one elsewhere.
    pts = [("256", [0.93, 1.0, 1.06]), ("16K", [1.7, 1.9, 2.0])]
    v, why = judge(pts, "up", 0.95, published={"256": 1.5})
    assert v == NOT_REPRODUCED and "256" in why and "16K" not in why, why
    assert judge([("16K", [1.7, 1.9, 2.0])], "up", 0.95, published={"256": 1.5})[0] == REPRODUCED
    # Never narrower than the machine's noise: 1.03 is no effect even
    # beside a published 1.05.
    v, why = judge([("x", [1.01, 1.03, 1.04])], "up", published=1.05)
    assert v == NOT_REPRODUCED and "the machine's noise; published 1.05" in why, why
    # A published effect inside the noise (seed 001's receive checksum
    # cost, 1.15/1.10): finding none refutes nothing, so inconclusive;
    # one past the noise still reproduces it, the opposite still refutes.
    v, why = judge([("x", [1.01, 1.03, 1.04])], "up", published=1.15 / 1.10)
    assert v == INCONCLUSIVE and "as is the published 1.045: an effect of that size cannot be told" in why, why
    assert judge([("x", [1.06, 1.08, 1.07])], "up", published=1.15 / 1.10)[0] == REPRODUCED
    assert judge([("x", [0.97, 0.98, 0.99])], "up", published=1.15 / 1.10)[0] == NOT_REPRODUCED
    # ... and where the study gave only a direction: 3% is none, an
    # interval across 5% cannot tell; a threshold other than no change
    # ("loses no throughput": >= 0.95) has no such band.
    v, why = judge([("x", [1.01, 1.03, 1.04])], "up")
    assert v == NOT_REPRODUCED and "the machine's noise" in why, why
    v, why = judge([("x", [1.02, 1.06, 1.1])], "up")
    assert v == INCONCLUSIVE and "covers 1.05, the edge of no effect (the machine's noise)" in why, why
    assert judge([("x", [1.06, 1.1, 1.2])], "up")[0] == REPRODUCED
    assert judge([("x", [0.97, 1.0, 1.02])], "up", 0.95)[0] == REPRODUCED
    assert both((REPRODUCED, ""), (INCONCLUSIVE, "w"))[0] == INCONCLUSIVE
    assert both((REPRODUCED, ""), (NOT_REPRODUCED, "w"))[0] == NOT_REPRODUCED
    p = summarize([{"gbps": 3.0, "lro": "on"}, {"gbps": 1.0, "lro": "on"}, {"gbps": 2.0, "lro": "on"}])
    assert p["gbps"] == 2.0 and p["spread"]["gbps"] == [1.0, 3.0] and p["lro"] == "on" and len(p["runs"]) == 3


def test_the_effects_interval_narrows_as_runs_are_added():
    from hvnet_lab.verdict import interval
    # Up to 3 runs, the min-max (coverage 75%); then the 2nd to 9th of 4
    # runs' 10 Walsh averages (75%), the 3rd to 13th of 5's 15 (81%).
    assert interval([3, 1, 2]) == (1, 3)
    assert interval([4.0]) == (4.0, 4.0)
    assert interval([1, 2, 3, 10]) == (1.5, 6.5)
    assert interval([5, 1, 4, 2, 3]) == (2, 4)
    assert interval(range(1, 8)) == (3, 5)
    # A wild run widens it towards itself (inconclusive, not wrong).
    assert interval([1, 2, 3, 4, 50]) == (2, 26.5)
    # Ratios on a log scale: symmetric about their geometric centre.
    lo, hi = interval([0.5, 1.0, 2.0, 1.0, 1.0], log=True)
    assert math.isclose(lo * hi, 1.0) and math.isclose(lo, 2 ** -0.5)


def test_the_signed_rank_distribution_behind_the_interval():
    """Against independent truth: the signed-rank counts by enumerating
    every sign pattern, and the identity behind the Hodges-Lehmann
    interval — the Walsh averages above zero number exactly Wilcoxon's
    T+ (the rank sum of the positive samples)."""
    import itertools
    import random
    from hvnet_lab.verdict import signed_rank_counts
    for n in range(1, 9):
        counts = [0] * (n * (n + 1) // 2 + 1)
        for signs in itertools.product((0, 1), repeat=n):
            counts[sum(r for r, s in zip(range(1, n + 1), signs) if s)] += 1
        assert signed_rank_counts(n) == counts, n
    rng = random.Random(7)
    for _ in range(200):
        xs = [rng.gauss(0.3, 1) for _ in range(rng.randint(1, 12))]
        ranks = {x: r for r, x in enumerate(sorted(xs, key=abs), start=1)}
        t_plus = sum(ranks[x] for x in xs if x > 0)
        walsh = [(xs[i] + xs[j]) / 2 for i in range(len(xs)) for j in range(i, len(xs))]
        assert sum(w > 0 for w in walsh) == t_plus


def test_an_undecided_comparison_gets_more_runs_and_no_more_than_it_needs():
    from hvnet_lab.runners import interleaved
    from hvnet_lab.verdict import judge, undecided
    samples = iter([1.0, 1.3, 1.0, 0.9, 1.0, 1.3, 1.0, 1.25, 1.0, 1.4, 1.0, 1.35, 1.0, 1.3, 1.0, 1.3])
    order = []

    def run(c):
        order.append(c)
        return {"v": next(samples)}

    def settle(runs):
        gain = [b["v"] / a["v"] for a, b in zip(runs["A"], runs["B"])]
        return undecided([judge([("B vs A", gain)], "up")])

    runs = interleaved(("A", "B"), 3, run, settle=settle)
    # Undecided while the interval is the min-max of 3 (0.9 among the
    # ratios), decided at the 4th, whose interval (2nd to 9th Walsh
    # average) leaves 0.9 out.
    assert order == ["A", "B"] * 4 and len(runs["A"]) == len(runs["B"]) == 4, order
    # Never more than 5N rounds, and none more without a settle.
    assert len(interleaved(("A",), 3, lambda c: {"v": 1.0}, settle=lambda r: {None})["A"]) == 15
    assert len(interleaved(("A",), 3, lambda c: {"v": 1.0})["A"]) == 3
    assert len(interleaved(("A",), 1, lambda c: {"v": 1.0}, settle=lambda r: {None})["A"]) == 1


def test_more_runs_go_only_to_the_configurations_of_undecided_points():
    """Two sizes, LRO off and on at each: the large size's gain is clear at
    3 runs, the small one's is not, so only the small size's two
    configurations run again; a figure that keeps no judge calls makes
    every configuration run again."""
    from hvnet_lab.figures import figure
    from hvnet_lab.runners import interleaved
    from hvnet_lab.verdict import judge, ratios, undecided
    small_on = iter([1.0, 1.3, 0.9, 1.2, 1.25, 1.3, 1.2, 1.3, 1.25, 1.3, 1.2, 1.3, 1.25, 1.3, 1.2])
    order = []

    def run(c):
        order.append(c)
        lro, size = c
        return {"v": 1.0 if lro == "off" else (2.0 if size == "large" else next(small_on))}

    def figs(runs):
        gain = [(size, ratios(runs[("on", size)], runs[("off", size)], "v")) for size in ("small", "large")]
        return [figure("f", "", "", "", {}, {}, "", "", judge(gain, "up"), "")]

    configs = [(lro, size) for size in ("small", "large") for lro in ("off", "on")]
    runs = interleaved(configs, 3, run, settle=lambda r: undecided(figs(r)),
                       feeds=lambda c, label: c[1] == label)
    assert len(runs[("off", "large")]) == len(runs[("on", "large")]) == 3
    assert len(runs[("off", "small")]) == len(runs[("on", "small")]) > 3
    assert order[12:] == [("off", "small"), ("on", "small")] * ((len(order) - 12) // 2), order
    assert undecided(figs(runs)) == set()
    # No judge calls to say which point: everything again.
    assert undecided([{"verdict": "inconclusive", "judged_by": []}]) == {None}
    assert len(interleaved(configs, 3, lambda c: {"v": 1.0}, settle=lambda r: {None},
                           feeds=lambda c, label: False)[("on", "large")]) == 15


def test_sack_rate_is_judged_only_where_losses_give_one():
    """SACKs come only with losses: a side with (almost) none has no rate,
    and the verdict says so instead of flipping with one lost segment (as
    the two runs of 2026-11-23 did: 0-302 then 141-1090 blocks with LRO
    on, none with LRO off)."""
    from hvnet_lab.lro_rate import sack_verdict
    from hvnet_lab.verdict import INCONCLUSIVE, NOT_REPRODUCED, REPRODUCED

    def runs(*blocks, acks=1000):
        return [{"sack_merged_at_sender": b, "sack_rate": b / acks} for b in blocks]

    for on in (runs(0, 302, 40), runs(141, 1090, 500)):
        v, why = sack_verdict(on, runs(0, 0, 0))
        assert v == INCONCLUSIVE and "LRO off 0 SACK blocks per run" in why, why
    assert sack_verdict(runs(50, 60, 70), runs(200, 300, 250))[0] == REPRODUCED
    assert sack_verdict(runs(500, 600, 700), runs(200, 300, 250))[0] == NOT_REPRODUCED


def test_compare_says_what_changed():
    def res(rev, verdict, claim):
        fig = {"id": "f1", "verdict": verdict, "reproduced": verdict == "reproduced", "claim": claim, "why_not": ""}
        return {"meta": {"date": "d", "git_revision": rev, "repeat": 3}, "experiments": [{"figures": [fig]}]}
    out = report.compare(res("aaa", "inconclusive", "x 1.0"), res("bbb", "reproduced", "x 1.5"))
    assert "aaa" in out and "bbb" in out
    assert "f1" in out and "inconclusive" in out and "<- changed" in out
    assert "before: x 1.0" in out and "after:  x 1.5" in out
    same = report.compare(res("a", "reproduced", "x"), res("b", "reproduced", "x"))
    assert "<- changed" not in same and "verdicts on" not in same
    # Runs judged by different rules say so.
    new = res("c", "reproduced", "x")
    new["meta"].update(most=9, interval="the effect's Hodges-Lehmann interval")
    out = report.compare(res("a", "reproduced", "x"), new)
    assert "before: up to 7 runs where undecided, verdicts on the median's interval" in out, out
    assert "after: up to 9 runs where undecided, verdicts on the effect's Hodges-Lehmann interval" in out, out
    assert "each \"why\" draws both runs' intervals by today's rule" in out and "today's rule" not in same, out


def test_compare_says_why_a_verdict_moved():
    """A changed verdict is explained point by point from the effects it
    was judged on: intervals that overlap across an edge are the same
    effect landing on either side of it; intervals apart, a moved one."""
    from hvnet_lab.figures import figure
    from hvnet_lab.verdict import judge

    def res(effects):
        fig = figure("f1", "t", "x", "y", {}, {}, "s", "c", judge([("256", effects)], "up", published=1.25), "n")
        return json.loads(json.dumps({"meta": {"date": "d", "git_revision": "r", "repeat": 3},
                                      "experiments": [{"figures": [fig]}]}))
    on_edge = res([1.04, 1.06, 1.08, 1.10, 1.05])      # 1.05-1.08, across 1.06: inconclusive
    inside = res([1.04, 1.056, 1.052, 1.045, 1.05])    # 1.045-1.053, inside the band: not reproduced
    beyond = res([1.20, 1.25, 1.30, 1.22, 1.28])       # 1.22-1.28, past the edge: reproduced
    out = report.compare(on_edge, inside)
    assert "<- changed" in out and "256: interval 1.05–1.08, then 1.04–1.05" in out, out
    assert "they overlap, about the edge 1.06" in out and "on either side of it" in out, out
    out = report.compare(inside, beyond)
    assert "apart, about the edge 1.06: the effect moved" in out, out
    # Unchanged verdicts need no reason; figures without judge calls get none.
    assert "why:" not in report.compare(beyond, beyond)


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
                     str(tmp_path / "none.json")], check=False, cwd=str(ROOT / "lab"))
    assert cli.returncode == 1 and "none.json does not exist" in cli.stderr, cli.stderr
    cli = hvlab.run([sys.executable, "-m", "hvnet_lab", "stability", str(tmp_path / "r.json"), "--draws", "50"],
                    check=False, cwd=str(ROOT / "lab"))
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


def test_report_flags_verdicts_that_could_differ_in_another_run(tmp_path):
    """From a run's own per-run effects, drawn again through the rule: a
    verdict whose effect straddles an edge is flagged with its chance of
    differing in another run, one clear of every edge is not; a quick run
    (one run per point, nothing to draw again) flags nothing."""
    from hvnet_lab.figures import figure
    from hvnet_lab.verdict import judge
    figs = [figure("clear", "Clear", "x", "y", {"s": [("a", 1.0)]}, {}, "shared/seeds/000", "clear claim",
                   judge([("x", [2.0, 2.1, 1.9])], "up"), "n"),
            figure("edge", "Edge", "x", "y", {"s": [("a", 1.0)]}, {}, "shared/seeds/000", "edge claim",
                   judge([("x", [0.98, 1.05, 1.12, 1.02, 1.08, 1.0, 1.06, 1.04, 1.1])], "up"), "n")]
    meta = {"date": "d", "host": "h", "cpu_model": "c", "cpus": 2, "kernel": "k", "git_revision": "r",
            "iperf3": "3", "repeat": 3}
    res = json.loads(json.dumps({"meta": meta, "experiments": [
        {"name": "e", "reproduces": "000", "workload": "w", "figures": figs}]}))
    report.render(res, tmp_path)
    md = (tmp_path / "report.md").read_text()
    rows = {line.split("|")[2].strip(): line for line in md.splitlines() if line.startswith("| e |")}
    assert "could differ in another run" in rows["edge"] and "could differ" not in rows["clear"], md
    assert "1 could with a chance of 10% or more" in md and "Another run would give another verdict" in md
    assert "could differ in another run" in (tmp_path / "report.html").read_text()
    res["meta"]["repeat"] = 1
    report.render(res, tmp_path)
    assert "could differ" not in (tmp_path / "report.md").read_text()


def test_a_measurement_has_no_verdict_and_its_report_asks_its_question(tmp_path):
    """A measurement (no study behind it): medians and min-max of each
    configuration's runs, verdict "measured", no published source needed;
    the report says it is a measurement and asks instead of claiming."""
    from hvnet_lab.figures import measured
    runs = {("hvnet", "x"): [{"v": 3.0}, {"v": 1.0}, {"v": 2.0}], ("bridge", "x"): [{"v": 4.0}]}
    fig = measured("m-fig", "A measurement", "", "units", runs, "v", lambda c: c, "how big is it?", "it is 2", "n")
    assert fig["verdict"] == "measured" and fig["series"] == {"hvnet": [("x", 2.0)], "bridge": [("x", 4.0)]}
    assert fig["spread"]["hvnet"] == [("x", 1.0, 3.0)] and not fig["published"]
    meta = {"date": "d", "host": "h", "cpu_model": "c", "cpus": 2, "kernel": "k", "git_revision": "r",
            "iperf3": "3", "repeat": 3}
    res = json.loads(json.dumps({"meta": meta, "experiments": [
        {"name": "m", "reproduces": "measurement", "workload": "w", "figures": [fig]}]}))
    assert report.check(res) == []
    report.render(res, tmp_path)
    md = (tmp_path / "report.md").read_text()
    assert "## m — a measurement" in md and "**Question:** how big is it? — **measured**" in md, md
    assert "Published effect" not in md


def test_report_without_results_says_what_to_run(tmp_path):
    r = hvlab.run([sys.executable, "-m", "hvnet_lab", "report", "--out", str(tmp_path / "none")], check=False,
                  cwd=str(ROOT / "lab"))
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert "hvnet lab run all --out" in r.stderr, r.stderr


def test_linear_fit_of_the_published_table():
    slope, icpt, r2 = cpu_and_rings.linear_fit(cpu_and_rings.PUB_002_CPU)
    assert 0.2 < slope < 0.25 and r2 > 0.98


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("lab") / "lab"
    r = hvlab.run([hvlab.hvnet_bin(), "lab", "run", "lro-rate", "--quick", "--out", str(out)], check=False, timeout=600)
    return out, r


@pytest.mark.root
def test_quick_experiment_end_to_end_and_its_report(quick_run):
    out, r = quick_run
    assert r.returncode == 0, r.stdout + r.stderr
    res = json.loads((out / "results.json").read_text())
    for k in ("date", "host", "kernel", "cpu_model", "git_revision", "iperf3"):
        assert res["meta"][k], k
    exp = res["experiments"][0]
    assert exp["samples"] and all("command" in s for s in exp["samples"])
    assert report.check(res) == []
    assert res["meta"]["repeat"] == 1, "--quick runs once per point"
    for fig in exp["figures"]:
        assert fig["verdict"] in ("reproduced", "not reproduced", "inconclusive")
        assert fig["verdict"] == "reproduced" or fig["why_not"], "a verdict other than reproduced says why"
        assert fig["source"].startswith("shared/seeds/003")
        assert all(math.isfinite(y) for pts in fig["series"].values() for _, y in pts)
        assert (out / f"fig-{fig['id']}.png").exists() and (out / f"fig-{fig['id']}.svg").exists()
    md = (out / "report.md").read_text()
    html = (out / "report.html").read_text()
    assert "Published effect" in md and "shared/seeds/003" in md and "<img" in html
    assert md.index("## At a glance") < md.index("## lro-rate"), "the verdict table comes first"
    assert "LRO rate" in md
    # Every figure judged on per-run effects keeps them, for `stability`.
    from hvnet_lab import stability
    judged = [f for f in exp["figures"] if f["judged_by"]]
    assert judged and all(s for f in judged for c in f["judged_by"] for _, s in c["points"])
    assert {fid for fid, _, _ in stability.predict([res], draws=20)} == {f["id"] for f in judged}
    # The run's own effects, in order, through the rule give what it said.
    assert {fid: v for fid, (v, _) in stability.replay(res).items()} == {f["id"]: f["verdict"] for f in judged}


CHROMIUM = next((b for b in ("chromium", "chromium-browser") if hvlab.have(b)), None)


@pytest.mark.root
@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (scripts/install-deps.sh installs it)")
def test_report_loads_in_a_real_browser(quick_run, tmp_path):
    """Headless Chromium opens report.html: the page loads, every image
    loads, and the console shows no error."""
    out, r = quick_run
    assert r.returncode == 0, r.stdout + r.stderr
    probe = out / "probe.html"
    probe.write_text(
        "<!doctype html><title>waiting</title><iframe id=r src='report.html' width=1200 height=800></iframe><script>"
        "document.getElementById('r').onload = () => {"
        " const d = document.getElementById('r').contentDocument;"
        " const imgs = Array.from(d.images);"
        " const bad = imgs.filter(i => !(i.complete && i.naturalWidth > 0)).length;"
        " document.title = 'loaded ' + d.title + ' images ' + imgs.length + ' broken ' + bad; };"
        "</script>")
    p = hvlab.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--allow-file-access-from-files",
                   "--enable-logging=stderr", "--v=0", "--virtual-time-budget=10000", "--dump-dom", probe.as_uri()],
                  check=False, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    m = __import__("re").search(r"<title>loaded (.*) images (\d+) broken (\d+)</title>", p.stdout)
    assert m, p.stdout[:2000]
    assert m.group(1) == "hvnet lab report"
    assert int(m.group(2)) >= 3 and int(m.group(3)) == 0, m.group(0)
    console = [line for line in p.stderr.splitlines() if "CONSOLE" in line or "Failed to load resource" in line]
    assert not [c for c in console if "rror" in c or "Failed to load" in c], console



def links():
    """The root namespace's network devices."""
    return sorted(line.split()[0] for line in hvlab.run(["ip", "-br", "link"]).stdout.splitlines())


def netns():
    """The named network namespaces."""
    return sorted(line.split()[0] for line in hvlab.run(["ip", "netns", "list"]).stdout.splitlines())

@pytest.mark.root
def test_a_lab_run_with_open_vswitch_leaves_nothing_behind(tmp_path):
    """lro-local brings up hvnet, a Linux bridge and Open vSwitch's
    userspace datapath; afterwards the root namespace has the same devices
    and the same namespaces as before."""
    if not hvlab.have("ovs-vswitchd"):
        pytest.skip("Open vSwitch is not installed (scripts/install-deps.sh installs it)")
    before = (links(), netns())
    r = hvlab.run([hvlab.hvnet_bin(), "lab", "run", "lro-local", "--quick", "--out", str(tmp_path / "lab")],
                  check=False, timeout=600)
    assert r.returncode in (0, 2), r.stdout + r.stderr
    res = json.loads((tmp_path / "lab" / "results.json").read_text())
    refs = res["experiments"][0]["raw"]["references"]
    assert isinstance(refs["ovs"], list), f"the OVS reference ran: {refs['ovs']}"
    assert (links(), netns()) == before


PHYSICAL = ["uplink-rss", "vxlan-rss", "splitrx", "tso-offload", "rx-csum", "port-batch", "netqueue", "lro-rate-wire"]


@pytest.mark.root
def test_the_physical_side_experiments_run_and_leave_nothing_behind(tmp_path):
    """Seed 001's figures on uplinks (and 003's LRO rates from a real wire),
    each --quick: every figure has our values for each configuration, a
    verdict and its published source; the root namespace is as before."""
    before = (links(), netns())
    r = hvlab.run([hvlab.hvnet_bin(), "lab", "run", *PHYSICAL, "--quick", "--out", str(tmp_path / "lab")],
                  check=False, timeout=900)
    assert r.returncode in (0, 2), r.stdout + r.stderr
    res = json.loads((tmp_path / "lab" / "results.json").read_text())
    assert [e["name"] for e in res["experiments"]] == PHYSICAL
    for e in res["experiments"]:
        assert e["figures"], e["name"]
        for fig in e["figures"]:
            assert fig["verdict"] in ("reproduced", "not reproduced", "inconclusive"), fig
            assert "shared/seeds/00" in fig["source"], fig
            values = [v for series in fig["series"].values() for _, v in series]
            assert values and all(isinstance(v, (int, float)) and v > 0 for v in values), (fig["id"], fig["series"])
    figs = {f["id"]: f for e in res["experiments"] for f in e["figures"]}
    # Every configuration compared has its point.
    assert [x for x, _ in figs["uplink-rss-throughput"]["series"]["hvnet RSS on"]] == ["large", "small"]
    assert {x for x, _ in figs["tso-offload-cpu"]["series"]["hvnet"]} == {"hardware", "software", "vxlan"}
    # Queues in use come from the uplink's filters: Dynamic NetQueue starts
    # packed, so at low load it uses fewer than static's one per VM.
    spread = figs["netqueue-dynamic-spread"]["series"]
    assert [x for x, _ in spread["static"]] == ["low", "high"] and spread["static"][0][1] == 4, spread
    assert spread["dynamic"][0][1] < 4, spread
    # rx-csum's two switches ran at the same moment, round by round.
    csum = next(e for e in res["experiments"] if e["name"] == "rx-csum")["samples"]
    assert sorted((s["csum"], s["at_once_with"]) for s in csum) == [("hardware", ["software"]),
                                                                    ("software", ["hardware"])], csum
    assert (links(), netns()) == before


MEASUREMENTS = ["fabrics", "per-frame", "hostile-neighbour", "uplinks"]


@pytest.mark.root
def test_the_measurements_run_beside_the_references_and_leave_nothing_behind(tmp_path):
    """The measurements, each --quick: every figure is "measured" (no
    verdict, no published source), has a positive value for every
    configuration it compares (hvnet and each reference that could run),
    and every run's command is kept; the root namespace is as before."""
    before = (links(), netns())
    r = hvlab.run([hvlab.hvnet_bin(), "lab", "run", *MEASUREMENTS, "--quick", "--out", str(tmp_path / "lab")],
                  check=False, timeout=900)
    assert r.returncode == 0, r.stdout + r.stderr
    res = json.loads((tmp_path / "lab" / "results.json").read_text())
    assert [e["name"] for e in res["experiments"]] == MEASUREMENTS
    assert report.check(res) == []
    figs = {}
    for e in res["experiments"]:
        assert e["samples"] and all("command" in s for s in e["samples"]), e["name"]
        for fig in e["figures"]:
            assert fig["verdict"] == "measured" and fig["why_not"], fig
            values = [v for series in fig["series"].values() for _, v in series]
            assert values and all(v > 0 for v in values), (fig["id"], fig["series"])
            figs[fig["id"]] = fig
    assert {"hvnet", "hvnet-uring", "bridge"} <= set(figs["fabrics-throughput"]["series"])
    assert {"hvnet-uplink", "bridge-uplink", "hvnet-vxlan", "linux-vxlan"} <= set(figs["uplinks-throughput"]["series"])
    assert [x for x, _ in figs["hostile-neighbour-throughput"]["series"]["VM c to VM b"]] == \
        ["neighbour idle", "neighbour hostile"]
    # A few system calls per frame at most (a TAP port reads and writes a
    # frame per call; other ports batch).
    calls = dict(figs["per-frame-calls"]["series"]["hvnet"])
    assert 0 < calls["system calls"] < 10, calls
    assert (links(), netns()) == before


@pytest.mark.root
@pytest.mark.parametrize("how", ["ctrl-c", "sigterm"])
def test_an_interrupted_lab_run_leaves_nothing_behind(tmp_path, how):
    """Ctrl-C (SIGINT to the terminal's whole process group), or SIGTERM to
    the lab alone, while a run has its VMs up and traffic flowing: the run
    removes everything it made, says so and ends with status 130."""
    import os
    import signal
    import subprocess

    before = (links(), netns())
    p = subprocess.Popen([hvlab.hvnet_bin(), "lab", "run", "lro-rate", "--quick", "--out", str(tmp_path / "lab")],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        # Interrupt once the experiment's VMs exist and traffic is running.
        assert hvlab.eventually(lambda: len(netns()) >= len(before[1]) + 2 or p.poll() is not None, timeout=120)
        assert p.poll() is None, "the run ended before it could be interrupted"
        assert hvlab.eventually(lambda: hvlab.run(["pgrep", "-g", str(p.pid), "-f", "iperf3 .*-c"], check=False).returncode == 0,
                              timeout=60)
        if how == "ctrl-c":
            os.killpg(p.pid, signal.SIGINT)
        else:
            p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    assert p.returncode == 130, out + err
    assert "interrupted during lro-rate" in err and "Traceback" not in err, err
    assert (links(), netns()) == before


@pytest.mark.root
@pytest.mark.skipif(not Path("/usr/bin/linux.uml").exists(), reason="needs user-mode-linux")
def test_a_quick_experiment_with_real_guests(tmp_path):
    out = tmp_path / "lab"
    r = hvlab.run([hvlab.hvnet_bin(), "lab", "run", "lro-local", "jumbo", "multiqueue", "--quick", "--vms", "uml",
                   "--out", str(out)], check=False, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    res = json.loads((out / "results.json").read_text())
    assert res["meta"]["vms"] == "uml"
    e = res["experiments"][0]
    assert {f["id"] for f in e["figures"]} >= {"lro-local-throughput", "lro-local-frames"}
    assert all(x["gbps"] > 0 for x in e["raw"]["hvnet"]["on"]), e["raw"]
    for e in res["experiments"]:
        assert "User-Mode Linux" in e["figures"][0]["note"], e["name"]
        # The guests went through hvnet exec: no namespace of theirs existed.
        assert all(s["command"].startswith("hvnet exec") for s in e["samples"]), (e["name"], e["samples"][0])
    # Experiments that cannot run with these guests say so, and which can.
    r = hvlab.run([hvlab.hvnet_bin(), "lab", "run", "ring-exhaustion", "--vms", "uml", "--out", str(out)], check=False)
    assert r.returncode == 1 and "does not run with --vms uml" in r.stderr and "lro-local" in r.stderr, r.stderr


@pytest.mark.root
@pytest.mark.skipif(not shutil.which("qemu-system-x86_64"), reason="needs qemu-system-x86")
def test_ring_exhaustion_on_a_qemu_guests_receive_virtqueue(tmp_path):
    """QEMU guests hvnet starts: the receiving guest's virtqueue, set up
    with the sizes compared, is the ring that fills."""
    before = (links(), netns())
    out = tmp_path / "lab"
    r = hvlab.run([hvlab.hvnet_bin(), "lab", "run", "ring-exhaustion", "--quick", "--vms", "qemu", "--out", str(out)],
                  check=False, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    res = json.loads((out / "results.json").read_text())
    assert res["meta"]["vms"] == "qemu"
    (e,) = res["experiments"]
    assert {f["id"] for f in e["figures"]} == {"ring-exhaustion-drops", "ring-exhaustion-retransmits"}
    # The guest's driver set up the virtqueue each switch asked for.
    assert sorted((x["rings"], x["virtqueue"]) for x in e["samples"]) == [(256, 256), (1024, 1024)], e["samples"]
    assert all(x["gbps"] > 0 and x["command"].startswith("hvnet exec") for x in e["samples"]), e["samples"]
    assert "QEMU" in e["figures"][0]["note"]
    assert (links(), netns()) == before


def test_at_once_runs_calls_at_the_same_moment_and_raises_their_errors():
    """Fleets measured side by side: each call in its own thread (two that
    each wait for the other end only if both run at once); results by key;
    a call's exception comes back to the caller."""
    import threading
    from hvnet_lab.fleet import at_once
    met = threading.Barrier(2, timeout=10)
    assert at_once({k: (lambda k=k: (met.wait(), k)[1]) for k in ("static", "dynamic")}) == {"static": "static",
                                                                                             "dynamic": "dynamic"}

    def fails():
        raise RuntimeError("v0 does not answer")
    with pytest.raises(RuntimeError, match="v0 does not answer"):
        at_once({"a": fails, "b": lambda: 1})
