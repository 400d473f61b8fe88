"""The band files' rows: written per key partition from each document's band keys and exact hash, and read back
into candidate pairs, each routed to the verify task of its anchor document."""

from __future__ import annotations

from typing import NamedTuple, Sequence

import numpy as np
import pyarrow as pa

from tokenmill.dedup.candidates import candidate_pairs, exact_pairs
from tokenmill.dedup.refs import route

__all__ = ["EXACT_BAND", "BucketPairs", "band_tables", "bucket_pairs", "exact_digests"]

EXACT_BAND = 0xFFFF  # the band number exact hashes travel under


def band_tables(keys: np.ndarray, docs: np.ndarray, hashes: Sequence[bytes], bands: int, partitions: int
                ) -> list[pa.Table]:
    """One shard's band-file rows per partition (`partitions` of them, by key): (band, key, doc, exact) for each
    document's `bands` band keys (`keys`, one row per document), then its exact hash under `EXACT_BAND`."""
    n_band = len(docs) * bands
    # The 128-bit exact hash travels as two uint64: its first 8 bytes are the key, the last 8 `exact`.
    halves = np.frombuffer(b"".join(hashes), dtype="<u8").reshape(-1, 2).astype(np.uint64)
    key = np.concatenate([keys.ravel(), halves[:, 0]])
    # Every row (band rows document by document, then the exact rows) in one table, ordered by partition (a
    # stable sort, so each partition's rows keep that order), each partition a slice of it.
    part = (key % np.uint64(partitions)).astype(np.int64)
    order = np.argsort(part, kind="stable")
    bounds = np.zeros(partitions + 1, dtype=np.int64)
    np.cumsum(np.bincount(part, minlength=partitions), out=bounds[1:])
    band = np.concatenate([np.tile(np.arange(bands, dtype=np.uint16), len(docs)),
                           np.full(len(docs), EXACT_BAND, np.uint16)])
    doc = np.concatenate([np.repeat(docs, bands), docs]).astype(np.uint64, copy=False)
    exact = np.concatenate([np.zeros(n_band, np.uint64), halves[:, 1]])
    table = pa.table({
        "band": pa.array(band[order], pa.uint16()),
        "key": pa.array(key[order], pa.uint64()),
        "doc": pa.array(doc[order], pa.uint64()),
        "exact": pa.array(exact[order], pa.uint64(), mask=order < n_band),
    })
    return [table.slice(a, b - a) for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist())]


def exact_digests(key: np.ndarray, exact: pa.ChunkedArray) -> np.ndarray:
    """The 16-byte exact hashes (``S16``) of the exact rows of a band file from their key (first 8 bytes) and
    `exact` (last 8). A file written before the hash was split carries the whole digest in `exact` (binary): a run
    begun by that code and resumed by this one reads it as it is."""
    if pa.types.is_fixed_size_binary(exact.type) or pa.types.is_binary(exact.type):
        return np.array(exact.to_pylist(), dtype="S16")
    rest = exact.to_numpy().astype(np.uint64, copy=False)
    return np.stack([key.astype(np.uint64, copy=False), rest], axis=1).astype("<u8").view("S16").ravel()


class BucketPairs(NamedTuple):
    """What one partition's band rows propose: pairs for each verify task, the members of buckets over the cap."""

    pairs: list[pa.Table]
    """Per verify task: (a, b, exact), the pairs whose anchor routes there."""
    over_cap: pa.Table
    """(bucket, doc): the members of the buckets over the cap, for the groups phase."""
    counts: dict[str, int]
    """exact_pairs, candidate_pairs, buckets_over_cap, pairs_in_buckets_over_cap."""


def bucket_pairs(rows: pa.Table | None, max_pairs: int, partitions: int) -> BucketPairs:
    """All pairs of the buckets of `rows` (one partition's band rows; None: no files) within the cap `max_pairs`,
    exact pairs apart; the members of buckets over it."""
    empty = np.zeros((0, 2), np.uint64)
    near, exact, anchor = empty, empty, np.zeros(0, np.uint64)
    over_bucket, over_doc, over_pairs, over_buckets = np.zeros(0, np.int64), np.zeros(0, np.uint64), 0, 0
    if rows is not None and rows.num_rows:
        band = rows.column("band").to_numpy()
        is_exact = band == EXACT_BAND
        key, doc = rows.column("key").to_numpy(), rows.column("doc").to_numpy()
        found = candidate_pairs(band[~is_exact], key[~is_exact], doc[~is_exact], max_pairs)
        near, over_bucket, over_doc, anchor = found.pairs, found.over_cap_bucket, found.over_cap_doc, found.anchor
        over_pairs, over_buckets = found.over_cap_pairs, found.buckets_over_cap
        exact_bytes = exact_digests(key[is_exact], rows.column("exact").filter(pa.array(is_exact)))
        exact = exact_pairs(exact_bytes, doc[is_exact])
    # Each pair to the verify task of its anchor (exact pairs: their group's smallest document, the first of
    # each pair), so a pair proposed by several bands' buckets is verified once, with its cluster's documents.
    pairs = np.concatenate([exact, near])
    is_exact = np.r_[np.ones(len(exact), bool), np.zeros(len(near), bool)]
    target = route(np.concatenate([exact[:, 0], anchor]), partitions)
    routed = []
    for p in range(partitions):
        mine = target == p
        routed.append(pa.table({
            "a": pa.array(pairs[mine, 0], pa.uint64()),
            "b": pa.array(pairs[mine, 1], pa.uint64()),
            "exact": pa.array(is_exact[mine]),
        }))
    over_cap = pa.table({"bucket": pa.array(over_bucket, pa.int64()), "doc": pa.array(over_doc, pa.uint64())})
    return BucketPairs(routed, over_cap, {"exact_pairs": int(len(exact)), "candidate_pairs": int(len(near)),
                                          "buckets_over_cap": int(over_buckets),
                                          "pairs_in_buckets_over_cap": int(over_pairs)})
