"""Exact Jaccard verification."""

from __future__ import annotations

import numpy as np
import pytest

from tokenmill.dedup.verify import jaccard, verify


def _s(*xs):
    return np.array(sorted(xs), dtype=np.uint64)


def _set_with_jaccard(num_shared: int, num_only_b: int):
    a = np.arange(num_shared, dtype=np.uint64)
    b = np.concatenate([a, np.arange(10_000, 10_000 + num_only_b, dtype=np.uint64)])
    return a, b


def test_jaccard_exact_values():
    assert jaccard(_s(1, 2, 3, 4), _s(3, 4, 5, 6)) == pytest.approx(2 / 6)
    assert jaccard(_s(1, 2, 3), _s(1, 2, 3)) == 1.0
    assert jaccard(_s(1, 2), _s(3, 4)) == 0.0
    assert jaccard(_s(2**64 - 1, 5), _s(2**64 - 1)) == 0.5


def test_jaccard_empty_sets_are_not_duplicates():
    assert jaccard(_s(), _s()) == 0.0
    assert jaccard(_s(), _s(1)) == 0.0


def test_verify_threshold_strict():
    a93, b93 = _set_with_jaccard(93, 7)  # 93/100
    a96, b96 = _set_with_jaccard(96, 4)  # 96/100
    a95, b95 = _set_with_jaccard(95, 5)  # exactly 0.95: not above
    shingles = {1: a93, 2: b93, 3: a96, 4: b96, 5: a95, 6: b95}
    sims, mask = verify(np.array([[1, 2], [3, 4], [5, 6]], dtype=np.uint64), shingles, 0.95)
    assert sims.dtype == np.float64 and mask.dtype == bool
    assert sims == pytest.approx([0.93, 0.96, 0.95])
    assert mask.tolist() == [False, True, False]


def test_verify_matches_scalar_jaccard():
    rng = np.random.default_rng(1)
    shingles = {}
    for d in range(30):
        shingles[(d << 32) | 7] = np.unique(rng.integers(0, 200, rng.integers(0, 60)).astype(np.uint64))
    shingles[(30 << 32) | 7] = np.empty(0, dtype=np.uint64)
    docs = np.array(sorted(shingles), dtype=np.uint64)
    pairs = np.array([(a, b) for i, a in enumerate(docs) for b in docs[i + 1:]], dtype=np.uint64)
    want = np.array([jaccard(shingles[int(a)], shingles[int(b)]) for a, b in pairs])
    sims, mask = verify(pairs, shingles, 0.2)
    assert np.array_equal(sims, want)
    assert np.array_equal(mask, want > 0.2)
    assert (want > 0.2).any() and (want <= 0.2).any()


def test_verify_empty_and_missing():
    sims, mask = verify(np.empty((0, 2), dtype=np.uint64), {}, 0.95)
    assert sims.shape == mask.shape == (0,)
    with pytest.raises(KeyError):
        verify(np.array([[1, 2]], dtype=np.uint64), {1: _s(1)}, 0.95)


def test_verify_groups_by_first_document_whatever_the_pair_order():
    """Pairs in any order and orientation, many sharing a first document (an LSH bucket's clique), give the values of
    the scalar jaccard in the input order: grouping by first document only batches the work."""
    rng = np.random.default_rng(5)
    base = np.unique(rng.integers(0, 10_000, 300).astype(np.uint64))
    shingles = {d: np.unique(np.concatenate([base[rng.random(base.size) > 0.05],
                                             rng.integers(10_000, 20_000, 10).astype(np.uint64)]))
                for d in range(40)}
    shingles[40] = np.empty(0, dtype=np.uint64)
    pairs = np.array([(a, b) for a in range(41) for b in range(a + 1, 41)], dtype=np.uint64)
    pairs = pairs[rng.permutation(len(pairs))]
    flip = rng.random(len(pairs)) < 0.5
    pairs[flip] = pairs[flip][:, ::-1]
    want = np.array([jaccard(shingles[int(a)], shingles[int(b)]) for a, b in pairs])
    sims, mask = verify(pairs, shingles, 0.8)
    assert np.array_equal(sims, want)
    assert mask.any() and not mask.all() and not sims[(pairs == 40).any(axis=1)].any()
