"""A fixed-bin histogram of scores in [0, 1]: per-shard counts that add across shards, and quantiles read from it.

The bins are equal steps of the score's logit, log(p / (1 - p)), from -10 to 10 (200 bins of 0.1), the two end bins
open to 0 and 1. Classifier scores crowd near 0 and 1 (DCLM keeps web pages above 0.018), where equal steps of the
score itself would put most documents in one bin: a logit step of 0.1 is about a 10% step of the score near 0 (and
of 1 - score near 1), 0.025 near 0.5. Edges are fixed, so two shards' counts add bin by bin into the whole input's,
whatever the sharding, the worker count or the order (`merge_stats` adds dicts key by key).
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

LOGIT_LOW, LOGIT_HIGH, BINS = -10.0, 10.0, 200
EDGES = 1.0 / (1.0 + np.exp(-np.linspace(LOGIT_LOW, LOGIT_HIGH, BINS + 1)))
"""Bin k holds the scores in [EDGES[k], EDGES[k + 1]); bin 0 also those below EDGES[0], the last those at or
above EDGES[-1] (float64)."""
QUANTILES = (0.01, 0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99)
"""The quantiles the manifest reports."""
BINNING = {"scale": "logit", "low": LOGIT_LOW, "high": LOGIT_HIGH, "bins": BINS}
"""The bins, as the manifest describes them."""


def bin_counts(scores: np.ndarray) -> dict[str, int]:
    """Documents per bin (only bins with any), keyed by the bin's zero-padded index (`"042"`)."""
    bins = np.clip(np.searchsorted(EDGES, np.asarray(scores, dtype=np.float64), side="right") - 1, 0, BINS - 1)
    found, counts = np.unique(bins, return_counts=True)
    return {f"{int(b):03d}": int(n) for b, n in zip(found, counts)}


def bin_bounds(k: int) -> tuple[float, float]:
    """The scores bin `k` covers: [low, high) (0 and 1 for the open end bins)."""
    return (0.0 if k == 0 else float(EDGES[k])), (1.0 if k == BINS - 1 else float(EDGES[k + 1]))


def quantile(counts: Mapping[str, int], q: float) -> float | None:
    """The `q` quantile of the scores counted, linear within the bin it falls in (off by less than that bin's
    width); None for no scores."""
    total = sum(counts.values())
    if not total:
        return None
    target, below = q * total, 0
    for key in sorted(counts):
        n = counts[key]
        if n and below + n >= target:
            low, high = bin_bounds(int(key))
            return low + (high - low) * max(target - below, 0.0) / n
        below += n
    return bin_bounds(int(max(counts)))[1]


def histogram_rows(counts: Mapping[str, int]) -> list[list[float]]:
    """[low, high, documents] per bin with any, low to high, the bounds to 6 significant digits."""
    return [[_round(b[0]), _round(b[1]), counts[key]] for key in sorted(counts) if counts[key]
            for b in (bin_bounds(int(key)),)]


def _round(x: float) -> float:
    return float(f"{x:.6g}")
