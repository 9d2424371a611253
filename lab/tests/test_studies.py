"""What the studies' modules compute from runs, without running them:
their verdicts and the figures shaped from summarized points."""

from hvnet_lab import cpu_and_rings, jumbo_frames, lro_gain, queues
from hvnet_lab.fabric_compare import ratio_range
from hvnet_lab.fleet import each, sizes_text
from hvnet_lab.verdict import NOT_REPRODUCED, REPRODUCED, summarize


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


def test_linear_fit_of_the_published_table():
    slope, icpt, r2 = cpu_and_rings.linear_fit(cpu_and_rings.PUB_002_CPU)
    assert 0.2 < slope < 0.25 and r2 > 0.98


def lro_rows(gain):
    """LRO off and on, three runs at each of the sizes of LRO for VMXNET3
    on Windows VMs: LRO on multiplies throughput, efficiency and frame
    size by `gain` and divides the frames delivered by it."""
    def runs(size, base, g):
        return [{"size": size, "gbps": base * g * k, "gbps_per_core": base * g * k, "rx_frames_per_s": 1e5 / g * k,
                 "rx_avg_frame": 1500 * g * k} for k in (0.98, 1.0, 1.02)]
    return {lro: [summarize(runs(size, base, g)) for size, base in (("256", 0.5), ("16K", 5.0), ("64K", 8.0))]
            for lro, g in (("off", 1.0), ("on", gain))}


def test_lro_figures_from_summarized_points():
    """The four figures of LRO for VMXNET3 on Windows VMs from LRO off/on
    points: our medians with their spread per size, the published values
    beside them, and verdicts on the per-repetition ratios."""
    figs = lro_gain.lro_figures("lro-local", lro_rows(2.0), lro_gain.PUB_000_LOCAL, "src", "note", lambda p: p["size"])
    assert [f["id"] for f in figs] == ["lro-local-throughput", "lro-local-cpu-efficiency", "lro-local-frames",
                                       "lro-local-frame-size"]
    assert all(f["verdict"] == REPRODUCED for f in figs), [(f["id"], f["why_not"]) for f in figs]
    thr = figs[0]
    assert list(thr["series"]) == ["hvnet LRO off (Gbit/s)", "hvnet LRO on (Gbit/s)"]
    assert thr["series"]["hvnet LRO on (Gbit/s)"] == [("256", 1.0), ("16K", 10.0), ("64K", 16.0)]
    assert thr["spread"]["hvnet LRO on (Gbit/s)"][0] == ("256", 0.98, 1.02)
    assert thr["published"]["published LRO on (Gbit/s)"] == [("256", 1.0), ("16K", 18.4), ("64K", 28.4)]
    assert "64K: ours 2.00 (2.00–2.00), published 2.42" in thr["claim"]
    # The frames judged at 64 KB alone.
    assert [label for label, _ in figs[2]["judged_by"][0]["points"]] == ["64K"]
    # No gain at all where one was published: no effect, not a doubt.
    figs = lro_gain.lro_figures("lro-local", lro_rows(1.0), lro_gain.PUB_000_LOCAL, "src", "note", lambda p: p["size"],
                                where=" (wire)")
    assert all(f["verdict"] == NOT_REPRODUCED and "no effect at" in f["why_not"] for f in figs), figs
    assert figs[0]["title"] == "Throughput, LRO off vs on (wire)"


def test_jumbo_frames_and_queues_judged_on_their_runs():
    def run(gbps, per_core):
        return jumbo_frames.with_cost({"gbps": gbps, "gbps_per_core": per_core})
    assert run(2.0, 4.0)["cores_per_gbps"] == 0.25
    # Jumbo Frames Inside Virtual Machines: 9000 carries more per CPU and
    # more in all.
    runs = {1500: [run(g, 2.0) for g in (10.0, 10.5, 9.5)], 9000: [run(g, 4.0) for g in (17.0, 18.0, 17.5)]}
    (thr_v, cpu_v), thr, cpu = jumbo_frames.jumbo_judged(runs)
    assert thr_v[0] == REPRODUCED and cpu_v[0] == REPRODUCED and cpu == [0.5, 0.5, 0.5]
    assert [round(r, 3) for r in thr] == [1.7, 1.714, 1.842]
    # MTU 9000 the same as 1500: neither claim holds.
    same = {1500: runs[1500], 9000: runs[1500]}
    assert [v[0] for v in jumbo_frames.jumbo_judged(same)[0]] == [NOT_REPRODUCED, NOT_REPRODUCED]
    q = {1: [{"gbps": g} for g in (4.0, 4.2, 3.9)], 4: [{"gbps": g} for g in (6.0, 6.3, 5.9)]}
    assert queues.multiqueue_judged(q)[0] == REPRODUCED
    assert queues.multiqueue_judged({1: q[1], 4: q[1]})[0] == NOT_REPRODUCED


def test_fleet_and_fabric_summaries():
    runs = {"static": [{"v": 1.0}, {"v": 3.0}, {"v": 2.0}], "dynamic": [{"v": 4.0}]}
    res, series, spreads = each(runs, ("static", "dynamic"), "v")
    assert res["static"]["v"] == 2.0 and series == [("static", 2.0), ("dynamic", 4.0)]
    assert spreads == [("static", 1.0, 3.0), ("dynamic", 4.0, 4.0)]
    assert sizes_text({"small": [1.0, 1.2, 1.1], "large": [2.0]}, {"small": 1.5}) == \
        "small: hvnet 1.10, published 1.50; large: hvnet 2.00"
    # The ratio of medians ours/other over the grid points both have.
    grid = {("hvnet", 1): [{"g": 4.0}, {"g": 6.0}], ("bridge", 1): [{"g": 2.0}],
            ("hvnet", 4): [{"g": 9.0}], ("bridge", 4): [{"g": 10.0}], ("hvnet", 8): [{"g": 1.0}]}
    assert ratio_range(grid, "hvnet", "bridge", "g") == "0.90–2.50"
    assert ratio_range(grid, "hvnet", "ovs", "g") == "n/a"
