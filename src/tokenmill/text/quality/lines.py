"""Line measures of a whole chunk at once: Gopher's bullet and ellipsis lines and C4's kept lines, by Arrow over every
line of every document, with the values of the per-document forms (`measures._line_marks`, `measures._c4_scores`).

The rules are datatrove's (`GopherQualityFilter`'s line ratios, `C4QualityFilter.filter`'s line loop, datatrove
0.10); the per-document forms walk each line in Python (a million lines per 130 MB of web text). Here a chunk's lines
(`str.splitlines`, concatenated) are one Arrow array and each line rule one compute call over all of them, as
`vocab.py` cuts pieces: `utf8_trim_whitespace` is `str.strip` (its whitespace is `str.isspace`'s, code point by code
point, as a test checks), `utf8_length` counts code points as `len`, `utf8_split_whitespace` with `max_splits` counts
the first words as `str.split(None, k)`. The few things Arrow cannot do alike stay in Python: a document with
citation marks to remove (`[`), a phrase to look for in lowercase (`str.lower` is not Arrow's), or a NUL character
(`words.count_line_sentences` joins lines with it) takes the per-document form whole; a line longer than
`max_word_length` has its words measured by `str.split`; a chunk Arrow refuses (a lone surrogate) takes the
per-document forms. Ratios are divisions of exact integers in float64, as Python's `int / int`: the same bits.
"""

from __future__ import annotations

import re
from itertools import chain
from typing import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from datatrove.pipeline.filters.c4_filters import ELLIPSIS, END_PUNCTUATION, POLICY_SUBSTRINGS

from tokenmill.text.quality.config import C4Config
from tokenmill.text.quality.words import _LINE_JOIN, SENTENCE_END_RE

_BULLETS = ("•", "-")
if not all(re.fullmatch("[a-z ]+", p) for p in ("lorem ipsum", "javascript", *POLICY_SUBSTRINGS)):
    raise ImportError("C4's phrases are no longer plain lowercase words: `_content_rules` puts them in a regex as "
                      f"they are ({POLICY_SUBSTRINGS})")
_ELLIPSES = ("...", "…")


class ChunkLines:
    """Every line (`str.splitlines`) of a chunk's texts in one Arrow array, with each line's document."""

    def __init__(self, lines: list[list[str]], flat: list[str], array: pa.Array):
        self.lines = lines
        self.flat = flat
        self.array = array
        self.count = np.fromiter(map(len, lines), dtype=np.int64, count=len(lines))
        self.doc = np.repeat(np.arange(len(lines), dtype=np.int64), self.count)

    @classmethod
    def of(cls, lines: list[list[str]]) -> "ChunkLines | None":
        """The chunk's lines, or None where Arrow cannot hold them (a lone surrogate has no UTF-8)."""
        flat = list(chain.from_iterable(lines))
        try:
            array = pa.array(flat, pa.string())
        except (pa.ArrowInvalid, UnicodeEncodeError):
            return None
        return cls(lines, flat, array)

    def per_doc(self, mask: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
        """Lines (or their `weights`) where `mask` holds, summed per document (float64)."""
        w = None if weights is None else weights[mask]
        return np.bincount(self.doc[mask], weights=w, minlength=len(self.lines)).astype(np.float64)


def _any_of(fn, array: pa.Array, patterns: Sequence[str]) -> np.ndarray:
    out = np.zeros(len(array), dtype=bool)
    for p in patterns:
        out |= fn(array, p).to_numpy(zero_copy_only=False)
    return out


def line_marks(chunk: ChunkLines) -> tuple[np.ndarray, np.ndarray]:
    """Per document, the share of lines starting with a bullet and of lines ending with an ellipsis (after
    whitespace), NaN for a document without lines: `measures._line_marks` for every document at once."""
    bullets = _any_of(pc.starts_with, pc.utf8_ltrim_whitespace(chunk.array), _BULLETS)
    ellipses = _any_of(pc.ends_with, pc.utf8_rtrim_whitespace(chunk.array), _ELLIPSES)
    n = chunk.count.astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return (np.where(n > 0, chunk.per_doc(bullets) / n, np.nan),
                np.where(n > 0, chunk.per_doc(ellipses) / n, np.nan))


def c4_simple(texts: Sequence[str], cfg: C4Config) -> np.ndarray:
    """True for the documents whose C4 scores `c4_lines` gives: not empty, no citation mark to remove (`[`, whose
    removal `measures._c4_scores` does by regex, line by line), no NUL."""
    cited = cfg.remove_citations
    return np.fromiter((bool(t) and _LINE_JOIN not in t and not (cited and "[" in t) for t in texts), dtype=bool,
                       count=len(texts))


def _line_rules(chunk: ChunkLines, stripped: pa.Array, length: np.ndarray, ok: np.ndarray, cfg: C4Config) -> None:
    """Clear `ok` for the lines C4's shape rules skip (empty, a word too long, no terminal punctuation, too few
    words), in `_c4_scores`'s order."""
    max_word, min_words, terminal = cfg.max_word_length, cfg.min_words_per_line, cfg.filter_no_terminal_punct
    if terminal or min_words:  # an empty line fails both rules: `_c4_scores` skips it
        ok &= pc.utf8_length(chunk.array).to_numpy(zero_copy_only=False) > 0
    if max_word is not None:
        for i in np.flatnonzero(ok & (length > max_word)).tolist():
            words = chunk.flat[i].split()
            if words and max(map(len, words)) > max_word:
                ok[i] = False
    if terminal:
        ok &= _any_of(pc.ends_with, stripped, END_PUNCTUATION) & ~pc.ends_with(stripped, ELLIPSIS).to_numpy(
            zero_copy_only=False)
    if min_words:
        words = pc.list_value_length(pc.utf8_split_whitespace(stripped, max_splits=min_words - 1))
        ok &= np.where(length > 0, words.to_numpy(zero_copy_only=False), 0) >= min_words


def _content_rules(chunk: ChunkLines, texts: Sequence[str], stripped: pa.Array, ok: np.ndarray,
                   cfg: C4Config) -> tuple[np.ndarray, np.ndarray]:
    """Clear `ok` for the lines C4's content rules skip, in `_c4_scores`'s order (lorem ipsum, javascript, curly
    bracket, policy); return the lorem ipsum lines and the curly bracket lines among them.

    A line that may hold a phrase once lowercased (RE2 finds it case-blind in an ASCII line, where `str.lower` is
    ASCII's; any other line may, since `str.lower` maps some other characters to ASCII: `K`, Kelvin's sign, to `k`)
    takes `_c4_scores`'s steps in Python; the others only the curly bracket rule, for texts holding a `{`."""
    lorem_lines, curly_lines = np.zeros(len(ok), dtype=bool), np.zeros(len(ok), dtype=bool)
    phrases = (*(("lorem ipsum",) if cfg.filter_lorem_ipsum else ()),
               *(("javascript",) if cfg.filter_javascript else ()), *(POLICY_SUBSTRINGS if cfg.filter_policy else ()))
    may = np.zeros(len(ok), dtype=bool)
    if phrases:
        at = np.flatnonzero(ok)  # the lines the earlier rules kept: only those are looked at
        some = stripped.take(pa.array(at))
        may[at] = (pc.match_substring_regex(some, "|".join(phrases), ignore_case=True).to_numpy(zero_copy_only=False)
                   | ~pc.string_is_ascii(some).to_numpy(zero_copy_only=False))
        for i in np.flatnonzero(may).tolist():
            line = chunk.flat[i].strip()
            low = line.lower()
            if cfg.filter_lorem_ipsum and "lorem ipsum" in low:
                lorem_lines[i], ok[i] = True, False
            elif cfg.filter_javascript and "javascript" in low:
                ok[i] = False
            elif cfg.filter_curly_bracket and "{" in line:
                curly_lines[i], ok[i] = True, False
            elif cfg.filter_policy and any(map(low.__contains__, POLICY_SUBSTRINGS)):
                ok[i] = False
    if cfg.filter_curly_bracket:
        braced = np.fromiter(("{" in t for t in texts), dtype=bool, count=len(texts))[chunk.doc]
        for i in np.flatnonzero(ok & ~may & braced).tolist():  # a line of a text with `{`
            if "{" in chunk.flat[i]:
                curly_lines[i], ok[i] = True, False
    return lorem_lines, curly_lines


def c4_lines(chunk: ChunkLines, texts: Sequence[str], simple: np.ndarray, text_len: np.ndarray,
             cfg: C4Config) -> dict[int, tuple]:
    """`measures._c4_scores` (sentences, lorem ipsum lines, curly bracket lines, removed character share) of each
    document where `simple` holds (see `c4_simple`), by its index.

    The line rules in `_c4_scores`'s order, each on the lines the earlier ones kept. Its document-wide lowercase
    checks are left out: a line is part of its text, so a phrase in a line's lowercase is in the text's."""
    ok = simple[chunk.doc]
    stripped = pc.utf8_trim_whitespace(chunk.array)
    length = pc.utf8_length(stripped).to_numpy(zero_copy_only=False).astype(np.int64)
    _line_rules(chunk, stripped, length, ok, cfg)
    lorem_lines, curly_lines = _content_rules(chunk, texts, stripped, ok, cfg)
    lorem, curly = chunk.per_doc(lorem_lines), chunk.per_doc(curly_lines)
    kept_chars = chunk.per_doc(ok, length.astype(np.float64))
    kept = np.bincount(chunk.doc[ok], minlength=len(chunk.lines))
    offsets = np.zeros(len(kept) + 1, dtype=np.int32)
    np.cumsum(kept, out=offsets[1:])
    joined = pc.binary_join(pa.ListArray.from_arrays(pa.array(offsets), stripped.filter(pa.array(ok))), _LINE_JOIN)
    with np.errstate(divide="ignore", invalid="ignore"):
        removed = 1.0 - kept_chars / text_len
    out = {}
    findall = SENTENCE_END_RE.findall
    docs = np.flatnonzero(simple)
    for i, j in zip(docs.tolist(), joined.take(pa.array(docs)).to_pylist()):
        n = int(kept[i])  # kept lines are stripped and hold no NUL: `count_line_sentences`'s one-pass form
        out[i] = (float(n + len(findall(j)) if n else 0), float(lorem[i]), float(curly[i]), float(removed[i]))
    return out
