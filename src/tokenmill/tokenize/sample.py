"""The tokenizer's training sample: the n documents with the smallest keyed hash of their id, the same whatever
the sharding; exactly, in one pass over every shard's ids, or from per-shard candidates under a bound."""

from __future__ import annotations

import heapq
import itertools
from typing import Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import xxhash

from tokenmill.documents import read_rows

__all__ = ["choose_sample", "id_key", "id_keys", "read_texts", "sample_bound", "sample_candidates", "training_sample"]


def _key_seed(seed: int) -> int:
    """The xxh3 seed of the keyed hash of ids (`id_key`), from the run's seed."""
    return (seed ^ 0x70C3) & 0xFFFFFFFFFFFFFFFF


def id_key(seed: int, doc_id: str) -> int:
    """A document's keyed hash (xxh3-64 of its id under the run's seed): what orders the training sample and puts
    a document in the valid split, whatever the sharding."""
    return xxhash.xxh3_64_intdigest(doc_id.encode("utf-8"), seed=_key_seed(seed))


def id_keys(ids: pa.ChunkedArray | pa.Array, seed: int) -> np.ndarray:
    """`id_key` of every id of an Arrow string column, as uint64: hashed from the UTF-8 bytes Arrow holds (a cast to
    binary is a view), without a str and a Python call around each."""
    raw = ids.cast(pa.large_binary() if pa.types.is_large_string(ids.type) else pa.binary()).to_pylist()
    # `map` with the seed positional: no generator frame nor keyword per id
    return np.fromiter(map(xxhash.xxh3_64_intdigest, raw, itertools.repeat(_key_seed(seed))), dtype=np.uint64,
                       count=len(raw))


def training_sample(paths: Sequence[str], fs, seed: int, n: int) -> list[str]:
    """The n documents with the smallest keyed hash of their id: the same sample whatever the sharding.

    The exact definition, one pass over every shard's ids (`paths`, Parquet on `fs`) in one process; the stage takes
    it from `sample_candidates` and `choose_sample` instead, and comes here only where those cannot decide (equal
    ids among the chosen). The heap holds where each text lies; a text is read only to break a tie of equal ids, and
    at the end for the n chosen. The heap sees the same items in the same order as it did with the texts in hand, so
    the sample and its order (a tie keeps the heap's order) are what they were."""
    heap: list[tuple[int, str, _Text]] = []
    for path in paths:
        ids = pq.read_table(path, columns=["id"], filesystem=fs).column("id").to_pylist()
        for row, doc_id in enumerate(ids):
            key = -id_key(seed, doc_id)
            if len(heap) < n:
                heapq.heappush(heap, (key, doc_id, _Text(path, fs, row)))
            elif (key, doc_id) >= heap[0][:2]:
                item = (key, doc_id, _Text(path, fs, row))
                if item > heap[0]:
                    heapq.heapreplace(heap, item)
    chosen = sorted(heap, key=lambda x: (-x[0], x[1]))
    texts: dict[tuple[str, int], str] = {}
    for path in dict.fromkeys(t.path for _, _, t in chosen):
        rows = np.array(sorted(t.row for _, _, t in chosen if t.path == path))
        texts.update(((path, int(r)), text) for r, text in zip(rows, read_texts(path, fs, rows)))
    return [texts[t.path, t.row] for _, _, t in chosen]


def sample_bound(total_docs: int, n: int) -> int:
    """A key below which, among `total_docs` keyed hashes (uniform over 64 bits), comfortably more than n fall: the
    expected n + 10% + 8 standard deviations + 64, so that each shard sends only its documents under it (about
    1.1 n in all, not every id) and `choose_sample` almost never finds fewer than n."""
    if total_docs <= n:
        return 2**64
    expected = n * 1.1 + 8 * n**0.5 + 64
    return min(2**64, int(2**64 * expected / total_docs))


def sample_candidates(ids: pa.ChunkedArray | pa.Array, seed: int, below: int) -> dict[str, list]:
    """The rows of one shard whose id's keyed hash is under `below`: their rows, keys and ids."""
    keys = id_keys(ids, seed)
    rows = np.flatnonzero(keys < np.uint64(below)) if below < 2**64 else np.arange(len(keys))
    return {"rows": rows.tolist(), "keys": keys[rows].tolist(), "ids": ids.take(rows).to_pylist()}


def choose_sample(candidates: Sequence[tuple[str, Mapping[str, list]]], n: int,
                  below: int) -> list[tuple[str, int]] | None:
    """`training_sample`'s n documents as (shard, row), in its order, from every shard's `sample_candidates`
    (shard, candidates) under the bound `below`; None where they cannot decide it, and the exact pass must run.

    When at least n candidates came (or every id, the bound being 2**64), the n smallest (key, id) are the n
    documents, and sorting by (key, id) is the exact pass's order, as long as no two of them, nor the last and the
    next, share a key and an id: there the text and the heap's history decide, so the exact pass runs."""
    items = [(k, i, path, r) for path, c in candidates for k, i, r in zip(c["keys"], c["ids"], c["rows"])]
    if len(items) < n and below < 2**64:  # fewer under the bound than asked: the exact pass decides
        return None
    items.sort(key=lambda x: (x[0], x[1]))
    head = items[: n + 1]
    if any(a[:2] == b[:2] for a, b in zip(head, head[1:])):
        return None
    return [(path, r) for _, _, path, r in items[:n]]


class _Text:
    """Where a document's text lies; compared by the text itself, read only when a comparison needs it."""

    __slots__ = ("path", "fs", "row")

    def __init__(self, path: str, fs, row: int):
        self.path, self.fs, self.row = path, fs, row

    def value(self) -> str:
        return next(iter(read_texts(self.path, self.fs, np.array([self.row]))))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Text) and self.value() == other.value()

    def __lt__(self, other: "_Text") -> bool:
        return self.value() < other.value()

    def __gt__(self, other: "_Text") -> bool:
        return self.value() > other.value()

    __hash__ = None  # type: ignore[assignment]


def read_texts(path: str, fs, rows: np.ndarray) -> list[str]:
    """The text of the given rows (ascending) of a Parquet shard, reading only the row groups that hold them."""
    return read_rows(path, rows, ["text"], fs).column("text").to_pylist()
