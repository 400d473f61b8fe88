"""Components and the greedy keep/drop choice."""

from __future__ import annotations

import numpy as np
import pytest

from tokenmill.dedup.clusters import cluster_table, components, greedy_keep, over_cap_groups


def _e(*pairs):
    return np.array(pairs, dtype=np.uint64).reshape(-1, 2)


def _brute_components(edges):
    parent = {}

    def find(x):
        while parent.setdefault(x, x) != x:
            x = parent[x]
        return x

    for a, b in edges.tolist():
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
    return {n: find(n) for n in list(parent)}


def test_components_small_graphs():
    nodes, comp = components(_e((5, 3), (3, 9), (20, 11), (7, 7)))
    assert nodes.dtype == np.uint64 and comp.dtype == np.uint64
    assert nodes.tolist() == [3, 5, 7, 9, 11, 20]
    assert comp.tolist() == [3, 3, 7, 3, 11, 11]
    # A long path given from its far end: the smallest node still labels everything.
    path = _e(*[(i + 1, i) for i in range(49, -1, -1)])  # 50 -> 49 -> ... -> 0
    nodes, comp = components(path)
    assert set(comp.tolist()) == {0} and len(nodes) == 51
    empty_nodes, empty_comp = components(np.empty((0, 2), dtype=np.uint64))
    assert empty_nodes.size == empty_comp.size == 0


def test_components_random_against_union_find():
    rng = np.random.default_rng(2)
    edges = (rng.integers(0, 300, (250, 2)).astype(np.uint64) << np.uint64(32)) | np.uint64(3)
    nodes, comp = components(edges)
    want = _brute_components(edges)
    assert dict(zip(nodes.tolist(), comp.tolist())) == want
    assert len(set(comp.tolist())) > 10


A, B, C = 100, 200, 300
CHAIN = _e((A, B), (B, C))  # A~C was 0.92: failed verification, no edge
CHAIN_J = np.array([0.96, 0.97])


def test_chain_order_a_first_keeps_a_and_c():
    order = {A: (0,), B: (1,), C: (2,)}
    assert greedy_keep(CHAIN, CHAIN_J, order) == {B: (A, 0.96)}


def test_chain_order_b_first_keeps_b():
    order = {A: (1,), B: (0,), C: (2,)}
    assert greedy_keep(CHAIN, CHAIN_J, order) == {A: (B, 0.96), C: (B, 0.97)}


def test_order_ties_broken_by_node_id():
    order = {A: (0,), B: (0,), C: (0,)}
    assert greedy_keep(CHAIN, CHAIN_J, order) == {B: (A, 0.96)}


def test_missing_order_key_and_bad_jaccard():
    with pytest.raises(KeyError):
        greedy_keep(CHAIN, CHAIN_J, {A: (0,), B: (1,)})
    with pytest.raises(ValueError):
        greedy_keep(CHAIN, CHAIN_J[:1], {A: (0,), B: (1,), C: (2,)})


def _random_graph(seed, n=80, m=160):
    rng = np.random.default_rng(seed)
    ends = rng.integers(0, n, (m, 2)).astype(np.uint64) + np.uint64(1 << 33)
    edges = ends[ends[:, 0] != ends[:, 1]]
    sims = rng.uniform(0.95, 1.0, len(edges))
    nodes = np.unique(edges).tolist()
    quality = rng.integers(0, 5, len(nodes))
    order = {d: (-int(q), d % 7, d) for d, q in zip(nodes, quality)}
    return rng, edges, sims, order


def test_deterministic_under_edge_shuffle_and_flip():
    rng, edges, sims, order = _random_graph(3)
    want = greedy_keep(edges, sims, order)
    for _ in range(5):
        perm = rng.permutation(len(edges))
        shuffled = edges[perm]
        flip = rng.random(len(edges)) < 0.5
        shuffled[flip] = shuffled[flip][:, ::-1]
        assert greedy_keep(shuffled, sims[perm], order) == want
        n1, c1 = components(shuffled)
        n0, c0 = components(edges)
        assert np.array_equal(n0, n1) and np.array_equal(c0, c1)


@pytest.mark.parametrize("seed", [4, 5, 6])
def test_random_graph_dropped_are_adjacent_to_kept(seed):
    _, edges, sims, order = _random_graph(seed)
    dropped = greedy_keep(edges, sims, order)
    nodes = set(np.unique(edges).tolist())
    kept = nodes - set(dropped)
    sim_of = {}
    for (a, b), s in zip(edges.tolist(), sims.tolist()):
        sim_of[(a, b)] = sim_of[(b, a)] = max(s, sim_of.get((a, b), 0.0))
    assert dropped and kept
    for d, (k, s) in dropped.items():
        assert k in kept
        assert sim_of[(d, k)] == s
    # No two kept documents are near-duplicates of each other, and each component keeps at least one.
    assert not any(a in kept and b in kept for a, b in edges.tolist())
    node_arr, comp = components(edges)
    kept_comps = {c for n, c in zip(node_arr.tolist(), comp.tolist()) if n in kept}
    assert kept_comps == set(comp.tolist())
    # The best document by `order` in every component is kept.
    best = {}
    for n, c in zip(node_arr.tolist(), comp.tolist()):
        if c not in best or (order[n], n) < (order[best[c]], best[c]):
            best[c] = n
    assert set(best.values()) <= kept


def test_cluster_table():
    edges = _e((B, A), (C, B), (7, 8))
    dropped = greedy_keep(edges, np.array([0.96, 0.97, 0.99]), {A: (1,), B: (0,), C: (2,), 7: (0,), 8: (0,)})
    t = cluster_table(edges, dropped)
    assert t["doc"].tolist() == [7, 8, A, B, C]
    assert t["cluster"].tolist() == [7, 7, A, A, A]
    assert t["kept"].tolist() == [True, False, False, True, False]
    assert t["kept_by"].tolist() == [7, 7, B, B, B]
    assert np.isnan(t["jaccard"][[0, 3]]).all()
    assert t["jaccard"][[1, 2, 4]].tolist() == [0.99, 0.96, 0.97]


def test_over_cap_groups_join_buckets_that_share_a_document():
    """Buckets 1 and 2 (two bands of one cluster) share documents 5 and 7; bucket 3 shares 9 with bucket 2 only
    through the chain; bucket 4 is apart. Each document comes back once, named by its group's smallest document."""
    bucket = np.array([1, 1, 1, 2, 2, 2, 3, 3, 4, 4], dtype=np.uint64)
    doc = np.array([7, 5, 3, 5, 7, 9, 9, 11, 20, 21], dtype=np.uint64)
    group, docs = over_cap_groups(bucket, doc)
    assert docs.tolist() == [3, 5, 7, 9, 11, 20, 21]
    assert group.tolist() == [3, 3, 3, 3, 3, 20, 20]
    empty = over_cap_groups(np.zeros(0, np.uint64), np.zeros(0, np.uint64))
    assert empty[0].size == empty[1].size == 0
    with pytest.raises(ValueError):
        over_cap_groups(np.array([1], np.uint64), np.array([1 << 63], np.uint64))


def _scalar_greedy(edges, jaccard, order):
    """The greedy choice as specified, one node and one neighbour at a time (repeated pairs: highest Jaccard)."""
    best: dict[int, dict[int, float]] = {}
    for (x, y), j in zip(edges.tolist(), jaccard.tolist()):
        if x != y:
            for p, q in ((x, y), (y, x)):
                best.setdefault(p, {})[q] = max(best.get(p, {}).get(q, -1.0), j)
    nodes = sorted({n for e in edges.tolist() for n in e}, key=lambda d: (order[d], d))
    decided, dropped = set(), {}
    for x in nodes:
        if x in decided:
            continue
        decided.add(x)
        for y, j in best.get(x, {}).items():
            if y not in decided:
                decided.add(y)
                dropped[y] = (x, j)
    return dropped


def test_greedy_keep_on_random_multigraphs_matches_the_scalar_choice():
    """Self-loops, pairs repeated in both directions with different Jaccards, ties in the order: the compact
    (int32, two half-CSR) adjacency decides exactly what the scalar greedy pass does, and so does cluster_table."""
    rng = np.random.default_rng(5)
    for _ in range(400):
        n, m = int(rng.integers(1, 40)), int(rng.integers(0, 120))
        ids = rng.choice(1 << 40, n, replace=False).astype(np.uint64)
        edges = ids[rng.integers(0, n, (m, 2))]
        jac = np.round(rng.uniform(0.95, 1.0, m), int(rng.integers(1, 4)))
        order = {int(d): (int(rng.integers(0, 3)),) for d in ids}
        got = greedy_keep(edges, jac, order)
        assert got == _scalar_greedy(edges, jac, order)
        table = cluster_table(edges, got)
        assert set(table["doc"][~table["kept"]].tolist()) == set(got)
