"""Dedup's `signatures` phase, second round: the exact hashes' normalised text built from the kept code points with
the spaces set after (no copy of every code point) and hashed from one byte per code point where a text is ASCII,
the alphanumeric mask gathered with `np.take`, code points widened before the polynomial prefix products, and
MinHash chunks of 6 MiB. Each is compared with a frozen copy of the form it replaced (or the chunk it had), on real
text (Pile documents, Chinese news, the standard library's own .py files) and hostile text."""

from __future__ import annotations

import numpy as np
import pytest
import xxhash

from tokenmill.dedup import minhash, shingles
from tokenmill.dedup.minhash import MinHasher
from tokenmill.dedup.polyhash import powers
from tokenmill.dedup.shingles import exact_hash, shingle_hashes_many, shingles_and_exact_hashes

from .test_speed_signatures import HOSTILE, _texts

MIXED = ["plain ascii words here", "café au lait", "", "!!! ...", "naïve ascii ascii", "中文 字", "x\ud800y z",
         "\x00 a \x00 b", "one", "Straße ẞ", "a\u0301b c", "\r\n\r", "end"]


# --- frozen copies of the replaced code ------------------------------------------------------------------------

def _old_exact_digests(cp, mask, starts, ends, word_doc, word_counts):
    later = starts[1:][word_doc[1:] == word_doc[:-1]]
    keep = mask.copy()
    keep[later - 1] = True
    spaced = cp.copy()
    spaced[later - 1] = 0x20
    normal = spaced[keep].tobytes().decode("utf-32-le", "surrogatepass")
    sizes = np.bincount(word_doc, weights=ends - starts, minlength=len(word_counts)).astype(np.int64)
    sizes += np.maximum(word_counts - 1, 0)
    bounds = np.zeros(len(sizes) + 1, dtype=np.int64)
    np.cumsum(sizes, out=bounds[1:])
    return [xxhash.xxh3_128_digest(normal[a:b].encode("utf-8", "surrogatepass"))
            for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist())]


def _old_poly_substrings(values, starts, sizes):
    base_pow, inv_pow = powers(len(values))
    prefix = np.empty(len(values) + 1, dtype=np.uint64)
    prefix[0] = 0
    np.multiply(values, base_pow, out=prefix[1:])
    np.cumsum(prefix[1:], out=prefix[1:])
    out = prefix[starts + sizes]
    out -= prefix[starts]
    out *= inv_pow[starts]
    out += sizes.astype(np.uint64) * np.uint64(0xD6E8FEB86659FD93)
    return out


# --- helpers ---------------------------------------------------------------------------------------------------

def _group_inputs(texts):
    """What _shingle_group hands _exact_digests for `texts` (lowered code points, mask, words)."""
    lowered = [t.lower() for t in texts]
    lengths = np.fromiter(map(len, lowered), dtype=np.int64, count=len(lowered))
    cp = np.frombuffer("\n".join(lowered).encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    doc_start = np.zeros(len(texts), dtype=np.int64)
    np.cumsum(lengths[:-1] + 1, out=doc_start[1:])
    mask = shingles._alnum()[cp]
    edges = np.diff(mask.view(np.int8), prepend=np.int8(0), append=np.int8(0))
    starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
    word_doc = np.searchsorted(doc_start, starts, side="right") - 1
    return cp, mask, starts, ends, word_doc, np.bincount(word_doc, minlength=len(texts))


def _groups(shared):
    texts, _ = _texts(shared)
    # Real groups (English, Chinese, code), one of hostile text, ASCII and non-ASCII texts mixed in one group, texts
    # with no word between others, and each hostile text alone.
    yield from (texts[i:i + 97] for i in range(0, len(texts), 97))
    yield HOSTILE
    yield MIXED
    yield MIXED[::-1] + HOSTILE
    yield from ([t] for t in HOSTILE + MIXED)


# --- the comparisons -------------------------------------------------------------------------------------------

def test_exact_digests_are_the_old_ones(shared_data):
    for group in _groups(shared_data):
        inputs = _group_inputs(group)
        new = shingles._exact_digests(*inputs)
        assert new == _old_exact_digests(*inputs)
        assert new == [exact_hash(t) for t in group]


def test_exact_hashes_of_the_phase_are_the_regex_ones(shared_data):
    texts, langs = _texts(shared_data)
    texts, langs = texts + MIXED + HOSTILE, langs + ["en"] * len(MIXED) + ["zh"] * len(HOSTILE)
    _, digests = shingles_and_exact_hashes(texts, langs)
    assert digests == [exact_hash(t) for t in texts]


def test_poly_substrings_are_the_old_ones_for_code_points_and_units(shared_data):
    texts, _ = _texts(shared_data)
    for group in (texts[:50], texts[400:450], texts[-80:], HOSTILE, MIXED):
        cp, _, starts, ends, _, _ = _group_inputs(group)
        assert cp.dtype == np.uint32
        got = shingles._poly_substrings(cp, starts, ends - starts)
        assert got.dtype == np.uint64 and np.array_equal(got, _old_poly_substrings(cp, starts, ends - starts))
        units = got.copy()
        shingles._fmix64(units)
        windows = np.arange(max(len(units) - 4, 0))
        sizes = np.full(len(windows), 5, np.int64)
        assert np.array_equal(shingles._poly_substrings(units, windows, sizes),
                              _old_poly_substrings(units, windows, sizes))
    top = np.array([0, 0x10FFFF, 0xD800, 0xFFFF, 1], np.uint32)  # the widest code points: no overflow of the copy
    idx = np.array([0, 1, 2], np.int64)
    assert np.array_equal(shingles._poly_substrings(top, idx, np.full(3, 3, np.int64)),
                          _old_poly_substrings(top, idx, np.full(3, 3, np.int64)))


def test_the_taken_mask_is_the_indexed_one(shared_data):
    texts, _ = _texts(shared_data)
    table = shingles._alnum()
    every = np.arange(0x110000, dtype=np.uint32)
    assert np.array_equal(np.take(table, every), table[every])
    for group in (texts[:50], texts[400:450], HOSTILE, MIXED):
        cp = _group_inputs(group)[0]
        assert np.array_equal(np.take(table, cp), table[cp])


@pytest.mark.parametrize("num_perm, perms", [(320, 299), (128, 128), (64, 40)])
def test_minima_at_the_new_chunk_are_those_at_the_old(shared_data, monkeypatch, num_perm, perms):
    texts, langs = _texts(shared_data)
    sets = shingle_hashes_many(texts + HOSTILE, langs + [None] * len(HOSTILE))
    sets = [np.empty(0, np.uint64), *sets, np.empty(0, np.uint64)]
    new = MinHasher(num_perm, seed=7)
    assert minhash._CHUNK_BYTES == 6 << 20 and new._chunk == (6 << 20) // (4 * num_perm)
    monkeypatch.setattr(minhash, "_CHUNK_BYTES", 4 << 20)
    old = MinHasher(num_perm, seed=7)
    (a, ia), (b, ib) = new.minima(sets, perms), old.minima(sets, perms)
    assert np.array_equal(ia, ib) and np.array_equal(a, b)
