"""The spans phase's faster forms against the ones they replaced, on real and hostile text: whitespace runs replaced
by RE2 only where normalisation changes them (`_RE2_RUNS`), and `content_kind` asked only of the documents where RE2
finds a code signal (`code_documents`)."""

from __future__ import annotations

import gzip
import json
import sysconfig
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from tests.subdoc.test_algorithm import one_at_a_time
from tokenmill.stages.subdoc import CODE_SIGNAL_RE2, code_documents
from tokenmill.subdoc import (_RE2_RUNS, _RE2_SPACE, SEPARATORS, doc_spans, remove_spans, remove_spans_batch,
                              split_spans)
from tokenmill.text.escapes import _CODE_OPERATOR, _CODE_STRONG, _CODE_WEAK, content_kind

HOSTILE = ["", "\x00", "a\x00b  c\x00\x00d", "\r", "\r\n\r\n", "x \r\n y\r", "\u00a0\u2003\u3000 x\u2028y \u0085z\t\t",
           "  lead and trail  \t", "x" * 300_000, "word " * 60_000 + "\n" + "  " * 1000, "e\u0301cole cafe\u0301  \u0301",
           "中文\u3000\u3000English混合，测试。\n\u3000版权所有\u3000新华网", "\x1c\x1d\x1e\x1f sep", "\x0b\x0c",
           "def f(x):\n    return x\n", "  if x == 1:\n  y = 2;\n}\n", "x = 1\n", ">>> 1", "#include <a.h>", '"""',
           "f(a);\r\n", "printf(", "\\d+", "a -> b", "{\r\n", "\u0660 = 1", "é_x.y[0] += 1", "\n\n  return",
           "def naïve(x):", "xé = 1", "public ébène", "using Sÿstem;", "package é.b;"]


def _real_texts(shared: Path) -> list[str]:
    texts = json.loads((shared / "pile" / "pearl_pile_texts.json").read_text(encoding="utf-8"))
    with gzip.open(shared / "commoncrawl" / "dolma_CC-MAIN-20190717121559-20190717143559-00140.jsonl.gz", "rt") as f:
        texts += [json.loads(line)["text"] for line in f if line.strip()]
    texts += [line.split("\t", 1)[1] for line in (shared / "chinese" / "thucnews_cnews.val.txt").open(encoding="utf-8")]
    return texts


def _python_files(limit: int) -> list[str]:
    files = sorted(Path(sysconfig.get_paths()["stdlib"]).glob("**/*.py"))[:limit]
    return [f.read_text(encoding="utf-8", errors="replace") for f in files]


@pytest.fixture(scope="module")
def texts() -> list[str]:
    from tests.conftest import SHARED_DATA

    if not SHARED_DATA.is_dir():
        pytest.skip(f"real-data samples not found at {SHARED_DATA}")
    return _real_texts(SHARED_DATA) + _python_files(400) + HOSTILE


def test_runs_replaced_as_every_whitespace_run_was(texts):
    lines = pc.list_flatten(pc.split_pattern(pa.array(texts, pa.large_string()), "\n"))
    old = pc.replace_substring_regex(lines, f"[{_RE2_SPACE}]+", " ")
    new = pc.replace_substring_regex(lines, _RE2_RUNS, " ")
    assert new.equals(old)
    assert pc.sum(pc.match_substring_regex(lines, _RE2_RUNS)).as_py() > 1000  # the texts have runs to replace


@pytest.mark.parametrize("unit", ["lines", "paragraphs"])
def test_doc_spans_are_the_python_spans_on_real_text(texts, unit):
    found = doc_spans(texts, unit, 20)
    assert set(zip(found.row.tolist(), found.hash.tolist())) == one_at_a_time(texts, unit, 20)


def test_code_documents_are_content_kinds_code(texts):
    column = pa.chunked_array([pa.array(texts[:500], pa.string()), pa.array(texts[500:], pa.string())])
    expected = [content_kind(t) == "code" for t in texts]
    assert code_documents(column) == expected
    assert 100 < sum(expected) < len(texts) - 1000  # real code and real prose both
    assert code_documents(pa.chunked_array([], pa.string())) == []


def test_every_code_signal_is_found_by_the_re2_pattern():
    """Line pairs of the standard library (and the hostile texts): wherever one of `content_kind`'s code signals is,
    the RE2 pattern matches, so no code document is passed over."""
    chunks = HOSTILE[:]
    for source in _python_files(300):
        lines = source.split("\n")
        chunks += ["\n".join(lines[i:i + 2]) for i in range(0, len(lines), 2)]
    found = pc.match_substring_regex(pa.array(chunks, pa.string()), CODE_SIGNAL_RE2).to_numpy(zero_copy_only=False)
    signal = np.array([bool(_CODE_STRONG.search(c if c[:1] == "\n" else "\n" + c) or _CODE_WEAK.search(
        c if c[:1] == "\n" else "\n" + c) or _CODE_OPERATOR.search(c)) for c in chunks])
    assert signal.sum() > 10_000
    assert not (signal & ~found).any(), [c for c, s, f in zip(chunks, signal, found) if s and not f][:5]


def test_lines_are_cut_as_the_newline_regex_cuts_them(texts):
    for text in texts + ["\n", "\n\n", "a\n", "\na", "\r\n\r\n", "\u2028\n\x85"]:
        regex = SEPARATORS["lines"]
        assert split_spans(text, "lines") == (regex.split(text), [m.group(0) for m in regex.finditer(text)])


@pytest.mark.parametrize("unit", ["lines", "paragraphs"])
def test_batch_removal_is_remove_spans(texts, unit):
    """Every line (paragraph) held by two documents or more removed from the texts holding it: the batch form gives
    each text, count and removed span that `remove_spans` gives, one text at a time."""
    found = doc_spans(texts, unit, 20)
    held = np.unique(found.hash, return_counts=True)
    repeated = set(held[0][held[1] > 1].tolist())
    removes = [set() for _ in texts]
    for row, h in zip(found.row.tolist(), found.hash.tolist()):
        if h in repeated:
            removes[row].add(h)
    removes[0] |= {1, 2, 3}  # hashes no line has
    expected = [remove_spans(t, unit, 20, r) for t, r in zip(texts, removes)]
    assert sum(e.spans_removed for e in expected) > 1000
    assert remove_spans_batch(texts, unit, 20, removes) == expected
    # A lone surrogate (in a line too short to hash: `remove_spans` never encodes it) sends the batch the old way.
    odd = texts[:3] + ["x\ud800y\n\n" + texts[1]]
    assert remove_spans_batch(odd, unit, 20, removes[:3] + [removes[1]]) == \
        [remove_spans(t, unit, 20, r) for t, r in zip(odd, removes[:3] + [removes[1]])]
