"""The mojibake pre-check answers exactly as ftfy's `is_bad`, and answers most real text without it."""

from __future__ import annotations

import random

import pytest
from ftfy.badness import is_bad

from tests.text.test_quality import cmrc, english_web, thucnews
from tokenmill.text import mojibake
from tokenmill.text.mojibake import may_be_mojibake


def test_the_pattern_was_read():
    """Every branch of ftfy's pattern gave its required character sets (else the pre-check is off: no speed-up)."""
    assert mojibake._BRANCHES is not None and mojibake._SIGNAL is not None
    assert len(mojibake._BRANCHES) > 30  # ftfy 6.3 has 37 branches


def _fuzz(seed: int, n: int) -> list[str]:
    """Short strings over the pattern's own characters, ASCII and CJK: many of them are mojibake by ftfy's test."""
    alphabet = sorted({chr(c) for sets in mojibake._BRANCHES for s in sets for c in s})
    alphabet += list("aAzZ .,!?:;1\n\t\"'(-") + ["中", "文", "é", "’", "—", "\u00a0"]
    rng = random.Random(seed)
    return ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 8))) for _ in range(n)]


def test_same_answer_as_is_bad_on_fuzzed_text():
    texts = _fuzz(19, 60_000)
    got = [may_be_mojibake(t) for t in texts]
    assert got == [is_bad(t) for t in texts]
    assert sum(got) > 5_000  # the fuzz reaches the True side, not only the pre-check's False


def test_same_answer_as_is_bad_on_real_text(shared_data):
    texts = english_web(shared_data) + thucnews(shared_data) + cmrc(shared_data)
    texts += [t[:i] + "Ã©" + t[i:] for t in texts[:300] for i in (len(t) // 2,)]  # planted mojibake
    assert [may_be_mojibake(t) for t in texts] == [is_bad(t) for t in texts]


@pytest.mark.parametrize("text", ["中文新闻：“引号”与破折号——不是乱码。", "Curly “quotes”, ’apostrophes’ — and dashes…"])
def test_clean_non_ascii_text_skips_the_regex(monkeypatch, text):
    def refuse(_):
        raise AssertionError("is_bad ran")

    monkeypatch.setattr(mojibake, "is_bad", refuse)
    assert not may_be_mojibake(text)


def test_mojibake_still_reaches_is_bad():
    assert may_be_mojibake("CafÃ© au lait â€” naÃ¯ve")
