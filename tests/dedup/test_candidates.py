"""Candidate pairs from LSH buckets and exact hashes."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from tokenmill.dedup.candidates import candidate_pairs, exact_pairs
from tokenmill.dedup.clusters import components


def _u64(*xs):
    return np.array(xs, dtype=np.uint64)


def _brute(band, key, doc, cap):
    buckets: dict = {}
    for b, k, d in zip(band.tolist(), key.tolist(), doc.tolist()):
        buckets.setdefault((b, k), set()).add(d)
    pairs, overflow = set(), 0
    for members in buckets.values():
        ms = sorted(members)
        full = len(ms) * (len(ms) - 1) // 2
        if full > cap:
            pairs |= {(ms[0], m) for m in ms[1:]}
            overflow += full - (len(ms) - 1)
        else:
            pairs |= set(itertools.combinations(ms, 2))
    return sorted(pairs), overflow


def test_buckets_to_pairs():
    band = np.array([0, 0, 0, 0, 1, 1], dtype=np.int64)
    key = _u64(7, 7, 7, 9, 7, 7)
    doc = _u64(30, 10, 20, 40, 40, 10)
    pairs, overflow = candidate_pairs(band, key, doc)
    assert pairs.dtype == np.uint64 and pairs.shape == (4, 2)
    assert pairs.tolist() == [[10, 20], [10, 30], [10, 40], [20, 30]]
    assert overflow == 0


def test_pairs_unique_across_bands_and_repeated_rows():
    # The same bucket contents in three bands, and a doc listed twice in one bucket: each pair once.
    band = np.array([0, 0, 1, 1, 2, 2, 2], dtype=np.int32)
    key = _u64(5, 5, 8, 8, 1, 1, 1)
    big = (3 << 32) | 17
    doc = _u64(big, 2, 2, big, big, 2, 2)
    pairs, overflow = candidate_pairs(band, key, doc)
    assert pairs.tolist() == [[2, big]]
    assert overflow == 0


def test_same_key_different_band_is_not_a_bucket():
    pairs, _ = candidate_pairs(np.array([0, 1]), _u64(5, 5), _u64(1, 2))
    assert pairs.shape == (0, 2)


def test_bucket_over_cap_is_a_star_and_counts_overflow():
    k = 6  # 15 pairs > cap 10
    band = np.zeros(k + 2, dtype=np.int64)
    key = _u64(*([1] * k + [2, 2]))
    doc = _u64(60, 50, 40, 30, 20, 10, 70, 80)
    pairs, overflow = candidate_pairs(band, key, doc, max_pairs_per_bucket=10)
    star = [[10, d] for d in (20, 30, 40, 50, 60)]
    assert pairs.tolist() == star + [[70, 80]]
    assert overflow == 15 - 5
    nodes, comp = components(pairs)
    assert set(comp[np.isin(nodes, doc[:k])].tolist()) == {10}


def test_bucket_at_cap_is_complete():
    pairs, overflow = candidate_pairs(np.zeros(5), np.zeros(5, dtype=np.uint64), _u64(1, 2, 3, 4, 5), 10)
    assert len(pairs) == 10 and overflow == 0


def test_random_against_bruteforce_and_input_order():
    rng = np.random.default_rng(0)
    n = 400
    band = rng.integers(0, 4, n)
    key = rng.integers(0, 12, n).astype(np.uint64)
    doc = rng.integers(0, 60, n).astype(np.uint64) + np.uint64(1 << 40)
    want_pairs, want_over = _brute(band, key, doc, 20)
    pairs, overflow = candidate_pairs(band, key, doc, max_pairs_per_bucket=20)
    assert [tuple(p) for p in pairs.tolist()] == want_pairs
    assert overflow == want_over > 0
    perm = rng.permutation(n)
    pairs2, overflow2 = candidate_pairs(band[perm], key[perm], doc[perm], max_pairs_per_bucket=20)
    assert np.array_equal(pairs, pairs2) and overflow2 == overflow


def test_empty_and_bad_input():
    pairs, overflow = candidate_pairs(np.array([]), np.array([]), np.array([]))
    assert pairs.shape == (0, 2) and pairs.dtype == np.uint64 and overflow == 0
    with pytest.raises(ValueError):
        candidate_pairs(np.zeros(2), np.zeros(3), np.zeros(2))


def test_exact_pairs_bytes():
    h = np.array([b"a" * 16, b"b" * 16, b"a" * 16, b"c" * 16, b"a" * 16, b"b" * 16], dtype="S16")
    doc = _u64(9, 8, 3, 1, 5, 2)
    pairs = exact_pairs(h, doc)
    assert pairs.dtype == np.uint64
    assert pairs.tolist() == [[2, 8], [3, 5], [3, 9]]


def test_exact_pairs_two_uint64_columns():
    h = np.array([[1, 2], [1, 3], [1, 2], [0, 2], [1, 3], [1, 2]], dtype=np.uint64)
    doc = _u64(10, 11, 12, 13, 14, 12)  # doc 12 twice with the same hash: one member
    assert exact_pairs(h, doc).tolist() == [[10, 12], [11, 14]]


def test_exact_pairs_no_duplicates():
    assert exact_pairs(np.array([b"x", b"y"], dtype="S16"), _u64(1, 2)).shape == (0, 2)
