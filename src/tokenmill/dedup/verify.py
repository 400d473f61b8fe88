"""Exact Jaccard verification of candidate pairs over shingle-hash sets.

A document's shingle set is a sorted, duplicate-free ``uint64`` numpy array. Candidate pairs (from LSH) are kept
as near-duplicates only when their exact Jaccard similarity is strictly above the threshold (OPT: "exceeded 0.95").

Empty sets: the Jaccard of two empty sets is defined here as ``0.0`` (not the mathematical convention ``1.0``):
a document with no shingles carries no evidence of duplication and must never be removed as a near-duplicate of
another. One empty set against a non-empty one is ``0.0`` as well.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

__all__ = ["jaccard", "verify"]


def jaccard(a: np.ndarray, b: np.ndarray) -> float:
    """Exact Jaccard similarity ``|a & b| / |a | b|`` of two sorted, duplicate-free ``uint64`` arrays.

    Both empty gives ``0.0`` (see the module docstring). The inputs are trusted to be unique: duplicates would
    inflate the intersection.
    """
    a = np.asarray(a)
    b = np.asarray(b)
    inter = np.intersect1d(a, b, assume_unique=True).size
    union = a.size + b.size - inter
    return float(inter) / union if union else 0.0


def _chunks(sizes: np.ndarray, budget: int) -> list[tuple[int, int]]:
    """Split ``range(len(sizes))`` into consecutive ``[lo, hi)`` runs whose summed size is about ``budget``."""
    n = sizes.size
    out: list[tuple[int, int]] = []
    lo = 0
    cum = np.cumsum(sizes)
    while lo < n:
        base = cum[lo - 1] if lo else 0
        hi = int(np.searchsorted(cum, base + budget, side="right"))
        hi = max(hi, lo + 1)  # a single huge pair still goes through alone
        out.append((lo, min(hi, n)))
        lo = hi
    return out


def verify(
    pairs: np.ndarray,
    shingles: Mapping[int, np.ndarray],
    threshold: float,
    *,
    chunk_elements: int = 1 << 22,
) -> tuple[np.ndarray, np.ndarray]:
    """Exact Jaccard of every candidate pair, and which pairs pass.

    Args:
        pairs: ``(m, 2)`` document references (any integer dtype; typically ``uint64``).
        shingles: document reference (Python ``int``) -> sorted, duplicate-free ``uint64`` shingle-hash array.
            A document of ``pairs`` missing here raises ``KeyError``.
        threshold: a pair passes when its Jaccard is strictly greater than this (0.95 for OPT).
        chunk_elements: about how many shingle values are processed at once (bounds the working memory).

    Returns:
        ``(jaccard, mask)``: ``jaccard`` ``(m,)`` ``float64`` exact similarities (same values as :func:`jaccard`,
        both-empty pairs ``0.0``) and ``mask`` ``(m,)`` ``bool``, ``jaccard > threshold``.

    Vectorised per chunk: the two sets of each pair are concatenated and tagged with the pair's index, one lexsort
    by ``(pair, value)`` brings equal values side by side, and a value seen twice within a pair is in the
    intersection. Only gathering the arrays from the mapping loops in Python.
    """
    pairs = np.asarray(pairs)
    if pairs.ndim != 2 or pairs.shape[1] != 2:
        raise ValueError(f"pairs must be (m, 2), got {pairs.shape}")
    m = pairs.shape[0]
    sims = np.zeros(m, dtype=np.float64)
    if m == 0:
        return sims, np.zeros(0, dtype=bool)

    left = [np.asarray(shingles[int(d)]) for d in pairs[:, 0]]
    right = [np.asarray(shingles[int(d)]) for d in pairs[:, 1]]
    len_a = np.fromiter((x.size for x in left), dtype=np.int64, count=m)
    len_b = np.fromiter((x.size for x in right), dtype=np.int64, count=m)

    for lo, hi in _chunks(len_a + len_b, chunk_elements):
        la, lb = len_a[lo:hi], len_b[lo:hi]
        k = hi - lo
        values = np.concatenate(
            [np.empty(0, dtype=np.uint64)]
            + [x.astype(np.uint64, copy=False) for x in left[lo:hi]]
            + [x.astype(np.uint64, copy=False) for x in right[lo:hi]]
        )
        pair_id = np.concatenate([np.repeat(np.arange(k), la), np.repeat(np.arange(k), lb)])
        order = np.lexsort((values, pair_id))
        values, pair_id = values[order], pair_id[order]
        twice = (pair_id[1:] == pair_id[:-1]) & (values[1:] == values[:-1])
        inter = np.bincount(pair_id[1:][twice], minlength=k)
        union = la + lb - inter
        sims[lo:hi] = np.divide(inter, union, out=np.zeros(k, dtype=np.float64), where=union > 0)

    return sims, sims > threshold
