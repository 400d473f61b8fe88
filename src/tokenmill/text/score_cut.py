"""The exact cut of a `top_fraction` keep rule: a two-level count of float32 scores' bits that adds across shards.

A non-negative float32's bit pattern, read as an integer, orders as its value does, so its upper 16 bits name a bin
of 2^16 consecutive float32 values (about 0.8% of the value wide) and its lower 16 bits the value inside the bin.
Each shard counts its scores by upper half (`coarse_counts`: at most 16,384 bins for scores in [0, 2), those of
[0, 1] stop at 16,256); the counts add across shards, whatever the sharding or the worker count, into the whole
pool's, which names the bin holding the cut (`cut_bin`). A second look at the scores inside that one bin, counted by
lower half (`fine_counts`, 65,536 bins), gives the exact value (`cut_value`). Memory stays bounded by the bins, not
by the number of documents or of distinct scores, and the cut is exact: no interpolation, no rounding.

Ties: the cut is the score of the K-th best document, K = ceil(F x N) (`keep_count`), and a document is kept when its
score is at or above the cut, as a threshold keeps it; documents tied with the K-th are all kept, so a run keeps K
plus those ties, and a document's verdict depends on its score alone (the same text keeps the same verdict).
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

HALF = 16
COARSE_BINS = 1 << 14
"""Upper halves of the float32 values in [0, 2) (0x3F80 is 1.0's)."""
FINE_BINS = 1 << HALF


def _bits(scores: np.ndarray) -> np.ndarray:
    scores = np.ascontiguousarray(scores, dtype=np.float32)
    if scores.size and not (np.all(scores >= 0) and np.all(scores < 2)):  # NaN fails both
        raise ValueError("top_fraction ranks scores in [0, 1]; got a score outside [0, 2) or NaN")
    return scores.view(np.uint32)


def coarse_counts(scores: np.ndarray) -> list[list[int]]:
    """[coarse bin, scores] per bin with any, low to high (a bin is the upper 16 bits of the float32 pattern): JSON
    as it is, for a task's completion record."""
    found, counts = np.unique(_bits(scores) >> HALF, return_counts=True)
    return [[int(b), int(n)] for b, n in zip(found, counts)]


def fine_counts(scores: np.ndarray, coarse_bin: int) -> np.ndarray:
    """Counts by lower 16 bits of the scores that fall in `coarse_bin` (an int64 array of FINE_BINS)."""
    bits = _bits(scores)
    inside = bits[(bits >> HALF) == coarse_bin] & (FINE_BINS - 1)
    return np.bincount(inside.astype(np.int64), minlength=FINE_BINS)


def keep_count(fraction: float, documents: int) -> int:
    """K = ceil(fraction x documents), with `fraction` read as the decimal it was written as (0.1 is 1/10: 0.1 x 30
    keeps 3, where float arithmetic gives 3.0000000000000004 and would keep 4)."""
    return math.ceil(Fraction(repr(float(fraction))) * documents)


def cut_bin(coarse: np.ndarray, keep: int) -> tuple[int, int]:
    """(the coarse bin holding the `keep`-th best score, its rank from the top inside that bin, from 1)."""
    if not 0 < keep <= int(coarse.sum()):
        raise ValueError(f"cannot keep {keep} of {int(coarse.sum())} scores")
    at_or_above = np.cumsum(coarse[::-1])[::-1]  # scores in bin b or higher
    b = int(np.nonzero(at_or_above >= keep)[0].max())
    above = int(at_or_above[b + 1]) if b + 1 < len(coarse) else 0
    return b, keep - above


def cut_value(coarse_bin: int, fine: np.ndarray, rank: int) -> np.float32:
    """The `rank`-th best score (from 1) among those of `coarse_bin`, counted by `fine`."""
    at_or_above = np.cumsum(fine[::-1])[::-1]
    low = int(np.nonzero(at_or_above >= rank)[0].max())
    return np.array([(coarse_bin << HALF) | low], dtype=np.uint32).view(np.float32)[0]


def merged(counts: list[list[list[int]]]) -> np.ndarray:
    """Per-shard `coarse_counts` added into one array of COARSE_BINS (order does not matter)."""
    total = np.zeros(COARSE_BINS, dtype=np.int64)
    for c in counts:
        if c:
            pairs = np.asarray(c, dtype=np.int64)
            np.add.at(total, pairs[:, 0], pairs[:, 1])
    return total
