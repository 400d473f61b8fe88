"""Intervals and verdicts: a t interval over seeds, a paired bootstrap over seeds and items, the earliest held verdict."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from tokenmill.documents import digest

BETTER, WORSE, SAME = "better", "worse", "no detectable difference"


def _t_cdf(t: float, df: int) -> float:
    """Student's t distribution function, by Simpson's rule on its density from 0 (no scipy needed)."""
    if t == 0:
        return 0.5
    log_c = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)
    n, x = 2000, abs(t)
    h = x / n
    ys = [math.exp(log_c - (df + 1) / 2 * math.log1p((i * h) ** 2 / df)) for i in range(n + 1)]
    area = h / 3 * (ys[0] + ys[-1] + 4 * sum(ys[1:-1:2]) + 2 * sum(ys[2:-1:2]))
    return 0.5 + area if t > 0 else 0.5 - area


@functools.lru_cache(maxsize=64)
def t_quantile(p: float, df: int) -> float:
    """The p quantile (p > 0.5) of Student's t with `df` degrees of freedom, by bisection to 1e-9."""
    lo, hi = 0.0, 1e3
    for _ in range(50):
        mid = (lo + hi) / 2
        if _t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def mean_interval(values: Sequence[float], confidence: float) -> tuple[float, float, float]:
    """(mean, low, high): the t interval of the mean over seeds."""
    x = np.asarray(values, dtype=np.float64)
    mean = float(x.mean())
    if len(x) < 2:
        return mean, math.nan, math.nan
    half = t_quantile(0.5 + confidence / 2, len(x) - 1) * float(x.std(ddof=1)) / math.sqrt(len(x))
    return mean, mean - half, mean + half


@dataclass(frozen=True)
class Runs:
    """One metric of one variant at one evaluation point: per seed, per item, the numerator and denominator whose
    sums over items make the metric (bits per byte: nats / (ln 2 x bytes); an accuracy: correct / 1). Rows are seeds
    (in the config's order, the same for every variant: paired), columns items (the same for every variant)."""

    num: np.ndarray
    """(S, N)"""
    den: np.ndarray
    """(S, N)"""

    def per_seed(self) -> np.ndarray:
        return self.num.sum(axis=1) / self.den.sum(axis=1)


def bootstrap_difference(variant: Runs, base: Runs, reps: int, confidence: float, key: object
                         ) -> tuple[float, float, float]:
    """(difference of the means, low, high) of variant - base, over seeds and items.

    A bootstrap draws seeds and items with replacement, the same draw for both arms (paired: the same seeds and the
    same items), seeded by a hash of `key` (same inputs, same bytes); its standard deviation is the difference's
    standard error. The interval is that error times Student's t at S - 1 degrees of freedom, the error first
    scaled by sqrt(S / (S - 1)): with 3 seeds the percentile interval of the draws is far too narrow (a seed
    bootstrap's variance is (S - 1) / S of the mean's, and a normal quantile stands in for t at 2 degrees of
    freedom), and it called a difference between two equal arms in 15% of trials (tests/ablate/test_stats.py)."""
    S, N = variant.num.shape
    rng = np.random.default_rng(int(digest(key)[:16], 16))
    seeds = rng.integers(0, S, size=(reps, S))
    items = rng.integers(0, N, size=(reps, N))

    def draws(r: Runs) -> np.ndarray:
        # (reps,): each seed's metric on each draw of items, then the draw of seeds averaged.
        per = r.num[:, items].sum(axis=2) / r.den[:, items].sum(axis=2)  # (S, reps)
        return np.take_along_axis(per.T, seeds, axis=1).mean(axis=1)  # (reps,)

    diffs = draws(variant) - draws(base)
    point = float(variant.per_seed().mean() - base.per_seed().mean())
    se = float(diffs.std(ddof=1)) * math.sqrt(S / (S - 1)) if S > 1 else math.inf
    half = t_quantile(0.5 + confidence / 2, max(S - 1, 1)) * se
    return point, point - half, point + half


def verdict(low: float, high: float, lower_is_better: bool) -> str:
    """`better`, `worse` or `no detectable difference`: whether the interval of variant - base excludes 0."""
    if low > 0:
        return WORSE if lower_is_better else BETTER
    if high < 0:
        return BETTER if lower_is_better else WORSE
    return SAME


def held_from(verdicts: Sequence[str]) -> int:
    """Index of the earliest evaluation point from which the verdict stayed the final one to the end."""
    i = len(verdicts) - 1
    while i > 0 and verdicts[i - 1] == verdicts[-1]:
        i -= 1
    return i


EARLY_FRACTIONS = (0.25, 0.5)
"""The fractions of the budget at which the report states how often the early verdict was the final one."""


def _share(agree: int, of: int) -> dict[str, object]:
    return {"agree": agree, "of": of, "agreement": agree / of if of else None}


def agreement(fractions: Sequence[float], verdicts: dict[str, dict[str, Sequence[str]]],
              at: Sequence[float] = EARLY_FRACTIONS) -> dict[str, object]:
    """How often the verdict at an earlier evaluation point was the final one (the verdict at the last point).

    `fractions`: each evaluation point's fraction of the budget (increasing, the last 1); `verdicts`: {metric:
    {pair: the verdict at each of those points}}. For each fraction f of `at`, the point used is the last one at or
    before f of the budget (None when no point is that early), and a pair agrees when its verdict there is its
    final verdict; `every_point` counts every (pair, point) before the last. Per metric, and over every metric."""
    last = len(fractions) - 1

    def summary(curves: list[Sequence[str]]) -> dict[str, object]:
        rows = []
        for f in at:
            early = [i for i in range(last + 1) if fractions[i] <= f + 1e-9]
            if not early:
                rows.append({"fraction": f, "point": None, "point_fraction": None, **_share(0, 0)})
                continue
            i = early[-1]
            rows.append({"fraction": f, "point": i, "point_fraction": fractions[i],
                         **_share(sum(c[i] == c[last] for c in curves), len(curves))})
        every = _share(sum(c[i] == c[last] for c in curves for i in range(last)), len(curves) * last)
        return {"at": rows, "every_point": every}

    for metric, pairs in verdicts.items():
        for pair, curve in pairs.items():
            if len(curve) != len(fractions):
                raise ValueError(f"{metric} {pair}: {len(curve)} verdicts for {len(fractions)} evaluation points")
    out = {"by_metric": {m: summary(list(pairs.values())) for m, pairs in verdicts.items()}}
    out.update(summary([c for pairs in verdicts.values() for c in pairs.values()]))
    return out
