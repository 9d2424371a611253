"""Which verdicts can flip from one run to the next, predicted instead of
waited for (`hvnet lab stability A/results.json B/results.json ...`).

Every figure judged by `verdict.judge` keeps the per-repetition effects it
was judged on (`judged_by` in results.json). Pooled over the given runs,
per figure and point, they are drawn again with replacement the way a run
draws them — N runs, one more at each point while undecided, up to the
rule's most — and put through today's rule many times over; the chance
that two runs give different verdicts is 1 - sum(p^2) over the
verdicts' shares p.
Points of one experiment with the same label come from the same runs
(LRO's throughput and CPU-efficiency gains at 256 bytes): they are drawn
as one, by repetition, and grow while any figure judged on them is
undecided, as `interleaved` runs a configuration while any point it
feeds is — a figure decided early is judged again on every run its
neighbour's doubt adds. Other points are drawn independently (a run
pairs them by repetition), and the pool holds only the runs given: it
predicts how this machine's spread meets each figure's edges, no more.

Beside the prediction, each given run's own effects are put through
today's rule in the order they were measured (`replay`): what that run
would have said, which is how a change of rule is tried on runs already
made (where today's rule wants more runs than the run made, the verdict
is marked so)."""

import random
from collections import Counter

from .runners import most_runs
from .verdict import INCONCLUSIVE, INTERVAL, NOT_REPRODUCED, REPRODUCED, Judged, both, shape, undecided, weigh


def pooled(results):
    """{experiment: {figure id: [judge call with the samples of every run
    pooled]}}, judged as the newest of the runs judged it (a published
    size added since is used for all); a run that judged a figure another
    way (other calls or points than the first run that judged it) adds
    nothing to it, and a figure the newest run's experiment no longer
    judges is left out (it has no verdict today)."""
    newest = {exp.get("name", ""): {f["id"] for f in exp.get("figures", []) if f.get("judged_by")}
              for exp in results[-1]["experiments"]} if results else {}
    out = {}
    for r in results:
        for exp in r["experiments"]:
            for fig in exp.get("figures", []):
                calls = fig.get("judged_by") or []
                figs = out.setdefault(exp.get("name", ""), {})
                mine = figs.setdefault(fig["id"], [dict(c, points=[[label, []] for label, _ in c["points"]])
                                                   for c in calls])
                if shape(mine) != shape(calls):
                    continue
                for m, c in zip(mine, calls):
                    m.update((k, c[k]) for k in ("direction", "threshold", "what", "published") if k in c)
                    for (_, pool), (_, samples) in zip(m["points"], c["points"]):
                        pool.extend(samples)
    return {name: kept for name, figs in out.items()
            if (kept := {fid: calls for fid, calls in figs.items()
                         if calls and all(s for c in calls for _, s in c["points"])
                         and fid in newest.get(name, {fid})})}


def draws_of(figs):
    """Which pooled points are drawn as one: {(figure, call, point): key},
    the key their label where every point of that label has a pool of
    the same length (the same runs), else the point's own."""
    sizes = {}
    for fid, calls in figs.items():
        for c in calls:
            for label, pool in c["points"]:
                sizes.setdefault(label, set()).add(len(pool))
    return {(fid, i, j): label if len(sizes[label]) == 1 else (fid, i, j)
            for fid, calls in figs.items() for i, c in enumerate(calls) for j, (label, _) in enumerate(c["points"])}


def one_run(figs, first, most, rng):
    """One run's verdicts {figure id: verdict} of an experiment's figures
    drawn from their pools: `first` runs, then one more of each draw that
    an undecided point is drawn from, up to `most`."""
    return grown(figs, first, most, lambda size, have: rng.randrange(size))[0]


def grown(figs, first, most, pick):
    """({figure id: verdict}, {figure id whose pools ran out}) of an
    experiment's figures judged on `first` samples of each draw, then one
    more of each draw an undecided point is drawn from, up to `most`;
    `pick(size, have)` says which sample of a pool of `size` comes next
    (None: there is none)."""
    key = draws_of(figs)
    size = {k: len(figs[fid][i]["points"][j][1]) for (fid, i, j), k in key.items()}
    picks = {k: [pick(n, have) for have in range(min(first, n))] for k, n in size.items()}
    while True:
        verdicts, grow, wants = {}, set(), {}
        for fid, calls in figs.items():
            drawn = [[[label, [pool[x] for x in picks[key[(fid, i, j)]]]] for j, (label, pool) in enumerate(c["points"])]
                     for i, c in enumerate(calls)]
            verdict = both(*(Judged(*weigh(points, c["direction"], c["threshold"], c["what"], c["published"]),
                                    [dict(c, points=points)]) for points, c in zip(drawn, calls)))
            verdicts[fid] = verdict[0]
            pending = undecided([verdict])
            wants[fid] = {key[(fid, i, j)] for i, c in enumerate(calls) for j, (label, _) in enumerate(c["points"])
                          if None in pending or label in pending}
            grow |= wants[fid]
        if not grow or max(len(picks[k]) for k in grow) >= most:
            return verdicts, set()
        more = {k: pick(size[k], len(picks[k])) for k in grow}
        if None in more.values():
            return verdicts, {fid for fid, ks in wants.items() if any(more[k] is None for k in ks)}
        for k, x in more.items():
            picks[k].append(x)


def replay(result):
    """{figure id: (verdict, ran out)}: one run's own effects taken in the
    order they were measured through today's rule — what it would have
    said (ran out: today's rule wanted more runs than that run made)."""
    reps, most = today([result])
    out = {}
    for figs in pooled([result]).values():
        verdicts, short = grown(figs, reps, most, lambda size, have: have if have < size else None)
        out.update({fid: (v, fid in short) for fid, v in verdicts.items()})
    return out


CODE = {REPRODUCED: "R", NOT_REPRODUCED: "N", INCONCLUSIVE: "I"}


def today(results):
    """Today's rule at the newest run's runs per point: (N, most)."""
    reps = results[-1]["meta"].get("repeat", 1)
    return reps, most_runs(reps)


def predict(results, draws=1000, seed=1):
    """[(figure id, chance two runs differ, {verdict: share})], most
    fragile first, through today's rule."""
    reps, most = today(results)
    rng = random.Random(seed)
    out = []
    for figs in pooled(results).values():
        counts = {fid: Counter() for fid in figs}
        for _ in range(draws):
            for fid, verdict in one_run(figs, reps, most, rng).items():
                counts[fid][verdict] += 1
        for fid, c in counts.items():
            shares = {v: n / draws for v, n in c.most_common()}
            out.append((fid, 1 - sum(p * p for p in shares.values()), shares))
    return sorted(out, key=lambda row: -row[1])


def table(results, draws=1000):
    """What `hvnet lab stability` prints."""
    reps, most = today(results)
    rows = predict(results, draws)
    if not rows:
        return ("no figure in these results keeps the per-run effects it was judged on (runs before 2026-11-24 "
                "did not): run `hvnet lab run` again and give its results.json")
    figures = {f["id"] for r in results for e in r["experiments"] for f in e.get("figures", [])}
    lines = [f"{len(results)} run(s) pooled: " + "; ".join(
                f"{r['meta']['date']}, hvnet {r['meta']['git_revision']}" for r in results),
             f"today's rule: {reps} run(s), up to {most} where undecided, verdicts on {INTERVAL}; {draws} draws per "
             "figure",
             "each run: that run's own effects, in the order measured, through today's rule (R reproduced, N not "
             "reproduced, I inconclusive, - not judged that way; + where today's rule wanted more runs than it made)",
             "", f"{'figure':<32} {'differ':>7}  {'each run':<{2 * len(results)}}  verdicts drawn"]
    replays = [replay(r) for r in results]
    for fid, chance, shares in rows:
        each = " ".join(CODE[rp[fid][0]] + ("+" if rp[fid][1] else "") if fid in rp else "-" for rp in replays)
        lines.append(f"{fid:<32} {chance:>7.2f}  {each:<{2 * len(results)}}  "
                     + ", ".join(f"{v} {p:.0%}" for v, p in shares.items()))
    left = len(figures - {fid for fid, _, _ in rows})
    lines += ["", f"expected figures differing between two runs: {sum(c for _, c, _ in rows):.1f} of the {len(rows)} "
                  f"drawn again ({left} figure{'' if left == 1 else 's'} not judged on per-run effects, not the same "
                  f"way in every run, or no longer by the newest, {'is' if left == 1 else 'are'} left out)"]
    return "\n".join(lines)
