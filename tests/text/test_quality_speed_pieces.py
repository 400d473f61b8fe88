"""Whitespace pieces cut on the UTF-8 bytes (`vocab.split_pieces`) and the Gopher word measures summed by running
totals and a bincount (`measures._gopher_word_scores`) give what the forms they replace gave, bit for bit: the old
forms (as they stood at 17e2797: Arrow's `utf8_split_whitespace`, boolean selections and `np.unique`) are copied here
as the reference and run on real text, the standard library's own source and hostile text."""

from __future__ import annotations

import random
import sysconfig
from itertools import chain
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from tests.conftest import SHARED_DATA
from tests.text.test_quality import english_web, thucnews
from tokenmill.text.quality import GopherQualityConfig, measures
from tokenmill.text.quality.measures import _gopher_word_scores
from tokenmill.text.quality.ngrams import Units, token_hashes
from tokenmill.text.quality.vocab import ALPHA, WORD, Vocabulary, split_pieces, text_units


def old_split(texts: list[str]) -> tuple[list[str], list[int]]:
    """`Vocabulary._piece_ids`'s cut at 17e2797: Arrow's split, its empty pieces dropped."""
    lists = pc.utf8_split_whitespace(pa.array(texts, pa.string()))
    flat = lists.flatten()
    nonempty = pc.greater(pc.binary_length(flat), 0)
    parent = pc.list_parent_indices(lists).filter(nonempty).to_numpy()
    return flat.filter(nonempty).to_pylist(), np.bincount(parent, minlength=len(texts)).tolist()


def old_gopher_word_scores(units: Units, ids: np.ndarray, vocab: Vocabulary, texts: list[str],
                           cfg: GopherQualityConfig) -> dict[str, np.ndarray]:
    """`measures._gopher_word_scores` at 17e2797."""
    d = len(texts)
    codes = vocab.classes[ids]
    lengths = np.diff(units.ends)
    is_word = (codes & WORD).astype(bool)
    words = np.bincount(units.doc[is_word], minlength=d).astype(np.float64)
    word_chars = np.bincount(units.doc[is_word], weights=lengths[is_word], minlength=d)
    alpha = np.bincount(units.doc[(codes & ALPHA).astype(bool)], minlength=d)
    n_tokens = units.count.astype(np.float64)
    stops = list(dict.fromkeys(cfg.stop_words))
    stop_hashes = np.sort(token_hashes(stops))
    slot = np.searchsorted(stop_hashes, vocab.hashes).clip(0, max(len(stops) - 1, 0))
    at = slot[ids]
    found = np.flatnonzero((stop_hashes[slot] == vocab.hashes)[ids]) if stops else np.zeros(0, dtype=np.int64)
    pairs = np.unique(units.doc[found] * max(len(stops), 1) + at[found])
    stop_words = np.bincount(pairs // max(len(stops), 1), minlength=d).astype(np.float64)
    hashes_count = np.fromiter((t.count("#") for t in texts), dtype=np.float64, count=d)
    ellipses = np.fromiter((t.count("...") + t.count("…") for t in texts), dtype=np.float64, count=d)
    with np.errstate(divide="ignore", invalid="ignore"):
        return {
            "gopher_words": words,
            "gopher_mean_word_length": np.where(words > 0, word_chars / words, np.nan),
            "gopher_hash_ratio": np.where(n_tokens > 0, hashes_count / n_tokens, np.nan),
            "gopher_ellipsis_ratio": np.where(n_tokens > 0, ellipses / n_tokens, np.nan),
            "gopher_alpha_word_ratio": np.where(n_tokens > 0, alpha / n_tokens, np.nan),
            "gopher_stop_words": stop_words,
        }


_SPACES = [chr(c) for c in range(0x110000) if chr(c).isspace()]
_ODD = ["a", "é", "中", "e\u0301", "\u0915\u093f", "😀", "“", ".", "\x00", "\r", "\u200b", "\u180e", "\ufeff", "\x7f"]


def hostile() -> list[str]:
    """Empty texts, every whitespace character alone, between letters, at either end and in runs, NUL, `\\r`,
    zero-width characters that are not whitespace, combining marks, Chinese, emoji, one 300 KB line."""
    rng = random.Random(7)
    alphabet = _SPACES + _ODD * 3
    texts = ["", " ", "\n\n", "a", " a ", "a\x00b", "a\rb\r\n", "中文 文本", "e\u0301 \u0915\u093f", "x" * 300_000,
             " ".join(["word"] * 60_000), *_SPACES, *(f"a{s}b" for s in _SPACES), *(f"{s}a{s}" for s in _SPACES)]
    texts += ["".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 40))) for _ in range(3_000)]
    return texts


def stdlib_source(limit: int = 300) -> list[str]:
    """The first `limit` of the standard library's own .py files: code, with tabs, indentation and form feeds."""
    paths = sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py"))[:limit]
    return [p.read_text(encoding="utf-8", errors="replace") for p in paths]


@pytest.fixture(scope="module")
def real() -> list[str]:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real-data samples not found at {SHARED_DATA} (they sit beside the repository in CI)")
    return english_web(SHARED_DATA) + thucnews(SHARED_DATA)[:500]


def _check_split(texts: list[str]) -> None:
    pieces, counts = split_pieces(pa.array(texts, pa.large_string()))
    want, want_counts = old_split(texts)
    assert pieces.to_pylist() == want
    assert counts.tolist() == want_counts
    assert want == list(chain.from_iterable(t.split() for t in texts))  # and both are `str.split`'s


def test_byte_pieces_are_arrows_on_every_code_point():
    """Every code point but the surrogates, alone and between letters, in one chunk: whitespace is `str.isspace`."""
    chars = [chr(c) for c in range(0x110000) if not 0xD800 <= c < 0xE000]
    _check_split(chars + [f"a{c}b" for c in chars])


def test_byte_pieces_are_arrows_on_hostile_text():
    texts = hostile()
    _check_split(texts)
    for k in range(0, len(texts), 97):  # texts meeting inside a run, after empty ones, at every chunk edge
        _check_split(texts[k:k + 5])
    _check_split([""])
    _check_split(["", ""])
    _check_split(["ab", "", "", "cd", "ef", " ", "gh"])
    _check_split([" "])  # a chunk of only whitespace: no piece (no run to cut)
    _check_split(_SPACES[:3] + ["", "\n \t"])


def test_byte_pieces_are_arrows_on_real_text_and_code(real):
    _check_split(real)
    _check_split(stdlib_source())


def test_a_lone_surrogate_still_takes_str_split():
    """Arrow cannot hold a lone surrogate: the chunk's pieces come from `str.split`, as before."""
    texts = ["a\ud800b c", "x y"]
    units, _ = text_units(texts, Vocabulary())
    assert units.count.tolist() == [4, 2]  # a, \ud800, b, c | x, y


def _bits(values) -> list[int]:
    return np.asarray(values, dtype=np.float64).view(np.uint64).tolist()


def _check_words(texts: list[str], cfg: GopherQualityConfig) -> None:
    vocab = Vocabulary()
    units, ids = text_units(texts, vocab)
    got = _gopher_word_scores(units, ids, vocab, texts, cfg)
    want = old_gopher_word_scores(units, ids, vocab, texts, cfg)
    assert got.keys() == want.keys()
    for name in want:
        assert _bits(got[name]) == _bits(want[name]), name


CONFIGS = [
    GopherQualityConfig(),
    GopherQualityConfig(stop_words=()),
    GopherQualityConfig(stop_words=("the", "the", "of", "a", ",", ".", "中", "word", "#", "...")),
]


@pytest.mark.parametrize("cfg", CONFIGS, ids=["default", "no_stop_words", "repeated_and_punctuation"])
def test_gopher_word_measures_are_the_old_ones(real, cfg):
    _check_words(real, cfg)
    _check_words(hostile(), cfg)
    _check_words(stdlib_source(100), cfg)


def test_gopher_stop_words_by_sort_past_the_bin_limit(real, monkeypatch):
    """Past `_STOP_BINS` (documents times stop words) the distinct stop words are counted by `np.unique`."""
    monkeypatch.setattr(measures, "_STOP_BINS", 10)
    _check_words(real[:400], GopherQualityConfig())
