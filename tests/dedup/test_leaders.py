"""Leader clustering inside buckets over the cap: exact components, verified edges, bounded and counted cost."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from tokenmill.dedup.clusters import components
from tokenmill.dedup.leaders import central_order, cluster_bucket, leader_edges
from tokenmill.dedup.verify import jaccard

T = 0.95


def _rand(rng, n):
    return np.unique(rng.integers(0, 2**63, n).astype(np.uint64))


def _edit(rng, base, drop, add):
    kept = base[rng.random(base.size) >= drop]
    return np.unique(np.concatenate([kept, rng.integers(0, 2**63, add).astype(np.uint64)]))


def _components(edges) -> dict[int, int]:
    nodes, comp = components(np.array(edges, dtype=np.uint64).reshape(-1, 2))
    return dict(zip(nodes.tolist(), comp.tolist()))


def _check_counts(r, k):
    assert r.compared + r.inferred + r.not_verified == k * (k - 1) // 2
    assert r.rejected == r.compared - len(r.pairs) >= 0 and r.inferred >= 0


def test_pair_not_involving_the_first_document_is_found():
    # The old star paired everything with doc 0 only; A (5) ~ B (9) was never verified.
    rng = np.random.default_rng(1)
    sets = {i: _rand(rng, 300) for i in range(12)}
    sets[9] = _edit(rng, sets[5], 0.0, 5)
    r = leader_edges(list(range(12)), sets, T, 1000)
    assert r.pairs.tolist() == [[5, 9]] and r.jaccard[0] == pytest.approx(jaccard(sets[5], sets[9]))
    assert r.jaccard[0] > T
    assert r.not_verified == 0
    _check_counts(r, 12)


def test_partner_that_is_a_member_not_a_leader_is_found_by_the_triangle_bound():
    # L leads; M joins L (0.96); X is 0.96 to M but only ~0.92 to L: X must still reach M's cluster.
    base = np.arange(1000, dtype=np.uint64)
    lead = base
    member = np.concatenate([base[20:], np.arange(5000, 5020, dtype=np.uint64)])
    x = np.concatenate([base[40:], np.arange(5000, 5040, dtype=np.uint64)])
    sets = {1: lead, 2: member, 3: x}
    assert jaccard(lead, member) > T and jaccard(member, x) > T and 0.90 < jaccard(lead, x) <= T
    r = leader_edges([1, 2, 3], sets, T, 1000)
    assert r.pairs.tolist() == [[1, 2], [2, 3]]
    assert r.compared == 3 and r.rejected == 1


def test_components_equal_those_of_all_pairs_on_random_families():
    rng = np.random.default_rng(0)
    for trial in range(25):
        sets, n = {}, 0
        for _ in range(rng.integers(1, 6)):  # families of edits of a base: chains, stars, cliques
            base = _rand(rng, int(rng.integers(40, 400)))  # sizes apart and close: the size filter at work
            for _ in range(rng.integers(1, 12)):
                sets[n] = _edit(rng, base, rng.uniform(0.0, 0.06), int(rng.integers(0, 8)))
                n += 1
        for _ in range(rng.integers(0, 10)):
            sets[n] = _rand(rng, 200)
            n += 1
        docs = rng.permutation(n).tolist()
        r = leader_edges(docs, sets, T, 10**6)
        truth = [p for p in itertools.combinations(range(n), 2) if jaccard(sets[p[0]], sets[p[1]]) > T]
        assert _components(r.pairs.tolist()) == _components(truth), trial
        assert all(jaccard(sets[a], sets[b]) > T for a, b in r.pairs.tolist())
        assert r.not_verified == 0
        _check_counts(r, n)
        again = leader_edges(docs, sets, T, 10**6)
        assert np.array_equal(again.pairs, r.pairs) and again[2:] == r[2:]


def test_one_giant_cluster_costs_one_comparison_per_document():
    rng = np.random.default_rng(2)
    base = _rand(rng, 400)
    k = 3000
    sets = {i: np.unique(np.concatenate([base, rng.integers(0, 2**63, 2).astype(np.uint64)])) for i in range(k)}
    r = leader_edges(list(range(k)), sets, T, 1000)
    assert r.compared == k - 1 and len(r.pairs) == k - 1 and r.rejected == 0
    assert set(_components(r.pairs.tolist()).values()) == {0}
    _check_counts(r, k)


def test_sizes_too_far_apart_are_never_compared():
    rng = np.random.default_rng(4)
    sets = {i: _rand(rng, 100 * 2**i) for i in range(6)}  # size ratio 1/2 <= 2t - 1: no partner possible
    sets[6] = _edit(rng, sets[3], 0.0, 4)
    r = leader_edges(list(range(7)), sets, T, 1000)
    assert r.pairs.tolist() == [[3, 6]]
    assert r.compared == 1 and r.inferred == 7 * 6 // 2 - 1
    _check_counts(r, 7)


def test_budget_counts_what_it_leaves_unverified():
    rng = np.random.default_rng(3)
    k = 40
    sets = {i: _rand(rng, 100) for i in range(k)}
    sets[39] = _edit(rng, sets[20], 0.0, 1)  # a partner beyond the budget of 5 comparisons
    r = leader_edges(list(range(k)), sets, T, 5)
    assert len(r.pairs) == 0  # missed, and said so:
    assert r.compared == sum(min(i, 5) for i in range(k))
    assert r.not_verified == sum(max(i - 5, 0) for i in range(k)) > 0
    _check_counts(r, k)
    full = leader_edges(list(range(k)), sets, T, 1000)
    assert full.pairs.tolist() == [[20, 39]] and full.not_verified == 0


def test_bad_arguments():
    with pytest.raises(ValueError, match="max_comparisons"):
        leader_edges([1], {1: np.zeros(0, np.uint64)}, T, 0)
    with pytest.raises(ValueError, match="threshold"):
        leader_edges([1], {1: np.zeros(0, np.uint64)}, 1.0, 5)


def _family(rng, k, extra=12):
    """An original of 400 shingles and k - 1 longer edits (12 shingles added): each 0.97 to the original, 0.94 to
    one another (not duplicates, but within 2t - 1)."""
    original = _rand(rng, 400)
    sets = {0: original}
    for i in range(1, k):
        sets[i] = np.unique(np.concatenate([original, rng.integers(0, 2**63, extra).astype(np.uint64)]))
    return sets


def test_central_order_puts_the_original_first():
    sets = _family(np.random.default_rng(5), 50)
    keep_order = list(range(1, 50)) + [0]  # longest first: the edits, then the original
    assert central_order(keep_order, sets)[0] == 0
    assert central_order(keep_order, sets)[1:] == list(range(1, 50))  # ties keep the input order


def test_family_of_longer_edits_comes_out_whole_past_the_budget():
    k, budget = 300, 20
    sets = _family(np.random.default_rng(6), k)
    keep_order = list(range(1, k)) + [0]
    one_pass = leader_edges(keep_order, sets, T, budget)
    assert one_pass.not_verified > 0 and len(one_pass.pairs) == budget  # the original reached 20 edits only
    r = cluster_bucket(keep_order, sets, T, budget)
    assert r.second_pass and r.pairs.tolist() == [[0, i] for i in range(1, k)]
    assert all(j > T for j in r.jaccard.tolist())
    assert r.compared <= 2 * k * budget and r.passed + r.rejected == r.compared
    assert r.not_verified <= one_pass.not_verified


def test_cluster_bucket_is_one_pass_when_nothing_is_left_undecided():
    sets = _family(np.random.default_rng(7), 30)
    r = cluster_bucket(list(range(1, 30)) + [0], sets, T, 1000)
    assert not r.second_pass and r.not_verified == 0 and len(r.pairs) == 29
