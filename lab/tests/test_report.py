"""The report and `hvnet lab compare`: results.json in, Markdown, HTML and
plots out, without running an experiment."""

import json
import sys
from pathlib import Path

import hvlab
from hvnet_lab import report

LAB = Path(__file__).resolve().parents[1]


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


def test_compare_takes_a_runs_directory_and_names_what_is_missing(tmp_path):
    import subprocess
    fig = {"id": "f1", "verdict": "reproduced", "reproduced": True, "claim": "x", "why_not": ""}
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        meta = {"date": "d", "git_revision": name * 3, "repeat": 3}
        (tmp_path / name / "results.json").write_text(json.dumps({"meta": meta, "experiments": [{"figures": [fig]}]}))
    run = lambda *args: subprocess.run([sys.executable, "-m", "hvnet_lab", "compare", *args],  # noqa: E731
                                       capture_output=True, text=True, cwd=LAB, env={"PYTHONPATH": str(LAB)})
    r = run(str(tmp_path / "a"), str(tmp_path / "b" / "results.json"))
    assert r.returncode == 0 and "aaa" in r.stdout and "bbb" in r.stdout, r
    r = run(str(tmp_path / "a"), str(tmp_path / "c"))
    assert r.returncode == 1 and "c does not exist" in r.stderr and "Traceback" not in r.stderr, r


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


def test_report_flags_verdicts_that_could_differ_in_another_run(tmp_path):
    """From a run's own per-run effects, drawn again through the rule: a
    verdict whose effect straddles an edge is flagged with its chance of
    differing in another run, one clear of every edge is not; a quick run
    (one run per point, nothing to draw again) flags nothing."""
    from hvnet_lab.figures import LRO_VMXNET3, figure
    from hvnet_lab.verdict import judge
    figs = [figure("clear", "Clear", "x", "y", {"s": [("a", 1.0)]}, {}, LRO_VMXNET3, "clear claim",
                   judge([("x", [2.0, 2.1, 1.9])], "up"), "n"),
            figure("edge", "Edge", "x", "y", {"s": [("a", 1.0)]}, {}, LRO_VMXNET3, "edge claim",
                   judge([("x", [0.98, 1.05, 1.12, 1.02, 1.08, 1.0, 1.06, 1.04, 1.1])], "up"), "n")]
    meta = {"date": "d", "host": "h", "cpu_model": "c", "cpus": 2, "kernel": "k", "git_revision": "r",
            "iperf3": "3", "repeat": 3}
    res = json.loads(json.dumps({"meta": meta, "experiments": [
        {"name": "e", "reproduces": "LRO for VMXNET3 on Windows VMs, Figures 1-3", "workload": "w", "figures": figs}]}))
    report.render(res, tmp_path)
    md = (tmp_path / "report.md").read_text()
    rows = {line.split("|")[2].strip(): line for line in md.splitlines() if line.startswith("| e |")}
    assert "could differ in another run" in rows["edge"] and "could differ" not in rows["clear"], md
    assert "1 could with a chance of 10% or more" in md and "Another run would give another verdict" in md
    assert "could differ in another run" in (tmp_path / "report.html").read_text()
    res["meta"]["repeat"] = 1
    report.render(res, tmp_path)
    assert "could differ" not in (tmp_path / "report.md").read_text()


def test_studies_are_cited_by_their_titles_on_the_references_page():
    """Every reproduction names its study by the short title of its section
    in docs/references.md, and every section is there under its anchor."""
    from hvnet_lab import experiments, figures
    page = report.REFERENCES.read_text()
    for anchor, (short, _) in figures.STUDIES.items():
        assert f'<a id="{anchor}"></a>\n## {short}\n' in page, anchor
    shorts = [short for short, _ in figures.STUDIES.values()]
    for e in experiments.EXPERIMENTS:
        assert e["reproduces"] == "measurement" or e["reproduces"].startswith(tuple(shorts)), e["name"]
    for source in (figures.LRO_VMXNET3, figures.NIC_TECHNOLOGY, figures.CPU_SCHEDULING, figures.LRO_VIRTUALIZED,
                   figures.JUMBO_FRAMES):
        assert figures.cites_study(source) and not figures.cites_study(figures.MEASUREMENT), source
    assert figures.LRO_VIRTUALIZED == "LRO in a Virtualized System (Hatori & Oi, VPACT 2008)"


def test_report_links_each_study_to_the_references_page(tmp_path, monkeypatch):
    """Written inside the repository, a report's Markdown links a study's
    short title (in the summary's study column, each figure's source, an
    experiment's workload) to its section of the references page, by a
    path relative to the report; written elsewhere, the title stands
    alone. The HTML names it plainly."""
    from hvnet_lab.figures import NIC_TECHNOLOGY, figure
    from hvnet_lab.verdict import judge
    fig = figure("f", "F", "x", "y", {"s": [("a", 1.0)]}, {}, NIC_TECHNOLOGY + ", Figure 9", "claim",
                 judge([("x", [2.0, 2.1, 1.9])], "up"), "n")
    meta = {"date": "d", "host": "h", "cpu_model": "c", "cpus": 2, "kernel": "k", "git_revision": "r",
            "iperf3": "3", "repeat": 1}
    res = json.loads(json.dumps({"meta": meta, "experiments": [
        {"name": "e", "reproduces": "NIC Technology in vSphere, Figure 9",
         "workload": "as in NIC Technology in vSphere", "figures": [fig]}]}))
    assert report.check(res) == []
    link = "[NIC Technology in vSphere](../../../docs/references.md#nic-technology)"
    monkeypatch.setattr(report, "REFERENCES", tmp_path / "repo" / "docs" / "references.md")
    out = tmp_path / "repo" / "lab" / "results" / "run"
    out.mkdir(parents=True)
    report.render(res, out)
    md = (out / "report.md").read_text()
    assert "| experiment | figure | study |" in md and f"| e | f | {link} | claim |" in md, md
    assert f"Source: {link} (Rishi Mehta, VMware white paper), Figure 9. n" in md, md
    assert f"## e — reproduces NIC Technology in vSphere, Figure 9\n\nas in {link}\n" in md, md
    assert "<td>NIC Technology in vSphere</td>" in (out / "report.html").read_text()
    assert report.references_from(tmp_path / "elsewhere") is None
    report.render(res, tmp_path)
    md = (tmp_path / "report.md").read_text()
    assert "| e | f | NIC Technology in vSphere | claim |" in md and "references.md" not in md, md


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
                  cwd=str(LAB))
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert "hvnet lab run all --out" in r.stderr, r.stderr


def test_check_names_what_a_report_cannot_show():
    fig = {"id": "f", "series": {"hvnet": [("a", 1.0), ("b", float("nan"))]}, "verdict": "reproduced",
           "source": "a blog", "claim": "c", "why_not": ""}
    res = {"experiments": [{"name": "e", "figures": [fig, dict(fig, id="g", series={})]},
                           {"name": "x", "error": "RuntimeError: boom", "figures": []},
                           {"name": "y", "figures": []}]}
    assert report.check(res) == ["f: hvnet at b is nan", "f: no published source", "g: no published source",
                                 "g: no series", "x: not run: RuntimeError: boom", "y: no figures"]


def test_what_rule_a_run_was_judged_by():
    """Older files do not say: the median's interval, up to 2N+1 runs."""
    assert report.rule({"repeat": 3}) == (3, 7, "the median's interval of at least 75%")
    assert report.rule({"repeat": 1}) == (1, 1, "the median's interval of at least 75%")
    assert report.rule({"repeat": 3, "most": 15, "interval": "i"}) == (3, 15, "i")
    # Flagged: a chance of 10% or more, most likely first.
    assert report.fragile({"a": (0.05, {}), "b": (0.3, {}), "c": (0.1, {})}) == [(0.3, "b"), (0.1, "c")]


def test_the_overview_draws_every_point_judged_on_a_ratio():
    from hvnet_lab.figures import figure
    from hvnet_lab.verdict import judge
    figs = [figure("thr", "t", "x", "y", {}, {}, "s", "c",
                   judge([("256", [1.2, 1.3, 1.4]), ("64K", [2.0, 2.2, 2.1])], "up", published={"64K": 2.4}), "n"),
            figure("lat", "t", "x", "y", {}, {}, "s", "c", judge([("idle", [-3.0, -1.0])], "down", 0, "difference"), "n"),
            figure("m", "t", "x", "y", {}, {}, "s", "c", ("measured", "said"), "n")]
    res = json.loads(json.dumps({"experiments": [{"figures": figs}]}))
    assert report.overview_points(res) == [("thr", "256", "reproduced", 1.3, (1.2, 1.4), None),
                                           ("thr", "64K", "reproduced", 2.1, (2.0, 2.2), 2.4)]
