import numpy as np
import pytest

from tokenmill.loader.mixture import MixtureSchedule, round_weights


def _counts(schedule, positions):
    s, _ = schedule.locate(np.arange(positions))
    onehot = np.zeros((positions, len(schedule.slots)))
    onehot[np.arange(positions), s] = 1
    return np.cumsum(onehot, axis=0)


@pytest.mark.parametrize("seed", range(8))
def test_within_one_sample_of_target_at_every_prefix(seed):
    rng = np.random.default_rng(seed)
    weights = (rng.random(rng.integers(2, 10)) ** 3).tolist()
    schedule = MixtureSchedule.build(weights, period=2048)
    n = 3 * schedule.period + 17
    counts = _counts(schedule, n)
    target = np.arange(1, n + 1)[:, None] * np.array(schedule.fractions())[None, :]
    assert np.abs(counts - target).max() < 1.0
    # The rounded fractions are the requested ones to within a slot.
    assert np.allclose(schedule.fractions(), np.array(weights) / sum(weights), atol=1 / 2048)


def test_index_within_stream_counts_earlier_positions():
    schedule = MixtureSchedule.build([0.5, 0.3, 0.2], period=100)
    n = 1000
    s, j = schedule.locate(np.arange(n))
    seen = [0, 0, 0]
    for stream, index in zip(s.tolist(), j.tolist()):
        assert index == seen[stream]
        seen[stream] += 1


def test_position_one_billion_directly():
    # A small prime period so the brute force below covers many periods.
    schedule = MixtureSchedule.build([3, 2, 1, 1], period=97)
    brute = _counts(schedule, 97 * 50)
    for k in (1, 96, 97, 98, 97 * 49 + 5):
        assert schedule.counts(k) == brute[k - 1].astype(int).tolist()
    k = 10**9
    s, j = schedule.locate(np.array([k]))
    # The stream's index at position k equals how many earlier positions it served: count(k).
    assert j[0] == schedule.counts(k)[s[0]]
    assert sum(schedule.counts(k)) == k
    target = k * np.array(schedule.fractions())
    assert np.abs(np.array(schedule.counts(k)) - target).max() < 1.0


def test_rounding_keeps_small_weights_and_sums_to_period():
    slots = round_weights([1e-9, 1.0, 0.0], period=1024)
    assert sum(slots) == 1024 and slots[0] == 1 and slots[2] == 0


@pytest.mark.parametrize("bad", [[], [0, 0], [-1, 2], [float("nan"), 1]])
def test_bad_weights(bad):
    with pytest.raises(ValueError):
        round_weights(bad)
