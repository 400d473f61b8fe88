"""Sub-document dedup, the pure algorithm: spans, counts over distinct documents, removal, code and Chinese."""

from __future__ import annotations

import numpy as np

from tokenmill.subdoc import _WHITESPACE, count_spans, dedup_texts, doc_spans, normalize, remove_spans, split_spans, span_hash
from tokenmill.text.escapes import content_kind

BANNER = "We use cookies to improve your experience. Accept all cookies"
NAV = "Home | News | Sport | Weather | Contact us"


def page(i: int) -> str:
    return f"{NAV}\nArticle {i}: the river rose {i} metres overnight and the bridge at mile {i} closed.\n{BANNER}"


def test_split_and_join_give_the_text_back():
    text = "a\n\n  b\r\nc\n \n\nd"
    for unit in ("lines", "paragraphs"):
        spans, seps = split_spans(text, unit)
        assert "".join(s + p for s, p in zip(spans, seps + [""])) == text
    assert split_spans(text, "paragraphs")[0] == ["a", "b\r\nc", "d"]
    assert normalize("  Home \t|\u00a0News\r ") == "Home | News"


def test_a_banner_in_five_documents_is_removed_from_four_and_kept_in_the_first():
    texts = [page(i) for i in range(5)]
    out, short = dedup_texts(texts, "lines", min_chars=20, max_docs=3, min_doc_chars=10)
    assert out[0] == texts[0]  # the first document keeps every span
    for i in range(1, 5):
        assert out[i] == f"Article {i}: the river rose {i} metres overnight and the bridge at mile {i} closed."
    assert not any(short)
    # At or under max_docs documents, nothing goes.
    assert dedup_texts(texts[:3], "lines", min_chars=20, max_docs=3, min_doc_chars=10)[0] == texts[:3]


def test_documents_are_counted_once_and_short_spans_ignored():
    # One document repeating the banner 6 times is one document: nothing is removed.
    texts = ["\n".join([BANNER] * 6), "Something else entirely, long enough to count."]
    assert dedup_texts(texts, "lines", min_chars=20, max_docs=1, min_doc_chars=0)[0] == texts
    # "Share" (5 characters) is in every document but under min_chars: never counted, never removed.
    texts = [f"Share\nStory number {i} about a long and winding road." for i in range(4)]
    assert dedup_texts(texts, "lines", min_chars=20, max_docs=1, min_doc_chars=0)[0] == texts
    found = doc_spans(texts, "lines", 20)
    assert found.row.tolist() == [0, 1, 2, 3]


def test_counts_are_distinct_documents_with_the_smallest_first():
    hashes = np.array([7, 5, 7, 7, 5], np.uint64)
    docs = np.array([(2 << 32) | 4, 9, 3, (1 << 32), 1], np.uint64)
    counted = count_spans(hashes, docs)
    assert counted.hash.tolist() == [5, 7] and counted.count.tolist() == [2, 3]
    assert counted.first.tolist() == [1, 3]
    assert counted.repeated(2).hash.tolist() == [7]


def test_a_document_left_empty_is_flagged_too_short():
    texts = [f"{NAV}\n{BANNER}" for _ in range(3)] + ["A real article with a real paragraph of text in it.\n" + NAV]
    out, short = dedup_texts(texts, "lines", min_chars=20, max_docs=1, min_doc_chars=30)
    assert out[0] == texts[0] and not short[0]
    assert out[1] == out[2] == "" and short[1] and short[2]
    assert out[3] == "A real article with a real paragraph of text in it." and not short[3]


def test_a_code_document_keeps_every_line():
    code = "import os\n\ndef main():\n    path = os.path.join(base, name)\n    return len(path)\n\n" \
           "class Config:\n    pass\n# Licensed under the Apache License, Version 2.0\n"
    assert content_kind(code) == "code"
    header = "# Licensed under the Apache License, Version 2.0"
    prose = [f"{header}\nNotes number {i} on the project, written by hand for the readers." for i in range(4)]
    texts = prose[:1] + [code] + prose[1:]
    skip = [content_kind(t) == "code" for t in texts]
    out, _ = dedup_texts(texts, "lines", min_chars=20, max_docs=1, min_doc_chars=0, skip=skip)
    assert out[1] == code  # the header line is removed from prose, never from code
    assert all(header not in t for t in out[2:]) and header in out[0]
    # With code deduplicated as prose, the header goes from the code too.
    assert header not in dedup_texts(texts, "lines", min_chars=20, max_docs=1, min_doc_chars=0)[0][1]


def test_chinese_without_spaces_gives_spans_and_loses_its_boilerplate():
    footer = "版权所有：新华网　未经授权禁止转载"  # 17 characters, one ideographic space
    texts = [f"第{i}条新闻：今天北京的天气晴朗，气温在二十度左右，适合出行。\n{footer}\n责任编辑：张{i}" for i in range(4)]
    found = doc_spans(texts, "lines", 10)
    assert found.row.tolist() == [0, 0, 1, 1, 2, 2, 3, 3]  # a news line and the footer each ("责任编辑：张0": 6 characters)
    assert normalize(footer) == "版权所有：新华网 未经授权禁止转载"
    out, _ = dedup_texts(texts, "lines", min_chars=10, max_docs=1, min_doc_chars=10)
    assert footer in out[0]
    assert all(footer not in t and t.startswith(f"第{i}条新闻") and t.endswith(f"责任编辑：张{i}")
               for i, t in enumerate(out[1:], 1))
    # Paragraphs of Chinese text (blank-line separated) too.
    paras = [t.replace("\n", "\n\n") for t in texts]
    out, _ = dedup_texts(paras, "paragraphs", min_chars=10, max_docs=1, min_doc_chars=10)
    assert all(footer not in t for t in out[1:])


def test_removal_keeps_the_separators_around_kept_spans():
    text = "intro line that stays here\n\nboilerplate paragraph to go\n\n\nlast paragraph that stays"
    h = span_hash("boilerplate paragraph to go")
    result = remove_spans(text, "paragraphs", 5, {h})
    assert result.text == "intro line that stays here\n\n\nlast paragraph that stays"
    assert (result.spans_removed, result.chars_removed) == (1, len("boilerplate paragraph to go"))
    assert remove_spans(text, "paragraphs", 5, {span_hash("other")}).text == text
    # The first span removed: the text starts at the next kept span, with no separator before it.
    assert remove_spans("boilerplate paragraph to go\nkept", "lines", 5, {h}).text == "kept"


def one_at_a_time(texts: list[str], unit: str, min_chars: int) -> set[tuple[int, int]]:
    """(row, hash) of every span cut, normalised and hashed one span at a time in Python."""
    return {(i, span_hash(normalize(s))) for i, t in enumerate(texts) for s in split_spans(t, unit)[0]
            if len(normalize(s)) >= min_chars}


def test_the_arrow_spans_equal_the_python_spans_whatever_the_whitespace():
    assert list(_WHITESPACE) == [c for c in map(chr, range(0x110000)) if c.isspace()]
    rng = np.random.default_rng(5)
    alphabet = list("abc 中文\u3000\u00a0\u2028\x1c\t\r\n\n\n.") + ["  \n", "\n \u3000\n", "é"]
    texts = ["".join(rng.choice(alphabet, size=int(rng.integers(0, 80)))) for _ in range(300)]
    texts += [page(1), "\u3000\u3000版权所有\u3000新华网\u00a0\u00a0\n\n \n\t第二段 文字", ""]
    for unit in ("lines", "paragraphs"):
        for min_chars in (1, 5, 20):
            found = doc_spans(texts, unit, min_chars)
            assert set(zip(found.row.tolist(), found.hash.tolist())) == one_at_a_time(texts, unit, min_chars)
            assert len(found.row) == len(one_at_a_time(texts, unit, min_chars))  # distinct per document
