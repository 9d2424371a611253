"""The verdict rule: the effect's interval against the threshold and the
no-effect band, and the medians, ratios and edges it is drawn from."""

import math

from hvnet_lab.verdict import (both, edges, effect_size, judge, median, no_effect_band, point_interval, published_at,
                               ratios, shape, spread, value_range)


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
    # A published effect inside the noise (the receive checksum cost in
    # NIC Technology in vSphere, 1.15/1.10): finding none refutes nothing, so inconclusive;
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


def test_medians_ratios_and_ranges():
    assert median([3, 1, 2]) == 2 and median([4, 1, 3, 2]) == 2.5 and math.isnan(median([]))
    assert spread([3, 1, 2]) == {"median": 2, "min": 1, "max": 3, "n": 3}
    # Paired by repetition; a zero below is an infinite ratio, not an error.
    assert ratios([{"g": 2}, {"g": 3}], [{"g": 1}, {"g": 0}], "g") == [2.0, float("inf")]
    assert ratios([{"g": 2}, {"g": 3}, {"g": 4}], [{"g": 1}], "g") == [2.0]
    assert value_range([1.0, 1.0]) == "1" and value_range([0.9, 1.234]) == "0.9–1.23"
    assert effect_size(1.5, None) == ""
    assert effect_size(1.5, 2.0) == "size 1.50 against published 2.00 (0.75x the published effect)"


def test_where_a_verdict_turns():
    """The published size at a point, the no-effect band it sets (a quarter
    of it on a log scale, never under the machine's noise), and the edges
    a judged point turns at."""
    assert published_at(1.5, "x") == 1.5 and published_at({"a": 1.2}, "a") == 1.2
    # No published size at that point, or none at all (1: no effect).
    assert published_at({"a": 1.2}, "b") is None and published_at(1.0, "x") is None and published_at(None, "x") is None
    noise = math.log(1.05)
    assert math.isclose(no_effect_band(3.0, 1, "ratio"), math.log(3) / 4)
    assert no_effect_band(1.05, 1, "ratio") == noise and no_effect_band(None, 1.0, "ratio") == noise
    # A threshold other than no change, or a difference: no band.
    assert no_effect_band(None, 0.95, "ratio") is None and no_effect_band(None, 0, "difference") is None
    (up,) = judge([("256", [1.2, 1.3, 1.4])], "up", published=2.0).calls
    assert edges(up, "256") == [1.0, 2 ** 0.25]
    (down,) = judge([("x", [0.5, 0.6])], "down", published=0.5).calls
    assert edges(down, "x") == [0.5 ** 0.25, 1.0]
    (loses_none,) = judge([("x", [1.0])], "up", 0.95).calls
    assert edges(loses_none, "x") == [0.95]
    # Two runs judged a figure the same way where its calls' labels match.
    assert shape(both(judge([("a", [1]), ("b", [2])], "up"), judge([("c", [1])], "up")).calls) == [["a", "b"], ["c"]]


def test_ratios_are_judged_on_a_log_scale():
    """A ratio's interval is symmetric about its geometric centre; a
    difference's (or anything not all positive) about its arithmetic one."""
    lo, hi = point_interval([1, 2, 4, 8], "ratio")
    assert math.isclose(lo, 2 ** 0.5) and math.isclose(hi, 2 ** 2.5)
    assert point_interval([1, 2, 4, 8], "difference") == (1.5, 6.0)
    assert point_interval([-1, 2, 4], "ratio") == (-1, 4)
