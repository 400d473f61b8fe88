"""The preparation both training and scoring apply: one line, no label words, as the options say; and the line
scoring hands fastText, which fastText reads as the same words."""

from __future__ import annotations

import re
import unicodedata

import pytest

from tests.classifier.real_text import real_pieces
from tests.conftest import SHARED_DATA
from tokenmill.classifier.config import PrepareOptions
from tokenmill.classifier.prepare import _SPACES_FASTTEXT_KEEPS, predict_line, prepare


def test_one_line_lower_case_whitespace_runs_to_one_space():
    text = "  The Title\n\nA  body\twith\u00a0spaces\r\nand\x00a NUL\u2028end \n"
    assert prepare(text, PrepareOptions()) == "the title a body with spaces and a nul end"
    assert prepare(text, PrepareOptions(lowercase=False)).startswith("The Title A body")


def test_label_words_in_the_text_are_defused():
    line = prepare("buy now __label__hq __LABEL__lq", PrepareOptions())
    assert "__label__" not in line and line.split() == ["buy", "now", "_label_hq", "_label_lq"]


def test_max_chars_cuts_after_the_whitespace_runs_are_collapsed():
    assert prepare("one\n\n\n\ntwo three", PrepareOptions(max_chars=9)) == "one two t"
    assert prepare("one two ", PrepareOptions(max_chars=4)) == "one"  # no trailing space left by the cut


def test_a_lone_surrogate_becomes_a_question_mark():
    assert prepare("ok \ud800 fine", PrepareOptions()) == "ok ? fine"


# --- predict_line: what scoring hands fastText, the same words as prepare ------------------------------------------

FASTTEXT_SPACES = b" \t\n\v\f\r\x00"
"""What fastText's `Dictionary::readWord` splits words on."""


def fasttext_words(line: bytes) -> list[bytes]:
    """The words fastText reads from `line`, by its own rule (not by Python's `split`)."""
    assert line.endswith(b"\n") and b"\n" not in line[:-1], "one line, ended by its newline"
    return re.split(rb"[ \t\n\v\f\r\x00]+", line[:-1].strip(FASTTEXT_SPACES)) if line.strip(FASTTEXT_SPACES) else []


def same_words(text: str, options: PrepareOptions) -> bool:
    canonical = prepare(text, options)
    return fasttext_words(predict_line(text, options)) == (canonical.encode("utf-8").split(b" ") if canonical else [])


@pytest.mark.parametrize("options", [PrepareOptions(), PrepareOptions(lowercase=False), PrepareOptions(max_chars=7)])
def test_predict_line_reads_as_prepare_for_every_code_point(options):
    """Every code point between two words, alone and in a run with newlines: the words fastText reads are
    prepare's words (a space fastText would keep as a character, such as U+00A0, would make one word of two)."""
    chars = [chr(c) for c in range(0x110000)]
    for start in range(0, len(chars), 4096):
        block = chars[start:start + 4096]
        assert same_words("".join(f"Ab{c}cD\n{c}\t" for c in block), options), hex(start)
        for c in block:
            if c.isspace() or unicodedata.category(c) in ("Cc", "Cf", "Cs", "Zs", "Zl", "Zp"):
                assert same_words(f"x{c}y {c}{c}z", options), hex(ord(c))


def test_predict_line_edge_cases():
    for text in ("", " \n\t ", "\x00", "one\n\n\ntwo", "__label__hq spam __LABEL__x", "a\u00a0b", "ok \ud800 fine",
                 "tab\there\r\ncr", "\x1cfile\x1dsep", "\u3000全角\u3000", "end\n"):
        for options in (PrepareOptions(), PrepareOptions(lowercase=False), PrepareOptions(max_chars=3)):
            assert same_words(text, options), (text, options)
    assert predict_line("One\nTwo", PrepareOptions()) == b"one two\n"  # the fast path: newline to one space


def test_predict_line_reads_as_prepare_on_real_text():
    """Real pieces: Pile prose, Common Crawl WET and WARC (CRLF, no-break spaces), Reddit, Chinese news, Python's own
    source files (indentation and tabs), cut pieces with lone surrogates."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real-data samples not found at {SHARED_DATA} (they sit beside the repository in CI)")
    pieces = real_pieces()
    assert len(pieces) > 1000
    slow = sum(any(c in p.lower() for c in _SPACES_FASTTEXT_KEEPS) for p in pieces)
    print(f"{len(pieces)} real pieces, {slow} of them through prepare's own path")
    assert 0 < slow < len(pieces)  # both paths ran
    for options in (PrepareOptions(), PrepareOptions(lowercase=False)):
        bad = [p for p in pieces if not same_words(p, options)]
        assert not bad, bad[0][:200]
