"""MinHash: Jaccard estimation accuracy, determinism, empty sets, batching and chunking."""

import subprocess
import sys

import numpy as np
import pytest

from tokenmill.dedup import minhash
from tokenmill.dedup.minhash import EMPTY, MinHasher
from tokenmill.dedup.shingles import shingle_hashes


def _random_pairs(rng, count):
    """Pairs of random uint64 sets with Jaccard spread over [0, 1]."""
    pairs = []
    for _ in range(count):
        common, only_a, only_b = rng.integers(0, 400, 3)
        pool = rng.integers(0, 2 ** 64, common + only_a + only_b, dtype=np.uint64)
        a = np.unique(pool[: common + only_a])
        b = np.unique(np.concatenate([pool[:common], pool[common + only_a:]]))
        pairs.append((a, b))
    return pairs


def _jaccard(a, b):
    union = len(np.union1d(a, b))
    return len(np.intersect1d(a, b)) / union if union else 1.0


def test_jaccard_estimate_accuracy_320():
    rng = np.random.default_rng(0)
    pairs = [p for p in _random_pairs(rng, 300) if len(p[0]) and len(p[1])]
    hasher = MinHasher(320, seed=1)
    sigs = hasher.signatures([s for p in pairs for s in p])
    est = (sigs[0::2] == sigs[1::2]).mean(axis=1)
    exact = np.array([_jaccard(a, b) for a, b in pairs])
    err = np.abs(est - exact)
    assert err.mean() < 0.03
    assert abs((est - exact).mean()) < 0.01  # unbiased
    # spread close to the binomial sqrt(J(1-J)/k) of independent permutations
    assert np.sqrt(np.mean((est - exact) ** 2)) < 1.3 * np.sqrt(np.mean(exact * (1 - exact) / 320)) + 1e-3


def test_signature_shape_dtype_and_single_matches_batch():
    hasher = MinHasher(128, seed=7)
    sets = [shingle_hashes(t, None) for t in ["a b c d e f g h", "one two three", "x"]]
    sigs = hasher.signatures(sets)
    assert sigs.shape == (3, 128) and sigs.dtype == np.uint64
    assert all(np.array_equal(hasher.signature(s), sig) for s, sig in zip(sets, sigs))
    assert np.all(sigs < 2 ** 32)
    assert np.array_equal(hasher.signature(np.concatenate([sets[0], sets[0]])), sigs[0])  # duplicates harmless


def test_empty_sets():
    hasher = MinHasher(64)
    assert np.all(hasher.signature(np.empty(0, dtype=np.uint64)) == EMPTY)
    sigs = hasher.signatures([np.empty(0, dtype=np.uint64), np.array([5], dtype=np.uint64), np.empty(0, np.uint64)])
    assert np.all(sigs[0] == EMPTY) and np.all(sigs[2] == EMPTY) and np.all(sigs[1] < EMPTY)
    assert hasher.signatures([]).shape == (0, 64)


def test_chunking_does_not_change_results(monkeypatch):
    rng = np.random.default_rng(3)
    sets = [rng.integers(0, 2 ** 64, n, dtype=np.uint64) for n in (0, 1, 5, 300, 2, 0, 1000, 7)]
    expected = MinHasher(32).signatures(sets)
    monkeypatch.setattr(minhash, "_CHUNK_BYTES", 4 * 32 * 13)  # 13 shingles a chunk: documents span chunks
    small = MinHasher(32)
    assert small._chunk == 13
    assert np.array_equal(small.signatures(sets), expected)
    brute = np.array([[min(((int(a) * ((int(v) ^ int(v) >> 32) & 0xFFFFFFFF) + int(b)) & 0xFFFFFFFF) for v in s)
                       if len(s) else int(EMPTY) for a, b in zip(small.a, small.b)] for s in sets], dtype=np.uint64)
    assert np.array_equal(brute, expected)


def test_seeds_and_validation():
    s = np.arange(1, 100, dtype=np.uint64)
    assert np.array_equal(MinHasher(16, seed=3).signature(s), MinHasher(16, seed=3).signature(s))
    assert not np.array_equal(MinHasher(16, seed=3).signature(s), MinHasher(16, seed=4).signature(s))
    assert np.all(MinHasher(16).a % 2 == 1)
    with pytest.raises(ValueError):
        MinHasher(0)


def test_deterministic_across_processes():
    code = ("from tokenmill.dedup.minhash import MinHasher; from tokenmill.dedup.shingles import shingle_hashes; "
            "print(MinHasher(320).signature(shingle_hashes('the same text gives the same signature', None))"
            ".tolist())")
    outs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={"PYTHONHASHSEED": str(seed), "PATH": ""}).stdout for seed in (1, 2)}
    assert len(outs) == 1
    expected = MinHasher(320).signature(shingle_hashes("the same text gives the same signature", None)).tolist()
    assert outs.pop().strip() == str(expected)
