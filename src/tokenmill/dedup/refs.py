"""Document references (input shard index << 32 | row): made, split back by shard, routed to a verify task."""

from __future__ import annotations

import numpy as np

__all__ = ["doc_ref", "route", "rows_by_shard"]


def doc_ref(shard_index: int, rows: np.ndarray) -> np.ndarray:
    return (np.uint64(shard_index) << np.uint64(32)) | rows.astype(np.uint64)


def route(anchor: np.ndarray, partitions: int) -> np.ndarray:
    """The verify task of each anchor document (the smallest document of a bucket or a group): a mixed hash, so
    that references (shard << 32 | row) spread evenly; one function for pairs and groups, so that a cluster split
    into buckets within and over the cap goes to one task."""
    return ((anchor.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(40)) % np.uint64(partitions)


def rows_by_shard(docs: np.ndarray) -> list[tuple[int, np.ndarray, np.ndarray]]:
    """Split sorted unique document references by shard: (shard index, references, rows within the shard)."""
    docs = np.unique(docs.astype(np.uint64, copy=False))
    shard = (docs >> np.uint64(32)).astype(np.int64)
    cuts = np.flatnonzero(np.r_[True, shard[1:] != shard[:-1]]) if docs.size else np.zeros(0, np.int64)
    return [(int(shard[a]), part, (part & np.uint64(0xFFFFFFFF)).astype(np.int64))
            for a, part in zip(cuts.tolist(), np.split(docs, cuts[1:]))]
