"""Candidate pairs from LSH buckets and exact hashes."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from tokenmill.dedup.candidates import candidate_pairs, exact_pairs


def _u64(*xs):
    return np.array(xs, dtype=np.uint64)


def _brute(band, key, doc, cap):
    buckets: dict = {}
    for b, k, d in zip(band.tolist(), key.tolist(), doc.tolist()):
        buckets.setdefault((b, k), set()).add(d)
    pairs, over = set(), []
    for _, members in sorted(buckets.items()):
        ms = sorted(members)
        if len(ms) * (len(ms) - 1) // 2 > cap:
            over.append(ms)
        else:
            pairs |= set(itertools.combinations(ms, 2))
    return sorted(pairs), over


def _groups(found):
    return [found.over_cap_doc[found.over_cap_bucket == i].tolist() for i in range(found.buckets_over_cap)]


def test_buckets_to_pairs():
    band = np.array([0, 0, 0, 0, 1, 1], dtype=np.int64)
    key = _u64(7, 7, 7, 9, 7, 7)
    doc = _u64(30, 10, 20, 40, 40, 10)
    found = candidate_pairs(band, key, doc)
    assert found.pairs.dtype == np.uint64 and found.pairs.shape == (4, 2)
    assert found.pairs.tolist() == [[10, 20], [10, 30], [10, 40], [20, 30]]
    assert found.buckets_over_cap == 0 and found.over_cap_pairs == 0 and found.over_cap_doc.size == 0


def test_pairs_unique_across_bands_and_repeated_rows():
    # The same bucket contents in three bands, and a doc listed twice in one bucket: each pair once.
    band = np.array([0, 0, 1, 1, 2, 2, 2], dtype=np.int32)
    key = _u64(5, 5, 8, 8, 1, 1, 1)
    big = (3 << 32) | 17
    doc = _u64(big, 2, 2, big, big, 2, 2)
    found = candidate_pairs(band, key, doc)
    assert found.pairs.tolist() == [[2, big]]
    assert found.buckets_over_cap == 0


def test_same_key_different_band_is_not_a_bucket():
    pairs = candidate_pairs(np.array([0, 1]), _u64(5, 5), _u64(1, 2)).pairs
    assert pairs.shape == (0, 2)


def test_bucket_over_cap_emits_its_members_not_a_star():
    k = 6  # 15 pairs > cap 10
    band = np.zeros(k + 2, dtype=np.int64)
    key = _u64(*([1] * k + [2, 2]))
    doc = _u64(60, 50, 40, 30, 20, 10, 70, 80)
    found = candidate_pairs(band, key, doc, max_pairs_per_bucket=10)
    # No pair of the capped bucket is emitted (nor dropped): the whole bucket goes to leader clustering.
    assert found.pairs.tolist() == [[70, 80]]
    assert found.buckets_over_cap == 1 and found.over_cap_pairs == 15
    assert _groups(found) == [[10, 20, 30, 40, 50, 60]]


def test_bucket_at_cap_is_complete():
    found = candidate_pairs(np.zeros(5), np.zeros(5, dtype=np.uint64), _u64(1, 2, 3, 4, 5), 10)
    assert len(found.pairs) == 10 and found.buckets_over_cap == 0


def test_random_against_bruteforce_and_input_order():
    rng = np.random.default_rng(0)
    n = 400
    band = rng.integers(0, 4, n)
    key = rng.integers(0, 12, n).astype(np.uint64)
    doc = rng.integers(0, 60, n).astype(np.uint64) + np.uint64(1 << 40)
    want_pairs, want_over = _brute(band, key, doc, 20)
    found = candidate_pairs(band, key, doc, max_pairs_per_bucket=20)
    assert [tuple(p) for p in found.pairs.tolist()] == want_pairs
    assert _groups(found) == want_over and len(want_over) > 0
    assert found.over_cap_pairs == sum(len(g) * (len(g) - 1) // 2 for g in want_over)
    perm = rng.permutation(n)
    again = candidate_pairs(band[perm], key[perm], doc[perm], max_pairs_per_bucket=20)
    assert all(np.array_equal(x, y) for x, y in zip(found[:3], again[:3])) and again[3] == found[3]


def test_empty_and_bad_input():
    found = candidate_pairs(np.array([]), np.array([]), np.array([]))
    assert found.pairs.shape == (0, 2) and found.pairs.dtype == np.uint64 and found.buckets_over_cap == 0
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


def test_each_pair_carries_the_smallest_document_of_its_buckets():
    """Bucket (0, 7) holds docs 5, 9, 12; bucket (1, 8) holds 3, 9, 12: the pair (9, 12) is in both and keeps the
    smaller anchor, 3; the anchor is what routes a pair, so every band's copy of it goes to one verify task."""
    band = np.array([0, 0, 0, 1, 1, 1])
    key = np.array([7, 7, 7, 8, 8, 8], dtype=np.uint64)
    doc = np.array([12, 5, 9, 9, 3, 12], dtype=np.uint64)
    found = candidate_pairs(band, key, doc)
    got = dict(zip(map(tuple, found.pairs.tolist()), found.anchor.tolist()))
    assert got == {(5, 9): 5, (5, 12): 5, (9, 12): 3, (3, 9): 3, (3, 12): 3}
    assert found.anchor.dtype == np.uint64 and candidate_pairs(band[:0], key[:0], doc[:0]).anchor.size == 0
