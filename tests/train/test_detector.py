"""The rank detector judges each value only against values of its kind: losses and local norms across ranks, a
shard's norm against its own rank's past (shards are not comparable across ranks: the embedding's rows are token
ids, so rank 0 holds the frequent ones)."""

from __future__ import annotations

import numpy as np
import pytest

from tokenmill.train.fingerprints import METRICS, Anomaly, Detector, FingerprintConfig

LOSS, LOCAL, SHARD = (METRICS.index(m) for m in ("loss", "grad_norm_local", "grad_norm_shard"))


def healthy(world: int, steps: int, seed: int) -> np.ndarray:
    """(steps, world, 3): a falling loss and norm with per-rank noise as two micro-batches give it, and shard norms
    with a lasting per-rank offset (rank 0 five times rank 1's, as the demo's two ranks measured 0.75 and 0.15)."""
    rng = np.random.default_rng(seed)
    t = np.arange(steps)[:, None]
    loss = (2.0 + 8.0 * np.exp(-t / 40)) * np.exp(rng.normal(0, 0.05, (steps, world)))
    local = (0.5 + 5.0 * np.exp(-t / 30)) * np.exp(rng.normal(0, 0.2, (steps, world)))
    offset = np.array([5.0] + [1.0 + 0.3 * r for r in range(world - 1)])[None, :]
    shard = offset * (0.2 + 2.0 * np.exp(-t / 30)) * np.exp(rng.normal(0, 0.1, (steps, world)))
    return np.stack([loss, local, shard], axis=2)


@pytest.mark.parametrize("world", [2, 3, 4, 8])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_healthy_run_with_lasting_shard_offsets_raises_no_flag(world, seed):
    d = Detector(FingerprintConfig(), world)
    flags = [f for step in healthy(world, 300, seed) for f in d.check(step)]
    assert flags == []


@pytest.mark.parametrize("world", [2, 3, 4, 8])
def test_one_rank_going_bad_is_named_alone_whatever_the_world_size(world):
    steps = healthy(world, 40, 7)
    bad = world - 1
    cases = {
        "local": (LOCAL, 1e3, "grad_norm_local", "outlier"),   # a bad gradient before the reduction
        "loss": (LOSS, 50.0, "loss", "outlier"),              # a poisoned batch
        "shard": (SHARD, 40.0, "grad_norm_shard", "departure"),  # its shard, after the reduction
    }
    for name, (j, factor, metric, rule) in cases.items():
        d = Detector(FingerprintConfig(), world)
        for step in steps[:30]:
            assert d.check(step) == [], name
        step = steps[30].copy()
        step[bad, j] *= factor
        assert [(r, m, rl) for r, m, rl, *_ in d.check(step)] == [(bad, metric, rule)], name


def test_every_shard_moving_alike_is_no_flag_and_one_shard_gone_is():
    d = Detector(FingerprintConfig(), 4)
    steps = healthy(4, 40, 3)
    for step in steps[:30]:
        d.check(step)
    spread = steps[30].copy()
    spread[:, SHARD] *= 300.0  # a bad gradient before the reduction reaches every shard
    assert [f for f in d.check(spread) if f[1] == "grad_norm_shard"] == []
    gone = steps[31].copy()
    gone[2, SHARD] = float("nan")
    assert [(r, m, rule) for r, m, rule, *_ in d.check(gone)] == [(2, "grad_norm_shard", "non_finite")]


def test_two_ranks_that_differ_from_the_start_are_named_only_until_each_has_a_history():
    """A lasting difference between two ranks (here a loss 5x apart) names both at the first steps, then neither:
    the values named for want of a history still join it."""
    d = Detector(FingerprintConfig(), 2)
    named = []
    for step in range(20):
        table = np.array([[10.0, 1.0, 1.0], [2.0, 1.0, 0.2]])
        named.append(sorted({r for r, *_ in d.check(table)}))
    assert named[:3] == [[0, 1]] * 3 and named[3:] == [[]] * 17


def test_a_departure_says_how_far_the_shard_moved_from_its_usual_ratio():
    a = Anomaly(step=9, rank=1, host="h", device="cpu", metric="grad_norm_shard", rule="departure", value=8.0,
                reference=0.2, score=12.5, values=(5.0, 8.0, 1.0, 1.3))
    assert a.describe() == "grad_norm_shard 8 is 3.14x the ranks' median, against its usual 0.2x (12.5 spreads)"
