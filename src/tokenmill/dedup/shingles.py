"""Text normalisation and shingling for near-duplicate detection: word n-grams, or character n-grams for CJK/Thai."""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

import xxhash

from tokenmill.dedup.polyhash import fmix64 as _fmix64
from tokenmill.dedup.polyhash import powers as _powers

CJK_LANGS = frozenset({"zh", "ja", "th"})  # languages written without spaces: shingle by characters

_WORD_RE = re.compile(r"[^\W_]+")
_U64 = np.uint64
# Polynomial base for the vectorised rolling hashes (odd, so it is invertible mod 2^64).
_BASE = 0x9E3779B97F4A7C15
_LEN_MIX = _U64(0xD6E8FEB86659FD93)
_GROUP_CODEPOINTS = 1 << 20  # texts are shingled in groups of about this many code points (bounds memory)

_alnum_table: np.ndarray | None = None


def words(text: str) -> list[str]:
    """Lowercased maximal runs of Unicode letters and digits (regex [^\\W_]+, i.e. str.isalnum characters)."""
    return _WORD_RE.findall(text.lower())


def normalized(text: str) -> str:
    """The words of `text` joined by single spaces."""
    return " ".join(words(text))


def exact_hash(text: str) -> bytes:
    """16-byte xxh3_128 digest of normalized(text): equal for texts that differ only in case, spacing, punctuation."""
    return xxhash.xxh3_128_digest(normalized(text).encode("utf-8", "surrogatepass"))


def shingle_hashes(text: str, lang: str | None, *, word_ngram: int = 5, char_ngram: int = 5,
                   seed: int = 0) -> np.ndarray:
    """Sorted unique uint64 hashes of the shingles of `text` (see shingle_hashes_many)."""
    return shingle_hashes_many([text], lang, word_ngram=word_ngram, char_ngram=char_ngram, seed=seed)[0]


def uses_chars(lang: str | None) -> bool:
    """Whether texts tagged `lang` are shingled by characters ("zh", "ja", "th", also "zh-Hant", "ja_JP")."""
    return bool(lang) and re.split(r"[-_]", lang.lower(), maxsplit=1)[0] in CJK_LANGS


def shingle_hashes_many(texts: Sequence[str], lang: str | None | Sequence[str | None], *, word_ngram: int = 5,
                        char_ngram: int = 5, seed: int = 0) -> list[np.ndarray]:
    """Sorted unique uint64 shingle hashes for each text, vectorised over many texts at once.

    Shingles are word n-grams of words(text), or for CJK_LANGS character n-grams of "".join(words(text)); a text
    with fewer than n units gives one shingle of all of them, an empty one an empty array. `lang` is one tag for
    all texts or one per text. Hashing, all numpy: each word is a polynomial hash mod 2^64 of its code points
    (prefix sums of c_j * B^j, so any substring costs O(1)), finalised with the murmur3 fmix64 mixer; n consecutive
    unit hashes are combined the same way and mixed again with `seed`. Equal to shingle_hashes per text.
    """
    return _shingled(texts, lang, word_ngram, char_ngram, seed, False)[0]


def shingles_and_exact_hashes(texts: Sequence[str], lang: str | None | Sequence[str | None], *, word_ngram: int = 5,
                              char_ngram: int = 5, seed: int = 0) -> tuple[list[np.ndarray], list[bytes]]:
    """shingle_hashes_many and each text's exact_hash in one pass: the exact hash from the words it finds."""
    return _shingled(texts, lang, word_ngram, char_ngram, seed, True)


def _shingled(texts: Sequence[str], lang: str | None | Sequence[str | None], word_ngram: int, char_ngram: int,
              seed: int, exact: bool) -> tuple[list[np.ndarray], list[bytes]]:
    """Shingle hashes per text, and with `exact` the exact hashes (else an empty list), in groups bounding memory."""
    if word_ngram < 1 or char_ngram < 1:
        raise ValueError("word_ngram and char_ngram must be >= 1")
    n_texts = len(texts)
    if lang is None or isinstance(lang, str):
        char_mode = [uses_chars(lang)] * n_texts
    else:
        if len(lang) != n_texts:
            raise ValueError(f"{len(lang)} lang tags for {n_texts} texts")
        tags = {tag: uses_chars(tag) for tag in set(lang)}  # a shard has a handful of tags
        char_mode = [tags[tag] for tag in lang]
    out: list[np.ndarray] = [np.empty(0, dtype=_U64)] * n_texts
    digests: list[bytes] = [b""] * n_texts if exact else []
    seed_key = _U64(_fmix64_int((seed * 0x9E3779B97F4A7C15 + 0x632BE59BD9B4E019) & 0xFFFFFFFFFFFFFFFF))
    for chars in (False, True):
        idx = [i for i in range(n_texts) if char_mode[i] == chars]
        n = char_ngram if chars else word_ngram
        start = 0
        while start < len(idx):
            stop, size = start, 0
            while stop < len(idx) and (stop == start or size + len(texts[idx[stop]]) <= _GROUP_CODEPOINTS):
                size += len(texts[idx[stop]]) + 1
                stop += 1
            group = idx[start:stop]
            hashes, group_digests = _shingle_group([texts[i] for i in group], chars, n, seed_key, exact)
            for i, h in zip(group, hashes):
                out[i] = h
            for i, d in zip(group, group_digests):
                digests[i] = d
            start = stop
    return out, digests


def _shingle_group(texts: list[str], chars: bool, n: int, seed_key: np.uint64, exact: bool
                   ) -> tuple[list[np.ndarray], list[bytes]]:
    lowered = [t.lower() for t in texts]
    lengths = np.fromiter(map(len, lowered), dtype=np.int64, count=len(lowered))
    cp = np.frombuffer("\n".join(lowered).encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    del lowered
    doc_start = np.zeros(len(texts), dtype=np.int64)
    np.cumsum(lengths[:-1] + 1, out=doc_start[1:])
    doc_end = doc_start + lengths
    mask = np.take(_alnum(), cp)  # take, not [cp]: no intp copy of the indices (half the time)
    if exact or not chars:
        edges = np.diff(mask.view(np.int8), prepend=np.int8(0), append=np.int8(0))
        starts = np.flatnonzero(edges == 1)
        ends = np.flatnonzero(edges == -1)
        del edges
        word_doc = np.searchsorted(doc_start, starts, side="right") - 1
        word_counts = np.bincount(word_doc, minlength=len(texts))
    digests = _exact_digests(cp, mask, starts, ends, word_doc, word_counts) if exact else []
    if chars:
        units = cp[mask].astype(_U64)
        before = np.zeros(len(cp) + 1, dtype=np.int64)
        np.cumsum(mask, out=before[1:])
        counts = before[doc_end] - before[doc_start]
    else:
        units = _poly_substrings(cp, starts, ends - starts)
        counts = word_counts
        _fmix64(units)
    hashes, doc = _ngram_hashes(units, counts, n)
    hashes ^= seed_key
    _fmix64(hashes)
    # Sort each text's hashes in place, then drop repeats within a text.
    bounds = np.zeros(len(texts) + 1, dtype=np.int64)
    np.cumsum(np.bincount(doc, minlength=len(texts)), out=bounds[1:])
    for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
        if b - a > 1:
            hashes[a:b].sort()
    keep = np.ones(len(hashes), dtype=bool)
    keep[1:] = (hashes[1:] != hashes[:-1]) | (doc[1:] != doc[:-1])
    hashes = hashes[keep]
    np.cumsum(np.bincount(doc[keep], minlength=len(texts)), out=bounds[1:])
    return [hashes[a:b] for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist())], digests


def _exact_digests(cp: np.ndarray, mask: np.ndarray, starts: np.ndarray, ends: np.ndarray, word_doc: np.ndarray,
                   word_counts: np.ndarray) -> list[bytes]:
    """exact_hash of each text of a group from its lowered code points `cp`, their alphanumeric `mask`, the words
    (starts, ends, text) and each text's word count: normalized(text) is the alphanumeric code points with a space
    in place of the character just before every word but a text's first (never alphanumeric, always in its text)."""
    sizes = ends - starts
    later = np.zeros(len(starts), dtype=bool)  # a word that is not its text's first: a space before it
    np.equal(word_doc[1:], word_doc[:-1], out=later[1:])
    keep = mask.copy()
    keep[starts[later] - 1] = True
    # The kept code points, then the spaces set in place: where each word starts among them is the characters of
    # the words before it and the spaces up to it (no copy of the whole `cp` with its spaces set first).
    normal = cp[keep]
    at = np.cumsum(sizes + later) - sizes
    normal[at[later] - 1] = 0x20
    # Each text's length in `normal`: its words' characters and a space between two.
    lengths = np.bincount(word_doc, weights=sizes, minlength=len(word_counts)).astype(np.int64)
    lengths += np.maximum(word_counts - 1, 0)
    bounds = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=bounds[1:])
    # A text of only ASCII code points is its UTF-8 bytes, one byte each; the others are encoded as before.
    wide = np.zeros(len(lengths), dtype=bool)
    wide[np.searchsorted(bounds, np.flatnonzero(normal >= 0x80), side="right") - 1] = True
    narrow = normal.astype(np.uint8)
    digest = xxhash.xxh3_128_digest
    return [digest(normal[a:b].tobytes().decode("utf-32-le", "surrogatepass").encode("utf-8", "surrogatepass"))
            if w else digest(narrow[a:b])
            for a, b, w in zip(bounds[:-1].tolist(), bounds[1:].tolist(), wide.tolist())]


def _ngram_hashes(units: np.ndarray, counts: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Hashes of every window of n consecutive units within a text (one window of all units if fewer), doc ids."""
    n_docs = len(counts)
    unit_start = np.zeros(n_docs, dtype=np.int64)
    np.cumsum(counts[:-1], out=unit_start[1:])
    if len(units) >= n:
        unit_doc = np.repeat(np.arange(n_docs), counts)
        long_starts = np.flatnonzero(unit_doc[: len(units) - n + 1] == unit_doc[n - 1:])
        long_doc = unit_doc[long_starts]
    else:
        long_starts = long_doc = np.empty(0, dtype=np.int64)
    short = np.flatnonzero((counts > 0) & (counts < n))
    if len(short):  # rare: merge the one-window texts in, keeping doc order
        starts = np.concatenate([long_starts, unit_start[short]])
        sizes = np.concatenate([np.full(len(long_starts), n, dtype=np.int64), counts[short]])
        doc = np.concatenate([long_doc, short])
        order = np.argsort(doc, kind="stable")
        starts, sizes, doc = starts[order], sizes[order], doc[order]
    else:
        starts, sizes, doc = long_starts, np.full(len(long_starts), n, dtype=np.int64), long_doc
    return _poly_substrings(units, starts, sizes), doc


def _poly_substrings(values: np.ndarray, starts: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """sum_j values[s + j] * B^j mod 2^64 for each (s, size), plus size * constant: O(1) each from prefix sums."""
    base_pow, inv_pow = _powers(len(values))
    # The products and their sums written in place into `prefix`: no temporary as long as the text.
    prefix = np.empty(len(values) + 1, dtype=_U64)
    prefix[0] = 0
    # Code points (uint32) are widened by a copy into `prefix` first: a mixed uint32 x uint64 multiply casts in
    # small buffered pieces and takes about twice as long.
    if values.dtype != _U64:
        prefix[1:] = values
        np.multiply(prefix[1:], base_pow, out=prefix[1:])
    else:
        np.multiply(values, base_pow, out=prefix[1:])
    np.cumsum(prefix[1:], out=prefix[1:])
    out = prefix[starts + sizes]
    out -= prefix[starts]
    out *= inv_pow[starts]
    out += sizes.astype(_U64) * _LEN_MIX
    return out




def _alnum() -> np.ndarray:
    """Boolean table over all code points: str.isalnum, exactly the characters [^\\W_] matches."""
    global _alnum_table
    if _alnum_table is None:
        _alnum_table = np.fromiter((chr(c).isalnum() for c in range(0x110000)), dtype=bool, count=0x110000)
    return _alnum_table




def _fmix64_int(x: int) -> int:
    mask = 0xFFFFFFFFFFFFFFFF
    x ^= x >> 33
    x = (x * 0xFF51AFD7ED558CCD) & mask
    x ^= x >> 33
    x = (x * 0xC4CEB9FE1A85EC53) & mask
    return x ^ (x >> 33)
