"""Which documents a deterministic sample keeps: a keyed hash of (seed, source, id), compared with a fraction."""

from __future__ import annotations

import numpy as np
import xxhash

_SCALE = 2.0**64


def sample_keys(seed: int, source: str, ids: list[str]) -> np.ndarray:
    """A 64-bit keyed hash of (seed, source, id) per document: uniform, and the same wherever the id is."""
    key = seed & 0xFFFFFFFFFFFFFFFF
    prefix = source.encode("utf-8") + b"\x00"
    return np.fromiter(
        (xxhash.xxh3_64_intdigest(prefix + i.encode("utf-8"), seed=key) for i in ids), dtype=np.uint64, count=len(ids)
    )


def keep_mask(seed: int, source: str, ids: list[str], fraction: float) -> np.ndarray:
    """True for the documents kept: their hash falls in the first `fraction` of the 64-bit range.

    Depends only on (seed, source, id), never on shard, worker or order, so resharding keeps the same choice.
    """
    if fraction >= 1.0:
        return np.ones(len(ids), dtype=bool)
    threshold = np.uint64(min(int(fraction * _SCALE), 2**64 - 1))
    return sample_keys(seed, source, ids) < threshold
