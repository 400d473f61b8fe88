"""The n-gram engine: Gopher's n-gram repetition measures over whole chunks of documents, by sorting hashed n-grams.

Units (words, or characters) get a 64-bit hash that is the same in every process (`token_hashes`; Python's `hash`
of a string is salted per process, so the rare 48-bit collision between two n-grams, which makes them count as the
same, would move with `PYTHONHASHSEED`). An n-gram's hash rolls its units' hashes.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

_P = np.uint64(0x100000001B3)  # multiplier of the rolling n-gram hash (any odd 64-bit constant works)
DOC_SHIFT = np.uint64(48)  # n-gram keys: the document's index in the chunk above bit 48, 48 bits of hash below
_HASH_SHIFT = np.uint64(64 - 48)
# splitmix64's constants: a multiply-xorshift mix that spreads every input bit over the whole word
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


def _mix(h: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer, in place."""
    h ^= h >> np.uint64(30)
    h *= _MIX1
    h ^= h >> np.uint64(27)
    h *= _MIX2
    h ^= h >> np.uint64(31)
    return h


def token_hashes(tokens: Sequence[str]) -> np.ndarray:
    """A 64-bit hash (uint64) per token, a function of its characters only: the same in every process and run.

    Vectorised over all tokens at once: each character is mixed with its place in the token, the mixes are summed
    per token, and the sum is mixed again with the token's length.
    """
    lengths = np.fromiter(map(len, tokens), dtype=np.int64, count=len(tokens))
    out = np.zeros(len(tokens), dtype=np.uint64)
    nonempty = np.flatnonzero(lengths)
    if len(nonempty):
        chars = np.frombuffer("".join(tokens).encode("utf-32-le", "surrogatepass"), dtype=np.uint32).astype(np.uint64)
        starts = np.zeros(len(tokens), dtype=np.int64)
        np.cumsum(lengths[:-1], out=starts[1:])
        place = np.arange(len(chars), dtype=np.int64) - np.repeat(starts, lengths)
        mixed = _mix(((place.astype(np.uint64) << np.uint64(32)) | chars) + _GOLDEN)
        out[nonempty] = np.add.reduceat(mixed, starts[nonempty])  # no empty segment: reduceat would misread it
    return _mix(out + lengths.astype(np.uint64) * _GOLDEN)


class Units:
    """The units (words, or characters) of a chunk of documents, concatenated.

    hashes[i]: 64-bit hash of unit i; ends[i]: characters of the units before i (ends has one more entry);
    doc[i]: the document (index in the chunk) unit i belongs to; start[d], count[d]: document d's first unit and
    number of units.
    """

    def __init__(self, hashes: np.ndarray, lengths: np.ndarray, count: np.ndarray):
        self.hashes = hashes
        self.ends = np.zeros(len(hashes) + 1, dtype=np.int64)
        np.cumsum(lengths, out=self.ends[1:])
        self.count = count
        self.start = np.zeros(len(count), dtype=np.int64)
        np.cumsum(count[:-1], out=self.start[1:])
        self.doc = np.repeat(np.arange(len(count), dtype=np.int64), count)
        self.tag = self.doc.astype(np.uint64) << DOC_SHIFT
        self.left = np.repeat(self.start + count, count) - np.arange(len(hashes), dtype=np.int64)
        """Units from unit i to the end of its document (i included): the n-gram at i lies inside it iff left >= n."""


def _runs(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sort `keys` stably: (order, start of each run of equal keys in sorted order, run lengths); within a run, the
    keys' order (`_top_ngram` takes a run's first member as its first occurrence)."""
    # Timsort: the keys come in document order, their top bits the document, so it merges presorted stretches;
    # 1.7-2.3x faster here than the default introsort, whose runs hold the same members.
    order = np.argsort(keys, kind="stable")
    sorted_keys = keys[order]
    starts = np.flatnonzero(np.concatenate(([True], sorted_keys[1:] != sorted_keys[:-1])))
    return order, starts, np.diff(np.append(starts, len(keys)))


def _top_ngram(units: Units, pos: np.ndarray, order: np.ndarray, starts: np.ndarray, counts: np.ndarray, n: int,
               separator: int) -> np.ndarray:
    """Characters of each document's most frequent n-gram times its count (ties: the one seen first, as datatrove's
    `Counter.most_common`); 0 where a document has no n-gram.

    `pos` holds at least every occurrence of every n-gram that occurs twice, in ascending order, sorted by key into
    runs (`_runs`). A document with no such n-gram has all its n-grams once: its first one wins, once.
    """
    out = np.zeros(len(units.count))
    whole = np.flatnonzero(units.count >= n)
    first_unit = units.start[whole]
    out[whole] = units.ends[first_unit + n] - units.ends[first_unit] + separator * (n - 1)
    many = counts > 1
    if not many.any():
        return out
    # Each repeated n-gram's first occurrence: its run's first member, as `pos` ascends and `_runs` sorts stably
    # (no minimum over every run needed).
    first = pos[order[starts[many]]]
    counts = counts[many]
    run_doc = units.doc[first]  # runs are sorted by key, whose top bits are the document
    doc_starts = np.flatnonzero(np.concatenate(([True], run_doc[1:] != run_doc[:-1])))
    top = np.maximum.reduceat(counts, doc_starts)
    per_run = np.repeat(top, np.diff(np.append(doc_starts, len(counts))))
    best = np.minimum.reduceat(np.where(counts == per_run, first, np.iinfo(np.int64).max), doc_starts)
    chars = units.ends[best + n] - units.ends[best] + separator * (n - 1)
    out[run_doc[doc_starts]] = chars * top
    return out


def ngram_repetition(
    units: Units, text_len: np.ndarray, top_ns: Sequence[int], dup_ns: Sequence[int], separator: int,
) -> dict[int, np.ndarray]:
    """Gopher's n-gram repetition fractions over units (words, or characters) for a chunk of documents, by n.

    `separator` is the characters between the units of a top n-gram (1 for words joined by spaces, as datatrove's
    `get_n_grams`; 0 for characters). n-grams are compared by a rolling hash of their unit hashes, tagged with
    their document.

    top n: see `_top_ngram`. dup n: datatrove's `find_all_duplicate` walk: left to right, an n-gram seen before
    adds its characters and the walk jumps n units ahead. Only n-grams that occur twice can be dominant (more than
    once) or duplicates, and an (n+1)-gram can only repeat where the n-grams at its first two positions repeat: the
    smallest n sorts every n-gram, each larger n only those candidates (a few percent of the words from n = 4 on
    in prose), and the walk (in Python) visits only repeated n-grams.
    """
    out: dict[int, np.ndarray] = {}
    if not top_ns and not dup_ns:
        return out
    with np.errstate(divide="ignore", invalid="ignore"):
        scale = np.where(text_len > 0, 1.0 / text_len, np.nan)
    h = units.hashes
    hashes = h
    repeated: np.ndarray | None = None  # units whose (n-1)-gram occurs twice or more in its document
    smallest = min((*top_ns, *dup_ns))
    for n in range(1, max((*top_ns, *dup_ns)) + 1):
        if n <= smallest:
            if n > 1:
                hashes = hashes[:-1] * _P + h[n - 1:]
            if n < smallest:
                continue
        if repeated is None:
            cand = np.arange(len(hashes))
        else:
            marked = np.zeros(len(h) + 1, dtype=bool)  # which units are in `repeated`: one pass, not a search
            marked[repeated] = True
            cand = repeated[marked[repeated + 1]]
        cand = cand[units.left[cand] >= n]
        if n > smallest:
            # Rolled only where an n-gram is a candidate: later candidates are among these, so the other entries
            # (still (n-1)-gram hashes) are never read again. In place: a few percent of the units, not all.
            if hashes is h:  # smallest n is 1: the units' own hashes, not to be written over
                hashes = h.copy()
            hashes[cand] = hashes[cand] * _P + h[cand + n - 1]
        keys = units.tag[cand] | (hashes[cand] >> _HASH_SHIFT)
        order, starts, counts = _runs(keys)
        if n in top_ns:
            out[n] = _top_ngram(units, cand, order, starts, counts, n, separator) * scale
        mask = np.empty(len(keys), dtype=bool)
        mask[order] = np.repeat(counts > 1, counts)
        repeated = cand[mask]
        if n in dup_ns:
            run = np.empty(len(keys), dtype=np.int64)  # each n-gram's run of equal keys: a small id per distinct key
            run[order] = np.repeat(np.arange(len(starts), dtype=np.int64), counts)
            out[n] = _walk_duplicates(units, repeated, run[mask], len(starts), n) * scale
    return out


def _walk_duplicates(units: Units, positions: np.ndarray, ids: np.ndarray, distinct: int, n: int) -> np.ndarray:
    """Characters datatrove's `find_all_duplicate` counts per document, visiting only n-grams that occur twice.

    `ids` name each n-gram's key (document and hash) by a number below `distinct`, so the n-grams seen are marks in
    a bytearray rather than keys in a set (the loop runs once per repeated n-gram: about 2.4x faster)."""
    out = np.zeros(len(units.count))
    if len(positions) == 0:
        return out
    seen = bytearray(distinct)
    hits: list[int] = []
    hit = hits.append  # bound once
    resume = 0  # the walk jumps past a duplicate: positions before `resume` are never visited
    for p, k in zip(positions.tolist(), ids.tolist()):  # ids stand for keys, which carry the document
        if p < resume:
            continue
        if seen[k]:
            hit(p)
            resume = p + n
        else:
            seen[k] = 1
    if hits:
        at = np.array(hits, dtype=np.int64)
        np.add.at(out, units.doc[at], units.ends[at + n] - units.ends[at])
    return out


def char_units(dense: list[str]) -> Units:
    """Characters as units, hashed by a multiply-xorshift mix of the code point."""
    chars = np.frombuffer("".join(dense).encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    h = (chars.astype(np.uint64) + _GOLDEN) * _MIX1
    h ^= h >> np.uint64(31)
    h *= _MIX2
    count = np.fromiter(map(len, dense), dtype=np.int64, count=len(dense))
    return Units(h, np.ones(len(chars), dtype=np.int64), count)
