"""Divergence guard: notice a loss or gradient-norm spike, and plan the rollback OPT did by hand.

OPT-175B's logbook: when the loss spiked, the team restarted from an earlier checkpoint, cut the
learning rate (by 10%, later to 2/3), tightened gradient clipping (2.5 -> 1.0) and, by restarting,
fed different data than the batches that led to the spike. metaseq later automated one piece,
``--ewm-ratio-to-skip-batch`` (skip a batch whose loss is far above the loss's exponentially
weighted mean). This guard does the detection and the bookkeeping; the trainer does the acting.

Detection, per step, from the step's loss and (optionally) its global gradient norm:

- ``non_finite_loss`` / ``non_finite_grad_norm``: NaN or inf, always, even before the guard is armed.
- after ``warmup_steps`` healthy steps:
  ``loss_z`` (loss > EWM mean + z * EWM std), ``loss_ratio`` (loss / EWM mean above a ratio),
  ``grad_norm_ratio`` (grad norm / its EWM mean above a ratio).

Statistics are updated with healthy steps only, so a spike does not raise the bar for the next one.
Both the loss and the gradient-norm rules look at the step before the optimizer applies it (the
trainer has both after backward and clipping), so a trainer may also simply skip that update.

Rollback, :meth:`DivergenceGuard.plan_rollback`: the trainer reloads the newest healthy checkpoint
(step R), restores the guard's statistics from that checkpoint's ``extra`` (the history of rollbacks
is kept, so LR cuts accumulate and ``max_rollbacks`` is reached), scales the learning rate by
``lr_factor ** rollbacks`` and the clip threshold by ``clip_factor ** rollbacks``, and skips data:

- ``skip_window=None`` (default): skip every global batch from step R+1 up to the spike step S
  inclusive, i.e. resume at step R+1 with the data that would have been step S+1. That is what
  OPT's restarts amounted to (the model never sees the batches that led into the spike).
- ``skip_window=k``: skip only the k batches ending at S (metaseq's ``--skip-batches``); the
  batches of steps R+1..S-k are replayed.

Skipping is of data positions, not of steps: the step counter goes back to R.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from pydantic import Field

from tokenmill.config_base import StrictModel
from tokenmill.train.errors import EveryRankError

STATE_VERSION = 1

#: The closed set of reasons a step is called a spike by the guard's rules.
REASONS = ("non_finite_loss", "non_finite_grad_norm", "loss_z", "loss_ratio", "grad_norm_ratio")
#: Spikes the guard's rules did not see, given to :meth:`DivergenceGuard.flag`: ``rank_anomaly``, a rank flagged by
#: its fingerprints whose fault the replay (``replay.py``) found to follow the batch; rolled back as any spike.
FLAGGED_REASONS = ("rank_anomaly",)


class RollbacksExhausted(EveryRankError):
    """The guard rolled back ``max_rollbacks`` times and the run diverged again; a person must look."""


class GuardConfig(StrictModel):
    """The ``guard:`` block of a train config: when a step is a spike, and what a rollback does.

    The one config of the guard: its bounds are checked when the train config is loaded, before any process group
    or model exists (a bad value is named by its key, ``guard.warmup_steps``, not raised by the first rank)."""

    enabled: bool = True
    """Check every step; off, spikes are only logged by the metrics."""

    ewm_alpha: float = Field(default=0.02, gt=0, le=1)
    """Weight of the newest healthy step in the exponentially weighted mean and variance
    (a span of about ``2/alpha - 1`` = 99 steps). Early on the weight is at least ``1/n``,
    so the first statistics are plain averages."""

    warmup_steps: int = Field(default=20, ge=1)
    """Healthy steps seen before the loss and gradient-norm rules are armed (non-finite values
    trigger from the first step); at least 1, since the rules compare with a mean of healthy steps."""

    z_threshold: float | None = Field(default=6.0, gt=0)
    """A loss above ``mean + z_threshold * std`` is a spike. None turns the rule off."""

    min_rel_std: float = Field(default=0.01, ge=0)
    """Floor of the std in the z rule, as a fraction of the mean: with a very smooth loss the EWM
    std becomes tiny and ordinary noise would otherwise trigger."""

    ratio_threshold: float | None = Field(default=None, gt=1)
    """A loss above ``ratio_threshold * mean`` is a spike (metaseq's ``--ewm-ratio-to-skip-batch``,
    e.g. 1.5); above 1, or every healthy step would be one. None turns the rule off."""

    max_grad_norm_ratio: float | None = Field(default=10.0, gt=1)
    """A gradient norm above this multiple of its EWM mean is a spike; above 1. None turns the rule off."""

    lr_factor: float = Field(default=0.5, gt=0, le=1)
    """The learning rate is multiplied by this once per rollback (cumulatively). OPT cut by 10%,
    then to 2/3; 1.0 keeps it."""

    clip_factor: float | None = Field(default=None, gt=0, le=1)
    """The gradient-clipping threshold is multiplied by this once per rollback (OPT went 2.5 -> 1.0,
    0.4). None keeps it."""

    skip_window: int | None = Field(default=None, ge=0)
    """Batches to skip at a rollback: None skips every batch after the rollback checkpoint up to and
    including the spike step; k skips only the k batches ending at the spike step."""

    max_rollbacks: int = Field(default=5, ge=0)
    """After this many rollbacks another spike raises :class:`RollbacksExhausted`."""


@dataclass(frozen=True, slots=True)
class Verdict:
    """The guard's answer for one step: ``spike`` False, or True with a ``rule`` from
    :data:`REASONS` and a readable ``reason``."""

    step: int
    spike: bool
    rule: str | None = None
    reason: str | None = None

    @property
    def ok(self) -> bool:
        return not self.spike


@dataclass(frozen=True, slots=True)
class RollbackPlan:
    """What the trainer does after a spike at ``spike_step``.

    Reload the checkpoint at ``resume_step`` (restore model, optimizer, loader, guard statistics),
    then advance the loader past the global batches of steps ``skip_from..skip_to`` inclusive
    (``skip_batches`` of them, none if 0) without training on them, and train on with the learning
    rate times ``lr_scale`` and the clip threshold times ``clip_scale`` (both cumulative).
    """

    spike_step: int
    resume_step: int
    skip_from: int
    skip_to: int
    skip_batches: int
    lr_scale: float
    clip_scale: float
    rollbacks: int
    reason: str


@dataclass(slots=True)
class _Ewm:
    """Exponentially weighted mean and variance, with weight ``max(alpha, 1/n)``."""

    n: int = 0
    mean: float = 0.0
    var: float = 0.0

    def update(self, x: float, alpha: float) -> None:
        self.n += 1
        a = max(alpha, 1.0 / self.n)
        diff = x - self.mean
        incr = a * diff
        self.mean += incr
        self.var = (1.0 - a) * (self.var + diff * incr)

    @property
    def std(self) -> float:
        return math.sqrt(max(self.var, 0.0))


@dataclass(slots=True)
class _History:
    rollbacks: list[dict[str, Any]] = field(default_factory=list)


class DivergenceGuard:
    """Watches loss and gradient norm per step; see the module docstring."""

    def __init__(self, cfg: GuardConfig | None = None):
        self.cfg = cfg or GuardConfig()
        self._loss = _Ewm()
        self._grad = _Ewm()
        self._spikes = 0
        self._history = _History()

    # ---- reading

    @property
    def armed(self) -> bool:
        return self._loss.n >= self.cfg.warmup_steps

    @property
    def loss_mean(self) -> float:
        return self._loss.mean

    @property
    def loss_std(self) -> float:
        return self._loss.std

    @property
    def grad_norm_mean(self) -> float:
        return self._grad.mean

    @property
    def healthy_steps(self) -> int:
        return self._loss.n

    @property
    def spikes(self) -> int:
        """Spikes seen since the statistics were last restored."""
        return self._spikes

    @property
    def rollbacks(self) -> int:
        return len(self._history.rollbacks)

    @property
    def lr_scale(self) -> float:
        """What to multiply the scheduled learning rate by, given the rollbacks so far."""
        return self.cfg.lr_factor**self.rollbacks

    @property
    def clip_scale(self) -> float:
        """What to multiply the gradient-clipping threshold by, given the rollbacks so far."""
        return 1.0 if self.cfg.clip_factor is None else self.cfg.clip_factor**self.rollbacks

    # ---- the rule

    def judge(self, step: int, loss: float, grad_norm: float | None = None) -> Verdict:
        """The verdict :meth:`check` would give, changing nothing (no statistics, no spike counted): the replay asks
        it of the original pass and of each replay before one of them is applied."""
        verdict = self._rule(step, float(loss), None if grad_norm is None else float(grad_norm))
        return verdict if verdict is not None else Verdict(step, False)

    def flag(self, step: int, rule: str, reason: str) -> Verdict:
        """A spike that the guard's own rules did not see (``rank_anomaly``), counted as one, for a rollback."""
        if rule not in REASONS + FLAGGED_REASONS:
            raise ValueError(f"unknown spike rule {rule!r}; rules: {', '.join(REASONS + FLAGGED_REASONS)}")
        return self._spike(step, rule, reason)

    def check(self, step: int, loss: float, grad_norm: float | None = None) -> Verdict:
        """Judge one step; update the statistics only if it is healthy.

        Args:
            step: the global step (for the verdict and the rollback plan).
            loss: the step's loss, averaged over the global batch (the same value on every rank,
                so every rank reaches the same verdict).
            grad_norm: the global gradient norm before clipping, or None if not tracked.
        """
        loss = float(loss)
        grad_norm = None if grad_norm is None else float(grad_norm)
        verdict = self._rule(step, loss, grad_norm)
        if verdict is not None:
            return self._spike(step, verdict.rule, verdict.reason)
        self._loss.update(loss, self.cfg.ewm_alpha)
        if grad_norm is not None:
            self._grad.update(grad_norm, self.cfg.ewm_alpha)
        return Verdict(step, False)

    def _rule(self, step: int, loss: float, grad_norm: float | None) -> Verdict | None:
        """The first rule a step breaks, as a spike verdict; None when healthy. Reads the statistics only."""
        if not math.isfinite(loss):
            return Verdict(step, True, "non_finite_loss", f"non-finite loss {loss}")
        if grad_norm is not None and not math.isfinite(grad_norm):
            return Verdict(step, True, "non_finite_grad_norm", f"non-finite grad norm {grad_norm}")
        cfg = self.cfg
        if self.armed:
            mean = self._loss.mean
            if cfg.z_threshold is not None:
                std = max(self._loss.std, cfg.min_rel_std * abs(mean))
                if loss > mean + cfg.z_threshold * std:
                    return Verdict(
                        step,
                        True,
                        "loss_z",
                        f"loss {loss:.4g} > mean {mean:.4g} + {cfg.z_threshold:g}·std {std:.3g}",
                    )
            if cfg.ratio_threshold is not None and mean > 0 and loss > cfg.ratio_threshold * mean:
                return Verdict(
                    step, True, "loss_ratio", f"loss {loss:.4g} > {cfg.ratio_threshold:g}x its mean {mean:.4g}"
                )
            if (
                grad_norm is not None
                and cfg.max_grad_norm_ratio is not None
                and self._grad.n >= cfg.warmup_steps
                and self._grad.mean > 0
                and grad_norm > cfg.max_grad_norm_ratio * self._grad.mean
            ):
                return Verdict(
                    step,
                    True,
                    "grad_norm_ratio",
                    f"grad norm {grad_norm:.4g} > {cfg.max_grad_norm_ratio:g}x its mean {self._grad.mean:.4g}",
                )
        return None

    def _spike(self, step: int, rule: str, reason: str) -> Verdict:
        self._spikes += 1
        return Verdict(step, True, rule, reason)

    # ---- rollback

    def plan_rollback(self, verdict: Verdict, resume_step: int, checkpoint_state: dict[str, Any] | None) -> RollbackPlan:
        """Record a rollback to the checkpoint at ``resume_step`` after the spike in ``verdict``.

        Args:
            verdict: the spike (its ``step`` is the spike step).
            resume_step: the step of the healthy checkpoint the trainer reloads (< the spike step).
            checkpoint_state: the guard's :meth:`state_dict` saved in that checkpoint's ``extra``;
                its statistics replace the current ones, the rollback history is kept. None keeps
                the current statistics.

        Raises :class:`RollbacksExhausted` once ``max_rollbacks`` rollbacks were made.
        """
        if not verdict.spike:
            raise ValueError(f"step {verdict.step} was healthy; there is nothing to roll back")
        if resume_step >= verdict.step:
            raise ValueError(f"resume_step={resume_step} must be before the spike step {verdict.step}")
        if self.rollbacks >= self.cfg.max_rollbacks:
            raise RollbacksExhausted(
                f"step {verdict.step}: {verdict.reason}; already rolled back {self.rollbacks} times "
                f"(max_rollbacks={self.cfg.max_rollbacks}). Steps: "
                + ", ".join(f"{r['spike_step']}->{r['resume_step']}" for r in self._history.rollbacks)
            )
        if checkpoint_state is not None:
            history = self._history
            self.load_state_dict(checkpoint_state)
            self._history = history
        window = self.cfg.skip_window
        skip_from = resume_step + 1 if window is None else max(resume_step + 1, verdict.step - window + 1)
        skip_batches = max(0, verdict.step - skip_from + 1)
        self._history.rollbacks.append(
            {"spike_step": verdict.step, "resume_step": resume_step, "rule": verdict.rule, "reason": verdict.reason}
        )
        return RollbackPlan(
            spike_step=verdict.step,
            resume_step=resume_step,
            skip_from=skip_from,
            skip_to=verdict.step,
            skip_batches=skip_batches,
            lr_scale=self.lr_scale,
            clip_scale=self.clip_scale,
            rollbacks=self.rollbacks,
            reason=verdict.reason or verdict.rule or "spike",
        )

    # ---- state

    def state_dict(self) -> dict[str, Any]:
        """JSON-able state: statistics, spike count, rollback history, and the config it ran with."""
        return {
            "version": STATE_VERSION,
            "loss": asdict(self._loss),
            "grad_norm": asdict(self._grad),
            "spikes": self._spikes,
            "rollbacks": [dict(r) for r in self._history.rollbacks],
            "config": self.cfg.model_dump(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`. The config is this guard's own (a changed config is allowed:
        the statistics do not depend on thresholds; ``ewm_alpha`` only weighs future steps)."""
        if state.get("version") != STATE_VERSION:
            raise ValueError(f"guard state version {state.get('version')!r}, this code reads {STATE_VERSION}")
        self._loss = _Ewm(**state["loss"])
        self._grad = _Ewm(**state["grad_norm"])
        self._spikes = int(state["spikes"])
        self._history = _History([dict(r) for r in state["rollbacks"]])
