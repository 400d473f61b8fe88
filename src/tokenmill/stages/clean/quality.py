"""Document quality: datatrove's Gopher quality, Gopher repetition and C4 rules; character rules for Chinese, Japanese.

Scores first, thresholds second (STYLE 4): `quality_scores` measures every document and returns one column per
measure (`QUALITY_SCORE_COLUMNS`); `quality_reasons` compares the columns with the config's thresholds and names
the first rule a document fails (`QUALITY_DROP_REASONS`). `quality` does both.

The rules are datatrove's (`GopherQualityFilter`, `GopherRepetitionFilter`, `C4QualityFilter`, datatrove 0.10),
re-implemented over whole batches because datatrove's per-document code stops at the first failing rule (we keep
every score) and spends most of its time building n-gram strings; `tests/stages/clean/test_quality.py` checks that
keep/drop agrees with datatrove's own filters on real web text. Two things differ on purpose:

- Words come from a regex tokenizer (`split_words`), not spaCy (datatrove's default for English: not a dependency
  here, and about 9x slower by the project's measure, ~200 documents/s). Like spaCy it splits punctuation off
  words and keeps numbers (`1,000`, `3.14`) and URLs whole. `RegexWordTokenizer` puts the same tokenizer into
  datatrove's filters for the agreement test. Punctuation tokens count as words in the alphabetic-word ratio, as
  they do with spaCy in datatrove: at the default 0.8, about a third of real web and Pile documents fail it.
- C4's line edits: datatrove's C4 filter rewrites `doc.text` without the lines it rejects (no terminal
  punctuation, fewer than 3 words, "javascript", cookie/terms-of-use lines). tokenmill only scores and filters
  documents and never edits text: the C4 rules decide on the lines C4 would keep, and `c4_removed_char_frac`
  records the share of characters C4 would have cut, for a later stage or a threshold to act on.

Documents whose language (`langs`) is in `CJKQualityConfig.languages` (Chinese, Japanese) get character-based
rules instead: a Chinese article has almost no spaces, so Gopher's word counts would drop every one.

Column values are float64; NaN means "not measured": the rule family is off, the document's script profile does
not use that measure (`gopher_*` word measures and `c4_*` on Chinese, `cjk_*` on the rest), or the measure is
undefined (mean word length of a text without words).
"""

from __future__ import annotations

import re
import unicodedata
from itertools import chain
from typing import Iterable, Sequence

import numpy as np
import pyarrow as pa
from datatrove.pipeline.filters.c4_filters import CITATION_REGEX, ELLIPSIS, END_PUNCTUATION, POLICY_SUBSTRINGS
from datatrove.pipeline.filters.gopher_quality_filter import STOP_WORDS as GOPHER_STOP_WORDS
from datatrove.utils.text import PUNCTUATION_SET, TERMINAL_PUNCTUATION
from datatrove.utils.word_tokenizers import WordTokenizer
from pydantic import Field, field_validator, model_validator

from tokenmill.pipeline.config_base import StrictModel

# --------------------------------------------------------------------------------------------------------------
# Tokenizer: words and sentences by regex (spaCy-like, ~9x faster than spaCy's blank English pipeline)
# --------------------------------------------------------------------------------------------------------------


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
SENTENCE_END_RE = re.compile(
    # A cheap test first (a class of BMP characters compiles to a lookup table; any astral character passes),
    # or `re` tries every lookbehind at every position.
    rf"(?=[{_TERMINAL_BMP}\U00010000-\U0010FFFF])"
    r"(?<!\b[A-Z])(?<!\bMr)(?<!\bMrs)(?<!\bMs)(?<!\bDr)(?<!\bSt)(?<!\bvs)(?<!\be\.g)(?<!\bi\.e)(?<!\betc)"
    rf"[{_TERMINAL}]+[\"'”’»)\]]*(?=\s+\S)"
)
"""A sentence boundary: terminal punctuation (datatrove's set), closing quotes or brackets, then space and more text.
Not after an initial (`J. Smith`, `U.S.`) or a few abbreviations spaCy keeps whole (`Mr.`, `e.g.`, `etc.`)."""


def split_words(text: str) -> list[str]:
    """Word tokens of `text` (see `TOKEN_RE`); none is empty or holds whitespace."""
    return TOKEN_RE.findall(text)


def count_sentences(text: str) -> int:
    """Sentences in `text`: one more than the boundaries inside it (an empty text counts 1, as datatrove's does)."""
    return 1 + len(SENTENCE_END_RE.findall(text))


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


# --------------------------------------------------------------------------------------------------------------
# Config
# --------------------------------------------------------------------------------------------------------------

TOP_N_GRAM_SIZES = (2, 3, 4)
"""n-gram sizes the `top_n_grams` rules may use (each has its score column)."""
DUP_N_GRAM_SIZES = (5, 6, 7, 8, 9, 10)
"""n-gram sizes the `dup_n_grams` rules may use (each has its score column)."""


def _check_n_grams(value: tuple[tuple[int, float], ...], allowed: tuple[int, ...], field: str):
    sizes = [n for n, _ in value]
    if any(n not in allowed for n in sizes) or len(set(sizes)) != len(sizes):
        raise ValueError(f"{field}: n-gram sizes must be distinct and among {list(allowed)} (one score column "
                         f"each), got {sizes}")
    return value


class GopherQualityConfig(StrictModel):
    """Gopher's quality rules (Rae et al. 2021, table A1) with datatrove's names and defaults; None turns a rule off."""

    min_doc_words: int | None = Field(default=50, ge=0)
    """Fewest words (tokens with a character that is not punctuation) a document may have."""
    max_doc_words: int | None = Field(default=100_000, ge=0)
    """Most words a document may have."""
    min_avg_word_length: float | None = Field(default=3, ge=0)
    """Shortest mean word length, in characters."""
    max_avg_word_length: float | None = Field(default=10, ge=0)
    """Longest mean word length, in characters."""
    max_symbol_word_ratio: float | None = Field(default=0.1, ge=0)
    """Most `#`, and separately most ellipses (`...`, `…`), per token."""
    max_bullet_lines_ratio: float | None = Field(default=0.9, ge=0)
    """Most share of lines that start with a bullet (`•` or `-`)."""
    max_ellipsis_lines_ratio: float | None = Field(default=0.3, ge=0)
    """Most share of lines that end with an ellipsis."""
    max_non_alpha_words_ratio: float | None = Field(default=0.8, ge=0, le=1)
    """Least share of tokens with a letter (datatrove's name, though it is a minimum: documents below it are dropped).
    Tokens include punctuation, as with datatrove's spaCy words, so ordinary prose sits near 0.8."""
    min_stop_words: int | None = Field(default=2, ge=0)
    """Fewest distinct stop words a document must contain."""
    stop_words: tuple[str, ...] = tuple(GOPHER_STOP_WORDS)
    """The stop words (Gopher's English list; case-sensitive, as in datatrove)."""
    stop_word_languages: tuple[str, ...] | None = ("en",)
    """Languages (`lang` codes) the stop-word rule applies to, since the list is English; None applies it to every
    document, as datatrove does (a French page then fails it)."""


class GopherRepetitionConfig(StrictModel):
    """Gopher's repetition rules (Rae et al. 2021, table A1), datatrove's names and defaults; None turns a rule off."""

    dup_line_frac: float | None = Field(default=0.3, ge=0)
    """Most share of lines (split on newlines) that repeat an earlier line."""
    dup_para_frac: float | None = Field(default=0.3, ge=0)
    """Most share of paragraphs (split on blank lines) that repeat an earlier paragraph."""
    dup_line_char_frac: float | None = Field(default=0.2, ge=0)
    """Most share of characters in repeated lines."""
    dup_para_char_frac: float | None = Field(default=0.2, ge=0)
    """Most share of characters in repeated paragraphs."""
    top_n_grams: tuple[tuple[int, float], ...] = ((2, 0.2), (3, 0.18), (4, 0.16))
    """(n, most share of characters covered by the most frequent word n-gram), n among 2, 3, 4."""
    dup_n_grams: tuple[tuple[int, float], ...] = ((5, 0.15), (6, 0.14), (7, 0.13), (8, 0.12), (9, 0.11), (10, 0.10))
    """(n, most share of characters in word n-grams that repeat an earlier one), n among 5 to 10."""

    @field_validator("top_n_grams")
    @classmethod
    def _top_sizes(cls, v):
        return _check_n_grams(v, TOP_N_GRAM_SIZES, "top_n_grams")

    @field_validator("dup_n_grams")
    @classmethod
    def _dup_sizes(cls, v):
        return _check_n_grams(v, DUP_N_GRAM_SIZES, "dup_n_grams")


class C4Config(StrictModel):
    """C4's rules (Raffel et al. 2020) with datatrove's names and defaults, on lines (C4's default, not sentences).

    The line rules (`filter_no_terminal_punct`, `min_words_per_line`, `max_word_length`, `filter_javascript`,
    `filter_policy`) choose the lines C4 would keep; the document rules (lorem ipsum, curly bracket, fewest sentences)
    look only at those lines. tokenmill does not remove the other lines from the text (see the module docstring);
    `c4_removed_char_frac` says how much C4 would have cut. None (or False) turns a rule off.
    """

    remove_citations: bool = True
    """Remove Wikipedia-style citation marks (`[1]`, `[edit]`, `[citation needed]`) before the line rules."""
    filter_no_terminal_punct: bool = True
    """Skip lines that do not end in `.`, `?`, `!`, `"` or `'` (or that end in `...`)."""
    min_num_sentences: int | None = Field(default=5, ge=0)
    """Fewest sentences, over the kept lines, a document must have."""
    min_words_per_line: int | None = Field(default=3, ge=0)
    """Skip lines with fewer whitespace-separated words."""
    max_word_length: int | None = Field(default=1000, ge=0)
    """Skip lines with a whitespace-separated word longer than this."""
    filter_lorem_ipsum: bool = True
    """Drop documents with "lorem ipsum" on a kept line."""
    filter_javascript: bool = True
    """Skip lines that mention "javascript"."""
    filter_curly_bracket: bool = True
    """Drop documents with `{` on a kept line."""
    filter_policy: bool = True
    """Skip lines about cookies, terms of use or privacy policies."""


class CJKQualityConfig(StrictModel):
    """Character-based rules for languages written without spaces between words (Chinese, Japanese).

    Gopher's word rules would drop nearly every Chinese article, so documents in these languages are measured in
    characters instead: length, share of CJK characters, common function characters (the stop-word idea), sentence
    ends, bullet and ellipsis lines, and Gopher's repetition rules with characters in place of words. The defaults
    keep >= 95% of real Chinese news (apart from articles that hold their own text twice, which the repetition
    rules drop as they should) and of Wikipedia paragraphs (tests/stages/clean/test_quality.py).
    """

    languages: tuple[str, ...] = ("zh", "ja")
    """`lang` codes that get these rules instead of the Gopher and C4 ones."""
    min_chars: int | None = Field(default=50, ge=0)
    """Fewest non-space characters (a Chinese word is 1.5 characters on average: about 35 words)."""
    max_chars: int | None = Field(default=300_000, ge=0)
    """Most non-space characters."""
    min_cjk_char_ratio: float | None = Field(default=0.15, ge=0, le=1)
    """Least share of non-space characters that are Han, kana or CJK punctuation (bilingual vocabulary lists sit
    near 0.2; pages of code or Latin text labelled Chinese fall below)."""
    min_stop_chars: int | None = Field(default=1, ge=0)
    """Fewest distinct function characters (from `stop_chars` for the document's language) a document must contain."""
    stop_chars: dict[str, str] = {"zh": "的了是在和有不这這也就为為与與对對将將于於", "ja": "のにはをがでとたしても"}
    """Function characters per language (simplified and traditional for Chinese): common in any running text,
    rare in menus, lists and keyword spam."""
    min_sentences: int | None = Field(default=1, ge=0)
    """Fewest sentence ends (`。！？!?` runs, `……`) a document must have."""
    max_bullet_lines_ratio: float | None = Field(default=0.9, ge=0)
    """Most share of lines that start with a bullet (`•` or `-`), as Gopher."""
    max_ellipsis_lines_ratio: float | None = Field(default=0.3, ge=0)
    """Most share of lines that end with an ellipsis, as Gopher."""
    line_rules_min_lines: int = Field(default=3, ge=0)
    """The bullet and ellipsis line rules apply to documents of at least this many lines: Chinese articles are
    often a single line, and a literary `……` at its end does not make it a truncated snippet."""
    dup_line_frac: float | None = Field(default=0.3, ge=0)
    """Most share of lines that repeat an earlier line, as Gopher."""
    dup_para_frac: float | None = Field(default=0.3, ge=0)
    """Most share of paragraphs that repeat an earlier paragraph, as Gopher."""
    dup_line_char_frac: float | None = Field(default=0.2, ge=0)
    """Most share of characters in repeated lines, as Gopher."""
    dup_para_char_frac: float | None = Field(default=0.2, ge=0)
    """Most share of characters in repeated paragraphs, as Gopher."""
    top_n_grams: tuple[tuple[int, float], ...] = ((2, 0.2), (3, 0.18), (4, 0.16))
    """(n, most share of characters covered by the most frequent character n-gram), n among 2, 3, 4."""
    dup_n_grams: tuple[tuple[int, float], ...] = ((5, 0.40), (6, 0.38), (7, 0.36), (8, 0.34), (9, 0.32), (10, 0.30))
    """(n, most share of characters in character n-grams that repeat an earlier one), n among 5 to 10. Higher than
    Gopher's word thresholds: a 5-character n-gram is two or three words, and a news story names its people, places
    and products again and again (real news reaches 0.3 at n = 5); a text that holds itself twice scores ~0.5."""

    @field_validator("top_n_grams")
    @classmethod
    def _top_sizes(cls, v):
        return _check_n_grams(v, TOP_N_GRAM_SIZES, "top_n_grams")

    @field_validator("dup_n_grams")
    @classmethod
    def _dup_sizes(cls, v):
        return _check_n_grams(v, DUP_N_GRAM_SIZES, "dup_n_grams")

    @model_validator(mode="after")
    def _stop_chars_for_every_language(self):
        if self.min_stop_chars:
            missing = [lang for lang in self.languages if not self.stop_chars.get(lang)]
            if missing:
                raise ValueError(f"stop_chars: no function characters for {missing}; add them, or set "
                                 "min_stop_chars to null")
        return self


class QualityConfig(StrictModel):
    """Which quality rule families run, and their thresholds; null turns a family off (its columns are NaN)."""

    gopher_quality: GopherQualityConfig | None = GopherQualityConfig()
    """Gopher's quality rules, on words (every language outside `cjk.languages`)."""
    gopher_repetition: GopherRepetitionConfig | None = GopherRepetitionConfig()
    """Gopher's repetition rules: repeated lines, paragraphs and word n-grams (outside `cjk.languages`)."""
    c4: C4Config | None = C4Config()
    """C4's rules (outside `cjk.languages`); scores and document drops only, no line edits."""
    cjk: CJKQualityConfig | None = CJKQualityConfig()
    """Character-based rules for Chinese and Japanese, in place of the three above; null gives those languages
    the word rules too (which drop nearly all of them)."""


# --------------------------------------------------------------------------------------------------------------
# Columns and reasons
# --------------------------------------------------------------------------------------------------------------

_GOPHER_COLUMNS = (
    "gopher_words", "gopher_mean_word_length", "gopher_hash_ratio", "gopher_ellipsis_ratio",
    "gopher_bullet_line_ratio", "gopher_ellipsis_line_ratio", "gopher_alpha_word_ratio", "gopher_stop_words",
)
_REPETITION_COLUMNS = (
    "rep_dup_para_frac", "rep_dup_para_char_frac", "rep_dup_line_frac", "rep_dup_line_char_frac",
    *(f"rep_top_{n}_gram_char_frac" for n in TOP_N_GRAM_SIZES),
    *(f"rep_dup_{n}_gram_char_frac" for n in DUP_N_GRAM_SIZES),
)
_C4_COLUMNS = ("c4_sentences", "c4_lorem_ipsum_lines", "c4_curly_bracket_lines", "c4_removed_char_frac")
_CJK_COLUMNS = ("cjk_chars", "cjk_char_ratio", "cjk_stop_chars", "cjk_sentences", "cjk_lines")

QUALITY_SCORE_COLUMNS: dict[str, pa.DataType] = {
    name: pa.float64() for name in (*_GOPHER_COLUMNS, *_REPETITION_COLUMNS, *_C4_COLUMNS, *_CJK_COLUMNS)
}
"""Score columns the quality rules add (float64; NaN = not measured). Counts are stored as floats too.

gopher_words: tokens with a non-punctuation character; gopher_mean_word_length: their mean length;
gopher_hash_ratio, gopher_ellipsis_ratio: `#`, ellipses per token; gopher_bullet_line_ratio,
gopher_ellipsis_line_ratio: share of lines starting with a bullet, ending with an ellipsis (also measured on CJK
documents); gopher_alpha_word_ratio: share of tokens with a letter; gopher_stop_words: distinct stop words present.
rep_*: Gopher's repetition fractions; the n-gram ones count words, or characters on CJK documents.
c4_sentences: sentences on the lines C4 keeps; c4_lorem_ipsum_lines, c4_curly_bracket_lines: kept lines with
"lorem ipsum", with `{`; c4_removed_char_frac: share of characters on the lines C4 would remove.
cjk_chars: non-space characters; cjk_char_ratio: share of them that are CJK; cjk_stop_chars: distinct function
characters present; cjk_sentences: sentence ends; cjk_lines: lines.
"""

QUALITY_DROP_REASONS: tuple[str, ...] = (
    # Gopher quality (words) and the CJK equivalents (characters)
    "too_few_words", "too_many_words", "short_average_word", "long_average_word", "too_many_hashes",
    "too_many_ellipses", "too_many_bullet_lines", "too_many_ellipsis_lines", "too_few_alphabetic_words",
    "too_few_stop_words",
    "too_few_chars", "too_many_chars", "too_few_cjk_chars", "too_few_stop_chars",
    # Gopher repetition
    "empty_text", "duplicate_paragraphs", "duplicate_paragraph_chars", "duplicate_lines", "duplicate_line_chars",
    *(f"dominant_{n}_gram" for n in TOP_N_GRAM_SIZES),
    *(f"duplicate_{n}_grams" for n in DUP_N_GRAM_SIZES),
    # C4 (and the CJK sentence rule)
    "lorem_ipsum", "curly_bracket", "too_few_sentences",
)
"""Every reason `quality` may give, each named for the failure. `dominant_<n>_gram`: the most frequent n-gram
covers too many characters; `duplicate_<n>_grams`: too many characters sit in repeated n-grams."""


# --------------------------------------------------------------------------------------------------------------
# Measures
# --------------------------------------------------------------------------------------------------------------

_NAN = float("nan")
_PARAGRAPH_RE = re.compile(r"\n{2,}")
_LINE_RE = re.compile(r"\n+")
_BULLETS = ("•", "-")
_ELLIPSES = ("...", "…")
_P = np.uint64(0x100000001B3)  # multiplier of the rolling n-gram hash (any odd 64-bit constant works)
_DOC_SHIFT = np.uint64(48)  # n-gram keys: the document's index in the chunk above bit 48, 48 bits of hash below
_HASH_SHIFT = np.uint64(64 - 48)
_CHUNK_CHARS = 4_000_000
"""Documents are measured in chunks of about this many characters (bounded memory: a token costs ~80 bytes)."""
_CHUNK_DOCS = 1 << 16  # the document index must fit the 16 bits above _DOC_SHIFT


class _TokenClasses(dict):
    """token -> 1 (has a non-punctuation character: a Gopher "word") | 2 (has a letter); computed on first sight.

    Most tokens recur across documents, so `map(classes.__getitem__, tokens)` stays in C for nearly all of them.
    """

    limit = 200_000  # ~20 MB of cached tokens

    def __missing__(self, token: str) -> int:
        if len(self) >= self.limit:
            self.clear()
        if token.isalpha():
            code = 3
        else:
            code = any(c not in PUNCTUATION_SET for c in token) | (any(c.isalpha() for c in token) << 1)
        self[token] = code
        return code


_token_classes = _TokenClasses()


class _Units:
    """The units (words, or characters) of a chunk of documents, concatenated.

    hashes[i]: 64-bit hash of unit i; ends[i]: characters of the units before i (ends has one more entry);
    doc[i]: the document (index in the chunk) unit i belongs to; start[d], count[d]: document d's first unit and
    number of units.
    """

    def __init__(self, hashes: np.ndarray, lengths: np.ndarray, count: np.ndarray):
        self.hashes = hashes
        self.ends = np.zeros(len(hashes) + 1, dtype=np.int64)
        np.cumsum(lengths, out=self.ends[1:])
        self.count = count
        self.start = np.zeros(len(count), dtype=np.int64)
        np.cumsum(count[:-1], out=self.start[1:])
        self.doc = np.repeat(np.arange(len(count), dtype=np.int64), count)
        self.tag = self.doc.astype(np.uint64) << _DOC_SHIFT
        self.left = np.repeat(self.start + count, count) - np.arange(len(hashes), dtype=np.int64)
        """Units from unit i to the end of its document (i included): the n-gram at i lies inside it iff left >= n."""


def _line_marks(lines: list[str]) -> tuple[float, float]:
    """Share of lines starting with a bullet, and ending with an ellipsis (datatrove's Gopher quality)."""
    if not lines:
        return _NAN, _NAN
    bullets = sum(1 for s in lines if s.lstrip().startswith(_BULLETS))
    ellipses = sum(1 for s in lines if s.rstrip().endswith(_ELLIPSES))
    return bullets / len(lines), ellipses / len(lines)


def _duplicates(parts: list[str]) -> tuple[int, int]:
    """(elements equal to an earlier one, their characters): datatrove's `find_duplicates`."""
    unique = set(parts)
    return len(parts) - len(unique), sum(map(len, parts)) - sum(map(len, unique))


def _line_repetition(text: str) -> tuple[float, float, float, float]:
    """Gopher's paragraph and line repetition fractions (paragraphs split on blank lines, lines on newlines)."""
    if not text:
        return _NAN, _NAN, _NAN, _NAN
    paragraphs = _PARAGRAPH_RE.split(text.strip())
    para_dups, para_chars = _duplicates(paragraphs)
    lines = _LINE_RE.split(text)
    line_dups, line_chars = _duplicates(lines)
    return para_dups / len(paragraphs), para_chars / len(text), line_dups / len(lines), line_chars / len(text)


def _runs(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sort `keys`: (order, start of each run of equal keys in sorted order, run lengths)."""
    order = np.argsort(keys)
    sorted_keys = keys[order]
    starts = np.flatnonzero(np.concatenate(([True], sorted_keys[1:] != sorted_keys[:-1])))
    return order, starts, np.diff(np.append(starts, len(keys)))


def _repeated(keys: np.ndarray) -> np.ndarray:
    """True where the key occurs more than once."""
    order, _, counts = _runs(keys)
    mask = np.empty(len(keys), dtype=bool)
    mask[order] = np.repeat(counts > 1, counts)
    return mask


def _top_ngram(units: _Units, hashes: np.ndarray, n: int, separator: int) -> np.ndarray:
    """Characters of each document's most frequent n-gram times its count (ties: the one seen first, as datatrove's
    `Counter.most_common`); 0 where a document has no n-gram. `hashes[i]` is the n-gram starting at unit i."""
    out = np.zeros(len(units.count))
    pos = np.flatnonzero(units.left[: len(hashes)] >= n)
    if len(pos) == 0:
        return out
    keys = units.tag[pos] | (hashes[pos] >> _HASH_SHIFT)
    order, starts, counts = _runs(keys)
    first = np.minimum.reduceat(pos[order], starts)
    run_doc = units.doc[first]
    doc_starts = np.flatnonzero(np.concatenate(([True], run_doc[1:] != run_doc[:-1])))
    top = np.maximum.reduceat(counts, doc_starts)
    per_run = np.repeat(top, np.diff(np.append(doc_starts, len(starts))))
    best = np.minimum.reduceat(np.where(counts == per_run, first, np.iinfo(np.int64).max), doc_starts)
    chars = units.ends[best + n] - units.ends[best] + separator * (n - 1)
    out[run_doc[doc_starts]] = chars * top
    return out


def _ngram_repetition(
    units: _Units, text_len: np.ndarray, top_ns: Sequence[int], dup_ns: Sequence[int], separator: int,
) -> dict[int, np.ndarray]:
    """Gopher's n-gram repetition fractions over units (words, or characters) for a chunk of documents, by n.

    `separator` is the characters between the units of a top n-gram (1 for words joined by spaces, as datatrove's
    `get_n_grams`; 0 for characters). n-grams are compared by a rolling hash of their unit hashes, tagged with
    their document.

    top n: see `_top_ngram`. dup n: datatrove's `find_all_duplicate` walk: left to right, an n-gram seen before
    adds its characters and the walk jumps n units ahead. Only n-grams that occur twice can be duplicates, and an
    (n+1)-gram can only repeat where the n-grams at its first two positions repeat, so each larger n sorts fewer
    keys and the walk (in Python) visits only repeated n-grams.
    """
    out: dict[int, np.ndarray] = {}
    if not top_ns and not dup_ns:
        return out
    with np.errstate(divide="ignore", invalid="ignore"):
        scale = np.where(text_len > 0, 1.0 / text_len, np.nan)
    h = units.hashes
    hashes = h
    repeated: np.ndarray | None = None  # units whose (n-1)-gram occurs twice or more in its document
    min_dup = min(dup_ns, default=None)
    for n in range(1, max((*top_ns, *dup_ns)) + 1):
        if n > 1:
            hashes = hashes[:-1] * _P + h[n - 1:]
        if n in top_ns:
            out[n] = _top_ngram(units, hashes, n, separator) * scale
        if min_dup is None or n < min_dup:
            continue
        if repeated is None:
            cand = np.arange(len(hashes))
        else:
            nxt = np.searchsorted(repeated, repeated + 1)
            ok = nxt < len(repeated)
            ok[ok] = repeated[nxt[ok]] == repeated[ok] + 1
            cand = repeated[ok]
        cand = cand[units.left[cand] >= n]
        keys = units.tag[cand] | (hashes[cand] >> _HASH_SHIFT)
        mask = _repeated(keys)
        repeated, keys = cand[mask], keys[mask]
        if n in dup_ns:
            out[n] = _walk_duplicates(units, repeated, keys, n) * scale
    return out


def _walk_duplicates(units: _Units, positions: np.ndarray, keys: np.ndarray, n: int) -> np.ndarray:
    """Characters datatrove's `find_all_duplicate` counts per document, visiting only n-grams that occur twice."""
    out = np.zeros(len(units.count))
    if len(positions) == 0:
        return out
    seen: set[int] = set()
    hits: list[int] = []
    resume = 0  # the walk jumps past a duplicate: positions before `resume` are never visited
    for p, k in zip(positions.tolist(), keys.tolist()):  # keys carry the document, so one set serves all
        if p < resume:
            continue
        if k in seen:
            hits.append(p)
            resume = p + n
        else:
            seen.add(k)
    if hits:
        at = np.array(hits, dtype=np.int64)
        np.add.at(out, units.doc[at], units.ends[at + n] - units.ends[at])
    return out


def _word_units(tokens: list[list[str]]) -> tuple[_Units, list[str]]:
    flat = list(chain.from_iterable(tokens))
    hashes = np.fromiter(map(hash, flat), dtype=np.int64, count=len(flat)).view(np.uint64)
    lengths = np.fromiter(map(len, flat), dtype=np.int64, count=len(flat))
    count = np.fromiter(map(len, tokens), dtype=np.int64, count=len(tokens))
    return _Units(hashes, lengths, count), flat


def _char_units(dense: list[str]) -> _Units:
    """Characters as units, hashed by a multiply-xorshift mix of the code point."""
    chars = np.frombuffer("".join(dense).encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    h = (chars.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)) * np.uint64(0xBF58476D1CE4E5B9)
    h ^= h >> np.uint64(31)
    h *= np.uint64(0x94D049BB133111EB)
    count = np.fromiter(map(len, dense), dtype=np.int64, count=len(dense))
    return _Units(h, np.ones(len(chars), dtype=np.int64), count)


def _gopher_word_scores(
    units: _Units, flat: list[str], texts: list[str], cfg: GopherQualityConfig
) -> dict[str, np.ndarray]:
    """The Gopher quality word measures for a chunk (the line measures come from `_line_marks`)."""
    d = len(texts)
    codes = np.fromiter(map(_token_classes.__getitem__, flat), dtype=np.uint8, count=len(flat))
    lengths = np.diff(units.ends)
    is_word = (codes & 1).astype(bool)
    words = np.bincount(units.doc[is_word], minlength=d).astype(np.float64)
    word_chars = np.bincount(units.doc[is_word], weights=lengths[is_word], minlength=d)
    alpha = np.bincount(units.doc[(codes & 2).astype(bool)], minlength=d)
    n_tokens = units.count.astype(np.float64)
    stops = list(dict.fromkeys(cfg.stop_words))
    stop_hashes = np.array([hash(w) for w in stops], dtype=np.int64).view(np.uint64)
    order = np.argsort(stop_hashes)
    at = np.searchsorted(stop_hashes[order], units.hashes).clip(0, max(len(stops) - 1, 0))
    found = np.flatnonzero(stop_hashes[order][at] == units.hashes) if stops else np.zeros(0, dtype=np.int64)
    pairs = np.unique(units.doc[found] * max(len(stops), 1) + at[found])
    stop_words = np.bincount(pairs // max(len(stops), 1), minlength=d).astype(np.float64)
    hashes_count = np.fromiter((t.count("#") for t in texts), dtype=np.float64, count=d)
    ellipses = np.fromiter((t.count("...") + t.count("…") for t in texts), dtype=np.float64, count=d)
    with np.errstate(divide="ignore", invalid="ignore"):
        return {
            "gopher_words": words,
            "gopher_mean_word_length": np.where(words > 0, word_chars / words, np.nan),
            "gopher_hash_ratio": np.where(n_tokens > 0, hashes_count / n_tokens, np.nan),
            "gopher_ellipsis_ratio": np.where(n_tokens > 0, ellipses / n_tokens, np.nan),
            "gopher_alpha_word_ratio": np.where(n_tokens > 0, alpha / n_tokens, np.nan),
            "gopher_stop_words": stop_words,
        }


def _c4_scores(text: str, lines: list[str], cfg: C4Config) -> tuple[float, ...]:
    """One pass over the lines, as datatrove's `C4QualityFilter.filter`, without its early exits."""
    if not text:
        return 0.0, 0.0, 0.0, _NAN
    cited = cfg.remove_citations and "[" in text
    # Document-wide substring checks first: most documents need no per-line lowercase at all. Citation removal can
    # join a phrase across a `[1]`, so the check runs on the text without them.
    lowered = (CITATION_REGEX.sub("", text) if cited else text).lower()
    want_lorem = cfg.filter_lorem_ipsum and "lorem ipsum" in lowered
    want_js = cfg.filter_javascript and "javascript" in lowered
    want_policy = cfg.filter_policy and any(p in lowered for p in POLICY_SUBSTRINGS)
    want_curly = cfg.filter_curly_bracket and "{" in text
    need_lower = want_lorem or want_js or want_policy
    max_word, min_words = cfg.max_word_length, cfg.min_words_per_line
    terminal = cfg.filter_no_terminal_punct
    sentences = lorem = curly = kept_chars = 0
    for raw in lines:
        line = raw.strip()
        words: list[str] | None = None
        if max_word is not None and len(line) > max_word:
            words = line.split()
            if words and max(map(len, words)) > max_word:
                continue
        if cited and "[" in line:
            line = CITATION_REGEX.sub("", line)
        if terminal and (not line.endswith(END_PUNCTUATION) or line.endswith(ELLIPSIS)):
            continue
        if min_words:
            if words is None:
                words = raw.split()  # words before citation removal, as datatrove
            if len(words) < min_words:
                continue
        if need_lower:
            line_l = line.lower()
            if want_lorem and "lorem ipsum" in line_l:
                lorem += 1  # datatrove drops the document here
                continue
            if want_js and "javascript" in line_l:
                continue
        if want_curly and "{" in line:
            curly += 1  # datatrove drops the document here
            continue
        if need_lower and want_policy and any(p in line_l for p in POLICY_SUBSTRINGS):
            continue
        sentences += count_sentences(line)
        kept_chars += len(line)
    return float(sentences), float(lorem), float(curly), 1.0 - kept_chars / len(text)


# Han (with extensions and compatibility ideographs), kana, CJK symbols and punctuation, full-width forms.
_CJK_RANGES = ((0x3000, 0x303F), (0x3040, 0x30FF), (0x31F0, 0x31FF), (0x3400, 0x4DBF), (0x4E00, 0x9FFF),
               (0xF900, 0xFAFF), (0xFF00, 0xFFEF), (0x20000, 0x3134F))
_CJK_CLASS = "".join(f"{re.escape(chr(a))}-{re.escape(chr(b))}" for a, b in _CJK_RANGES)
_CJK_RE = re.compile(f"[{_CJK_CLASS}]")
_CJK_SENTENCE_END_RE = re.compile(r"[。！？!?｡]+|…{2,}|\.{3,}")


def _profile(langs: Sequence[str], config: QualityConfig) -> np.ndarray:
    """True for documents measured in characters (their language is in `config.cjk.languages`)."""
    if config.cjk is None:
        return np.zeros(len(langs), dtype=bool)
    cjk = set(config.cjk.languages)
    return np.fromiter((lang in cjk for lang in langs), dtype=bool, count=len(langs))


def _chunks(texts: Sequence[str], rows: np.ndarray) -> Iterable[np.ndarray]:
    """`rows` in consecutive groups of about _CHUNK_CHARS characters (at most _CHUNK_DOCS documents)."""
    group: list[int] = []
    size = 0
    for i in rows.tolist():
        group.append(i)
        size += len(texts[i])
        if size >= _CHUNK_CHARS or len(group) >= _CHUNK_DOCS:
            yield np.array(group, dtype=np.int64)
            group, size = [], 0
    if group:
        yield np.array(group, dtype=np.int64)


def _put_ngrams(cols: dict[str, np.ndarray], rows: np.ndarray, ngrams: dict[int, np.ndarray]) -> None:
    for k, v in ngrams.items():
        cols[f"rep_{'top' if k in TOP_N_GRAM_SIZES else 'dup'}_{k}_gram_char_frac"][rows] = v


def _measure_words(cols: dict[str, np.ndarray], texts: list[str], rows: np.ndarray, config: QualityConfig) -> None:
    gq, gr, c4 = config.gopher_quality, config.gopher_repetition, config.c4
    if gq or gr:
        tokens = [split_words(t) for t in texts]
        units, flat = _word_units(tokens)
        del tokens
        text_len = np.fromiter(map(len, texts), dtype=np.float64, count=len(texts))
    if gq:
        for name, values in _gopher_word_scores(units, flat, texts, gq).items():
            cols[name][rows] = values
    if gr:
        _put_ngrams(cols, rows, _ngram_repetition(units, text_len, [k for k, _ in gr.top_n_grams],
                                                  [k for k, _ in gr.dup_n_grams], separator=1))
    for i, text in zip(rows.tolist(), texts):
        lines = text.splitlines() if (gq or c4) else []
        if gq:
            cols["gopher_bullet_line_ratio"][i], cols["gopher_ellipsis_line_ratio"][i] = _line_marks(lines)
        if gr:
            for name, v in zip(_REPETITION_COLUMNS[:4], _line_repetition(text)):
                cols[name][i] = v
        if c4:
            for name, v in zip(_C4_COLUMNS, _c4_scores(text, lines, c4)):
                cols[name][i] = v


def _measure_cjk(cols: dict[str, np.ndarray], texts: list[str], langs: list[str], rows: np.ndarray,
                 cfg: CJKQualityConfig) -> None:
    dense = ["".join(t.split()) for t in texts]
    units = _char_units(dense)
    text_len = np.fromiter(map(len, texts), dtype=np.float64, count=len(texts))
    _put_ngrams(cols, rows, _ngram_repetition(units, text_len, [k for k, _ in cfg.top_n_grams],
                                              [k for k, _ in cfg.dup_n_grams], separator=0))
    stop_sets = {lang: set(cfg.stop_chars.get(lang, "")) for lang in set(langs)}
    for i, text, d, lang in zip(rows.tolist(), texts, dense, langs):
        n = len(d)
        cols["cjk_chars"][i] = n
        cols["cjk_char_ratio"][i] = len(_CJK_RE.findall(d)) / n if n else _NAN
        cols["cjk_stop_chars"][i] = sum(1 for c in stop_sets[lang] if c in text)
        cols["cjk_sentences"][i] = len(_CJK_SENTENCE_END_RE.findall(text))
        lines = text.splitlines()
        cols["cjk_lines"][i] = len(lines)
        cols["gopher_bullet_line_ratio"][i], cols["gopher_ellipsis_line_ratio"][i] = _line_marks(lines)
        for name, v in zip(_REPETITION_COLUMNS[:4], _line_repetition(text)):
            cols[name][i] = v


def quality_scores(texts: Sequence[str], langs: Sequence[str], config: QualityConfig) -> dict[str, np.ndarray]:
    """Every score column (`QUALITY_SCORE_COLUMNS`) for every document, independent of the thresholds."""
    if len(texts) != len(langs):
        raise ValueError(f"{len(texts)} texts but {len(langs)} languages")
    cols = {name: np.full(len(texts), np.nan) for name in QUALITY_SCORE_COLUMNS}
    is_cjk = _profile(langs, config)
    if config.gopher_quality or config.gopher_repetition or config.c4:
        for rows in _chunks(texts, np.flatnonzero(~is_cjk)):
            _measure_words(cols, [texts[i] for i in rows], rows, config)
    if config.cjk is not None:
        for rows in _chunks(texts, np.flatnonzero(is_cjk)):
            _measure_cjk(cols, [texts[i] for i in rows], [langs[i] for i in rows], rows, config.cjk)
    return cols


def _rules_words(
    config: QualityConfig, s: dict[str, np.ndarray], stop_rule: np.ndarray
) -> list[tuple[np.ndarray, str]]:
    """(failing mask, reason) for the word profile, in datatrove's order (quality, repetition, C4)."""
    rules: list[tuple[np.ndarray, str]] = []
    with np.errstate(invalid="ignore"):  # NaN compares False: a measure not taken never fails its rule
        if (g := config.gopher_quality) is not None:
            words, mean = s["gopher_words"], s["gopher_mean_word_length"]
            for value, mask, reason in (
                (g.min_doc_words, lambda v: words < v, "too_few_words"),
                (g.max_doc_words, lambda v: words > v, "too_many_words"),
                (g.min_avg_word_length, lambda v: mean < v, "short_average_word"),
                (g.max_avg_word_length, lambda v: mean > v, "long_average_word"),
                (g.max_symbol_word_ratio, lambda v: s["gopher_hash_ratio"] > v, "too_many_hashes"),
                (g.max_symbol_word_ratio, lambda v: s["gopher_ellipsis_ratio"] > v, "too_many_ellipses"),
                (g.max_bullet_lines_ratio, lambda v: s["gopher_bullet_line_ratio"] > v, "too_many_bullet_lines"),
                (g.max_ellipsis_lines_ratio, lambda v: s["gopher_ellipsis_line_ratio"] > v, "too_many_ellipsis_lines"),
                (g.max_non_alpha_words_ratio, lambda v: s["gopher_alpha_word_ratio"] < v, "too_few_alphabetic_words"),
                (g.min_stop_words, lambda v: stop_rule & (s["gopher_stop_words"] < v), "too_few_stop_words"),
            ):
                if value is not None:
                    rules.append((mask(value), reason))
        if (r := config.gopher_repetition) is not None:
            rules += _repetition_rules(r, s)
        if (c := config.c4) is not None:
            if c.filter_lorem_ipsum:
                rules.append((s["c4_lorem_ipsum_lines"] > 0, "lorem_ipsum"))
            if c.filter_curly_bracket:
                rules.append((s["c4_curly_bracket_lines"] > 0, "curly_bracket"))
            if c.min_num_sentences is not None:
                rules.append((s["c4_sentences"] < c.min_num_sentences, "too_few_sentences"))
    return rules


def _repetition_rules(
    r: GopherRepetitionConfig | CJKQualityConfig, s: dict[str, np.ndarray]
) -> list[tuple[np.ndarray, str]]:
    rules = [(s["rep_dup_para_frac"] != s["rep_dup_para_frac"], "empty_text")]  # NaN: datatrove's "empty"
    for value, column, reason in (
        (r.dup_para_frac, "rep_dup_para_frac", "duplicate_paragraphs"),
        (r.dup_para_char_frac, "rep_dup_para_char_frac", "duplicate_paragraph_chars"),
        (r.dup_line_frac, "rep_dup_line_frac", "duplicate_lines"),
        (r.dup_line_char_frac, "rep_dup_line_char_frac", "duplicate_line_chars"),
    ):
        if value is not None:
            rules.append((s[column] > value, reason))
    rules += [(s[f"rep_top_{n}_gram_char_frac"] > v, f"dominant_{n}_gram") for n, v in r.top_n_grams]
    rules += [(s[f"rep_dup_{n}_gram_char_frac"] > v, f"duplicate_{n}_grams") for n, v in r.dup_n_grams]
    return rules


def _rules_cjk(cfg: CJKQualityConfig, s: dict[str, np.ndarray]) -> list[tuple[np.ndarray, str]]:
    rules: list[tuple[np.ndarray, str]] = []
    with np.errstate(invalid="ignore"):
        many_lines = s["cjk_lines"] >= cfg.line_rules_min_lines
        for value, mask, reason in (
            (cfg.min_chars, lambda v: s["cjk_chars"] < v, "too_few_chars"),
            (cfg.max_chars, lambda v: s["cjk_chars"] > v, "too_many_chars"),
            (cfg.min_cjk_char_ratio, lambda v: s["cjk_char_ratio"] < v, "too_few_cjk_chars"),
            (cfg.max_bullet_lines_ratio, lambda v: many_lines & (s["gopher_bullet_line_ratio"] > v),
             "too_many_bullet_lines"),
            (cfg.max_ellipsis_lines_ratio, lambda v: many_lines & (s["gopher_ellipsis_line_ratio"] > v),
             "too_many_ellipsis_lines"),
            (cfg.min_stop_chars, lambda v: s["cjk_stop_chars"] < v, "too_few_stop_chars"),
        ):
            if value is not None:
                rules.append((mask(value), reason))
        rules += _repetition_rules(cfg, s)
        if cfg.min_sentences is not None:
            rules.append((s["cjk_sentences"] < cfg.min_sentences, "too_few_sentences"))
    return rules


def quality_reasons(scores: dict[str, np.ndarray], langs: Sequence[str], config: QualityConfig) -> list[str | None]:
    """The first rule each document fails, from its scores and the config's thresholds (None = kept)."""
    n = len(langs)
    reasons = np.full(n, None, dtype=object)
    is_cjk = _profile(langs, config)
    g = config.gopher_quality
    if g is not None and g.stop_word_languages is not None:
        allowed = set(g.stop_word_languages)
        stop_rule = np.fromiter((lang in allowed for lang in langs), dtype=bool, count=n)
    else:
        stop_rule = np.ones(n, dtype=bool)
    profiles = [(~is_cjk, _rules_words(config, scores, stop_rule))]
    if config.cjk is not None:
        profiles.append((is_cjk, _rules_cjk(config.cjk, scores)))
    for members, rules in profiles:
        for failing, reason in reversed(rules):  # the earliest rule is written last, so it wins
            reasons[members & failing] = reason
    return reasons.tolist()


def quality(
    texts: Sequence[str], langs: Sequence[str], config: QualityConfig
) -> tuple[dict[str, np.ndarray], list[str | None]]:
    """Scores per column for every document, and the first failing reason per document (None = kept)."""
    scores = quality_scores(texts, langs, config)
    return scores, quality_reasons(scores, langs, config)


# --------------------------------------------------------------------------------------------------------------
# datatrove's own filters at the same thresholds (the reference for tests and benchmarks)
# --------------------------------------------------------------------------------------------------------------


def datatrove_filters(config: QualityConfig, tokenizer: WordTokenizer | None = None) -> list:
    """datatrove's GopherQuality, GopherRepetition and C4Quality filters configured as `config` (word rules only).

    `tokenizer` defaults to `RegexWordTokenizer()`: datatrove's English default is spaCy, which is not installed
    here, so the reference shares our words and sentences and the comparison tests the rule implementations.
    Differences by design: `stop_word_languages` does not exist in datatrove (give English text), and datatrove's
    C4 filter edits `doc.text` (put it last so the others see the original text, as here).
    """
    from datatrove.pipeline.filters.c4_filters import C4QualityFilter
    from datatrove.pipeline.filters.gopher_quality_filter import GopherQualityFilter
    from datatrove.pipeline.filters.gopher_repetition_filter import GopherRepetitionFilter

    tok = tokenizer if tokenizer is not None else RegexWordTokenizer()
    out = []
    if (g := config.gopher_quality) is not None:
        params = g.model_dump(exclude={"stop_words", "stop_word_languages"})
        out.append(GopherQualityFilter(**params, stop_words=list(g.stop_words), language=tok))
    if (r := config.gopher_repetition) is not None:
        out.append(GopherRepetitionFilter(**r.model_dump(), language=tok))
    if (c := config.c4) is not None:
        params = c.model_dump()
        for key in ("min_num_sentences", "min_words_per_line", "max_word_length"):
            params[key] = -1 if params[key] is None else params[key]
        out.append(C4QualityFilter(**params, split_paragraph=True, language=tok))
    return out
