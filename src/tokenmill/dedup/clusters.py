"""Duplicate clusters from verified edges, and the deterministic keep/drop choice inside each cluster.

Edges are an ``(m, 2)`` array of document references (``uint64``), each a verified near-duplicate pair.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

__all__ = ["components", "greedy_keep", "cluster_table", "over_cap_groups"]


def _as_edges(edges: np.ndarray) -> np.ndarray:
    edges = np.asarray(edges)
    if edges.size == 0:
        return np.empty((0, 2), dtype=np.uint64)
    if edges.ndim != 2 or edges.shape[1] != 2:
        raise ValueError(f"edges must be (m, 2), got {edges.shape}")
    return edges.astype(np.uint64, copy=False)


def _index(edges: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sorted unique nodes and each edge's endpoints as indices into them."""
    nodes = np.unique(edges)
    u = np.searchsorted(nodes, edges[:, 0])
    v = np.searchsorted(nodes, edges[:, 1])
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
    label = np.arange(nodes.size, dtype=np.int64)
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
    edges = _as_edges(edges)
    jaccard = np.asarray(jaccard, dtype=np.float64).reshape(-1)
    if jaccard.size != edges.shape[0]:
        raise ValueError(f"jaccard must have one value per edge: {jaccard.size} values, {edges.shape[0]} edges")
    if edges.shape[0] == 0:
        return {}
    nodes, u, v = _index(edges)
    n = nodes.size
    # Symmetric adjacency in CSR form; self-loops say nothing about keep/drop.
    not_loop = u != v
    src = np.concatenate([u[not_loop], v[not_loop]])
    dst = np.concatenate([v[not_loop], u[not_loop]])
    sim = np.concatenate([jaccard[not_loop], jaccard[not_loop]])
    # Sort by (src, dst, -sim): for a repeated pair the highest Jaccard comes first.
    by = np.lexsort((-sim, dst, src))
    src, dst, sim = src[by], dst[by], sim[by]
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(src, minlength=n), out=offsets[1:])

    try:
        keys = [(order[d], d) for d in nodes.tolist()]
    except KeyError as exc:
        raise KeyError(f"order has no sort key for node {exc.args[0]}") from None
    visit = sorted(range(n), key=keys.__getitem__)
    del keys

    # Numpy slices per kept node, not Python lists of every edge: the lists cost ~70 bytes an edge (1.5 GB at 10
    # million edges of a web-like crawl). In a node's run, a repeated neighbour comes first with its highest
    # Jaccard, so the first undecided occurrence of each neighbour is the one recorded, as the scalar loop did.
    first_of_run = np.r_[True, (dst[1:] != dst[:-1]) | (src[1:] != src[:-1])]
    decided = np.zeros(n, dtype=bool)
    offsets_l = offsets.tolist()
    kept_l, drop_j, drop_sim = [], [], []
    for i in visit:
        if decided[i]:
            continue
        decided[i] = True  # kept
        lo, hi = offsets_l[i], offsets_l[i + 1]
        if lo == hi:
            continue
        nb = dst[lo:hi]
        take = first_of_run[lo:hi] & ~decided[nb]
        if take.any():
            j = nb[take]
            decided[j] = True
            kept_l.append(np.full(j.size, i, dtype=np.int64))
            drop_j.append(j)
            drop_sim.append(sim[lo:hi][take])
    if not drop_j:
        return {}
    kept_by = nodes[np.concatenate(kept_l)].tolist()
    return dict(zip(nodes[np.concatenate(drop_j)].tolist(), zip(kept_by, np.concatenate(drop_sim).tolist())))


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
