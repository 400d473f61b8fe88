import numpy as np
import pytest

from tokenmill.loader.permutation import FeistelPermutation, round_keys


@pytest.mark.parametrize("n", [0, 1, 2, 3, 7, 64, 65, 1000, 4097])
def test_is_a_permutation(n):
    p = FeistelPermutation(n, round_keys("t", n))(np.arange(n))
    assert sorted(p.tolist()) == list(range(n))


def test_keys_change_the_order_and_the_same_key_repeats_it():
    n = 10_000
    a = FeistelPermutation(n, round_keys(1))(np.arange(n))
    b = FeistelPermutation(n, round_keys(2))(np.arange(n))
    assert np.array_equal(a, FeistelPermutation(n, round_keys(1))(np.arange(n)))
    assert (a != b).mean() > 0.99


def test_shuffles_well():
    n = 100_000
    p = FeistelPermutation(n, round_keys(7))(np.arange(n))
    # Neighbours in position land far apart, and position and value are uncorrelated.
    assert abs(np.corrcoef(np.arange(n), p)[0, 1]) < 0.02
    assert np.median(np.abs(np.diff(p))) > n / 8
    # Each tenth of the positions spreads over all tenths of the values.
    counts = np.histogram(p[: n // 10], bins=10, range=(0, n))[0]
    assert counts.min() > 0.8 * n / 100


def test_any_position_directly():
    n = 10**12
    perm = FeistelPermutation(n, round_keys(3))
    values = perm(np.array([0, 1, n - 1, 123456789012]))
    assert ((values >= 0) & (values < n)).all() and len(set(values.tolist())) == 4


def test_out_of_range_raises():
    with pytest.raises(IndexError):
        FeistelPermutation(10, round_keys(0))(np.array([10]))
