"""The quality rules' config: which families run (Gopher quality, Gopher repetition, C4, CJK) and their thresholds."""

from __future__ import annotations

from datatrove.pipeline.filters.gopher_quality_filter import STOP_WORDS as GOPHER_STOP_WORDS
from pydantic import Field, field_validator, model_validator

from tokenmill.config_base import StrictModel

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


class _RepetitionRules(StrictModel):
    """Gopher's repetition rules on lines, paragraphs and n-grams, as `GopherRepetitionConfig` (word n-grams) and
    `CJKQualityConfig` (character n-grams, their own defaults) both use them; None turns a rule off."""

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


class GopherRepetitionConfig(_RepetitionRules):
    """Gopher's repetition rules (Rae et al. 2021, table A1), datatrove's names and defaults; None turns a rule off."""


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


class CJKQualityConfig(_RepetitionRules):
    """Character-based rules for languages written without spaces between words (Chinese, Japanese).

    Gopher's word rules would drop nearly every Chinese article, so documents in these languages are measured in
    characters instead: length, share of CJK characters, common function characters (the stop-word idea), sentence
    ends, bullet and ellipsis lines, and Gopher's repetition rules with characters in place of words. The defaults
    keep >= 95% of real Chinese news (apart from articles that hold their own text twice, which the repetition
    rules drop as they should) and of Wikipedia paragraphs (tests/text/test_quality.py).
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
    top_n_grams: tuple[tuple[int, float], ...] = ((2, 0.2), (3, 0.18), (4, 0.16))
    """(n, most share of characters covered by the most frequent character n-gram), n among 2, 3, 4."""
    dup_n_grams: tuple[tuple[int, float], ...] = ((5, 0.40), (6, 0.38), (7, 0.36), (8, 0.34), (9, 0.32), (10, 0.30))
    """(n, most share of characters in character n-grams that repeat an earlier one), n among 5 to 10. Higher than
    Gopher's word thresholds: a 5-character n-gram is two or three words, and a news story names its people, places
    and products again and again (real news reaches 0.3 at n = 5); a text that holds itself twice scores ~0.5."""

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
