"""Divergence guard: no false alarms on a healthy curve, every rule reached, state survives JSON."""

from __future__ import annotations

import json
import math
import random

import pytest

from tokenmill.train.guard import (
    REASONS,
    DivergenceGuard,
    GuardConfig,
    RollbacksExhausted,
    Verdict,
)


def _healthy_loss(step: int, rng: random.Random) -> float:
    """A pretraining-like curve: fast early drop, slow power-law decay, 3% multiplicative noise."""
    base = 2.5 + 8.0 * (1 + step) ** -0.5
    return base * (1 + 0.03 * rng.gauss(0, 1))


def _healthy_grad(step: int, rng: random.Random) -> float:
    return (0.5 + 5.0 * math.exp(-step / 200)) * math.exp(0.2 * rng.gauss(0, 1))


def _run(guard: DivergenceGuard, steps: int, seed: int = 0) -> list[Verdict]:
    rng = random.Random(seed)
    return [guard.check(s, _healthy_loss(s, rng), _healthy_grad(s, rng)) for s in range(steps)]


@pytest.mark.parametrize("seed", range(5))
def test_smooth_noisy_decreasing_loss_never_triggers(seed):
    cfg = GuardConfig(ratio_threshold=1.5)
    verdicts = _run(DivergenceGuard(cfg), 2000, seed)
    assert [v for v in verdicts if v.spike] == []


def test_loss_spike_of_3x_triggers_at_that_step():
    guard = DivergenceGuard()
    _run(guard, 500)
    assert guard.armed
    mean = guard.loss_mean
    v = guard.check(500, 3 * mean, 0.6)
    assert v.spike and v.step == 500 and v.rule == "loss_z"
    assert v.reason.startswith("loss ") and "> mean" in v.reason and "·std" in v.reason
    assert guard.check(501, mean, 0.6).ok


def test_ratio_rule():
    guard = DivergenceGuard(GuardConfig(z_threshold=None, ratio_threshold=1.5))
    _run(guard, 200)
    assert guard.check(200, 1.4 * guard.loss_mean).ok
    v = guard.check(201, 1.6 * guard.loss_mean)
    assert v.rule == "loss_ratio" and "1.5x its mean" in v.reason


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_non_finite_triggers_during_warmup(value):
    guard = DivergenceGuard(GuardConfig(warmup_steps=20))
    guard.check(0, 10.0, 1.0)
    assert not guard.armed
    v = guard.check(1, value, 1.0)
    assert v.spike and v.rule == "non_finite_loss" and "non-finite loss" in v.reason
    v = guard.check(2, 9.0, value)
    assert v.spike and v.rule == "non_finite_grad_norm"
    assert guard.healthy_steps == 1


def test_no_rule_but_non_finite_before_warmup():
    guard = DivergenceGuard(GuardConfig(warmup_steps=20))
    for s in range(19):
        assert guard.check(s, 3.0 + 0.01 * (s % 2), 1.0).ok
    assert guard.check(19, 100.0, 1000.0).ok  # not armed yet: early training is wild
    assert guard.armed


def test_spike_does_not_update_statistics():
    guard = DivergenceGuard()
    _run(guard, 300)
    before = guard.state_dict()
    assert guard.check(300, 50.0, 0.6).spike
    assert guard.check(301, 2.0, 500.0).spike
    after = guard.state_dict()
    assert after["loss"] == before["loss"] and after["grad_norm"] == before["grad_norm"]
    assert after["spikes"] == before["spikes"] + 2


def test_grad_norm_rule():
    guard = DivergenceGuard(GuardConfig(max_grad_norm_ratio=10.0))
    for s in range(100):
        guard.check(s, 3.0 + 0.05 * math.sin(s), 4.0 + 0.5 * math.sin(s))
    gmean = guard.grad_norm_mean
    assert guard.check(100, 3.0, 9.5 * gmean).ok
    v = guard.check(101, 3.0, 55.0)
    assert v.rule == "grad_norm_ratio" and v.reason.startswith("grad norm 55 > 10x its mean 4.")
    # Turned off: the same norm passes.
    off = DivergenceGuard(GuardConfig(max_grad_norm_ratio=None))
    for s in range(100):
        off.check(s, 3.0, 4.0)
    assert off.check(100, 3.0, 55.0).ok


def test_every_reason_is_reachable():
    seen = set()
    guard = DivergenceGuard(GuardConfig(ratio_threshold=1.2, z_threshold=50.0, warmup_steps=5))
    for s in range(50):
        guard.check(s, 3.0 + 0.1 * (s % 3), 1.0 + 0.1 * (s % 2))
    seen.add(guard.check(50, float("nan"), 1.0).rule)
    seen.add(guard.check(51, 3.0, float("inf")).rule)
    seen.add(guard.check(52, 4.0, 1.0).rule)
    seen.add(guard.check(53, 3.0, 100.0).rule)
    z = DivergenceGuard(GuardConfig(warmup_steps=5))
    for s in range(50):
        z.check(s, 3.0 + 0.1 * (s % 3))
    seen.add(z.check(50, 10.0).rule)
    assert seen == set(REASONS)


def test_state_round_trip_through_json():
    guard = DivergenceGuard()
    _run(guard, 400)
    guard.check(400, 99.0, 1.0)
    state = json.loads(json.dumps(guard.state_dict()))
    other = DivergenceGuard()
    other.load_state_dict(state)
    assert other.state_dict() == guard.state_dict()
    rng = random.Random(1)
    for s in range(400, 600):
        loss, g = _healthy_loss(s, rng), _healthy_grad(s, rng)
        assert guard.check(s, loss, g) == other.check(s, loss, g)
    with pytest.raises(ValueError, match="version"):
        other.load_state_dict({**state, "version": 99})


def test_rollback_plan_restores_stats_keeps_history_and_scales():
    cfg = GuardConfig(lr_factor=0.5, clip_factor=0.4, max_rollbacks=2)
    guard = DivergenceGuard(cfg)
    _run(guard, 100)
    saved_at_100 = json.loads(json.dumps(guard.state_dict()))
    _run(guard, 150, seed=3)
    spike = guard.check(250, 1e3, 1.0)
    plan = guard.plan_rollback(spike, resume_step=100, checkpoint_state=saved_at_100)
    assert (plan.resume_step, plan.skip_from, plan.skip_to, plan.skip_batches) == (100, 101, 250, 150)
    assert plan.lr_scale == 0.5 and plan.clip_scale == pytest.approx(0.4) and plan.rollbacks == 1
    assert guard.state_dict()["loss"] == saved_at_100["loss"]
    assert guard.rollbacks == 1 and guard.lr_scale == 0.5

    plan = guard.plan_rollback(guard.check(300, float("nan")), 100, saved_at_100)
    assert plan.lr_scale == 0.25 and plan.rollbacks == 2  # cumulative though the stats were reset
    with pytest.raises(RollbacksExhausted, match="250->100, 300->100"):
        guard.plan_rollback(guard.check(301, float("nan")), 100, saved_at_100)
    with pytest.raises(ValueError, match="healthy"):
        guard.plan_rollback(Verdict(5, False), 1, None)


def test_skip_window_skips_only_the_last_batches():
    guard = DivergenceGuard(GuardConfig(skip_window=1))
    plan = guard.plan_rollback(guard.check(250, float("nan")), resume_step=200, checkpoint_state=None)
    assert (plan.skip_from, plan.skip_to, plan.skip_batches) == (250, 250, 1)
    guard = DivergenceGuard(GuardConfig(skip_window=0))
    plan = guard.plan_rollback(guard.check(250, float("nan")), resume_step=200, checkpoint_state=None)
    assert plan.skip_batches == 0


@pytest.mark.parametrize(
    "kwargs, flag",
    [
        ({"ewm_alpha": 0.0}, "ewm_alpha"),
        ({"warmup_steps": 0}, "warmup_steps"),
        ({"ratio_threshold": 0.9}, "ratio_threshold"),
        ({"max_grad_norm_ratio": 1.0}, "max_grad_norm_ratio"),
        ({"z_threshold": -1.0}, "z_threshold"),
        ({"lr_factor": 1.5}, "lr_factor"),
        ({"clip_factor": 0.0}, "clip_factor"),
        ({"skip_window": -1}, "skip_window"),
        ({"min_rel_std": -0.1}, "min_rel_std"),
        ({"max_rollbacks": -1}, "max_rollbacks"),
    ],
)
def test_config_errors_name_the_flag(kwargs, flag):
    with pytest.raises(ValueError, match=flag):
        GuardConfig(**kwargs)
