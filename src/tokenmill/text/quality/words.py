"""Words and sentences by regex: spaCy-like splitting, about 9x faster than spaCy's blank English pipeline."""

from __future__ import annotations

import re
import unicodedata
from typing import Iterable

from datatrove.utils.text import TERMINAL_PUNCTUATION
from datatrove.utils.word_tokenizers import WordTokenizer


def _char_ranges(codepoints: Iterable[int]) -> str:
    """A regex character-class body for a sorted set of code points, as ranges."""
    out, start, prev = [], None, None
    for c in codepoints:
        if start is None:
            start = prev = c
        elif c == prev + 1:
            prev = c
        else:
            out.append((start, prev))
            start = prev = c
    if start is not None:
        out.append((start, prev))
    return "".join(re.escape(chr(a)) if a == b else f"{re.escape(chr(a))}-{re.escape(chr(b))}" for a, b in out)


# Python's \w leaves out combining marks (Devanagari vowel signs, Arabic harakat, Latin diacritics as separate
# characters), which would cut words of many scripts into pieces; a word character here is \w or a mark of the
# Basic Multilingual Plane (marks beyond it would stop `re` from compiling the class to a fast lookup table: 3x slower).
_MARKS = _char_ranges(c for c in range(0x10000) if unicodedata.category(chr(c)) in ("Mn", "Mc", "Me"))
_W = rf"\w{_MARKS}"
_URL = r"(?:https?://|www\.)[^\s<>\"'()\[\]{}]*[^\s<>\"'()\[\]{}.,;:!?]"

TOKEN_RE = re.compile(
    rf"{_URL}"  # a URL is one token (spaCy's URL_MATCH)
    rf"|\d++(?:[.,:/-]\d++)*+(?![{_W}])"  # 1,000  3.14  10:30  2019-07-17  20/08/2018
    rf"|[{_W}]+"  # a run of word characters
    r"|\.\.+"  # an ellipsis made of dots
    rf"|[^{_W}\s]"  # any other character alone: punctuation, symbols
)
"""Word tokens: punctuation is split off words (as spaCy does), numbers with inner separators and URLs stay whole."""

_TERMINAL = "".join(re.escape(c) for c in sorted(TERMINAL_PUNCTUATION))
_TERMINAL_BMP = "".join(re.escape(c) for c in sorted(TERMINAL_PUNCTUATION) if ord(c) < 0x10000)
_ABBREVIATIONS = (r"\b[A-Z]", r"\b(?:Mr|Ms|Dr|St|vs)", r"\b(?:Mrs|e\.g|i\.e|etc)")
"""An initial and the abbreviations grouped by width: one "not after" lookbehind per width (an alternation of equal
widths), the same boundaries as one per abbreviation, about 10% faster."""
SENTENCE_END_RE = re.compile(
    # The first terminal character is consumed by a cheap class (BMP characters compile to a lookup table; any
    # astral character passes, and a lookbehind confirms it): with a lookahead there instead, or the whole set, `re`
    # runs slower at every position. Each "not after" lookbehind then spans that character too (`(?s:.)`).
    rf"[{_TERMINAL_BMP}\U00010000-\U0010FFFF](?<=[{_TERMINAL}])"
    + "".join(rf"(?<!{a}(?s:.))" for a in _ABBREVIATIONS)
    + rf"[{_TERMINAL}]*[\"'”’»)\]]*(?=\s+\S)"
)
"""A sentence boundary: terminal punctuation (datatrove's set), closing quotes or brackets, then space and more text.
Not after an initial (`J. Smith`, `U.S.`) or a few abbreviations spaCy keeps whole (`Mr.`, `e.g.`, `etc.`)."""


def split_words(text: str) -> list[str]:
    """Word tokens of `text` (see `TOKEN_RE`); none is empty or holds whitespace."""
    return TOKEN_RE.findall(text)


def count_sentences(text: str) -> int:
    """Sentences in `text`: one more than the boundaries inside it (an empty text counts 1, as datatrove's does)."""
    return 1 + len(SENTENCE_END_RE.findall(text))


_LINE_JOIN = "\x00"
"""Between lines counted together: neither space, nor a word character, nor punctuation. A boundary's lookbehinds
see a letter or nothing before a line (the same to them), its lookahead wants space then text: across a line's end
only when the line ends with space, and such lines are counted alone."""


def count_line_sentences(lines: list[str]) -> int:
    """`sum(count_sentences(line) for line in lines)`, in one regex pass over the lines joined (C4 counts the
    sentences of every line it keeps: one pass per document instead of one per line)."""
    if not lines:
        return 0
    joined = _LINE_JOIN.join(lines)
    if joined.count(_LINE_JOIN) != len(lines) - 1 or any(line[-1:].isspace() for line in lines):
        return sum(map(count_sentences, lines))  # a line holds the separator, or ends with space
    return len(lines) + len(SENTENCE_END_RE.findall(joined))


class RegexWordTokenizer(WordTokenizer):
    """tokenmill's regex tokenizer as a datatrove `WordTokenizer`, to run datatrove's own filters with it.

    datatrove's filters take `language=`, which `load_word_tokenizer` also accepts as a `WordTokenizer` instance:
    `GopherQualityFilter(language=RegexWordTokenizer())` runs datatrove's rule code on our words and sentences.
    """

    def __init__(self):
        super().__init__("regex")

    def word_tokenize(self, text: str) -> list[str]:
        return split_words(text)

    def sent_tokenize(self, text: str) -> list[str]:
        return [s for a, b in self.span_tokenize(text) if (s := text[a:b].strip())]

    def span_tokenize(self, text: str) -> list[tuple[int, int]]:
        ends = [m.end() for m in SENTENCE_END_RE.finditer(text)]
        return list(zip([0, *ends], [*ends, len(text)]))
