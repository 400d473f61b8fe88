"""The mixture schedule: which stream serves each position of the global order, in O(1) for any position.

Weights are rounded to ``n_i / P`` (largest remainder, every positive weight keeps at least one slot), and one
period of ``P`` positions is laid out as a Pfair schedule (Baruah et al., 1996): the m-th sample of stream i may not
come before position ``floor((m - 1) P / n_i)`` and must come before ``ceil(m P / n_i)``, and each position goes to the
released sample with the earliest deadline (EDF, optimal for unit jobs on one server). Every stream's running count
then stays strictly within one sample of ``k * n_i / P`` at every prefix ``k``. Megatron-LM's greedy (the stream
furthest behind its target) can stray past one sample with three or more streams. The period repeats, so
``count_i(k) = (k // P) * n_i + prefix_i[k % P]``: position 10^9 costs as much as position 0.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

PERIOD = 1 << 14


def round_weights(weights: list[float], period: int = PERIOD) -> list[int]:
    """Integer slots per stream summing to ``period``, proportional to ``weights`` (largest remainder)."""
    if not weights:
        raise ValueError("a mixture needs at least one stream")
    if any(w < 0 or w != w for w in weights):
        raise ValueError(f"weights must be non-negative numbers, got {weights}")
    total = sum(weights)
    if total <= 0:
        raise ValueError("at least one weight must be positive")
    positive = [i for i, w in enumerate(weights) if w > 0]
    if len(positive) > period:
        raise ValueError(f"{len(positive)} streams with positive weight do not fit a period of {period}")
    exact = [Fraction(w).limit_denominator(10**12) / Fraction(total).limit_denominator(10**12) * period
             for w in weights]
    slots = [max(1, int(e)) if w > 0 else 0 for e, w in zip(exact, weights)]
    # Give or take the difference by largest remainder (ties to the lower index), never below one slot.
    while sum(slots) != period:
        if sum(slots) < period:
            i = max(positive, key=lambda j: (exact[j] - slots[j], -j))
            slots[i] += 1
        else:
            i = max((j for j in positive if slots[j] > 1), key=lambda j: (slots[j] - exact[j], -j))
            slots[i] -= 1
    return slots


@dataclass(frozen=True)
class MixtureSchedule:
    """One period of the schedule: ``stream[r]`` serves period position ``r`` as its ``rank[r]``-th sample there."""

    slots: tuple[int, ...]
    stream: np.ndarray
    rank: np.ndarray

    @property
    def period(self) -> int:
        return len(self.stream)

    @classmethod
    def build(cls, weights: list[float], period: int = PERIOD) -> "MixtureSchedule":
        return cls._from_slots(tuple(round_weights(weights, period)), period)

    @classmethod
    @functools.lru_cache(maxsize=16)
    def _from_slots(cls, slots: tuple[int, ...], period: int) -> "MixtureSchedule":
        live = [i for i, n in enumerate(slots) if n]
        if len(live) == 1:
            # One stream: the period collapses to a single slot.
            return cls(tuple(1 if n else 0 for n in slots), np.full(1, live[0], np.int32), np.zeros(1, np.int64))
        stream = np.empty(period, np.int32)
        rank = np.empty(period, np.int64)
        count = [0] * len(slots)
        # Release and deadline of each stream's next sample, in exact integers.
        release = {i: 0 for i in live}
        deadline = {i: -(-period // slots[i]) for i in live}
        for k in range(period):
            best = min((i for i in live if release[i] <= k), key=lambda i: (deadline[i], i))
            stream[k] = best
            rank[k] = count[best]
            count[best] += 1
            m, n = count[best] + 1, slots[best]
            release[best] = (m - 1) * period // n
            deadline[best] = -(-m * period // n)
        # Cached and shared between loaders: read-only.
        stream.flags.writeable = rank.flags.writeable = False
        return cls(tuple(slots), stream, rank)

    def locate(self, positions) -> tuple[np.ndarray, np.ndarray]:
        """(stream, index within that stream's sequence) for each global position."""
        k = np.asarray(positions, dtype=np.int64)
        q, r = np.divmod(k, self.period)
        s = self.stream[r]
        return s, q * np.asarray(self.slots, dtype=np.int64)[s] + self.rank[r]

    def counts(self, position: int) -> list[int]:
        """Samples each stream has served among the first ``position`` positions."""
        q, r = divmod(int(position), self.period)
        head = np.bincount(self.stream[:r], minlength=len(self.slots))
        return [q * n + int(c) for n, c in zip(self.slots, head)]

    def fractions(self) -> list[float]:
        return [n / self.period for n in self.slots]
