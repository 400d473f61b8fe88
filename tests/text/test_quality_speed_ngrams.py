"""The n-gram engine's duplicate walk with a bytearray of n-gram ids gives the values of the walk over a set of keys
it replaces, bit for bit: the old `ngram_repetition` and `_walk_duplicates` (as they stood at 95de848) are copied
here as the reference and run on real text (words and characters) and on text built to repeat."""

from __future__ import annotations

import random

import numpy as np
import pytest

from tests.conftest import SHARED_DATA
from tests.text.test_quality import english_web, thucnews
from tokenmill.text.quality import DUP_N_GRAM_SIZES, TOP_N_GRAM_SIZES
from tokenmill.text.quality.measures import _vocabulary
from tokenmill.text.quality.ngrams import _HASH_SHIFT, _P, Units, _runs, _top_ngram, char_units, ngram_repetition
from tokenmill.text.quality.vocab import text_units


def old_walk_duplicates(units: Units, positions: np.ndarray, keys: np.ndarray, n: int) -> np.ndarray:
    out = np.zeros(len(units.count))
    if len(positions) == 0:
        return out
    seen: set[int] = set()
    hits: list[int] = []
    resume = 0
    for p, k in zip(positions.tolist(), keys.tolist()):
        if p < resume:
            continue
        if k in seen:
            hits.append(p)
            resume = p + n
        else:
            seen.add(k)
    if hits:
        at = np.array(hits, dtype=np.int64)
        np.add.at(out, units.doc[at], units.ends[at + n] - units.ends[at])
    return out


def old_ngram_repetition(units, text_len, top_ns, dup_ns, separator):
    out = {}
    if not top_ns and not dup_ns:
        return out
    with np.errstate(divide="ignore", invalid="ignore"):
        scale = np.where(text_len > 0, 1.0 / text_len, np.nan)
    h = units.hashes
    hashes = h
    repeated = None
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
            marked = np.zeros(len(h) + 1, dtype=bool)
            marked[repeated] = True
            cand = repeated[marked[repeated + 1]]
        cand = cand[units.left[cand] >= n]
        if n > smallest:
            if hashes is h:
                hashes = h.copy()
            hashes[cand] = hashes[cand] * _P + h[cand + n - 1]
        keys = units.tag[cand] | (hashes[cand] >> _HASH_SHIFT)
        order, starts, counts = _runs(keys)
        if n in top_ns:
            out[n] = _top_ngram(units, cand, order, starts, counts, n, separator) * scale
        mask = np.empty(len(keys), dtype=bool)
        mask[order] = np.repeat(counts > 1, counts)
        repeated, keys = cand[mask], keys[mask]
        if n in dup_ns:
            out[n] = old_walk_duplicates(units, repeated, keys, n) * scale
    return out


def repeating_texts(k: int, seed: int) -> list[str]:
    """Texts of phrases drawn from a small set, so that n-grams repeat at every distance, overlapping runs included."""
    rng = random.Random(seed)
    words = "a b c the of and river stone".split()
    phrases = [" ".join(rng.choice(words) for _ in range(rng.randint(1, 12))) for _ in range(30)]
    return [" ".join(rng.choice(phrases) for _ in range(rng.randint(0, 60))) for _ in range(k)]


def _same(units: Units, texts: list[str], separator: int, sizes=(TOP_N_GRAM_SIZES, DUP_N_GRAM_SIZES)) -> int:
    text_len = np.array([float(len(t)) for t in texts])
    got = ngram_repetition(units, text_len, *sizes, separator=separator)
    want = old_ngram_repetition(units, text_len, *sizes, separator=separator)
    assert sorted(got) == sorted(want)
    for n in want:
        assert got[n].view(np.uint64).tolist() == want[n].view(np.uint64).tolist(), n
    return sum(int(np.count_nonzero(want[n] > 0)) for n in sizes[1] if n in want)


@pytest.mark.parametrize("sizes", [(TOP_N_GRAM_SIZES, DUP_N_GRAM_SIZES), ((), (7,)), ((3,), (5, 10)), ((), (5,))],
                         ids=["all", "seven", "three_five_ten", "five"])
def test_duplicate_walk_by_ids_is_the_walk_by_keys(sizes):
    """Word n-grams of text built to repeat (overlapping repeated runs: the walk's jumps matter) and hostile inputs."""
    texts = repeating_texts(1500, 3) + ["", " ", "x", "a a a a a a a a a a a a a a a a", "\udc80 a b c " * 30,
                                        "中文没有空格的句子" * 20, "a\u3000b\xa0c\r\nd " * 40]
    units, _ = text_units(texts, _vocabulary)
    assert _same(units, texts, 1, sizes) > 500


def test_duplicate_walk_on_real_text_words_and_characters():
    """Common Crawl and Pile pages as words; Chinese news as characters, as the CJK rules measure them."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real-data samples not found at {SHARED_DATA} (they sit beside the repository in CI)")
    web = english_web(SHARED_DATA)
    units, _ = text_units(web, _vocabulary)
    assert _same(units, web, 1) > 100
    zh = thucnews(SHARED_DATA)[:400]
    dense = ["".join(t.split()) for t in zh]
    assert _same(char_units(dense), zh, 0) > 100
