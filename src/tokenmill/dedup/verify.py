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


def verify(pairs: np.ndarray, shingles: Mapping[int, np.ndarray], threshold: float) -> tuple[np.ndarray, np.ndarray]:
    """Exact Jaccard of every candidate pair, and which pairs pass.

    Args:
        pairs: ``(m, 2)`` document references (any integer dtype; typically ``uint64``).
        shingles: document reference (Python ``int``) -> sorted, duplicate-free ``uint64`` shingle-hash array.
            A document of ``pairs`` missing here raises ``KeyError``.
        threshold: a pair passes when its Jaccard is strictly greater than this (0.95 for OPT).

    Returns:
        ``(jaccard, mask)``: ``jaccard`` ``(m,)`` ``float64`` exact similarities (same values as :func:`jaccard`,
        both-empty pairs ``0.0``) and ``mask`` ``(m,)`` ``bool``, ``jaccard > threshold``.

    Both sets are sorted, so the smaller one is looked up in the larger by binary search: O(a log b) per pair in
    numpy, with no sort. (A vectorised lexsort over all pairs at once measured 15x slower at 200-shingle sets.)
    """
    pairs = np.asarray(pairs)
    if pairs.ndim != 2 or pairs.shape[1] != 2:
        raise ValueError(f"pairs must be (m, 2), got {pairs.shape}")
    sims = np.zeros(pairs.shape[0], dtype=np.float64)
    for k, (x, y) in enumerate(pairs.tolist()):
        a, b = np.asarray(shingles[x]), np.asarray(shingles[y])
        if a.size > b.size:
            a, b = b, a
        if b.size == 0:
            continue
        idx = np.searchsorted(b, a)
        np.minimum(idx, b.size - 1, out=idx)
        inter = int(np.count_nonzero(b[idx] == a))
        sims[k] = inter / (a.size + b.size - inter)
    return sims, sims > threshold
