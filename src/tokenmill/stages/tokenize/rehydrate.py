"""FineWeb-style rehydration: how many times the tokenize stage writes a train document, from its cluster size.

FineWeb-2 removes all but one document of each duplicate cluster and keeps the cluster's size in the kept document
(`minhash_cluster_size`), so that the corpus can be "re-hydrated": documents upsampled by a weight per range of
cluster sizes, which helped for high-resource languages (its README). tokenmill's dedup stage writes `cluster_size`
(the documents a kept one stands for, `tokenmill.dedup.keep_rules`), and `tokenize.rehydrate` maps ranges of it to
a number of copies.

Why here and not in the loader: the loader's sample index is over packed token windows of each stream (position ->
stream -> a Feistel permutation of the stream's windows, computed from a handful of integers, `loader/order.py`);
documents are not its unit, and a per-document weight would need a document-level index (Megatron's `doc_idx`),
built and cached per run, and a new resume state. Writing a document k times into the token files leaves the loader,
its O(1) resume and its fingerprints as they are: the copies are simply more tokens of the stream. The cost: the
weighting is fixed when the tokens are written (another table means tokenizing again), and the copies take disk.

Copies of one document must not sit side by side (a short document would meet its copy inside one packed sequence
and teach copying): with `rehydrate` set, each batch's train documents and their copies are written in the order of
a keyed hash of (id, copy number), so copies are spread over the batch (`batch_docs`) whatever the sharding. Valid
documents are written once. Pure functions over numpy arrays.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import xxhash

__all__ = ["copies", "spread"]


def copies(sizes: np.ndarray, table: Mapping[int, int]) -> np.ndarray:
    """Copies per document: `table[k]` for the largest key k <= its cluster size, 1 below the smallest key."""
    keys = np.array(sorted(table), np.int64)
    values = np.array([table[int(k)] for k in keys], np.int64)
    at = np.searchsorted(keys, np.asarray(sizes, np.int64), side="right") - 1
    return np.where(at >= 0, values[np.maximum(at, 0)], 1)


def spread(ids: Sequence[str], counts: np.ndarray, seed: int) -> np.ndarray:
    """Row indices, row i repeated `counts[i]` times, ordered by xxh3-64 of (id, copy number) under `seed`: the same
    order whatever the sharding or the batch a row is in."""
    rows = np.repeat(np.arange(len(ids)), counts)
    copy = np.arange(rows.size) - np.repeat(np.cumsum(counts) - counts, counts)
    keys = np.fromiter((xxhash.xxh3_64_intdigest(f"{ids[r]}\x00{c}".encode("utf-8"), seed=seed)
                        for r, c in zip(rows.tolist(), copy.tolist())), np.uint64, count=rows.size)
    return rows[np.lexsort((copy, rows, keys))]
