"""The faster forms of the lines path against the ones they replaced, on real and hostile text: whitespace runs
replaced in whole texts before they are cut into lines (`_normalized_lines`), the removal batch given its texts in
Arrow with only its long lines hashed, and the apply phase's text column rebuilt from the changed rows alone
(`documents.replace_rows`)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from tests.subdoc.test_speed_spans import HOSTILE, _python_files, _real_texts
from tokenmill.documents import replace_rows, shard_bytes
from tokenmill.subdoc import _RE2_RUNS, _normalized_lines, doc_spans, remove_spans, remove_spans_batch

AROUND_NEWLINES = ["a \n b", " \n ", "\t\n\t", "x  \n  y", "x\r\n\r\ny", "\u3000\n\u3000", "a\u2028\nb\x85\n c",
                   "\n\n\n", "  \n", "\n  ", "x \u00a0\ny\u2003 \n z", "line one\nline two  \n\tline three"]


@pytest.fixture(scope="module")
def texts() -> list[str]:
    from tests.conftest import SHARED_DATA

    if not SHARED_DATA.is_dir():
        pytest.skip(f"real-data samples not found at {SHARED_DATA}")
    return _real_texts(SHARED_DATA) + _python_files(400) + HOSTILE + AROUND_NEWLINES


def _old_normalized_lines(column: pa.Array) -> pa.Array:
    """The form replaced: cut into lines first, then each line's runs replaced."""
    return pc.replace_substring_regex(pc.list_flatten(pc.split_pattern(column, "\n")), _RE2_RUNS, " ")


@pytest.mark.parametrize("kind", [pa.string(), pa.large_string()])
def test_whole_text_runs_are_the_runs_of_each_line(texts, kind):
    column = pa.array(texts, kind)
    split = _normalized_lines(column)
    assert pc.list_flatten(split).cast(pa.large_string()).equals(_old_normalized_lines(column).cast(pa.large_string()))
    assert pc.list_value_length(split).equals(pc.list_value_length(pc.split_pattern(column, "\n")))
    for text in AROUND_NEWLINES + HOSTILE + [""]:  # one text at a time: with and without a run to replace
        one = pa.array([text], kind)
        assert pc.list_flatten(_normalized_lines(one)).equals(_old_normalized_lines(one)), repr(text[:40])
    sliced = column.slice(5, 300)  # an array that does not start at its buffers' start
    assert pc.list_flatten(_normalized_lines(sliced)).equals(_old_normalized_lines(sliced))


def _removes(texts: list[str]) -> list[set[int]]:
    found = doc_spans(texts, "lines", 20)
    held = np.unique(found.hash, return_counts=True)
    repeated = set(held[0][held[1] > 1].tolist())
    removes = [set() for _ in texts]
    for row, h in zip(found.row.tolist(), found.hash.tolist()):
        if h in repeated:
            removes[row].add(h)
    removes[0] |= {0, 1, 2}  # hashes no line has (0: a short line's placeholder must not match)
    return removes


def test_batch_removal_given_its_column_is_remove_spans(texts):
    texts = texts + ["repeated footer line here\nshort\n\nrepeated footer line here"] * 3
    removes = _removes(texts)
    expected = [remove_spans(t, "lines", 20, r) for t, r in zip(texts, removes)]
    assert sum(e.spans_removed for e in expected) > 1000
    assert remove_spans_batch(texts, "lines", 20, removes, pa.array(texts, pa.string())) == expected
    # Taken rows, as the apply phase passes them, and a slice: offsets that start past zero.
    rows = list(range(3, len(texts), 7))
    taken = pa.array(texts, pa.large_string()).take(pa.array(rows))
    assert remove_spans_batch([texts[r] for r in rows], "lines", 20, [removes[r] for r in rows], taken) == \
        [expected[r] for r in rows]
    sliced = pa.array(texts, pa.string()).slice(11, 200)
    assert remove_spans_batch(texts[11:211], "lines", 20, removes[11:211], sliced) == expected[11:211]


def test_rebuilt_text_column_is_the_column_of_the_texts(texts):
    column = pa.array(texts, pa.string())
    rng = np.random.default_rng(7)
    for share in (0.0, 0.01, 0.3, 1.0):
        rows = sorted(rng.choice(len(texts), int(share * len(texts)), replace=False).tolist())
        changed = {r: texts[r][: len(texts[r]) // 2] + "\u00e9\x00" for r in rows}
        edited = [changed.get(i, t) for i, t in enumerate(texts)]
        new = replace_rows(column, rows, [changed[r] for r in rows])
        assert new.equals(pa.array(edited, pa.string()))
        table = pa.table({"text": new})
        assert shard_bytes(table) == shard_bytes(pa.table({"text": pa.array(edited, pa.string())}))
