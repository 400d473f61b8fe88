"""Normalization: ftfy repairs mojibake only; our own steps do NFC, whitespace and width, each counted and optional."""

from __future__ import annotations

import unicodedata

import pytest

from tokenmill.stages.clean.normalize import NormalizeConfig, normalize, normalize_whitespace

ALL = NormalizeConfig()


def test_ftfy_repairs_mojibake():
    text, steps = normalize("CafÃ© au lait â€” naÃ¯ve rÃ©sumÃ©", ALL)
    assert text == "Café au lait — naïve résumé" and steps == ["ftfy"]


@pytest.mark.parametrize("kept", [
    "AT&amp;T and &lt;b&gt; stay for the escape step",
    "“curly quotes” and ‘single’ ones stay",
    "中文标点，保留！（全角括号）【书名号】",
    "ligatures ﬁ stay",
])
def test_ftfy_leaves_other_decisions_to_our_steps(kept):
    text, steps = normalize(kept, NormalizeConfig(nfc=False, whitespace=False, fullwidth=False))
    assert text == kept and steps == []


def test_nfc():
    decomposed = unicodedata.normalize("NFD", "élève")
    text, steps = normalize(decomposed, ALL)
    assert text == "élève" and steps == ["nfc"]


@pytest.mark.parametrize("raw, clean", [
    ("a\r\nb\rc", "a\nb\nc"),
    ("tabs\tand   runs  of spaces", "tabs and runs of spaces"),
    ("trailing   \nspaces  ", "trailing\nspaces"),
    ("one\n\n\n\n\n\ntwo", "one\n\n\ntwo"),
    ("zero\u200bwidth\ufeff and\u00a0no-break\u202fspaces", "zerowidth and no-break spaces"),
    ("bell\x07 and escape\x1b removed, NEL\u0085breaks", "bell and escape removed, NEL\nbreaks"),
    ("emoji 👩\u200d💻 keeps its joiner", "emoji 👩\u200d💻 keeps its joiner"),
    ("  \n  leading blank lines  \n", "leading blank lines"),
])
def test_whitespace_as_opt_did_for_the_pile(raw, clean):
    assert normalize_whitespace(raw) == clean


def test_fullwidth_letters_and_digits_fold_cjk_punctuation_stays():
    text, steps = normalize("ＧＤＰ增长５．２％，“稳中向好”。", ALL)
    assert text == "GDP增长5．2％，“稳中向好”。" and steps == ["fullwidth"]


def test_each_step_can_be_turned_off():
    raw = "CafÃ©\t\tＡＢ"
    assert normalize(raw, NormalizeConfig(ftfy=False, nfc=False, whitespace=False, fullwidth=False)) == (raw, [])
    assert normalize(raw, ALL) == ("Café AB", ["ftfy", "whitespace", "fullwidth"])
