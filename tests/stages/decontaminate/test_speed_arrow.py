"""A shard's text column tokenised and matched as it is in Arrow (joined by Arrow, no Python string per document):
the same tokens, spans, hashes, cuts and matches as the Python strings give, on real text (Pile documents, Common
Crawl pages, Chinese news, the standard library's own .py files) and hostile text, ASCII batches and others."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from tests.stages.decontaminate.test_batch import TRICKY
from tests.stages.decontaminate.test_speed_ascii import HOSTILE, _ascii_texts
from tests.subdoc.test_speed_spans import HOSTILE as MORE_HOSTILE, _real_texts
from tokenmill.stages.decontaminate.ngrams import build_index, find_matches_batch, tokenize_batch

FIELDS = ["this is the question about the ancient city and its many bridges",  # n-gram field
          "Paris is the capital", "the central nervous system", "1 2 3 4 5 6 7 8 9 10 11 12 13 14"]


def _same_batch(a, b) -> None:
    for name in ("starts", "ends", "offsets", "hashes", "cuts"):
        assert np.array_equal(getattr(a, name), getattr(b, name)), name


@pytest.fixture(scope="module")
def texts() -> list[str]:
    from tests.conftest import SHARED_DATA

    if not SHARED_DATA.is_dir():
        pytest.skip(f"real-data samples not found at {SHARED_DATA}")
    texts = _real_texts(SHARED_DATA) + _ascii_texts(SHARED_DATA) + HOSTILE + MORE_HOSTILE + TRICKY
    return [t for t in texts if "\ud800" not in t]  # Arrow holds UTF-8 only: a shard never has a lone surrogate


# The character variant (Chinese) is the slow one: test_a_column_matches_as_its_strings runs both kinds in make test.
@pytest.mark.parametrize("chars", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_a_column_tokenises_as_its_strings(texts, chars):
    ascii_only = [t for t in texts if t.isascii()]
    assert len(ascii_only) > 500 and len(ascii_only) < len(texts) - 500
    for batch in (texts, ascii_only, [""], ["", ""], ["\n"], ["a"], texts[:1], HOSTILE):
        for kind in (pa.string(), pa.large_string()):
            _same_batch(tokenize_batch(pa.array(batch, kind), chars, cuts=True), tokenize_batch(batch, chars, cuts=True))
    sliced = pa.array(texts, pa.string()).slice(7, 300)  # values that do not start at their buffers' start
    _same_batch(tokenize_batch(sliced, chars, cuts=True), tokenize_batch(texts[7:307], chars, cuts=True))


def test_a_column_matches_as_its_strings(texts):
    planted = [f"intro line. {FIELDS[0]} and more words after it" + " x" * 300, "Paris is the capital.",
               f"({FIELDS[2]})", f"see {FIELDS[3]} 15"] * 3
    docs = planted + texts
    langs = [("zh" if i % 11 == 0 else "en") for i in range(len(docs))]
    index = build_index([("s", str(i), "f", f, "en") for i, f in enumerate(FIELDS)]
                        + [("c", "0", "f", "中文测试的句子内容", "zh")])
    expected = find_matches_batch(docs, langs, index)
    assert sum(map(len, expected)) > 10
    assert find_matches_batch(pa.array(docs, pa.string()), langs, index) == expected
