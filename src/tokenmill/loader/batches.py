"""Global batches and their micro-batches: which samples each rank serves, and which batches are skipped.

Global batch k holds positions ``[k G, (k + 1) G)`` of the global order; rank r of R takes the contiguous slice
``[k G + r G/R, k G + (r + 1) G/R)`` and cuts it into micro-batches of ``mb``. Skipped batches (inclusive ranges
of k) are never served; the batches after them keep their own index, so a batch's content never depends on
which others were skipped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator


def parse_ranges(ranges) -> list[tuple[int, int]]:
    """Inclusive ranges of global batch indices, from ``[(a, b), ...]``, ``[k, ...]`` or ``"a-b,c"`` strings."""
    if isinstance(ranges, str):
        ranges = [part for part in ranges.split(",") if part.strip()]
    out = []
    for item in ranges:
        if isinstance(item, str):
            a, _, b = item.strip().partition("-")
            try:
                lo, hi = int(a), int(b or a)
            except ValueError:
                raise ValueError(f"skip range {item!r}: expected 'a-b' or 'k' with batch indices") from None
        elif isinstance(item, int):
            lo = hi = item
        else:
            lo, hi = (int(v) for v in item)
        if lo < 0 or hi < lo:
            raise ValueError(f"skip range {lo}-{hi}: need 0 <= a <= b")
        out.append((lo, hi))
    return merge_ranges(out)


def merge_ranges(ranges) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        if merged and lo <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
        else:
            merged.append((lo, hi))
    return merged


def next_served(k: int, skips: list[tuple[int, int]]) -> int:
    """The first batch index >= k that is not skipped."""
    for lo, hi in skips:
        if lo <= k <= hi:
            k = hi + 1
    return k


def served_batch(n: int, skips: list[tuple[int, int]]) -> int:
    """The index of the n-th served batch (0-based), counting from batch 0."""
    k = n
    for lo, hi in skips:
        if lo <= k:
            k += hi - lo + 1
    return k


@dataclass(frozen=True)
class BatchLayout:
    global_batch_size: int
    micro_batch_size: int
    rank: int
    world_size: int

    def __post_init__(self):
        g, mb, r, w = self.global_batch_size, self.micro_batch_size, self.rank, self.world_size
        if g <= 0 or mb <= 0 or w <= 0:
            raise ValueError(f"global_batch_size {g}, micro_batch_size {mb} and world_size {w} must be positive")
        if not 0 <= r < w:
            raise ValueError(f"rank {r} outside world_size {w}")
        if g % w or (g // w) % mb:
            raise ValueError(f"global_batch_size {g} does not divide evenly into world_size {w} x micro_batch_size "
                             f"{mb}: each rank needs a whole number of micro-batches (choose micro_batch_size dividing "
                             f"{g // w if g % w == 0 else 'G / world_size'})")

    @property
    def per_rank(self) -> int:
        return self.global_batch_size // self.world_size

    @property
    def micro_batches(self) -> int:
        """Micro-batches per rank per global batch (the gradient-accumulation steps)."""
        return self.per_rank // self.micro_batch_size

    @property
    def step_samples(self) -> int:
        """Global samples consumed when every rank takes one micro-batch."""
        return self.micro_batch_size * self.world_size

    def first_position(self, k: int, m: int) -> int:
        return k * self.global_batch_size + self.rank * self.per_rank + m * self.micro_batch_size

    def consumed_after(self, k: int, m: int) -> int:
        """Global samples consumed once every rank has taken micro-batch m of batch k."""
        return k * self.global_batch_size + (m + 1) * self.step_samples

    def resume_point(self, consumed: int) -> tuple[int, int]:
        """(batch, micro-batch) that follows ``consumed`` global samples, in this layout."""
        k, rest = divmod(consumed, self.global_batch_size)
        m, odd = divmod(rest, self.step_samples)
        if odd:
            raise ValueError(f"{consumed} consumed samples fall inside a micro-batch step of {self.step_samples}")
        return k, m

    def sequence(self, k: int, m: int, skips: list[tuple[int, int]]) -> Iterator[tuple[int, int]]:
        """Every (batch, micro-batch) this rank serves from (k, m) on, skipping skipped batches."""
        if next_served(k, skips) != k:
            k, m = next_served(k, skips), 0
        while True:
            for j in range(m, self.micro_batches):
                yield k, j
            k, m = next_served(k + 1, skips), 0
