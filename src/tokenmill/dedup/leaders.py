"""Verify a giant LSH bucket without all of its pairs: leader clustering, exact by the triangle inequality.

A bucket of ``k`` documents holds ``k*(k-1)/2`` pairs; for the boilerplate clusters of web crawls (``k`` in the
thousands) that is too many to verify. Pairing the bucket as a star around one document is cheap but loses every
duplicate pair that does not involve the centre. :func:`leader_edges` instead walks the bucket's documents in a
given order (the keep order, so that leaders are the documents a cluster keeps) and compares each document ``x``:

1. with every *leader* so far (one vectorised pass over their concatenated shingle sets). ``x`` joins the first
   leader it passes (``J > threshold``) as a *direct member*, with an edge to every leader it passes;
2. with the direct members of every leader ``L`` it did not pass but with ``J(x, L) > 2*threshold - 1``, unless
   ``x`` is already connected to ``L``'s cluster; an edge to each member it passes;
3. if it passed no leader, ``x`` becomes a leader itself.

Why this is exact: the Jaccard distance ``1 - J`` is a metric. A direct member ``m`` of ``L`` has
``d(m, L) < 1 - t``; if ``d(x, m) < 1 - t`` too, then ``d(x, L) < 2(1 - t)``, i.e. ``J(x, L) > 2t - 1``. So a
partner of ``x`` is either a leader (step 1 compares them all) or a direct member of a leader that step 2 reaches;
clusters of leaders with ``J(x, L) <= 2t - 1`` provably hold no partner. Within the budget the connected components
of the edges over the bucket equal those of the graph of all its pairs above the threshold, and every edge is a
verified pair above the threshold. A bucket that is one cluster costs about ``k`` comparisons, not ``k**2/2``.

The cost is capped: each document is compared with at most ``max_comparisons`` earlier documents (leaders
first, in order, then members of the nearest clusters). Pairs the cap leaves undecided are counted as
``not_verified``, never silently dropped; the pairs decided without a comparison (ruled out by size or by the
triangle inequality, or already in the same cluster) are counted as ``inferred``.

:func:`cluster_bucket` is what the dedup stage runs on a bucket: one pass in keep order (its leaders are exactly the
documents the greedy keep/drop choice keeps, so its edges decide the removals as all pairs would), and, only when
that pass hit the cap, a second pass with the most central documents first (:func:`central_order`). The keep order
is a poor leader order for a family of edits of one original when the edits are longer than it: each edit becomes a
leader and the original, last, reaches only ``max_comparisons`` of them. Central first, the original leads and
every edit joins it in one comparison, so the clusters come out whole.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple

import numpy as np

from tokenmill.dedup.verify import jaccard_many as _jaccard_against

__all__ = ["BucketResult", "LeaderResult", "central_order", "cluster_bucket", "cluster_groups", "leader_edges"]

_EPS = 1e-12  # float slack on the triangle bound, so rounding never rules out a real partner


class LeaderResult(NamedTuple):
    """Verified edges of one bucket and what it cost."""

    pairs: np.ndarray
    """``(m, 2)`` ``uint64`` document pairs with ``a < b``, each verified with Jaccard above the threshold."""
    jaccard: np.ndarray
    """``(m,)`` ``float64`` exact Jaccard of each pair."""
    compared: int
    """Exact Jaccard computations (each one a pair of the bucket)."""
    rejected: int
    """Compared pairs at or below the threshold (``compared - len(pairs)``)."""
    inferred: int
    """Pairs decided without a comparison: ruled out by the triangle inequality, or already in one cluster."""
    not_verified: int
    """Pairs left undecided because a document reached ``max_comparisons``."""


class _Bank:
    """Concatenated sorted shingle sets (amortised doubling buffer), for one-pass Jaccard against all of them."""

    def __init__(self) -> None:
        self.data = np.empty(1024, dtype=np.uint64)
        self.used = 0
        self.bounds = [0]

    def add(self, s: np.ndarray) -> None:
        need = self.used + s.size
        if need > self.data.size:
            grown = np.empty(max(need, 2 * self.data.size), dtype=np.uint64)
            grown[: self.used] = self.data[: self.used]
            self.data = grown
        self.data[self.used:need] = s
        self.used = need
        self.bounds.append(need)

    def sizes(self) -> np.ndarray:
        return np.diff(np.asarray(self.bounds, dtype=np.int64))

    def jaccard(self, x: np.ndarray, which: np.ndarray) -> np.ndarray:
        """Exact Jaccard of ``x`` with each set ``which`` (ascending indices) names."""
        bounds = np.asarray(self.bounds, dtype=np.int64)
        if which.size == len(self.bounds) - 1:  # all of them: no gather
            return _jaccard_against(x, self.data[: self.used], bounds)
        starts, lens = bounds[which], bounds[which + 1] - bounds[which]
        local = np.r_[0, np.cumsum(lens)]
        idx = np.repeat(starts - local[:-1], lens) + np.arange(local[-1])
        return _jaccard_against(x, self.data[idx], local)


def leader_edges(docs: Sequence[int], shingles: Mapping[int, np.ndarray], threshold: float,
                 max_comparisons: int) -> LeaderResult:
    """Verified near-duplicate edges among the documents of one bucket (see the module docstring).

    Args:
        docs: the bucket's distinct document references, in the order leaders are chosen (earliest first; pass
            the keep order so that a cluster's leader is the document it keeps).
        shingles: document reference -> sorted, duplicate-free ``uint64`` shingle-hash array (as for
            :func:`tokenmill.dedup.verify.verify`); empty sets never pass.
        threshold: an edge needs Jaccard strictly above it.
        max_comparisons: the most exact comparisons one document makes (``>= 1``).

    Returns:
        :class:`LeaderResult`; ``compared + inferred + not_verified == k*(k-1)/2`` for ``k = len(docs)``.
        Deterministic: a function of the arguments only.
    """
    _check_leader_args(threshold, max_comparisons)
    near = 2.0 * threshold - 1.0 - _EPS
    leaders: list[int] = []
    members: list[list[int]] = []  # per leader: its direct members (each with J > threshold to it)
    parent: list[int] = []         # union-find over leader indices: clusters joined by verified edges
    bank = _Bank()
    edges = _Edges(threshold)
    compared = not_verified = 0
    for x in docs:
        sx = np.asarray(shingles[x], dtype=np.uint64)
        # Size filter (exact): J(x, y) <= min/max of their sizes, so a leader whose size ratio with x is at most
        # 2t - 1 can neither pass nor hold a partner of x in its cluster. Then at most max_comparisons leaders.
        lsize = bank.sizes()
        eligible = np.flatnonzero((lsize > near * sx.size) & (lsize * near < sx.size))
        reach = eligible[:max_comparisons]
        budget = max_comparisons - reach.size
        to_leader = np.zeros(len(leaders))
        to_leader[reach] = bank.jaccard(sx, reach) if reach.size else 0.0
        compared += reach.size
        joined: int | None = None  # the root of the cluster x is connected to so far

        def join(leader: int) -> None:
            nonlocal joined
            r = _find(parent, leader)
            if joined is None:
                joined = r
            elif r != joined:
                parent[r] = joined

        passed = edges.add(x, leaders, to_leader)
        for i in passed:
            join(i)
        # Clusters that may hold a partner of x (triangle inequality), nearest first.
        maybe = np.flatnonzero((to_leader > near) & (to_leader <= threshold))
        for i in maybe[np.lexsort((maybe, -to_leader[maybe]))].tolist():
            if joined is not None and _find(parent, i) == _find(parent, joined):
                continue
            # A member can pass only if its size ratio with x is above t.
            group = [m for m in members[i]
                     if min(len(shingles[m]), sx.size) > threshold * max(len(shingles[m]), sx.size)]
            take = group[:budget]
            not_verified += len(group) - len(take)
            if not take:
                continue
            bounds = np.cumsum([0] + [len(shingles[m]) for m in take])
            data = np.concatenate([np.asarray(shingles[m], dtype=np.uint64) for m in take])
            to_member = _jaccard_against(sx, data, bounds)
            compared += len(take)
            budget -= len(take)
            if edges.add(x, take, to_member):
                join(i)
        # Eligible leaders past the budget, in clusters x is not connected to: undecided, with their members.
        for i in eligible[max_comparisons:].tolist():
            if joined is None or _find(parent, i) != _find(parent, joined):
                not_verified += 1 + len(members[i])
        if passed:
            members[passed[0]].append(x)
        else:
            leaders.append(x)
            members.append([])
            parent.append(len(parent))
            bank.add(sx)
            if joined is not None:
                parent[_find(parent, len(parent) - 1)] = _find(parent, joined)

    k = len(docs)
    pairs, jaccard = edges.arrays()
    return LeaderResult(pairs, jaccard, compared, compared - len(jaccard), k * (k - 1) // 2 - compared - not_verified,
                        not_verified)


class _Edges:
    """A bucket's verified edges as arrays, one per comparison pass that found any: a group of 10,000 near copies
    yields millions of edges, and as Python ints and floats they took 100 bytes each (the largest allocation of a
    verify task)."""

    def __init__(self, threshold: float) -> None:
        self.threshold = threshold
        self.a: list[np.ndarray] = []
        self.b: list[np.ndarray] = []
        self.sims: list[np.ndarray] = []

    def add(self, x: int, among: Sequence[int], jaccard: np.ndarray) -> list[int]:
        """An edge from `x` to each `among[i]` whose `jaccard[i]` is above the threshold; those i, ascending."""
        hits = np.flatnonzero(jaccard > self.threshold)
        if hits.size:
            self.a.append(np.full(hits.size, x, np.uint64))
            self.b.append(np.array([among[i] for i in hits.tolist()], np.uint64))
            self.sims.append(jaccard[hits])
        return hits.tolist()

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """``(m, 2)`` pairs ``(min, max)`` in the order found, and their Jaccard."""
        ua = np.concatenate(self.a) if self.a else np.zeros(0, np.uint64)
        ub = np.concatenate(self.b) if self.b else np.zeros(0, np.uint64)
        pairs = np.stack([np.minimum(ua, ub), np.maximum(ua, ub)], axis=1).reshape(-1, 2)
        return pairs, (np.concatenate(self.sims).astype(np.float64, copy=False) if self.sims
                       else np.zeros(0, np.float64))


def _check_leader_args(threshold: float, max_comparisons: int) -> None:
    if not 0.0 < threshold < 1.0:
        raise ValueError(f"threshold must be in (0, 1), got {threshold}")
    if max_comparisons < 1:
        raise ValueError(f"max_comparisons must be >= 1, got {max_comparisons}")


def _find(parent: list[int], i: int) -> int:
    """The root of ``i`` in the union-find ``parent``, halving the path on the way."""
    while parent[i] != i:
        parent[i] = parent[parent[i]]
        i = parent[i]
    return i


class BucketResult(NamedTuple):
    """The edges of one over-cap bucket from :func:`cluster_bucket`, and what they cost."""

    pairs: np.ndarray
    """``(m, 2)`` ``uint64`` verified pairs above the threshold, ``a < b``, sorted and unique."""
    jaccard: np.ndarray
    """``(m,)`` exact Jaccard of each pair."""
    compared: int
    """Exact Jaccard computations, both passes (a pair compared in both counts twice)."""
    passed: int
    """Comparisons above the threshold."""
    rejected: int
    """Comparisons at or below the threshold (``compared - passed``)."""
    not_verified: int
    """Pairs of the bucket that neither pass decided, at most (the smaller of the two passes' counts)."""
    second_pass: bool
    """Whether the keep-order pass hit the cap, so the central-first pass ran."""


def central_order(docs: Sequence[int], shingles: Mapping[int, np.ndarray]) -> list[int]:
    """``docs`` with the most central first: by the mean, over a document's shingles, of how many documents of
    ``docs`` hold that shingle (descending); ties keep the input order. An original has the shingles its edits
    share, each edit adds its own rare ones, so the original comes before its edits."""
    sets = [np.asarray(shingles[d], dtype=np.uint64) for d in docs]
    sizes = np.array([s.size for s in sets], dtype=np.int64)
    if not sizes.sum():
        return list(docs)
    _, inverse, counts = np.unique(np.concatenate(sets), return_inverse=True, return_counts=True)
    df = np.r_[0, np.cumsum(counts[inverse.reshape(-1)])]
    bounds = np.r_[0, np.cumsum(sizes)]
    score = (df[bounds[1:]] - df[bounds[:-1]]) / np.maximum(sizes, 1)
    return [docs[i] for i in np.lexsort((np.arange(len(docs)), -score)).tolist()]


def cluster_bucket(docs: Sequence[int], shingles: Mapping[int, np.ndarray], threshold: float,
                   max_comparisons: int) -> BucketResult:
    """Verified edges of one over-cap bucket: :func:`leader_edges` in the given (keep) order, then, if that left
    pairs undecided, again in :func:`central_order`; the union of both passes' edges.

    Cost: at most ``2 * len(docs) * max_comparisons`` comparisons, ``len(docs) - 1`` for a bucket that is one
    cluster. Deterministic: a function of the arguments only.
    """
    first = leader_edges(docs, shingles, threshold, max_comparisons)
    passes = [first]
    if first.not_verified:
        passes.append(leader_edges(central_order(docs, shingles), shingles, threshold, max_comparisons))
    pairs = np.concatenate([p.pairs for p in passes])
    sims = np.concatenate([p.jaccard for p in passes])
    order = np.lexsort((pairs[:, 1], pairs[:, 0]))
    pairs, sims = pairs[order], sims[order]
    first_of = np.r_[True, (pairs[1:] != pairs[:-1]).any(axis=1)] if len(pairs) else np.zeros(0, bool)
    compared = sum(p.compared for p in passes)
    passed = sum(len(p.pairs) for p in passes)
    return BucketResult(pairs[first_of], sims[first_of], compared, passed, compared - passed,
                        min(p.not_verified for p in passes), len(passes) > 1)


def cluster_groups(bucket: np.ndarray, doc: np.ndarray, visit: Callable[[np.ndarray], np.ndarray],
                   shingles: Mapping[int, np.ndarray], threshold: float, max_comparisons: int) -> list[BucketResult]:
    """:func:`cluster_bucket` on each group of over-cap buckets: `doc` its members, a group a run of equal
    `bucket`, each group's members in the order `visit` gives (the clusters phase's keep order)."""
    if not doc.size:
        return []
    starts = np.flatnonzero(np.r_[True, bucket[1:] != bucket[:-1]])
    return [cluster_bucket(group[visit(group)].tolist(), shingles, threshold, max_comparisons)
            for group in np.split(doc, starts[1:])]
