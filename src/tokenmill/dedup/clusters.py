"""Duplicate clusters from verified edges, and the deterministic keep/drop choice inside each cluster.

Edges are an ``(m, 2)`` array of document references (``uint64``), each a verified near-duplicate pair.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

__all__ = ["components", "greedy_keep", "greedy_drops", "ranked", "cluster_table", "over_cap_groups"]


def _as_edges(edges: np.ndarray) -> np.ndarray:
    edges = np.asarray(edges)
    if edges.size == 0:
        return np.empty((0, 2), dtype=np.uint64)
    if edges.ndim != 2 or edges.shape[1] != 2:
        raise ValueError(f"edges must be (m, 2), got {edges.shape}")
    return edges.astype(np.uint64, copy=False)


def _small(size: int) -> type:
    """The index dtype for arrays of ``size`` elements: int32 where it fits (half the memory of int64)."""
    return np.int32 if size < 2**31 else np.int64


def _index(edges: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sorted unique nodes and each edge's endpoints as indices into them (int32 where they fit)."""
    nodes = np.unique(edges)
    u = np.searchsorted(nodes, edges[:, 0]).astype(_small(nodes.size))
    v = np.searchsorted(nodes, edges[:, 1]).astype(_small(nodes.size))
    return nodes, u, v


def components(edges: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Connected components of the graph given by ``edges``.

    Args:
        edges: ``(m, 2)`` node references (cast to ``uint64``); self-loops and repeated edges are harmless.

    Returns:
        ``(nodes, component)``: ``nodes`` the sorted unique ``uint64`` nodes of ``edges``, ``component`` the same
        length, each node's component id = the smallest node of its component.

    Vectorised label propagation with hooking and pointer jumping over index arrays (O(nodes + edges) memory):
    every label points at a smaller-or-equal index in the same component; each round hooks the two labels of each
    edge onto their minimum and then compresses paths, until every edge joins equal labels. The surviving root of
    a component is its smallest index, i.e. its smallest node since ``nodes`` is sorted.
    """
    edges = _as_edges(edges)
    if edges.shape[0] == 0:
        return np.empty(0, dtype=np.uint64), np.empty(0, dtype=np.uint64)
    nodes, u, v = _index(edges)
    label = np.arange(nodes.size, dtype=_small(nodes.size))
    while True:
        lu, lv = label[u], label[v]
        differ = lu != lv
        if not differ.any():
            break
        lu, lv = lu[differ], lv[differ]
        low = np.minimum(lu, lv)
        np.minimum.at(label, lu, low)
        np.minimum.at(label, lv, low)
        while True:  # pointer jumping: point every node at its root
            nxt = label[label]
            if np.array_equal(nxt, label):
                break
            label = nxt
    return nodes, nodes[label]


def over_cap_groups(bucket: np.ndarray, doc: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Buckets joined by shared documents: the connected components of the bipartite bucket-document graph.

    A near-duplicate cluster of k documents fills a bucket in most of the LSH bands, so verifying each over-cap
    bucket on its own repeats the same cluster once per band (13 times at the default 320 permutations); its
    group is verified once. A group holds every pair of each of its buckets, so nothing a bucket would have
    found is lost.

    Args:
        bucket: ``(r,)`` ``uint64`` bucket name per membership row (unique across partitions and bands).
        doc: ``(r,)`` ``uint64`` document reference per row (below ``2**63``).

    Returns:
        ``(group, doc)``: each distinct document once, with its group's name (the group's smallest document),
        sorted by ``(group, doc)``.
    """
    doc = np.asarray(doc, dtype=np.uint64).reshape(-1)
    bucket = np.asarray(bucket, dtype=np.uint64).reshape(-1)
    if bucket.size != doc.size:
        raise ValueError(f"bucket and doc must have the same length, got {bucket.size} and {doc.size}")
    if not doc.size:
        return np.zeros(0, np.uint64), np.zeros(0, np.uint64)
    if int(doc.max()) >= 1 << 63:
        raise ValueError("document references must be below 2**63")
    # Bucket nodes above every document, so each component's smallest node is a document.
    nodes, comp = components(np.stack([doc, bucket | np.uint64(1 << 63)], axis=1))
    is_doc = nodes < np.uint64(1 << 63)
    nodes, comp = nodes[is_doc], comp[is_doc]
    order = np.lexsort((nodes, comp))
    return comp[order], nodes[order]


def greedy_keep(
    edges: np.ndarray,
    jaccard: np.ndarray,
    order: Mapping[int, tuple],
) -> dict[int, tuple[int, float]]:
    """Choose which documents of each duplicate cluster to keep, deterministically.

    Documents are visited in increasing ``(order[node], node)`` (the node id breaks ties, so equal keys are still
    deterministic; e.g. ``order[d] = (-quality, -length, d)`` keeps the best, longest document). A document not yet
    decided when visited is KEPT, and each of its not-yet-decided neighbours over an edge is DROPPED, recorded with
    (that kept document, the edge's Jaccard). Components are independent, so one global visit is the same as a
    visit per component.

    Guarantee: every dropped document has an edge to a kept document (the one in its record); two kept documents
    are never adjacent. It is not transitive: in a chain A~B, B~C without A~C, visiting A first keeps A and C
    (C is no near-duplicate of A) and drops B.

    Args:
        edges: ``(m, 2)`` verified near-duplicate pairs (``uint64`` references). All edges are used as given: filter
            by the verification mask first. A pair given twice (either direction) keeps its highest Jaccard.
        jaccard: ``(m,)`` Jaccard of each edge, reported with the drop.
        order: sort key per node (every node of ``edges`` must have one, else ``KeyError``); smaller goes first.

    Returns:
        ``{dropped node: (kept_by node, jaccard)}`` with Python ``int`` nodes and ``float`` Jaccards. Kept nodes are
        the nodes of ``edges`` not in the result. The result does not depend on the order of the edges.
    """

    def visit(nodes: np.ndarray) -> np.ndarray:
        try:
            keys = [(order[d], d) for d in nodes.tolist()]
        except KeyError as exc:
            raise KeyError(f"order has no sort key for node {exc.args[0]}") from None
        return np.array(sorted(range(nodes.size), key=keys.__getitem__), dtype=np.int64)

    dropped, kept_by, sims = greedy_drops(edges, jaccard, visit)
    return dict(zip(dropped.tolist(), zip(kept_by.tolist(), sims.tolist())))


def ranked(nodes: np.ndarray, rank: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    """A :func:`greedy_drops` visit order from a rank per node: ``rank[i]`` (distinct integers, smaller first) is
    the rank of ``nodes[i]`` (sorted, unique, a superset of the edges' nodes)."""

    def visit(of: np.ndarray) -> np.ndarray:
        at = np.searchsorted(nodes, of)
        if of.size and (at.max() >= nodes.size or not np.array_equal(nodes[at], of)):
            missing = of[(at >= nodes.size) | (nodes[np.minimum(at, nodes.size - 1)] != of)][0]
            raise KeyError(f"order has no sort key for node {int(missing)}")
        return np.argsort(rank[at], kind="stable")

    return visit


def greedy_drops(
    edges: np.ndarray,
    jaccard: np.ndarray,
    visit: Callable[[np.ndarray], np.ndarray],
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`greedy_keep` over arrays, for millions of nodes: ``visit(nodes)`` gives the order (indices into the
    sorted unique ``nodes`` of the edges) in which documents are visited, e.g. :func:`ranked`.

    Returns:
        ``(dropped, kept_by, jaccard)``: ``uint64``, ``uint64`` and ``float64`` arrays, one row per dropped node.
    """
    edges = _as_edges(edges)
    jaccard = np.asarray(jaccard, dtype=np.float64).reshape(-1)
    if jaccard.size != edges.shape[0]:
        raise ValueError(f"jaccard must have one value per edge: {jaccard.size} values, {edges.shape[0]} edges")
    if edges.shape[0] == 0:
        return np.zeros(0, np.uint64), np.zeros(0, np.uint64), np.zeros(0, np.float64)
    nodes, u, v = _index(edges)
    n = nodes.size
    # Each pair once, as (lo, hi), with its highest Jaccard; self-loops say nothing about keep/drop. Sorting by
    # the key lo * n + hi also orders the pairs by lo, which is half of the adjacency for free.
    lo, hi = np.minimum(u, v), np.maximum(u, v)
    del u, v
    key = lo.astype(np.int64) * n + hi
    by = np.lexsort((-jaccard, key))
    key = key[by]
    first = np.r_[True, key[1:] != key[:-1]] & (lo[by] != hi[by])
    del key
    pair = by[first].astype(_small(edges.shape[0]))
    del by, first
    lo, hi = lo[pair], hi[pair]
    # The adjacency as two CSR halves over the same pairs, each 4 bytes an entry where indices fit int32: by lo
    # (already in that order), the neighbour hi; by hi, the neighbour lo. A kept node drops its undecided
    # neighbours in either half; each neighbour appears once, so the order within a half does not matter.
    # (A symmetric CSR of int64 (node, neighbour, Jaccard) triples sorted with lexsort was most of the 3.3 GB the
    # clusters task reached at 17.8 million edges of a web-like crawl.)
    lo_start = np.searchsorted(lo, np.arange(n + 1)).tolist()
    by_hi = np.argsort(hi, kind="stable")
    hi_sorted = hi[by_hi]
    hi_start = np.searchsorted(hi_sorted, np.arange(n + 1)).tolist()
    del hi_sorted
    lo_nb, lo_pair = hi, pair
    hi_nb, hi_pair = lo[by_hi], pair[by_hi]
    del by_hi, lo

    visit_order = visit(nodes).tolist()

    decided = np.zeros(n, dtype=bool)
    kept_l, drop_j, drop_pair = [], [], []
    for i in visit_order:
        if decided[i]:
            continue
        decided[i] = True  # kept
        for nbs, pairs, lo_i, hi_i in ((lo_nb, lo_pair, lo_start[i], lo_start[i + 1]),
                                       (hi_nb, hi_pair, hi_start[i], hi_start[i + 1])):
            if lo_i == hi_i:
                continue
            nb = nbs[lo_i:hi_i]
            take = ~decided[nb]
            if take.any():
                j = nb[take]
                decided[j] = True
                kept_l.append(np.full(j.size, i, dtype=np.int64))
                drop_j.append(j)
                drop_pair.append(pairs[lo_i:hi_i][take])
    if not drop_j:
        return np.zeros(0, np.uint64), np.zeros(0, np.uint64), np.zeros(0, np.float64)
    return nodes[np.concatenate(drop_j)], nodes[np.concatenate(kept_l)], jaccard[np.concatenate(drop_pair)]


def cluster_table(edges: np.ndarray, dropped: Mapping[int, tuple[int, float]]) -> dict[str, np.ndarray]:
    """One row per node of ``edges``, for reporting: its cluster and the keep/drop decision.

    Args:
        edges: the ``(m, 2)`` verified edges given to :func:`greedy_keep`.
        dropped: the result of :func:`greedy_keep` on them.

    Returns:
        Columns (equal-length numpy arrays, rows sorted by ``(cluster, doc)``): ``cluster`` (``uint64``, the
        smallest doc of the component), ``doc`` (``uint64``), ``kept`` (``bool``), ``kept_by`` (``uint64``: the
        keeping document for a dropped row, the doc itself for a kept one) and ``jaccard`` (``float64``: the edge's
        Jaccard for a dropped row, ``NaN`` for a kept one).
    """
    nodes, comp = components(edges)
    order = np.lexsort((nodes, comp))
    nodes, comp = nodes[order], comp[order]
    kept_by = nodes.copy()
    sims = np.full(nodes.size, np.nan)
    kept = np.ones(nodes.size, dtype=bool)
    for i, d in enumerate(nodes.tolist()):
        hit = dropped.get(d)
        if hit is not None:
            kept[i] = False
            kept_by[i] = hit[0]
            sims[i] = hit[1]
    return {"cluster": comp, "doc": nodes, "kept": kept, "kept_by": kept_by, "jaccard": sims}
