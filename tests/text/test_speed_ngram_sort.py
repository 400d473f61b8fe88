"""The n-gram engine's runs by a stable sort (`ngrams._runs`, timsort) and `_top_ngram`'s first occurrences read
off them give what the default sort and a minimum per run gave, bit for bit: the old `_runs` and `_top_ngram` (as
they stood at 633000b) are copied here as the reference, and both forms run under the whole of `ngram_repetition`
on real text (Common Crawl, Pile, Reddit, the Python standard library's own sources as words;
Chinese news as characters) and on hostile text."""

from __future__ import annotations

import sys
import sysconfig
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import SHARED_DATA
from tests.text.test_clean_speed import hostile, real
from tests.text.test_quality_speed_ngrams import repeating_texts
from tokenmill.text.quality import DUP_N_GRAM_SIZES, TOP_N_GRAM_SIZES
from tokenmill.text.quality import ngrams
from tokenmill.text.quality.measures import _vocabulary
from tokenmill.text.quality.ngrams import char_units, ngram_repetition
from tokenmill.text.quality.vocab import text_units


def old_runs(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    order = np.argsort(keys)
    sorted_keys = keys[order]
    starts = np.flatnonzero(np.concatenate(([True], sorted_keys[1:] != sorted_keys[:-1])))
    return order, starts, np.diff(np.append(starts, len(keys)))


def old_top_ngram(units, pos, order, starts, counts, n, separator):
    out = np.zeros(len(units.count))
    whole = np.flatnonzero(units.count >= n)
    first_unit = units.start[whole]
    out[whole] = units.ends[first_unit + n] - units.ends[first_unit] + separator * (n - 1)
    many = counts > 1
    if not many.any():
        return out
    first = np.minimum.reduceat(pos[order], starts)[many]
    counts = counts[many]
    run_doc = units.doc[first]
    doc_starts = np.flatnonzero(np.concatenate(([True], run_doc[1:] != run_doc[:-1])))
    top = np.maximum.reduceat(counts, doc_starts)
    per_run = np.repeat(top, np.diff(np.append(doc_starts, len(counts))))
    best = np.minimum.reduceat(np.where(counts == per_run, first, np.iinfo(np.int64).max), doc_starts)
    chars = units.ends[best + n] - units.ends[best] + separator * (n - 1)
    out[run_doc[doc_starts]] = chars * top
    return out


def run_ids(order: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Each key's run (a number by sorted key): what every caller of `_runs` reads, whatever the order in a run."""
    run = np.empty(len(order), dtype=np.int64)
    run[order] = np.repeat(np.arange(len(counts), dtype=np.int64), counts)
    return run


def stdlib_sources(limit: int = 300) -> list[str]:
    """The Python standard library's own .py files (code: short repeated lines, deep indentation)."""
    paths = sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py"))[:limit]
    return [p.read_text(encoding="utf-8", errors="surrogateescape") for p in paths]


@pytest.fixture(scope="module")
def texts() -> list[str]:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real-data samples not found at {SHARED_DATA} (they sit beside the repository in CI)")
    return real(SHARED_DATA) + stdlib_sources() + hostile() + repeating_texts(500, 35)


def _repetition(units, texts: list[str], separator: int, monkeypatch, runs, top) -> dict[int, np.ndarray]:
    monkeypatch.setattr(ngrams, "_runs", runs)
    monkeypatch.setattr(ngrams, "_top_ngram", top)
    text_len = np.array([float(len(t)) for t in texts])
    return ngram_repetition(units, text_len, TOP_N_GRAM_SIZES, DUP_N_GRAM_SIZES, separator=separator)


def _same(units, texts: list[str], separator: int, monkeypatch) -> int:
    new = _repetition(units, texts, separator, monkeypatch, ngrams._runs, ngrams._top_ngram)
    want = _repetition(units, texts, separator, monkeypatch, old_runs, old_top_ngram)
    assert sorted(new) == sorted(want)
    for n in want:
        assert new[n].view(np.uint64).tolist() == want[n].view(np.uint64).tolist(), n
    return sum(int(np.count_nonzero(want[n] > 0)) for n in want)


def test_stable_runs_are_the_runs_of_the_default_sort():
    """Keys with many ties, tagged by document as the engine tags them, and the edge sizes: same runs, same members."""
    rng = np.random.default_rng(35)
    docs = np.sort(rng.integers(0, 300, 50_000)).astype(np.uint64) << ngrams.DOC_SHIFT
    for keys in (docs | rng.integers(0, 40, 50_000).astype(np.uint64), rng.integers(0, 2**63, 20_000, dtype=np.uint64),
                 np.zeros(0, dtype=np.uint64), np.ones(1, dtype=np.uint64), np.full(1000, 7, dtype=np.uint64)):
        order, starts, counts = ngrams._runs(keys)
        old_order, old_starts, old_counts = old_runs(keys)
        assert starts.tolist() == old_starts.tolist() and counts.tolist() == old_counts.tolist()
        assert keys[order].tolist() == keys[old_order].tolist()
        assert run_ids(order, counts).tolist() == run_ids(old_order, old_counts).tolist()
        # Stable: within a run the keys keep their order, so a run's first member is its earliest (`_top_ngram`).
        assert all(np.all(np.diff(order[a:a + c]) > 0) for a, c in zip(starts.tolist(), counts.tolist()))


def test_repetition_by_stable_runs_is_the_old_on_words(texts, monkeypatch):
    """Every text measured as words (Chinese too: the engine takes any text)."""
    units, _ = text_units(texts, _vocabulary)
    assert _same(units, texts, 1, monkeypatch) > 1000


def test_repetition_by_stable_runs_is_the_old_on_characters(texts, monkeypatch):
    """Every text measured as characters (without its whitespace), as the CJK rules measure Chinese."""
    dense = ["".join(t.split()) for t in texts]
    assert _same(char_units(dense), texts, 0, monkeypatch) > 1000


def test_the_reference_is_not_the_code_under_test():
    """The comparison means something only while the engine's forms are the new ones."""
    assert ngrams._runs is not old_runs and "stable" in ngrams._runs.__code__.co_consts
    assert ngrams._top_ngram is not old_top_ngram
    assert sys.modules[old_runs.__module__] is not ngrams
