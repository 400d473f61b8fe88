"""The learning rate at a step: linear warmup, then linear decay to a floor (OPT: 10% of the peak)."""

from __future__ import annotations


def learning_rate(step: int, peak: float, warmup_steps: int, total_steps: int, min_ratio: float) -> float:
    """Learning rate for optimizer step ``step`` (1-based). A pure function of the step, so nothing needs saving."""
    if warmup_steps and step <= warmup_steps:
        return peak * step / warmup_steps
    decay_steps = max(1, total_steps - warmup_steps)
    progress = min(1.0, (step - warmup_steps) / decay_steps)
    return peak * (1.0 - (1.0 - min_ratio) * progress)
