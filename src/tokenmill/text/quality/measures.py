"""Quality measures: every score column for every document, apart from any threshold (STYLE 4).

Column values are float64; NaN means "not measured": the rule family is off, the document's script profile does
not use that measure (`gopher_*` word measures and `c4_*` on Chinese, `cjk_*` on the rest), or the measure is
undefined (mean word length of a text without words).
"""

from __future__ import annotations

import re
from typing import Iterable, Sequence

import numpy as np
import pyarrow as pa
from datatrove.pipeline.filters.c4_filters import CITATION_REGEX, ELLIPSIS, END_PUNCTUATION, POLICY_SUBSTRINGS

from tokenmill.text.quality.config import (
    DUP_N_GRAM_SIZES,
    TOP_N_GRAM_SIZES,
    C4Config,
    CJKQualityConfig,
    GopherQualityConfig,
    QualityConfig,
)
from tokenmill.text.quality.lines import ChunkLines, c4_lines, c4_simple, line_marks
from tokenmill.text.quality.ngrams import Units, char_units, ngram_repetition, token_hashes
from tokenmill.text.quality.vocab import ALPHA, WORD, Vocabulary, text_units
from tokenmill.text.quality.words import count_line_sentences

GOPHER_COLUMNS = (
    "gopher_words", "gopher_mean_word_length", "gopher_hash_ratio", "gopher_ellipsis_ratio",
    "gopher_bullet_line_ratio", "gopher_ellipsis_line_ratio", "gopher_alpha_word_ratio", "gopher_stop_words",
)
REPETITION_COLUMNS = (
    "rep_dup_para_frac", "rep_dup_para_char_frac", "rep_dup_line_frac", "rep_dup_line_char_frac",
    *(f"rep_top_{n}_gram_char_frac" for n in TOP_N_GRAM_SIZES),
    *(f"rep_dup_{n}_gram_char_frac" for n in DUP_N_GRAM_SIZES),
)
C4_COLUMNS = ("c4_sentences", "c4_lorem_ipsum_lines", "c4_curly_bracket_lines", "c4_removed_char_frac")
CJK_COLUMNS = ("cjk_chars", "cjk_char_ratio", "cjk_stop_chars", "cjk_sentences", "cjk_lines")

QUALITY_SCORE_COLUMNS: dict[str, pa.DataType] = {
    name: pa.float64() for name in (*GOPHER_COLUMNS, *REPETITION_COLUMNS, *C4_COLUMNS, *CJK_COLUMNS)
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

_NAN = float("nan")
_PARAGRAPH_RE = re.compile(r"\n{2,}")
_BULLETS = ("•", "-")
_ELLIPSES = ("...", "…")
_CHUNK_CHARS = 4_000_000
"""Documents are measured in chunks of about this many characters (bounded memory: a token costs ~80 bytes)."""
_CHUNK_DOCS = 1 << 16  # the document index must fit the 16 bits above ngrams.DOC_SHIFT


_vocabulary = Vocabulary()
"""This process's words, each hashed, measured and classed once (see `vocab.py`)."""


def _line_marks(lines: list[str], text: str) -> tuple[float, float]:
    """Share of lines starting with a bullet, and ending with an ellipsis (datatrove's Gopher quality); `lines` are
    `text`'s, so a mark missing from the text is on none of them. The per-document form of `lines.line_marks`, for a
    chunk Arrow refuses (a lone surrogate) and the CJK documents."""
    if not lines:
        return _NAN, _NAN
    bullets = sum(1 for s in lines if s.lstrip().startswith(_BULLETS)) if any(map(text.__contains__, _BULLETS)) else 0
    ellipses = sum(1 for s in lines if s.rstrip().endswith(_ELLIPSES)) if any(map(text.__contains__, _ELLIPSES)) else 0
    return bullets / len(lines), ellipses / len(lines)


def _duplicates(parts: list[str]) -> tuple[int, int]:
    """(elements equal to an earlier one, their characters): datatrove's `find_duplicates`."""
    unique = set(parts)
    if len(unique) == len(parts):
        return 0, 0
    return len(parts) - len(unique), sum(map(len, parts)) - sum(map(len, unique))


def _split_lines(text: str) -> list[str]:
    """`re.split(r"\\n+", text)` by `str.split`: the empty lines go, but a first and a last one (as `re.split` keeps
    them when the text starts or ends with a line break)."""
    parts = text.split("\n")
    if "\n\n" in text:
        parts = [parts[0], *filter(None, parts[1:-1]), parts[-1]]
    return parts


def _line_repetition(text: str) -> tuple[float, float, float, float]:
    """Gopher's paragraph and line repetition fractions (paragraphs split on blank lines, lines on newlines)."""
    if not text:
        return _NAN, _NAN, _NAN, _NAN
    stripped = text.strip()
    if "\n\n\n" in stripped:
        paragraphs = _PARAGRAPH_RE.split(stripped)
    else:  # every line-break run is of one or two: `str.split` cuts where the regex would, without its scan
        paragraphs = stripped.split("\n\n")
    para_dups, para_chars = _duplicates(paragraphs)
    lines = _split_lines(text)
    line_dups, line_chars = _duplicates(lines)
    return para_dups / len(paragraphs), para_chars / len(text), line_dups / len(lines), line_chars / len(text)


def _per_doc(values: np.ndarray, units: Units) -> np.ndarray:
    """Sums of integer `values` (one per unit) over each document's units, as float64: units are stored document by
    document, so a sum is the difference of two running totals (no boolean selection, no bincount)."""
    totals = np.zeros(len(values) + 1, dtype=np.int64)
    np.cumsum(values, out=totals[1:])
    return (totals[units.start + units.count] - totals[units.start]).astype(np.float64)


_STOP_BINS = 1 << 22
"""Above this many (document, stop word) bins, the distinct stop words of each document are counted by a sort."""


def _stop_word_counts(units: Units, ids: np.ndarray, vocab: Vocabulary, stop_words: Sequence[str]) -> np.ndarray:
    """Distinct stop words in each document (float64), words told by their hash, as datatrove's set of words."""
    d = len(units.count)
    stops = list(dict.fromkeys(stop_words))
    if not stops:
        return np.zeros(d)
    width = len(stops)
    stop_hashes = np.sort(token_hashes(stops))
    # Each distinct word is looked up among the stop words once: its stop word's slot, or -1; units take it by id.
    slot = np.searchsorted(stop_hashes, vocab.hashes).clip(0, width - 1)
    slot = np.where(stop_hashes[slot] == vocab.hashes, slot, -1)[ids]
    found = np.flatnonzero(slot >= 0)
    pairs = units.doc[found] * width + slot[found]
    if d * width <= _STOP_BINS:  # which (document, stop word) pairs occur: a bincount instead of a sort
        present = np.bincount(pairs, minlength=d * width).reshape(d, width) > 0
        return present.sum(axis=1).astype(np.float64)
    return np.bincount(np.unique(pairs) // width, minlength=d).astype(np.float64)


def _gopher_word_scores(
    units: Units, ids: np.ndarray, vocab: Vocabulary, texts: list[str], cfg: GopherQualityConfig
) -> dict[str, np.ndarray]:
    """The Gopher quality word measures for a chunk (the line measures come from `_line_marks`); `ids` are the
    units' words in `vocab`."""
    d = len(texts)
    # Per distinct word: is it a word, its length if so, has it a letter; units take them by id and sum per document.
    is_word = ((vocab.classes & WORD) != 0).astype(np.int64)
    words = _per_doc(is_word[ids], units)
    word_chars = _per_doc((vocab.lengths * is_word)[ids], units)
    alpha = _per_doc(((vocab.classes & ALPHA) != 0).astype(np.int64)[ids], units)
    n_tokens = units.count.astype(np.float64)
    stop_words = _stop_word_counts(units, ids, vocab, cfg.stop_words)
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
    """One pass over the lines, as datatrove's `C4QualityFilter.filter`, without its early exits: the per-document
    form, for the documents (citation marks, NUL) and chunks (a lone surrogate) `lines.c4_lines` leaves to it."""
    if not text:
        return 0.0, 0.0, 0.0, _NAN
    cited = cfg.remove_citations and "[" in text
    # Document-wide substring checks first: most documents need no per-line lowercase at all. Citation removal can
    # join a phrase across a `[1]`, so the check runs on the text without them.
    lowered = (CITATION_REGEX.sub("", text) if cited else text).lower()
    want_lorem = cfg.filter_lorem_ipsum and "lorem ipsum" in lowered
    want_js = cfg.filter_javascript and "javascript" in lowered
    want_policy = cfg.filter_policy and any(map(lowered.__contains__, POLICY_SUBSTRINGS))
    want_curly = cfg.filter_curly_bracket and "{" in text
    need_lower = want_lorem or want_js or want_policy
    max_word, min_words = cfg.max_word_length, cfg.min_words_per_line
    terminal = cfg.filter_no_terminal_punct
    lorem = curly = kept_chars = 0
    kept: list[str] = []
    # An empty line fails the terminal punctuation and the word count rules: `filter` passes over them in C.
    for raw in filter(None, lines) if terminal or min_words else lines:
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
            if words is None:  # words before citation removal, as datatrove; enough of them to count to min_words
                words = raw.split(None, min_words - 1)
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
        if need_lower and want_policy and any(map(line_l.__contains__, POLICY_SUBSTRINGS)):
            continue
        kept.append(line)
        kept_chars += len(line)
    return float(count_line_sentences(kept)), float(lorem), float(curly), 1.0 - kept_chars / len(text)


# Han (with extensions and compatibility ideographs), kana, CJK symbols and punctuation, full-width forms.
_CJK_RANGES = ((0x3000, 0x303F), (0x3040, 0x30FF), (0x31F0, 0x31FF), (0x3400, 0x4DBF), (0x4E00, 0x9FFF),
               (0xF900, 0xFAFF), (0xFF00, 0xFFEF), (0x20000, 0x3134F))
_CJK_SENTENCE_END_RE = re.compile(r"[。！？!?｡]+|…{2,}|\.{3,}")


def _cjk_counts(dense: list[str], n_chars: np.ndarray) -> np.ndarray:
    """CJK characters (`_CJK_RANGES`) in each text of `dense`, whose lengths are `n_chars`: one pass over their code
    points for the whole chunk."""
    chars = np.frombuffer("".join(dense).encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    cjk = np.zeros(len(chars), dtype=bool)
    for a, b in _CJK_RANGES:
        cjk |= (chars >= a) & (chars <= b)
    before = np.zeros(len(chars) + 1, dtype=np.int64)  # CJK characters before each position
    np.cumsum(cjk, out=before[1:])
    ends = np.zeros(len(n_chars) + 1, dtype=np.int64)
    np.cumsum(n_chars, out=ends[1:])
    return np.diff(before[ends]).astype(np.float64)


def cjk_profile(langs: Sequence[str], config: QualityConfig) -> np.ndarray:
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


def _lengths(texts: list[str]) -> np.ndarray:
    return np.fromiter(map(len, texts), dtype=np.float64, count=len(texts))


def _measure_words(cols: dict[str, np.ndarray], texts: list[str], rows: np.ndarray, config: QualityConfig) -> None:
    gq, gr, c4 = config.gopher_quality, config.gopher_repetition, config.c4
    if gq or gr:
        units, ids = text_units(texts, _vocabulary)
        text_len = _lengths(texts)
    if gq:
        for name, values in _gopher_word_scores(units, ids, _vocabulary, texts, gq).items():
            cols[name][rows] = values
    if gr:
        _put_ngrams(cols, rows, ngram_repetition(units, text_len, [k for k, _ in gr.top_n_grams],
                                                  [k for k, _ in gr.dup_n_grams], separator=1))
    all_lines = [text.splitlines() for text in texts] if (gq or c4) else []
    chunk = ChunkLines.of(all_lines) if all_lines else None  # None: Arrow refused a text, every line in Python
    if gq and chunk is not None:
        cols["gopher_bullet_line_ratio"][rows], cols["gopher_ellipsis_line_ratio"][rows] = line_marks(chunk)
    by_arrow: dict[int, tuple] = {}
    if c4 and chunk is not None:
        by_arrow = c4_lines(chunk, texts, c4_simple(texts, c4), text_len if (gq or gr) else _lengths(texts), c4)
    for j, (i, text) in enumerate(zip(rows.tolist(), texts)):
        if gq and chunk is None:
            cols["gopher_bullet_line_ratio"][i], cols["gopher_ellipsis_line_ratio"][i] = _line_marks(all_lines[j],
                                                                                                     text)
        if gr:
            for name, v in zip(REPETITION_COLUMNS[:4], _line_repetition(text)):
                cols[name][i] = v
        if c4:
            scores = by_arrow.get(j)
            for name, v in zip(C4_COLUMNS, _c4_scores(text, all_lines[j], c4) if scores is None else scores):
                cols[name][i] = v


def _measure_cjk(cols: dict[str, np.ndarray], texts: list[str], langs: list[str], rows: np.ndarray,
                 cfg: CJKQualityConfig) -> None:
    dense = ["".join(t.split()) for t in texts]
    units = char_units(dense)
    text_len = np.fromiter(map(len, texts), dtype=np.float64, count=len(texts))
    _put_ngrams(cols, rows, ngram_repetition(units, text_len, [k for k, _ in cfg.top_n_grams],
                                              [k for k, _ in cfg.dup_n_grams], separator=0))
    cols["cjk_chars"][rows] = n_chars = units.count
    with np.errstate(divide="ignore", invalid="ignore"):
        cols["cjk_char_ratio"][rows] = np.where(n_chars > 0, _cjk_counts(dense, n_chars) / n_chars, np.nan)
    stop_sets = {lang: set(cfg.stop_chars.get(lang, "")) for lang in set(langs)}
    for i, text, lang in zip(rows.tolist(), texts, langs):
        cols["cjk_stop_chars"][i] = sum(1 for c in stop_sets[lang] if c in text)
        cols["cjk_sentences"][i] = len(_CJK_SENTENCE_END_RE.findall(text))
        lines = text.splitlines()
        cols["cjk_lines"][i] = len(lines)
        cols["gopher_bullet_line_ratio"][i], cols["gopher_ellipsis_line_ratio"][i] = _line_marks(lines, text)
        for name, v in zip(REPETITION_COLUMNS[:4], _line_repetition(text)):
            cols[name][i] = v


def quality_scores(texts: Sequence[str], langs: Sequence[str], config: QualityConfig) -> dict[str, np.ndarray]:
    """Every score column (`QUALITY_SCORE_COLUMNS`) for every document, independent of the thresholds."""
    if len(texts) != len(langs):
        raise ValueError(f"{len(texts)} texts but {len(langs)} languages")
    cols = {name: np.full(len(texts), np.nan) for name in QUALITY_SCORE_COLUMNS}
    is_cjk = cjk_profile(langs, config)
    if config.gopher_quality or config.gopher_repetition or config.c4:
        for rows in _chunks(texts, np.flatnonzero(~is_cjk)):
            _measure_words(cols, [texts[i] for i in rows], rows, config)
    if config.cjk is not None:
        for rows in _chunks(texts, np.flatnonzero(is_cjk)):
            _measure_cjk(cols, [texts[i] for i in rows], [langs[i] for i in rows], rows, config.cjk)
    return cols
