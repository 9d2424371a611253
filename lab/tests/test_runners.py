"""Configurations run interleaved, with more rounds only for what is still
undecided, and fleets run at the same moment: the runners' logic, without
running anything."""

import pytest

from hvnet_lab.runners import most_runs


def test_an_undecided_comparison_gets_more_runs_and_no_more_than_it_needs():
    from hvnet_lab.runners import interleaved
    from hvnet_lab.verdict import judge, undecided
    b_samples = iter([1.3, 0.9, 1.3, 1.25, 1.4, 1.35, 1.3, 1.3])
    order = []

    def run(c):
        order.append(c)
        return {"v": 1.0 if c == "A" else next(b_samples)}

    def settle(runs):
        gain = [b["v"] / a["v"] for a, b in zip(runs["A"], runs["B"])]
        return undecided([judge([("B vs A", gain)], "up")])

    runs = interleaved(("A", "B"), 3, run, settle=settle)
    # Undecided while the interval is the min-max of 3 (0.9 among the
    # ratios), decided at the 4th, whose interval (2nd to 9th Walsh
    # average) leaves 0.9 out.
    # Every other round in reverse: neither always runs after the other.
    assert order == ["A", "B", "B", "A"] * 2 and len(runs["A"]) == len(runs["B"]) == 4, order
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
    # The extra rounds: the small size's two, every other one in reverse.
    extra = [order[i:i + 2] for i in range(12, len(order), 2)]
    small = [("off", "small"), ("on", "small")]
    assert extra == [small if (3 + k) % 2 == 0 else small[::-1] for k in range(len(extra))], order
    assert undecided(figs(runs)) == set()
    # No judge calls to say which point: everything again.
    assert undecided([{"verdict": "inconclusive", "judged_by": []}]) == {None}
    assert len(interleaved(configs, 3, lambda c: {"v": 1.0}, settle=lambda r: {None},
                           feeds=lambda c, label: False)[("on", "large")]) == 15


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


def test_an_undecided_comparison_gets_up_to_5n_runs_from_3():
    assert [most_runs(n) for n in (1, 2, 3, 5)] == [1, 2, 15, 25]
