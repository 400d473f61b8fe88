"""Sub-document dedup on hostile inputs: one enormous line (memory linear in it, hashed from Arrow's buffers), texts
that are all empty or only whitespace, lines mixing CJK and Latin, CRLF line endings. Nothing is lost: every text
comes back (changed or not) and only texts that lost spans can be flagged too short."""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa

from tokenmill.subdoc import dedup_texts, doc_spans, normalize, remove_spans, span_hash, span_texts, split_spans

WORDS = "alpha beta gamma delta epsilon 中文 文字 数据 é ß".split()


def one_line(size: int, seed: int = 0) -> str:
    """A single line (no newline) of at least `size` UTF-8 bytes: 50 kB of Latin and CJK words, repeated."""
    chunk = " ".join(random.Random(seed).choices(WORDS, k=8_000))
    return " ".join([chunk] * (size // len(chunk.encode()) + 1))


def test_one_enormous_line_is_one_span_and_memory_stays_linear():
    big = one_line(5_000_000)
    assert "\n" not in big and len(big.encode()) >= 5_000_000
    tracked = pa.proxy_memory_pool(pa.default_memory_pool())
    previous = pa.default_memory_pool()
    pa.set_memory_pool(tracked)
    try:
        found = doc_spans([big, "a short line that is long enough", big], "lines", 20)
    finally:
        pa.set_memory_pool(previous)
    # One span per document, hashed whole (not per word or per window): the hash of the normalised line.
    assert found.row.tolist() == [0, 1, 2]
    assert found.hash[0] == found.hash[2] == span_hash(normalize(big))
    # Arrow's peak while cutting and hashing: a few copies of the column (two 5 MB texts), not a blow-up.
    assert 0 < tracked.max_memory() <= 6 * 2 * len(big.encode()), tracked.max_memory()
    # Removed from every document but the first; the emptied ones flagged, none lost.
    texts = [big, f"{big}\nThe one line of this page that is its own.", big]
    out, short = dedup_texts(texts, "lines", min_chars=20, max_docs=1, min_doc_chars=10)
    assert out == [big, "The one line of this page that is its own.", ""] and short == [False, False, True]
    assert span_texts(big, "lines", 20, {int(found.hash[0])}) == {int(found.hash[0]): normalize(big)}


def test_empty_texts_and_whitespace_only_texts_give_no_spans_and_stay():
    for texts in ([""] * 5, [" \t\r\n\u3000\n\n  \u00a0"] * 4, []):
        for unit in ("lines", "paragraphs"):
            found = doc_spans(texts, unit, 1)
            assert found.row.size == 0 and found.hash.dtype == np.uint64
            assert dedup_texts(texts, unit, min_chars=1, max_docs=1, min_doc_chars=50) == (texts, [False] * len(texts))
    # An empty Arrow column, and one where every document is skipped (code kept whole).
    assert doc_spans(pa.array([], pa.string()), "lines", 20).row.size == 0
    assert doc_spans(["x" * 30, "x" * 30], "lines", 20, skip=[True, True]).row.size == 0


def test_mixed_cjk_and_latin_lines_are_one_span_each():
    footer = "订阅 Newsletter 获取最新 updates：©2024 Example 公司 All rights reserved"
    texts = [f"第{i}篇 article about 数据 pipelines, part {i} of the series 系列。\n{footer}" for i in range(4)]
    found = doc_spans(texts, "lines", 20)
    assert found.row.tolist() == [0, 0, 1, 1, 2, 2, 3, 3]
    python = {(i, span_hash(normalize(s))) for i, t in enumerate(texts) for s in split_spans(t, "lines")[0]}
    assert set(zip(found.row.tolist(), found.hash.tolist())) == python
    out, short = dedup_texts(texts, "lines", min_chars=20, max_docs=1, min_doc_chars=10)
    assert out[0] == texts[0] and not any(short)
    assert all(t == texts[i].split("\n")[0] for i, t in enumerate(out[1:], 1))


def test_crlf_lines_match_their_lf_copies_and_keep_their_endings():
    banner = "We use cookies to improve your experience on this site."
    crlf = [f"Headline number {i} of the day, written at length\r\n{banner}\r\nSigned, the editors {i}\r\n"
            for i in range(3)]
    lf = f"Another page entirely, with its own words in it\n{banner}\n"
    texts = [lf, *crlf]
    found = doc_spans(texts, "lines", 20)
    h = span_hash(banner)
    assert [row for row, x in zip(found.row.tolist(), found.hash.tolist()) if x == h] == [0, 1, 2, 3]
    out, short = dedup_texts(texts, "lines", min_chars=20, max_docs=1, min_doc_chars=10)
    assert out[0] == lf  # the first document, with LF endings, keeps the banner
    assert out[1:] == [f"Headline number {i} of the day, written at length\r\nSigned, the editors {i}\r\n"
                       for i in range(3)] and not any(short)
    # Paragraphs separated by CRLF blank lines: the separator survives around the kept paragraphs.
    text = f"First paragraph that stays.\r\n\r\n{banner}\r\n\r\nLast paragraph that stays."
    assert remove_spans(text, "paragraphs", 20, {h}).text == \
        "First paragraph that stays.\r\n\r\nLast paragraph that stays."
    # What the first document kept (the stage's kept/ files): the same span, normalised, found by its hash.
    assert span_texts(text, "paragraphs", 20, {h, 1}) == span_texts(crlf[0], "lines", 20, {h}) == {h: banner}
