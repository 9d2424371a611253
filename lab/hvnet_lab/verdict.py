"""Verdicts that hold from one run to the next.

Each compared configuration is measured N times, the configurations
interleaved (A, B, B, A, ...) so that the machine's drift hits both. A
published effect is judged on the per-repetition ratios (or differences)
at every point the study claims it, through a confidence interval of at
least 75% for their centre: the Hodges-Lehmann interval (the Walsh
averages' order statistics that Wilcoxon's signed-rank test gives; on a
log scale for ratios). It assumes only that the effects scatter
symmetrically about their centre, and it narrows as runs are added about
as fast as a mean's interval does (the median's own interval, used
before, needed about half again as many runs for the same width: at 7
runs it was the 2nd to 6th sample). A wild run widens it towards itself:
the verdict then turns inconclusive rather than wrong.

- reproduced: the interval lies past the threshold at every point, and
  past the no-effect band too (a quarter of the published size on a log
  scale, never less than 5%, the machine's noise; 5% where the study gave
  only a direction);
- not reproduced: at some point the interval lies on the wrong side of
  the threshold, or inside the no-effect band (an effect of about nothing
  where the study saw one);
- inconclusive: the interval covers a threshold or a band's edge; or it
  lies inside the band where the published effect does too (smaller
  than this machine's noise: an effect of that size cannot be told from
  none here, so finding none refutes nothing).

A comparison still inconclusive after N runs gets more, up to 5N
(`interleaved(..., settle=)`), of only the configurations its undecided
points are drawn from: the interval narrows as runs are added, so an
effect that can be told apart on this machine is, and one of about the
threshold's size stays inconclusive and says why. No rule keeps an
effect that sits on a boundary from landing on either side of it in
some runs; a narrower interval narrows the stretch of effects that can
(docs/perf/lab.md says how many figures that leaves on this machine).

With one run per point (`--quick`) the interval is a single value: the
verdict is indicative only, and says so.
"""

import math

REPRODUCED, NOT_REPRODUCED, INCONCLUSIVE = "reproduced", "not reproduced", "inconclusive"
# A scenario that measures rather than reproduces a study: its figures
# stand side by side, judged by nobody.
MEASURED = "measured"

# What results.json says decided its verdicts (older files: the median's
# order-statistic interval, up to 2N+1 runs).
INTERVAL = "the effect's Hodges-Lehmann interval of at least 75% (log scale for ratios)"

# Ratios within 5% of no change are no effect on this machine whatever
# was published: its run-to-run spread is about that wide.
NOISE = math.log(1.05)


def median(xs):
    xs = sorted(xs)
    n = len(xs)
    if n == 0:
        return float("nan")
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


def spread(xs):
    """Median, min and max of the samples."""
    return {"median": median(xs), "min": min(xs), "max": max(xs), "n": len(xs)}


def summarize(runs):
    """One point from its runs: the median of every numeric field, the
    min-max spread of each, and the runs themselves."""
    out = {}
    keys = [k for k, v in runs[0].items() if isinstance(v, (int, float)) and not isinstance(v, bool)]
    for k in keys:
        vals = [r[k] for r in runs if isinstance(r.get(k), (int, float))]
        out[k] = median(vals)
        out.setdefault("spread", {})[k] = [min(vals), max(vals)]
    for k, v in runs[0].items():
        if k not in out:
            out[k] = v
    out["runs"] = runs
    return out


def signed_rank_counts(n):
    """How many subsets of {1..n} have each rank sum: the null
    distribution of Wilcoxon's signed-rank statistic, times 2^n."""
    counts = [1] + [0] * (n * (n + 1) // 2)
    for rank in range(1, n + 1):
        for total in range(len(counts) - 1, rank - 1, -1):
            counts[total] += counts[total - rank]
    return counts


def interval(xs, log=False):
    """The Hodges-Lehmann confidence interval, of at least 75%, for the
    centre of the samples: (w(k), w(m+1-k)) of their m = n(n+1)/2 sorted
    Walsh averages (x_i + x_j) / 2, i <= j, with the largest k whose
    coverage 1 - 2 P(T < k) is 75% or more, T the signed-rank statistic.
    With `log` (ratios, all positive), on the samples' logarithms. For 3
    samples or fewer it is their min-max."""
    xs = list(xs)
    if log:
        xs = [math.log(x) for x in xs]
    n = len(xs)
    walsh = sorted((xs[i] + xs[j]) / 2 for i in range(n) for j in range(i, n))
    counts = signed_rank_counts(n)
    k, below = 1, counts[0]
    while k < len(walsh) // 2 and 1 - 2 * (below + counts[k]) / 2 ** n >= 0.75:
        below += counts[k]
        k += 1
    lo, hi = walsh[k - 1], walsh[len(walsh) - k]
    return (math.exp(lo), math.exp(hi)) if log else (lo, hi)


class Judged(tuple):
    """(verdict, reason), with the judge calls behind it (`calls`: each
    one's points and arguments), kept in results.json so that
    `stability` can put the same effects through the rule again."""

    def __new__(cls, verdict, reason, calls=()):
        judged = super().__new__(cls, (verdict, reason))
        judged.calls = list(calls)
        return judged


def judge(points, direction, threshold=1.0, what="ratio", published=None):
    """`points`: [(label, samples)], the effect's samples at each point the
    study claims it (ratios on/off, or differences). `direction`: "up"
    (the effect makes the value larger than `threshold`) or "down".
    `published`: the published effect as a ratio where there is one —
    one number for every point, or {label: ratio} per point. Within a
    quarter of it (on a log scale) of no change, and never less than
    NOISE, is the no-effect band: an interval inside it shows no effect of
    that kind (not reproduced), an interval across its edge cannot tell
    (inconclusive). Returns (verdict, reason), a Judged."""
    points = [(label, list(s)) for label, s in points]
    call = {"points": [[label, s] for label, s in points], "direction": direction, "threshold": threshold,
            "what": what, "published": published}
    verdict, reason = weigh(points, direction, threshold, what, published)
    return Judged(verdict, reason, [call])


def shape(calls):
    """The labels of each judge call's points: two runs judged a figure the
    same way where these match."""
    return [[label for label, _ in c["points"]] for c in calls]


def published_at(published, label):
    """The published effect at `label` (`published`: one ratio for every
    point, or {label: ratio}), where one was."""
    p = published.get(label) if isinstance(published, dict) else published
    return p if p and p > 0 and p != 1 else None


def no_effect_band(published, threshold, what):
    """The no-effect band's half-width on a log scale for a point whose
    published effect is `published` (None where there is none to judge
    against)."""
    if published:
        return max(abs(math.log(published)) / 4, NOISE)
    # No published size: an effect past no change, within the machine's
    # noise, is still none.
    return NOISE if threshold == 1 and what == "ratio" else None


def edges(call, label):
    """Where the verdict of a judge call's point turns: its threshold and,
    where it has a no-effect band, the band's edge on the effect's side."""
    b = no_effect_band(published_at(call["published"], label), call["threshold"], call["what"])
    out = [call["threshold"]]
    if b:
        out.append(math.exp(b) if call["direction"] == "up" else math.exp(-b))
    return sorted(set(out))


def point_interval(samples, what):
    """The interval a point is judged on: on a log scale for ratios (all
    positive)."""
    return interval(samples, log=min(samples) > 0 and what.endswith("ratio"))


def weigh(points, direction, threshold, what, published):
    """judge's verdict and reason, without the record of the call."""
    up = direction == "up"

    def size(label):
        return published_at(published, label)

    def band(label):
        return no_effect_band(size(label), threshold, what)

    def of_size(label):
        """What set the band's edge."""
        p = size(label)
        if not p:
            return "the machine's noise"
        if band(label) > NOISE:
            return f"a quarter of the published {p:.2f}"
        return f"the machine's noise; published {p:.2f}"

    flat, wrong, unsure = [], [], []
    for label, s in points:
        if not s:
            unsure.append(f"{label} (no runs)")
            continue
        lo, hi = point_interval(s, what)
        b = band(label)
        desc = f"{label} ({what} {value_range(s)}, median {median(s):.3g}" + (
            f", interval {lo:.3g}–{hi:.3g})" if not (math.isclose(lo, min(s)) and math.isclose(hi, max(s))) else ")")
        opposite = (hi < threshold) if up else (lo > threshold)
        inside = b and lo > 0 and math.exp(-b) < lo and hi < math.exp(b)
        # A published effect inside the band too is one this machine
        # cannot tell from none: finding none refutes nothing.
        published_inside = size(label) and abs(math.log(size(label))) < (b or 0)
        if inside and published_inside and not opposite:
            unsure.append(f"{desc}: within {math.exp(-b):.2f}–{math.exp(b):.2f} of no change, the machine's noise, "
                          f"as is the published {size(label):.3f}: an effect of that size cannot be told from none here")
        elif inside:
            flat.append(f"{desc}: within {math.exp(-b):.2f}–{math.exp(b):.2f} of no change, {of_size(label)}")
        elif opposite:
            wrong.append(desc)
        elif not ((lo > threshold) if up else (hi < threshold)):
            unsure.append(f"{desc}: covers the threshold {threshold:g}")
        elif b and not ((lo >= math.exp(b)) if up else (hi <= math.exp(-b))):
            edge = math.exp(b) if up else math.exp(-b)
            unsure.append(f"{desc}: past the threshold {threshold:g} but covers {edge:.2f}, the edge of no "
                          f"effect ({of_size(label)})")
    if flat:
        return NOT_REPRODUCED, "no effect at " + "; ".join(flat)
    if wrong:
        return NOT_REPRODUCED, "opposite beyond the spread at " + ", ".join(wrong)
    if unsure:
        return INCONCLUSIVE, "the spread cannot decide at " + "; ".join(unsure)
    return REPRODUCED, ""


def undecided(figures):
    """What more runs could still decide: the labels of the points whose
    own interval decides nothing, in every figure (a figure record, or a
    Judged) still inconclusive; None for one that keeps no judge calls
    (every point). Empty once every verdict is decided."""
    out = set()
    for f in figures:
        verdict, calls = (f["verdict"], f.get("judged_by")) if isinstance(f, dict) else (f[0], getattr(f, "calls", []))
        if verdict != INCONCLUSIVE:
            continue
        open_points = {label for c in calls or [] for label, s in c["points"]
                       if weigh([(label, s)], c["direction"], c["threshold"], c["what"], c["published"])[0]
                       == INCONCLUSIVE}
        out |= open_points or {None}
    return out


def both(*verdicts):
    """All of several claims: not reproduced if any is, reproduced if all
    are, else inconclusive; the reasons joined."""
    vs = [v for v, _ in verdicts]
    why = "; ".join(r for _, r in verdicts if r)
    calls = [c for judged in verdicts for c in getattr(judged, "calls", [])]
    if NOT_REPRODUCED in vs:
        return Judged(NOT_REPRODUCED, why, calls)
    if all(v == REPRODUCED for v in vs):
        return Judged(REPRODUCED, "", calls)
    return Judged(INCONCLUSIVE, why, calls)


def ratios(a_runs, b_runs, key):
    """Per-repetition ratios a/b of `key` (runs paired by repetition)."""
    return [a[key] / b[key] if b[key] else float("inf") for a, b in zip(a_runs, b_runs)]


def value_range(s):
    lo, hi = min(s), max(s)
    return f"{lo:.3g}" if lo == hi else f"{lo:.3g}–{hi:.3g}"


def effect_size(ours, published):
    """How big our effect is beside the published one (both as ratios)."""
    if not published:
        return ""
    return f"size {ours:.2f} against published {published:.2f} ({ours / published:.2f}x the published effect)"
