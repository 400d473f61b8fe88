"""Candidate pairs for near-duplicate verification: from LSH buckets and from exact content hashes.

Documents are identified by a ``uint64`` reference (``shard << 32 | row``). Every function here is a pure,
deterministic function of numpy arrays: pairs come back as an ``(m, 2)`` ``uint64`` array with ``a < b`` in each
row, rows sorted (lexicographically) and unique, whatever the order of the input rows.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

__all__ = ["Candidates", "candidate_pairs", "exact_pairs"]

_EMPTY_PAIRS_SHAPE = (0, 2)


def _empty_pairs() -> np.ndarray:
    return np.empty(_EMPTY_PAIRS_SHAPE, dtype=np.uint64)


def _sorted_unique_pairs(a: np.ndarray, b: np.ndarray, anchor: np.ndarray | None = None):
    """Stack two uint64 columns (``a < b`` row-wise) into sorted, duplicate-free ``(m, 2)`` pairs; with ``anchor``,
    also each kept pair's smallest anchor: ``(pairs, anchor)``."""
    if a.size == 0:
        return _empty_pairs() if anchor is None else (_empty_pairs(), np.empty(0, np.uint64))
    order = np.lexsort((b, a)) if anchor is None else np.lexsort((anchor, b, a))
    a, b = a[order], b[order]
    keep = np.ones(a.size, dtype=bool)
    keep[1:] = (a[1:] != a[:-1]) | (b[1:] != b[:-1])
    pairs = np.stack([a[keep], b[keep]], axis=1).astype(np.uint64, copy=False)
    return pairs if anchor is None else (pairs, anchor[order][keep].astype(np.uint64, copy=False))


def _as_1d(name: str, x: np.ndarray) -> np.ndarray:
    x = np.asarray(x)
    if x.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {x.shape}")
    return x


def _run_starts(*cols: np.ndarray) -> np.ndarray:
    """Boolean mask, True where a new run of equal rows (over all ``cols``) begins; rows must be sorted."""
    n = cols[0].size
    start = np.zeros(n, dtype=bool)
    if n:
        start[0] = True
        for c in cols:
            start[1:] |= c[1:] != c[:-1]
    return start


class Candidates(NamedTuple):
    """What LSH buckets propose: all pairs of the buckets within the cap, and the members of those over it."""

    pairs: np.ndarray
    """``(m, 2)`` ``uint64`` pairs from buckets of at most ``max_pairs_per_bucket`` pairs, ``a < b``, sorted, unique."""
    over_cap_bucket: np.ndarray
    """``(r,)`` ``int64``: per member row of an over-cap bucket, the bucket's index (``0..buckets-1``, in
    ``(band, key)`` order)."""
    over_cap_doc: np.ndarray
    """``(r,)`` ``uint64``: the member document; rows sorted by bucket, then document; a document once per bucket."""
    over_cap_pairs: int
    """``k*(k-1)/2`` summed over the over-cap buckets: the pairs they hold, none of them emitted here."""
    anchor: np.ndarray
    """``(m,)`` ``uint64``, per pair: the smallest document of the bucket it came from (of those buckets, the
    smallest). A near-duplicate cluster fills a bucket in most bands, with the same smallest document in each, so
    routing pairs by their anchor brings every band's copy of a pair, and the cluster's documents, to one place."""

    @property
    def buckets_over_cap(self) -> int:
        """How many buckets were over the cap."""
        return int(self.over_cap_bucket[-1]) + 1 if self.over_cap_bucket.size else 0


def candidate_pairs(
    band: np.ndarray,
    key: np.ndarray,
    doc: np.ndarray,
    max_pairs_per_bucket: int = 10_000,
) -> Candidates:
    """Candidate document pairs from LSH band buckets.

    Each input row ``(band[i], key[i], doc[i])`` says that document ``doc[i]`` hashed to ``key[i]`` in LSH band
    ``band[i]``. A *bucket* is the set of distinct documents sharing one ``(band, key)``; a document listed twice in
    the same bucket counts once.

    A bucket of ``k`` documents yields all ``k*(k-1)/2`` pairs when that is at most ``max_pairs_per_bucket``.
    A bucket over the cap yields no pairs: its members come back as a group (``over_cap_bucket``, ``over_cap_doc``)
    for :func:`tokenmill.dedup.leaders.leader_edges`, which verifies them with a bounded number of comparisons and
    counts what it leaves unverified. Nothing is dropped here: every pair of a bucket is either in ``pairs`` or in
    an over-cap group (``over_cap_pairs`` of them).

    Args:
        band: ``(n,)`` integer band index per row.
        key: ``(n,)`` integer band key (hash of the band's MinHash values) per row.
        doc: ``(n,)`` ``uint64`` document reference per row.
        max_pairs_per_bucket: the most pairs a bucket may emit as pairs (``>= 0``).

    Returns:
        :class:`Candidates`. Deterministic: independent of the order of the input rows.

    Vectorised: one lexsort by ``(band, key, doc)``, run boundaries by comparing neighbours, and pair indices
    generated with ``np.repeat``/``np.cumsum``; there is no Python loop per bucket or per pair.
    """
    band = _as_1d("band", band)
    key = _as_1d("key", key)
    doc = _as_1d("doc", doc).astype(np.uint64, copy=False)
    if not (band.size == key.size == doc.size):
        raise ValueError(f"band, key and doc must have the same length, got {band.size}, {key.size}, {doc.size}")
    if max_pairs_per_bucket < 0:
        raise ValueError(f"max_pairs_per_bucket must be >= 0, got {max_pairs_per_bucket}")
    if doc.size == 0:
        return Candidates(_empty_pairs(), np.empty(0, np.int64), np.empty(0, np.uint64), 0, np.empty(0, np.uint64))

    order = np.lexsort((doc, key, band))
    band, key, doc = band[order], key[order], doc[order]
    # Drop repeated (band, key, doc) rows: a document is in a bucket once.
    distinct = _run_starts(band, key, doc)
    band, key, doc = band[distinct], key[distinct], doc[distinct]

    bucket_start = _run_starts(band, key)
    starts = np.flatnonzero(bucket_start)
    sizes = np.diff(np.append(starts, doc.size)).astype(np.int64)
    full = sizes * (sizes - 1) // 2
    capped = full > max_pairs_per_bucket

    # Per row: its bucket, its rank within the bucket, and how many pairs it opens as the smaller document.
    bucket_of = np.repeat(np.arange(starts.size), sizes)
    rank = np.arange(doc.size, dtype=np.int64) - starts[bucket_of]
    size_of = sizes[bucket_of]
    row_capped = capped[bucket_of]

    # Buckets within the cap: row i opens pairs with every later row of its bucket (size - 1 - rank of them).
    opens = np.where(row_capped, 0, size_of - 1 - rank)
    total = int(opens.sum())
    first = np.repeat(np.arange(doc.size, dtype=np.int64), opens)
    # Offset of each generated pair within its first row's run of pairs: 0, 1, ..., opens-1.
    run_begin = np.cumsum(opens) - opens
    offset = np.arange(total, dtype=np.int64) - np.repeat(run_begin, opens)
    second = first + 1 + offset

    # Buckets over the cap: their members, with dense bucket indices.
    dense = np.cumsum(capped) - 1
    pairs, anchor = _sorted_unique_pairs(doc[first], doc[second], doc[starts[bucket_of[first]]])
    return Candidates(pairs, dense[bucket_of[row_capped]].astype(np.int64), doc[row_capped], int(full[capped].sum()),
                      anchor)


def _group_ids(exact_hash: np.ndarray) -> np.ndarray:
    """Dense group id per row; rows with equal hashes share an id."""
    if exact_hash.ndim == 1:
        _, inverse = np.unique(exact_hash, return_inverse=True)
        return np.asarray(inverse).reshape(-1).astype(np.int64, copy=False)
    cols = [exact_hash[:, j] for j in range(exact_hash.shape[1])]
    order = np.lexsort(cols[::-1])
    start = _run_starts(*(c[order] for c in cols))
    ids = np.empty(exact_hash.shape[0], dtype=np.int64)
    ids[order] = np.cumsum(start) - 1
    return ids


def exact_pairs(exact_hash: np.ndarray, doc: np.ndarray) -> np.ndarray:
    """Star pairs of documents with identical exact hashes.

    Args:
        exact_hash: the exact-content hash per row, either ``(n,)`` fixed-width bytes (the intended form is
            dtype ``'S16'``: a 128-bit digest of the normalised text, compared bytewise) or any other 1-D
            fixed-width dtype (``uint64``, ``'V16'``...), or ``(n, w)`` integers compared row-wise (e.g. a
            128-bit hash as two ``uint64`` columns). ``'S'`` bytes are NumPy null-stripped strings, so two digests
            that differ only in trailing ``0x00`` bytes compare equal; pass ``'V16'`` or two ``uint64`` columns
            when that matters (it is a 2**-8 event per trailing byte, so a real hash almost never collides so).
        doc: ``(n,)`` ``uint64`` document reference per row.

    Returns:
        ``(m, 2)`` ``uint64`` pairs ``(smallest doc with that hash, other doc)``, one per other distinct document of
        each hash group, sorted and unique. A group of ``k`` distinct documents yields ``k - 1`` pairs.
    """
    exact_hash = np.asarray(exact_hash)
    doc = _as_1d("doc", doc).astype(np.uint64, copy=False)
    if exact_hash.ndim not in (1, 2) or exact_hash.shape[0] != doc.size:
        raise ValueError(f"exact_hash must be (n,) or (n, w) with n = len(doc) = {doc.size}, got {exact_hash.shape}")
    if doc.size == 0:
        return _empty_pairs()
    group = _group_ids(exact_hash)
    order = np.lexsort((doc, group))
    group, doc = group[order], doc[order]
    distinct = _run_starts(group, doc)
    group, doc = group[distinct], doc[distinct]
    start = _run_starts(group)
    hub = np.maximum.accumulate(np.where(start, np.arange(doc.size), 0))
    member = ~start
    return _sorted_unique_pairs(doc[hub[member]], doc[member])
