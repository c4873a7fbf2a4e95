"""Figures over scored runs: the paired gain over the uncompiled program with its bootstrap interval,
and how the metric's parts correlate, so that two parts that are the same bit show up."""

from __future__ import annotations

import math
import random
from itertools import combinations

RESAMPLES = 2000
INTERVAL = 0.90
# Two parts that give the same value on this share of runs measure one thing.
SAME_BIT = 0.97


def paired_gain(before: dict[str, float], after: dict[str, float]) -> dict | None:
    """The mean gain over the cases both scored, and a paired bootstrap interval over those cases."""
    diffs = [after[c] - before[c] for c in sorted(before) if c in after]
    if not diffs:
        return None
    rng = random.Random(0)
    means = sorted(sum(rng.choice(diffs) for _ in diffs) / len(diffs) for _ in range(RESAMPLES))
    tail = (1 - INTERVAL) / 2
    return {"gain": round(sum(diffs) / len(diffs), 4), "low": round(means[int(tail * len(means))], 4),
            "high": round(means[int((1 - tail) * len(means)) - 1], 4), "cases": len(diffs)}


def pearson(xs: list[float], ys: list[float]) -> float | None:
    """None when either side never varies: a constant part correlates with nothing."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sx = math.sqrt(sum((x - mx) ** 2 for x in xs))
    sy = math.sqrt(sum((y - my) ** 2 for y in ys))
    if not sx or not sy:
        return None
    return round(sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / (sx * sy), 3)


def part_correlation(runs: list[dict[str, float]], names: list[str]) -> dict:
    """Pearson correlation of every pair of parts over the runs; the pairs that are one bit (the same
    value on nearly every run); and the parts that never vary, which measure nothing on this run."""
    matrix = [[1.0 if a == b else pearson([r[a] for r in runs], [r[b] for r in runs]) for b in names] for a in names]
    constant = [n for n in names if len({r[n] for r in runs}) == 1]
    same = []
    for a, b in combinations([n for n in names if n not in constant], 2):
        agreement = sum(r[a] == r[b] for r in runs) / len(runs)
        if agreement >= SAME_BIT:
            same.append({"a": a, "b": b, "agreement": round(agreement, 3)})
    return {"names": names, "matrix": matrix, "runs": len(runs), "same_bit": same, "constant": constant}
