"""Dedup's `signatures` phase in its faster form gives what the old one gave: shingles and exact hashes in one pass
(the exact hash from the words the shingling finds), band keys from only the permutations the bands use, read
permutation-major, and the band rows partitioned by one stable sort. Each is compared with a frozen copy of the code
it replaced, on real text (Pile documents, Chinese news, the standard library's own .py files) and hostile text."""

from __future__ import annotations

import json
import re
import sysconfig
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import xxhash

from tokenmill.dedup import minhash, shingles
from tokenmill.dedup.bands import EXACT_BAND, band_tables
from tokenmill.dedup.lsh import band_keys, minhash_band_keys
from tokenmill.dedup.minhash import EMPTY, MinHasher
from tokenmill.dedup.polyhash import powers
from tokenmill.dedup.shingles import shingle_hashes_many, shingles_and_exact_hashes, uses_chars
from tokenmill.stages.dedup.band_files import band_bytes

HOSTILE = ["", "word", "one two", "\x00", "a\x00b\x00\x00c d e f g", "\r", "x\r\ny\rz w v u t", "A" * 300_000,
           ("lorem ipsum dolor " * 20_000).strip(), "x\ud800y z\udfff \ud83d\ude00 w", "\ud800", "e\u0301cole e\u0301 "
           "\u0308\u0308 a\u0301b", "İstanbul İİ ǅ ẞ ﬁ ΣΑΣ σς", "中文English混合，测试。今天天气很好", "ภาษาไทยเป็นภาษาที่ไม่มีช่องว่าง",
           "a\u00a0b\u2003c\u3000d\u2028e\u0085f\u200bg", "word_with_underscores __ _ 123abc ABC123", "   \t\n ",
           "𝔘𝔫𝔦 😀 𝟘𝟙𝟚 ①②③ ¼ Ⅻ", "\u0000\u0001\ufeff\ufffe\uffff x y z", "ⓐⓑⓒ ＡＢＣ ａｂｃ"]
LANGS = [None, "en", "zh", "ja_JP", "th", "zh-Hant"]


def _texts(shared: Path) -> tuple[list[str], list[str | None]]:
    """Real text and hostile text, each with a language tag (character shingles for some, word for others)."""
    pile = json.loads((shared / "pile" / "pearl_pile_texts.json").read_text(encoding="utf-8"))[:400]
    news = (shared / "chinese" / "thucnews_cnews.val.txt").read_text(encoding="utf-8").splitlines()[:200]
    files = sorted(Path(sysconfig.get_paths()["stdlib"]).glob("**/*.py"))[:150]
    code = [f.read_text(encoding="utf-8", errors="surrogateescape") for f in files]
    texts = pile + news + code + HOSTILE + HOSTILE
    langs = ["en"] * len(pile) + ["zh"] * len(news) + [None] * len(code) + [None] * len(HOSTILE) \
        + [LANGS[i % len(LANGS)] for i in range(len(HOSTILE))]
    return texts, langs


# --- frozen copies of the replaced code ------------------------------------------------------------------------

def _old_exact_hash(text: str) -> bytes:
    return xxhash.xxh3_128_digest(" ".join(re.findall(r"[^\W_]+", text.lower())).encode("utf-8", "surrogatepass"))


def _old_shingle_hashes_many(texts, lang, *, word_ngram=5, char_ngram=5, seed=0):
    n_texts = len(texts)
    char_mode = [uses_chars(lang)] * n_texts if lang is None or isinstance(lang, str) else [uses_chars(t) for t in lang]
    out = [np.empty(0, dtype=np.uint64)] * n_texts
    seed_key = np.uint64(shingles._fmix64_int((seed * 0x9E3779B97F4A7C15 + 0x632BE59BD9B4E019) & 0xFFFFFFFFFFFFFFFF))
    for chars in (False, True):
        idx = [i for i in range(n_texts) if char_mode[i] == chars]
        n = char_ngram if chars else word_ngram
        start = 0
        while start < len(idx):
            stop, size = start, 0
            while stop < len(idx) and (stop == start or size + len(texts[idx[stop]]) <= shingles._GROUP_CODEPOINTS):
                size += len(texts[idx[stop]]) + 1
                stop += 1
            group = idx[start:stop]
            for i, hashes in zip(group, _old_shingle_group([texts[i] for i in group], chars, n, seed_key)):
                out[i] = hashes
            start = stop
    return out


def _old_shingle_group(texts, chars, n, seed_key):
    lowered = [t.lower() for t in texts]
    lengths = np.fromiter(map(len, lowered), dtype=np.int64, count=len(lowered))
    cp = np.frombuffer("\n".join(lowered).encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    doc_start = np.zeros(len(texts), dtype=np.int64)
    np.cumsum(lengths[:-1] + 1, out=doc_start[1:])
    mask = shingles._alnum()[cp]
    if chars:
        units = cp[mask].astype(np.uint64)
        before = np.zeros(len(cp) + 1, dtype=np.int64)
        np.cumsum(mask, out=before[1:])
        counts = before[doc_start + lengths] - before[doc_start]
    else:
        edges = np.diff(mask.view(np.int8), prepend=np.int8(0), append=np.int8(0))
        starts = np.flatnonzero(edges == 1)
        ends = np.flatnonzero(edges == -1)
        units = _old_poly_substrings(cp, starts, ends - starts)
        counts = np.bincount(np.searchsorted(doc_start, starts, side="right") - 1, minlength=len(texts))
        shingles._fmix64(units)
    hashes, doc = _old_ngram_hashes(units, counts, n)
    hashes ^= seed_key
    shingles._fmix64(hashes)
    bounds = np.zeros(len(texts) + 1, dtype=np.int64)
    np.cumsum(np.bincount(doc, minlength=len(texts)), out=bounds[1:])
    for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
        if b - a > 1:
            hashes[a:b].sort()
    keep = np.ones(len(hashes), dtype=bool)
    keep[1:] = (hashes[1:] != hashes[:-1]) | (doc[1:] != doc[:-1])
    hashes = hashes[keep]
    np.cumsum(np.bincount(doc[keep], minlength=len(texts)), out=bounds[1:])
    return [hashes[a:b] for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist())]


def _old_ngram_hashes(units, counts, n):
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
    if len(short):
        starts = np.concatenate([long_starts, unit_start[short]])
        sizes = np.concatenate([np.full(len(long_starts), n, dtype=np.int64), counts[short]])
        doc = np.concatenate([long_doc, short])
        order = np.argsort(doc, kind="stable")
        starts, sizes, doc = starts[order], sizes[order], doc[order]
    else:
        starts, sizes, doc = long_starts, np.full(len(long_starts), n, dtype=np.int64), long_doc
    return _old_poly_substrings(units, starts, sizes), doc


def _old_poly_substrings(values, starts, sizes):
    base_pow, inv_pow = powers(len(values))
    prefix = np.zeros(len(values) + 1, dtype=np.uint64)
    np.cumsum(values * base_pow, out=prefix[1:])
    out = prefix[starts + sizes] - prefix[starts]
    out *= inv_pow[starts]
    out += sizes.astype(np.uint64) * np.uint64(0xD6E8FEB86659FD93)
    return out


def _old_signatures(hasher: MinHasher, shingle_sets) -> np.ndarray:
    n = len(shingle_sets)
    out = np.full((n, hasher.num_perm), EMPTY, dtype=np.uint64)
    sizes = np.fromiter(map(len, shingle_sets), dtype=np.int64, count=n)
    nonempty = np.flatnonzero(sizes)
    if not len(nonempty):
        return out
    values = np.concatenate([np.asarray(shingle_sets[i], dtype=np.uint64) for i in nonempty])
    folded = (values ^ (values >> np.uint64(32))).astype(np.uint32)
    offsets = np.zeros(len(nonempty) + 1, dtype=np.int64)
    np.cumsum(sizes[nonempty], out=offsets[1:])
    total = int(offsets[-1])
    mins = np.full((hasher.num_perm, len(nonempty)), np.iinfo(np.uint32).max, dtype=np.uint32)
    rows = min(max(1, (16 << 20) // (4 * hasher.num_perm)), total)
    for r0 in range(0, total, rows):
        r1 = min(r0 + rows, total)
        d0 = int(np.searchsorted(offsets, r0, side="right")) - 1
        d1 = int(np.searchsorted(offsets, r1, side="left"))
        perm = hasher.a[:, None] * folded[None, r0:r1] + hasher.b[:, None]
        part = np.minimum.reduceat(perm, np.maximum(offsets[d0:d1], r0) - r0, axis=1)
        np.minimum(mins[:, d0:d1], part, out=mins[:, d0:d1])
    out[nonempty] = mins.T
    return out


def _old_band_tables(keys, docs, hashes, bands, partitions):
    band = np.repeat(np.arange(bands, dtype=np.uint16)[None, :], len(docs), axis=0).ravel()
    doc_per_band = np.repeat(docs, bands)
    flat = keys.ravel()
    halves = np.frombuffer(b"".join(hashes), dtype="<u8").reshape(-1, 2).astype(np.uint64)
    exact_key, exact_rest = halves[:, 0], halves[:, 1]
    tables = []
    for p in range(partitions):
        mask = (flat % np.uint64(partitions)) == p
        emask = (exact_key % np.uint64(partitions)) == p
        tables.append(pa.table({
            "band": pa.array(np.concatenate([band[mask], np.full(emask.sum(), EXACT_BAND, np.uint16)]), pa.uint16()),
            "key": pa.array(np.concatenate([flat[mask], exact_key[emask]]), pa.uint64()),
            "doc": pa.array(np.concatenate([doc_per_band[mask], docs[emask]]), pa.uint64()),
            "exact": pa.array(np.concatenate([np.zeros(int(mask.sum()), np.uint64), exact_rest[emask]]), pa.uint64(),
                              mask=np.r_[np.ones(int(mask.sum()), bool), np.zeros(int(emask.sum()), bool)]),
        }))
    return tables


# --- the comparisons ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("group_codepoints", [None, 1000])
def test_shingles_and_exact_hashes_are_the_old_ones(shared_data, monkeypatch, group_codepoints):
    if group_codepoints:  # many small groups: texts split over groups of every size, one text alone in one
        monkeypatch.setattr(shingles, "_GROUP_CODEPOINTS", group_codepoints)
    texts, langs = _texts(shared_data)
    assert len(texts) > 700 and any(uses_chars(tag) for tag in langs)
    for lang in (langs, None, "zh"):
        sets, digests = shingles_and_exact_hashes(texts, lang, word_ngram=5, char_ngram=5, seed=3)
        old = _old_shingle_hashes_many(texts, lang, word_ngram=5, char_ngram=5, seed=3)
        assert len(sets) == len(old) == len(digests) == len(texts)
        for i, text in enumerate(texts):
            assert sets[i].dtype == np.uint64 and np.array_equal(sets[i], old[i]), i
            assert digests[i] == _old_exact_hash(text) == shingles.exact_hash(text), i
        for got, want in zip(shingle_hashes_many(texts, lang, seed=3), old):
            assert np.array_equal(got, want)


def test_one_text_and_none():
    assert shingles_and_exact_hashes([], None) == ([], [])
    for text in HOSTILE:
        sets, digests = shingles_and_exact_hashes([text], "en", word_ngram=3)
        assert np.array_equal(sets[0], _old_shingle_hashes_many([text], "en", word_ngram=3)[0])
        assert digests == [_old_exact_hash(text)]


@pytest.mark.parametrize("chunk_bytes", [None, 4 * 7 * 13])
def test_band_keys_from_minima_are_those_of_the_signatures(shared_data, monkeypatch, chunk_bytes):
    if chunk_bytes:  # a few shingles a chunk: documents span chunks
        monkeypatch.setattr(minhash, "_CHUNK_BYTES", chunk_bytes)
    texts, langs = _texts(shared_data)
    sets = shingle_hashes_many(texts, langs)
    sets = [np.empty(0, np.uint64), *sets[:300], np.empty(0, np.uint64), *sets[-60:]]  # empty sets among them
    for num_perm, bands, rows in ((320, 13, 23), (64, 8, 8), (40, 3, 7)):
        hasher = MinHasher(num_perm, seed=5)
        old = _old_signatures(hasher, sets)
        assert np.array_equal(hasher.signatures(sets), old)
        keys = minhash_band_keys(hasher, sets, bands, rows)
        assert keys.dtype == np.uint64 and np.array_equal(keys, band_keys(old, bands, rows))
    hasher = MinHasher(64)
    assert minhash_band_keys(hasher, [], 8, 8).shape == (0, 8)
    assert np.array_equal(minhash_band_keys(hasher, [np.empty(0, np.uint64)] * 2, 8, 8),
                          band_keys(np.full((2, 64), EMPTY, np.uint64), 8, 8))
    with pytest.raises(ValueError):
        minhash_band_keys(hasher, sets, 9, 8)


@pytest.mark.parametrize("partitions", [1, 7, 64])
def test_band_tables_and_their_bytes_are_the_old_ones(shared_data, partitions):
    texts, langs = _texts(shared_data)
    sets, digests = shingles_and_exact_hashes(texts, langs)
    keys = minhash_band_keys(MinHasher(320), sets, 13, 23)
    docs = (np.uint64(3) << np.uint64(32)) | np.arange(len(texts), dtype=np.uint64)
    new, old = band_tables(keys, docs, digests, 13, partitions), _old_band_tables(keys, docs, digests, 13, partitions)
    assert len(new) == len(old) == partitions
    for a, b in zip(new, old):
        assert a.equals(b) and a.schema == b.schema
    assert band_bytes(new) == band_bytes(old)
    empty = band_tables(keys[:0], docs[:0], [], 13, partitions)
    assert band_bytes(empty) == band_bytes(_old_band_tables(keys[:0], docs[:0], [], 13, partitions))


def test_every_code_point():
    """The exact hash rests on the alphanumeric table being the regex's [^\\W_] at every code point, lowered or not."""
    table = shingles._alnum()
    every = "".join(map(chr, range(0x110000)))
    for text in (every, every.lower()):
        found = np.zeros(0x110000, bool)
        found[[ord(c) for c in re.findall(r"[^\W_]", text)]] = True
        assert np.array_equal(found[[ord(c) for c in text]], table[[ord(c) for c in text]])
    texts = [every[i:i + 40_000] for i in range(0, 0x110000, 40_000)] + [" ".join(every[i:i + 9]) for i in range(0, 4000, 9)]
    sets, digests = shingles_and_exact_hashes(texts, None)
    assert digests == [_old_exact_hash(t) for t in texts]
    for got, want in zip(sets, _old_shingle_hashes_many(texts, None)):
        assert np.array_equal(got, want)
