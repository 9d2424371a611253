"""Verdicts that hold from one run to the next.

Each compared configuration is measured N times, the configurations
interleaved (A, B, A, B, ...) so that the machine's drift hits both. A
published effect is judged on the per-repetition ratios (or differences)
at every point the study claims it:

- reproduced: the effect's direction holds beyond the spread (every sample
  past the threshold) at every point;
- not reproduced: the opposite holds beyond the spread at some point
  (every sample there on the wrong side);
- inconclusive: the spread covers both sides somewhere.

With one run per point (`--quick`) the spread is a single value: the
verdict is indicative only, and says so.
"""

import math

REPRODUCED, NOT_REPRODUCED, INCONCLUSIVE = "reproduced", "not reproduced", "inconclusive"

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


def judge(points, direction, threshold=1.0, what="ratio", published=None):
    """`points`: [(label, samples)], the effect's samples at each point the
    study claims it (ratios on/off, or differences). `direction`: "up"
    (the effect makes the value larger than `threshold`) or "down".
    `published`: the published effect as a ratio where there is one —
    one number for every point, or {label: ratio} per point. A point whose
    median lies within a quarter of it (on a log scale) of no change shows
    no effect of that kind, whichever way its runs lean: not reproduced
    (the band is never narrower than NOISE).
    Judged on the median, so that an effect of about nothing gets the same
    verdict run after run instead of flipping with the noise around a
    threshold. Returns (verdict, reason)."""
    def past(x):
        return x > threshold if direction == "up" else x < threshold

    def against(x):
        return x < threshold if direction == "up" else x > threshold

    pub = published if isinstance(published, dict) else {label: published for label, _ in points}

    def band(label):
        p = pub.get(label)
        return max(abs(math.log(p)) / 4, NOISE) if p and p > 0 and p != 1 else None

    flat = [(label, s, band(label)) for label, s in points
            if s and band(label) and all(x > 0 for x in s) and abs(math.log(median(s))) < band(label)]
    if flat:
        return NOT_REPRODUCED, "no effect of the published size at " + ", ".join(
            f"{label} ({what} {value_range(s)}, median {median(s):.3g}, within {math.exp(-b):.2f}–{math.exp(b):.2f} "
            f"of no change; published {pub[label]:.2f})" for label, s, b in flat)
    wrong = [(label, s) for label, s in points if s and all(against(x) for x in s)]
    if wrong:
        return NOT_REPRODUCED, "opposite beyond the spread at " + ", ".join(
            f"{label} ({what} {value_range(s)})" for label, s in wrong)
    unsure = [(label, s) for label, s in points if not s or not all(past(x) for x in s)]
    if unsure:
        return INCONCLUSIVE, "the spread covers both sides at " + ", ".join(
            f"{label} ({what} {value_range(s)}, threshold {threshold:g})" for label, s in unsure)
    return REPRODUCED, ""


def both(*verdicts):
    """All of several claims: not reproduced if any is, reproduced if all
    are, else inconclusive; the reasons joined."""
    vs = [v for v, _ in verdicts]
    why = "; ".join(r for _, r in verdicts if r)
    if NOT_REPRODUCED in vs:
        return NOT_REPRODUCED, why
    if all(v == REPRODUCED for v in vs):
        return REPRODUCED, ""
    return INCONCLUSIVE, why


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
