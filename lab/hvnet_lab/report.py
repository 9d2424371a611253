"""The lab report: results.json in, Markdown and a static HTML page with
plots (PNG and SVG) out. Each figure shows hvnet's values, the references
measured in the same run, and the published values with their source, and
says whether the published effect was reproduced."""

import html
import json
import math
import os
from pathlib import Path

from . import stability
from .figures import cites_study, linked
from .verdict import INTERVAL, MEASURED, NOISE, edges, median, point_interval, published_at, shape

# The overview's colour of each verdict.
COLOURS = {"reproduced": "#2a9d4b", "not reproduced": "#c0392b", "inconclusive": "#e08e0b"}

# The page listing the published studies; a report's Markdown links each
# study's short title to its section there.
REFERENCES = Path(__file__).resolve().parents[2] / "docs" / "references.md"


def references_from(out_dir: Path):
    """The references page's path relative to `out_dir`, for a report
    written inside this repository; None elsewhere (the titles then stand
    without links)."""
    out = Path(out_dir).resolve()
    if REFERENCES.parents[1] not in (out, *out.parents):
        return None
    return os.path.relpath(REFERENCES, out)


def _numeric(xs):
    return all(isinstance(x, (int, float)) for x in xs)


def plot(fig, out_dir: Path):
    """Writes fig-<id>.png and .svg; returns the PNG's name (None when
    matplotlib is missing)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    f, ax = plt.subplots(figsize=(7, 4))
    allx = [x for pts in list(fig["series"].values()) + list(fig["published"].values()) for x, _ in pts]
    cats = None if _numeric(allx) else list(dict.fromkeys(str(x) for x in allx))
    pos = (lambda x: x) if cats is None else (lambda x: cats.index(str(x)))
    spread = fig.get("spread", {})
    for label, pts in fig["series"].items():
        if pts:
            line = ax.plot([pos(x) for x, _ in pts], [y for _, y in pts], marker="o", label=label)[0]
            bars = spread.get(label) or []
            if bars and any(lo != hi for _, lo, hi in bars):
                # The min-max spread of the runs behind each median.
                ax.errorbar([pos(x) for x, _, _ in bars], [(lo + hi) / 2 for _, lo, hi in bars],
                            yerr=[(hi - lo) / 2 for _, lo, hi in bars], fmt="none", ecolor=line.get_color(), capsize=3, alpha=0.7)
    for label, pts in fig["published"].items():
        if pts:
            ax.plot([pos(x) for x, _ in pts], [y for _, y in pts], marker="s", linestyle="--", label=label)
    if cats is not None:
        ax.set_xticks(range(len(cats)), cats)
    ys = [y for pts in list(fig["series"].values()) + list(fig["published"].values()) for _, y in pts if y > 0]
    if ys and max(ys) / min(ys) > 100:
        ax.set_yscale("log")
    ax.set_xlabel(fig["xlabel"])
    ax.set_ylabel(fig["ylabel"])
    ax.set_title(fig["title"], fontsize=10)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    f.tight_layout()
    name = f"fig-{fig['id']}"
    f.savefig(out_dir / f"{name}.png", dpi=110)
    f.savefig(out_dir / f"{name}.svg")
    plt.close(f)
    return f"{name}.png"


def _fmt(v):
    if isinstance(v, float):
        return f"{v:,.3g}" if abs(v) < 100 else f"{v:,.0f}"
    return str(v)


def _values(fig, label, pts):
    spread = {str(x): (lo, hi) for x, lo, hi in fig.get("spread", {}).get(label) or []}

    def one(x, y):
        lo, hi = spread.get(str(x), (y, y))
        return f"{x}: {_fmt(y)}" + (f" ({_fmt(lo)}–{_fmt(hi)})" if lo != hi else "")
    return ", ".join(one(x, y) for x, y in pts)


def _table(fig):
    rows = []
    for label, pts in fig["series"].items():
        rows.append(f"| {label} (ours) | " + _values(fig, label, pts) + " |")
    for label, pts in fig["published"].items():
        rows.append(f"| {label} | " + ", ".join(f"{x}: {_fmt(y)}" for x, y in pts) + " |")
    return "| series | values |\n|---|---|\n" + "\n".join(rows)


def overview_points(results):
    """Every point a claim was judged at whose effect is a ratio: (figure
    id, point, verdict, median effect, interval, published effect or
    None), in the report's order."""
    out = []
    for exp in results["experiments"]:
        for fig in exp.get("figures", []):
            for call in fig.get("judged_by") or []:
                if call.get("what", "ratio") != "ratio":
                    continue
                for label, samples in call["points"]:
                    if not samples or min(samples) <= 0:
                        continue
                    out.append((fig["id"], str(label), fig["verdict"], median(samples),
                                point_interval(samples, "ratio"), published_at(call.get("published"), label)))
    return out


def overview(results, out_dir: Path):
    """fig-overview.png (and .svg): where hvnet stands against the studies
    at a glance. Each judged ratio (hvnet's median effect with the
    interval its verdict was decided on, coloured by verdict) beside the
    published effect (a hollow diamond), on one log-scale axis, the
    machine's noise band (no effect: within 5%) shaded. None when
    matplotlib is missing or nothing was judged on a ratio."""
    pts = overview_points(results)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    if not pts:
        return None
    f, ax = plt.subplots(figsize=(9, 1.4 + 0.24 * len(pts)))
    ax.axvspan(math.exp(-NOISE), math.exp(NOISE), color="#999", alpha=0.25, lw=0, label="no effect (machine noise, ±5%)")
    ax.axvline(1, color="#666", lw=0.8)
    for i, (fid, label, verdict, mid, (lo, hi), pub) in enumerate(pts):
        colour = COLOURS.get(verdict, "#555")
        ax.plot([lo, hi], [i, i], color=colour, lw=2.5, solid_capstyle="butt")
        ax.plot([mid], [i], "o", color=colour, ms=4)
        if pub:
            ax.plot([pub], [i], "D", mfc="none", mec="#222", ms=5)
    ax.set_yticks(range(len(pts)), [f"{fid} @ {label}" for fid, label, *_ in pts], fontsize=7)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel("effect as a ratio (hvnet: median and the interval judged; ◇ published)")
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color=c, lw=2.5, marker="o", ms=4, label=v) for v, c in COLOURS.items()]
    handles += [Line2D([], [], ls="none", marker="D", mfc="none", mec="#222", label="published")]
    ax.legend(handles=handles + ax.get_legend_handles_labels()[0][:1], fontsize=7, loc="lower left",
              bbox_to_anchor=(0, 1.0), ncol=3, frameon=False)
    ax.grid(axis="x", alpha=0.3, which="both")
    f.tight_layout()
    f.savefig(out_dir / "fig-overview.png", dpi=110, bbox_inches="tight")
    f.savefig(out_dir / "fig-overview.svg", bbox_inches="tight")
    plt.close(f)
    return "fig-overview.png"


# A verdict more likely than this to differ in another run is flagged in
# the table at the top.
FRAGILE = 0.10


def another_run(results, draws=500):
    """{figure id: (chance another run's verdict differs, {verdict:
    share})} from the run's own per-run effects drawn again through the
    rule (`hvnet lab stability` on this run alone); empty for a run of
    fewer than 3 runs per point, whose single values cannot be redrawn."""
    if rule(results["meta"])[0] < 3:
        return {}
    return {fid: (chance, shares) for fid, chance, shares in stability.predict([results], draws)}


def fragile(odds):
    """[(chance, figure id)] of the verdicts flagged as could differ in
    another run (chance FRAGILE or more), most likely first."""
    return sorted(((chance, fid) for fid, (chance, _) in odds.items() if chance >= FRAGILE), reverse=True)


def _another_run_text(odds):
    chance, shares = odds
    return (f"Another run would give another verdict with chance {chance:.0%} (this run's per-run effects drawn again "
            f"through the rule: " + ", ".join(f"{v} {p:.0%}" for v, p in shares.items()) + ")")


def render(results: dict, out_dir: Path):
    """Writes report.md and report.html (and the plots) into out_dir;
    returns `another_run`'s odds."""
    meta = results["meta"]
    reps, most, interval = rule(meta)
    odds = another_run(results)
    flagged = {fid: chance for chance, fid in fragile(odds)}
    page = references_from(out_dir)
    md = ["# hvnet lab report", "",
          f"Run {meta['date']} on {meta['host']} ({meta['cpu_model']}, {meta['cpus']} cores), kernel {meta['kernel']}, "
          f"hvnet {meta['git_revision']}, iperf3 {meta['iperf3']}, Open vSwitch {meta.get('openvswitch') or 'not installed'}; "
          f"{reps} run{'s' if reps > 1 else ''} per point"
          f"{f' (up to {most} where a verdict was undecided)' if most > reps else ''}, configurations "
          f"interleaved, medians drawn with their min–max spread, verdicts on {interval}"
          f"{' — quick run: one run per point, verdicts indicative only' if reps == 1 else ''}.", ""]
    body = []
    summary = []
    for exp in results["experiments"]:
        what = "a measurement" if exp["reproduces"] == "measurement" else f"reproduces {exp['reproduces']}"
        md += [f"## {exp['name']} — {what}", "", linked(exp["workload"], page), ""]
        body.append(f"<h2>{html.escape(exp['name'])} — {html.escape(what)}</h2><p>{html.escape(exp['workload'])}</p>")
        if exp.get("error"):
            md += [f"**Not run:** {exp['error']}", ""]
            body.append(f"<p><b>Not run:</b> {html.escape(exp['error'])}</p>")
            summary.append((exp["name"], "—", "not run", "", "", exp["error"], ""))
            continue
        for fig in exp["figures"]:
            png = plot(fig, out_dir)
            verdict = fig.get("verdict") or ("reproduced" if fig["reproduced"] else "not reproduced")
            flag = f"could differ in another run: {flagged[fig['id']]:.0%}" if fig["id"] in flagged else ""
            summary.append((exp["name"], fig["id"], verdict, fig["source"].split(" (")[0], fig["claim"],
                            fig["why_not"], flag))
            again = f" {_another_run_text(odds[fig['id']])}." if fig["id"] in odds else ""
            # A measurement asks a question; a reproduction tests a claim.
            claim_is = "Question" if verdict == MEASURED else "Published effect"
            md += [f"### {fig['title']}", ""]
            if png:
                md += [f"![{fig['id']}]({png})", ""]
            md += [_table(fig), "", f"**{claim_is}:** {linked(fig['claim'], page)} — **{verdict}**." + (f" Measured: {fig['why_not']}." if fig["why_not"] else "") + again, "",
                   f"Source: {linked(fig['source'], page)}. {fig['note']}", ""]
            body.append(f"<h3>{html.escape(fig['title'])}</h3>" + (f"<img src='{png}' alt='{fig['id']}'>" if png else "")
                        + "<table><tr><th>series</th><th>values</th></tr>"
                        + "".join(f"<tr><td>{html.escape(l)} (ours)</td><td>{html.escape(_values(fig, l, p))}</td></tr>" for l, p in fig["series"].items())
                        + "".join(f"<tr><td>{html.escape(l)}</td><td>{html.escape(', '.join(f'{x}: {_fmt(y)}' for x, y in p))}</td></tr>" for l, p in fig["published"].items())
                        + f"</table><p><b>{claim_is}:</b> {html.escape(fig['claim'])} — <b>{verdict}</b>."
                        + (f" Measured: {html.escape(fig['why_not'])}." if fig["why_not"] else "") + html.escape(again)
                        + f"</p><p class='src'>Source: {html.escape(fig['source'])}. {html.escape(fig['note'])}</p>")
    table = ["| experiment | figure | study | published effect and what hvnet measured | verdict |", "|---|---|---|---|---|"]
    table += [f"| {a} | {b} | {linked(study, page)} | {linked(claim, page)} | **{v}**{f' ({flag})' if flag else ''}{': ' + why if why else ''} |"
              for a, b, v, study, claim, why, flag in summary]
    counts = {}
    for row in summary:
        counts[row[2]] = counts.get(row[2], 0) + 1
    glance = ", ".join(f"{n} {v}" for v, n in counts.items()) + "." + (
        f" Drawn again from this run's own per-run effects, {sum(c for c, _ in odds.values()):.1f} verdicts are "
        f"expected to differ in another run; {len(flagged)} could with a chance of {FRAGILE:.0%} or more, "
        "flagged below (`hvnet lab stability` over several runs says more)." if odds else "")
    picture = overview(results, out_dir)
    seen = ([f"![every judged effect beside the published one]({picture})", "",
             "Each judged ratio: hvnet's median effect and the interval its verdict was decided on, coloured by "
             "verdict, beside the published effect (◇), on a log scale; the shaded band is no effect on this "
             "machine.", ""] if picture else [])
    md[4:4] = ["## At a glance", ""] + seen + [glance, ""] + table + [""]
    (out_dir / "report.md").write_text("\n".join(md) + "\n")
    page = ("<!doctype html><meta charset='utf-8'><title>hvnet lab report</title>"
            "<style>body{font-family:sans-serif;max-width:60em;margin:2em auto}img{max-width:100%}"
            "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 6px;font-size:90%}.src{color:#555}</style>"
            f"<h1>hvnet lab report</h1><p>{html.escape(md[2])}</p>"
            + "<h2>At a glance</h2>"
            + (f"<img src='{picture}' alt='every judged effect beside the published one'><p class='src'>"
               + html.escape(seen[2]) + "</p>" if picture else "")
            + f"<p>{html.escape(glance)}</p><table><tr><th>experiment</th><th>figure</th><th>study</th><th>published effect and what hvnet measured</th><th>verdict</th></tr>"
            + "".join(f"<tr><td>{html.escape(a)}</td><td>{html.escape(b)}</td><td>{html.escape(study)}</td><td>{html.escape(claim)}</td>"
                      + (f"<td><details><summary><b>{html.escape(v)}</b>{html.escape(f' ({flag})' if flag else '')}</summary>"
                         f"{html.escape(why)}</details>" if why else f"<td><b>{html.escape(v)}</b>{html.escape(f' ({flag})' if flag else '')}")
                      + "</td></tr>" for a, b, v, study, claim, why, flag in summary)
            + "</table>" + "".join(body))
    (out_dir / "report.html").write_text(page)
    return odds


def check(results: dict):
    """The report's contract: every figure present with finite numbers and a
    cited published value. Returns a list of problems (empty when fine)."""
    problems = []
    for exp in results["experiments"]:
        if exp.get("error"):
            problems.append(f"{exp['name']}: not run: {exp['error']}")
            continue
        if not exp["figures"]:
            problems.append(f"{exp['name']}: no figures")
        for fig in exp["figures"]:
            for label, pts in fig["series"].items():
                for x, y in pts:
                    if not (isinstance(y, (int, float)) and math.isfinite(y)):
                        problems.append(f"{fig['id']}: {label} at {x} is {y!r}")
            if fig.get("verdict") != MEASURED and not cites_study(fig["source"]):
                problems.append(f"{fig['id']}: no published source")
            if not fig["series"]:
                problems.append(f"{fig['id']}: no series")
    return problems


def load(path: Path) -> dict:
    return json.loads(path.read_text())


def _figures(results):
    out = {}
    for exp in results["experiments"]:
        for fig in exp.get("figures", []):
            out[fig["id"]] = fig
    return out


def rule(meta):
    """How a run reached its verdicts: (runs per point, most runs where
    undecided, the interval). Files from before 2026-11-24 do not say:
    the median's interval, up to 2N+1."""
    reps = meta.get("repeat", 1)
    return (reps, meta.get("most", 2 * reps + 1 if reps >= 3 else reps),
            meta.get("interval", "the median's interval of at least 75%"))


def moved(before_calls, after_calls):
    """Why a figure's verdict changed, point by point, where both runs
    judged it the same way: the effect's interval in each run, and
    whether they overlap across one of the verdict's edges (the same
    effect, within the spreads, landing on either side of an edge) or lie
    apart (the effect itself moved, as after a datapath change — or one
    run's interval of at least 75% missed it: drawn twice from one effect,
    the two intervals lie apart about one time in ten, at 3 to 15 runs)."""
    if not before_calls or not after_calls or shape(before_calls) != shape(after_calls):
        return []
    out = []
    for cb, ca in zip(before_calls, after_calls):
        for (label, sb), (_, sa) in zip(cb["points"], ca["points"]):
            if not sb or not sa:
                continue
            (lb, hb), (la, ha) = point_interval(sb, cb["what"]), point_interval(sa, ca["what"])
            # Only points with an edge within reach of either interval can
            # have moved the verdict.
            near = [f"{e:.3g}" for e in edges(ca, label) if min(lb, la) < e < max(hb, ha)]
            if not near:
                continue
            across = ("edge " if len(near) == 1 else "edges ") + " and ".join(near)
            span = f"{label}: interval {lb:.3g}–{hb:.3g}, then {la:.3g}–{ha:.3g}"
            if max(lb, la) > min(hb, ha):
                out.append(f"{span}: apart, about the {across}: the effect moved (or one run's interval "
                           "missed it, as for about one point in ten of two runs of the same effect)")
            else:
                out.append(f"{span}: they overlap, about the {across}: the same effect within the spreads, "
                           "on either side of it")
    return out


def compare(before: dict, after: dict) -> str:
    """Figure by figure: the verdict then and now, and what was measured
    (the claim, with our numbers and their spreads) where it changed."""
    a, b = _figures(before), _figures(after)
    head = (f"before: {before['meta']['date']}, hvnet {before['meta']['git_revision']}, "
            f"{before['meta'].get('repeat', 1)} run(s) per point\n"
            f"after:  {after['meta']['date']}, hvnet {after['meta']['git_revision']}, "
            f"{after['meta'].get('repeat', 1)} run(s) per point\n")
    rules = {"before": rule(before["meta"]), "after": rule(after["meta"])}
    if rules["before"] != rules["after"]:
        head += "".join(f"{when}: up to {most} runs where undecided, verdicts on {interval}\n"
                        for when, (_, most, interval) in rules.items())
        head += f"(each \"why\" draws both runs' intervals by today's rule: {INTERVAL})\n"
    lines = [head, f"{'figure':<32} {'before':<16} {'after':<16}"]
    details = []
    for fid in list(dict.fromkeys(list(a) + list(b))):
        va = a[fid].get("verdict", "reproduced" if a[fid]["reproduced"] else "not reproduced") if fid in a else "absent"
        vb = b[fid].get("verdict", "reproduced" if b[fid]["reproduced"] else "not reproduced") if fid in b else "absent"
        mark = "" if va == vb else "  <- changed"
        lines.append(f"{fid:<32} {va:<16} {vb:<16}{mark}")
        if fid in a and fid in b and (va != vb or a[fid]["claim"] != b[fid]["claim"]):
            why = moved(a[fid].get("judged_by"), b[fid].get("judged_by")) if va != vb else []
            details.append(f"{fid}:\n  before: {a[fid]['claim']}" + (f" [{a[fid]['why_not']}]" if a[fid]["why_not"] else "")
                           + f"\n  after:  {b[fid]['claim']}" + (f" [{b[fid]['why_not']}]" if b[fid]["why_not"] else "")
                           + "".join(f"\n  why:    {w}" for w in why))
    return "\n".join(lines + ([""] + details if details else []))
