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

__all__ = ["jaccard", "jaccard_many", "unique_edges", "unique_pairs", "verify"]


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


def jaccard_many(x: np.ndarray, data: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """Exact Jaccard of sorted unique ``x`` with each set ``data[bounds[i]:bounds[i+1]]`` (sorted unique), vectorised:
    every element of ``data`` is looked up in ``x`` by binary search, hits summed per set. Empty against anything
    is ``0.0``."""
    sizes = np.diff(bounds)
    if x.size == 0 or data.size == 0:
        return np.zeros(sizes.size, dtype=np.float64)
    idx = np.searchsorted(x, data)
    np.minimum(idx, x.size - 1, out=idx)
    hits = np.concatenate([[0], np.cumsum(x[idx] == data)])
    inter = hits[bounds[1:]] - hits[bounds[:-1]]
    union = x.size + sizes - inter
    return np.divide(inter, union, out=np.zeros(sizes.size, dtype=np.float64), where=union > 0)


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

    Pairs are grouped by their first document: its set is compared with all its partners' sets at once
    (:func:`jaccard_many`, one binary search of their concatenation), so a bucket of k documents, whose
    k(k-1)/2 pairs share k first documents, costs k numpy calls instead of one per pair (LSH candidates come in
    such cliques). The values are those of :func:`jaccard`: the same integer counts, one float division.
    """
    pairs = np.asarray(pairs)
    if pairs.ndim != 2 or pairs.shape[1] != 2:
        raise ValueError(f"pairs must be (m, 2), got {pairs.shape}")
    sims = np.zeros(pairs.shape[0], dtype=np.float64)
    if not pairs.shape[0]:
        return sims, sims > threshold
    order = np.argsort(pairs[:, 0], kind="stable")
    first = pairs[order, 0]
    starts = np.flatnonzero(np.r_[True, first[1:] != first[:-1]])
    ends = np.r_[starts[1:], first.size]
    second = pairs[order, 1].tolist()
    for x, s, e in zip(first[starts].tolist(), starts.tolist(), ends.tolist()):
        sets = [np.asarray(shingles[y]) for y in second[s:e]]
        bounds = np.zeros(len(sets) + 1, dtype=np.int64)
        np.cumsum([b.size for b in sets], out=bounds[1:])
        data = np.concatenate(sets).astype(np.uint64, copy=False) if bounds[-1] else np.zeros(0, np.uint64)
        sims[order[s:e]] = jaccard_many(np.asarray(shingles[x], dtype=np.uint64), data, bounds)
    return sims, sims > threshold


def unique_pairs(a: np.ndarray, b: np.ndarray, exact: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The pairs routed to one verify task, each (a, b, exact) once: exact pairs first, then by (a, b)."""
    order = np.lexsort((b, a, ~exact))
    a, b, exact = a[order], b[order], exact[order]
    first = np.r_[True, (a[1:] != a[:-1]) | (b[1:] != b[:-1]) | (exact[1:] != exact[:-1])]
    return a[first], b[first], exact[first]


def unique_edges(pairs: np.ndarray, sims: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted, duplicate-free edges (a pair found in several buckets once; its Jaccard is the same each time)."""
    pairs = pairs.reshape(-1, 2).astype(np.uint64, copy=False)
    if not len(pairs):
        return pairs, sims
    order = np.lexsort((pairs[:, 1], pairs[:, 0]))
    pairs, sims = pairs[order], sims[order]
    first = np.r_[True, (pairs[1:] != pairs[:-1]).any(axis=1)]
    return pairs[first], sims[first]
