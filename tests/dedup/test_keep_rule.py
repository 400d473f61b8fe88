"""The two removal rules over the same verified edges: greedy keeps both ends of a chain, the component rule one per
component; both counts whatever the rule; a random graph checked against a plain union-find."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from tokenmill.dedup.clusters import components, ranked
from tokenmill.dedup.decisions import Decisions, decide
from tokenmill.dedup.keep_rules import component_keepers, stands_for


def _decide(a, b, jaccard, exact, ranks=None, rule="greedy"):
    edges = pa.table({"a": pa.array(a, pa.uint64()), "b": pa.array(b, pa.uint64()),
                      "jaccard": pa.array(jaccard, pa.float64()), "exact": pa.array(exact, pa.bool_())})
    nodes, comp = components(np.stack([np.asarray(a, np.uint64), np.asarray(b, np.uint64)], 1))
    ranks = np.arange(nodes.size) if ranks is None else np.asarray(ranks)
    return Decisions.of(nodes, comp, [decide(edges, ranked(nodes, ranks))],
                        ranks if rule == "component" else None)


def test_a_chain_keeps_both_ends_under_greedy_and_one_document_under_the_component_rule():
    """A~B (0.97), B~C (0.96), A!~C: greedy visits A first, removes B, keeps C (no edge to A); the component rule
    removes C too, as a component duplicate of A, with no Jaccard (no verified edge to A). Both counts are the
    same whichever rule ran."""
    A, B, C = 1, 2, 3
    ids = pa.array(["A", "B", "C"])
    greedy = _decide([A, B], [B, C], [0.97, 0.96], [False, False])
    assert greedy.code.tolist() == [3, 1, 3]  # kept, near, kept
    assert greedy.size.tolist() == [2, 0, 1]  # A stands for A and B; C for itself
    comp = _decide([A, B], [B, C], [0.97, 0.96], [False, False], rule="component")
    rows = comp.shard_table(ids, np.arange(3)).to_pylist()
    assert [(r["reason"], r["kept_by"], r["jaccard"], r["cluster_size"]) for r in rows] == [
        (None, None, None, 3), ("near_duplicate", "A", 0.97, None), ("component_duplicate", "A", None, None)]
    assert greedy.removals == comp.removals == {"greedy": 1, "component": 2}


def test_the_component_rule_keeps_the_first_document_of_the_keep_order():
    """With C ranked first, greedy keeps C and A (B goes to C); the component rule keeps C only: the document the
    `keep` rules prefer, whatever the references."""
    A, B, C = 1, 2, 3
    decided = _decide([A, B], [B, C], [0.97, 0.96], [False, False], ranks=[1, 2, 0], rule="component")
    assert decided.code.tolist() == [2, 1, 3] and decided.by[:2].tolist() == [2, 2]  # both removed by C
    assert decided.size.tolist() == [0, 0, 3]


def test_sizes_follow_removals_through_an_exact_copy_removed_in_turn():
    """a = b exactly, b ~ c (0.97): greedy removes b as a's exact copy and keeps c (b, gone, removes nothing): a
    stands for 2, c for 1. e = d exactly (d ranked before e), f ~ d with f ranked first: exact duplicates go first
    (d removes e), then f removes d; f stands for all three."""
    a, b, c = 1, 2, 3
    decided = _decide([a, b], [b, c], [1.0, 0.97], [True, False])
    assert decided.code.tolist() == [3, 0, 3] and decided.size.tolist() == [2, 0, 1]
    d, e, f = 4, 5, 6  # e is d's exact copy (d ranked first); f ranked before d, f ~ d
    decided = _decide([d, f], [e, d], [1.0, 0.98], [True, False], ranks=[1, 2, 0])
    assert decided.code.tolist() == [1, 0, 3]  # d near (by f), e exact (by d), f kept
    assert decided.size.tolist() == [0, 0, 3]


def test_component_rule_on_random_graphs_keeps_one_per_union_find_component_and_sizes_add_up():
    """Random sparse graphs (chains, stars, pairs): the component rule keeps exactly one document per component of
    a plain union-find, the best ranked one; greedy keeps at least one per component and never two adjacent;
    under both rules the kept sizes sum to the nodes, and per component to the component's size."""
    rng = np.random.default_rng(11)
    for trial in range(20):
        n = int(rng.integers(5, 300))
        m = int(rng.integers(1, 2 * n))
        a = rng.integers(0, n, m).astype(np.uint64)
        b = rng.integers(0, n, m).astype(np.uint64)
        keep = a != b
        a, b = a[keep], b[keep]
        if not a.size:
            continue
        jac = rng.uniform(0.951, 1.0, a.size)
        exact = rng.random(a.size) < 0.2
        nodes = np.unique(np.r_[a, b])
        ranks = rng.permutation(nodes.size)
        parent = list(range(n))

        def find(x):
            while parent[x] != x:
                parent[x] = parent[parent[x]]
                x = parent[x]
            return x

        for x, y in zip(a.tolist(), b.tolist()):
            parent[find(x)] = find(y)
        roots = np.array([find(int(x)) for x in nodes])
        best = {r: min((ranks[i], i) for i in np.flatnonzero(roots == r))[1] for r in set(roots.tolist())}
        for rule in ("greedy", "component"):
            d = _decide(a, b, jac, exact, ranks, rule)
            kept = np.flatnonzero(~d.dropped)
            assert d.size.sum() == nodes.size, (trial, rule)
            for r in best:
                members = np.flatnonzero(roots == r)
                assert d.size[members].sum() == members.size
                assert not d.dropped[best[r]]  # the best ranked document of a component is always kept
            if rule == "component":
                assert sorted(kept.tolist()) == sorted(best.values()), trial
                assert d.removals["component"] == int((d.dropped).sum())
            else:
                assert d.removals["greedy"] == int(d.dropped.sum()) <= d.removals["component"]


def test_keepers_and_stands_for_on_arrays():
    comp = np.array([0, 0, 2, 2, 2])
    assert component_keepers(comp, np.array([4, 3, 0, 2, 1])).tolist() == [1, 1, 2, 2, 2]
    dropped = np.array([False, True, True, False])
    assert stands_for(dropped, np.array([0, 2, 3, 0])).tolist() == [1, 0, 0, 3]
