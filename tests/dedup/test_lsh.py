"""LSH: candidate probability, band choice guarantees, band keys."""

import numpy as np
import pytest

from tokenmill.dedup.lsh import band_keys, candidate_probability, choose_bands
from tokenmill.dedup.minhash import MinHasher


def test_candidate_probability():
    assert candidate_probability(0.95, 16, 20) == pytest.approx(0.99918, abs=1e-5)
    assert candidate_probability(0.8, 16, 20) == pytest.approx(0.1693, abs=1e-4)
    assert candidate_probability(0.0, 5, 5) == 0.0 and candidate_probability(1.0, 5, 5) == 1.0


@pytest.mark.parametrize("num_perm", [128, 256, 320])
def test_choose_bands_095(num_perm):
    bands, rows = choose_bands(0.95, num_perm)
    assert bands * rows <= num_perm
    assert candidate_probability(0.95, bands, rows) >= 0.99
    assert candidate_probability(0.8, bands, rows) <= {128: 0.21, 256: 0.11, 320: 0.08}[num_perm]
    assert candidate_probability(0.5, bands, rows) < 2e-4


def test_choose_bands_known_values_and_minimality():
    assert choose_bands(0.95, 320) == (13, 23)  # 99.2% at 0.95, 7.4% at 0.8 (16x20: 99.9%, 17%)
    assert choose_bands(0.95, 128) == (8, 16)  # 99.0% at 0.95, 20.4% at 0.8
    # no admissible choice has a lower false-candidate rate at 0.8 by much
    b, r = choose_bands(0.95, 320)
    best_08 = min(candidate_probability(0.8, bb, rr) for bb in range(1, 321) for rr in range(1, 320 // bb + 1)
                  if candidate_probability(0.95, bb, rr) >= 0.99)
    assert candidate_probability(0.8, b, r) <= best_08 * 1.2


@pytest.mark.parametrize("threshold", [0.5, 0.7, 0.8, 0.9])
def test_choose_bands_recall(threshold):
    for num_perm in (64, 128, 320):
        bands, rows = choose_bands(threshold, num_perm, min_recall=0.95)
        assert bands * rows <= num_perm and candidate_probability(threshold, bands, rows) >= 0.95


def test_choose_bands_impossible():
    with pytest.raises(ValueError, match="num_perm=4"):
        choose_bands(0.5, 4, min_recall=0.999)
    with pytest.raises(ValueError):
        choose_bands(1.5, 128)


def test_band_keys_equal_iff_rows_equal():
    rng = np.random.default_rng(0)
    sigs = rng.integers(0, 2 ** 32, (200, 40), dtype=np.uint64)
    sigs[1] = sigs[0]
    sigs[2, :10] = sigs[0, :10]  # same first band only
    sigs[3, 10:20] = sigs[0, :10]  # band 0's rows in band 1's place: must not match band 0
    keys = band_keys(sigs, 4, 10)
    assert keys.shape == (200, 4) and keys.dtype == np.uint64
    assert np.array_equal(keys[0], keys[1])
    assert keys[2, 0] == keys[0, 0] and np.all(keys[2, 1:] != keys[0, 1:])
    assert keys[3, 1] != keys[0, 0]
    rows_equal = (sigs[:, None, :].reshape(200, 1, 4, 10) == sigs[None, :, :].reshape(1, 200, 4, 10)).all(axis=3)
    keys_equal = keys[:, None, :] == keys[None, :, :]
    assert np.array_equal(rows_equal, keys_equal)
    assert np.array_equal(band_keys(sigs, 2, 20), band_keys(sigs[:, :40], 2, 20))  # unused columns ignored
    with pytest.raises(ValueError):
        band_keys(sigs, 5, 10)


def test_band_collision_rate_matches_formula():
    rng = np.random.default_rng(1)
    base = rng.integers(0, 2 ** 64, 400, dtype=np.uint64)
    other = base.copy()
    other[:40] = rng.integers(0, 2 ** 64, 40, dtype=np.uint64)  # Jaccard 360/440
    s = 360 / 440
    hits = []
    for seed in range(20):
        sigs = MinHasher(320, seed=seed).signatures([base, other])
        keys = band_keys(sigs, 64, 5)
        hits.append((keys[0] == keys[1]).mean())
    assert np.mean(hits) == pytest.approx(s ** 5, abs=0.03)
