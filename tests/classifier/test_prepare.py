"""The preparation both training and scoring apply: one line, no label words, as the options say."""

from __future__ import annotations

from tokenmill.classifier.config import PrepareOptions
from tokenmill.classifier.prepare import prepare


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
