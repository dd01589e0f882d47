"""The statistics a study reports: bands over seeds, paired differences, steps to a threshold with censoring,
the exact sign test of one run's tasks gained and lost.

What this is: pure functions over plain numbers (numpy and the standard library only), shared by
`agentrl.study.report` and the older study scripts in studies/scripts/. What this is not: the choice of what
to compute (a study names its statistics in advance, `agentrl.study.spec.Statistic`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228}
"""Two-sided 95% Student-t quantiles by degrees of freedom (1.96 past 10)."""


def band(values: Sequence[float]) -> tuple[float, float, float]:
    """(mean, low, high) with a two-sided 95% Student-t interval; a single value has a zero-width band."""
    array = np.asarray(values, dtype=np.float64)
    mean = float(array.mean())
    if array.size < 2:
        return mean, mean, mean
    half = T95.get(array.size - 1, 1.96) * float(array.std(ddof=1)) / math.sqrt(array.size)
    return mean, mean - half, mean + half


def paired_band(first: Sequence[float], second: Sequence[float]) -> tuple[float, float, float]:
    """(mean difference, low, high) of `first[i] - second[i]` (paired by seed), 95% Student-t."""
    if len(first) != len(second):
        raise ValueError(f"paired values need equal lengths, got {len(first)} and {len(second)}")
    return band([a - b for a, b in zip(first, second, strict=True)])


def sign_test_p(gained: int, lost: int) -> float:
    """Two-sided exact sign test of the tasks one run gained and lost against the base on the same tasks
    (McNemar's exact test when outcomes are pass/fail): the binomial(gained + lost, 1/2) tail of the smaller
    count, doubled; 1 when no task changed."""
    changed = gained + lost
    if changed == 0:
        return 1.0
    tail = sum(math.comb(changed, i) for i in range(min(gained, lost) + 1)) / 2**changed
    return min(1.0, 2 * tail)


def steps_to_threshold(curve: Sequence[tuple[float, float]], threshold: float) -> float | None:
    """The first env-step count at which a (env steps, value) curve reaches `threshold`, linear between
    points; None if it never does (censored at the curve's last point)."""
    for index, (x, y) in enumerate(curve):
        if y >= threshold:
            if index == 0:
                return float(x)
            x0, y0 = curve[index - 1]
            return float(x0 + (threshold - y0) / (y - y0) * (x - x0))
    return None


def censored_steps(values: Sequence[float | None], budget: float) -> dict[str, float | int | None]:
    """Steps to a threshold over seeds, a seed that never reached it counted at the `budget` (so the mean is a
    lower bound when any is censored): the mean, how many were censored, and the median (None when more than
    half were censored: it is not known)."""
    filled = [budget if value is None else float(value) for value in values]
    censored = sum(value is None for value in values)
    ordered = sorted(filled)
    median = None if censored > len(values) / 2 else float(np.median(ordered))
    return {"mean_lower_bound": float(np.mean(filled)), "censored": censored, "median": median}
