"""Sub-document dedup, the pure algorithm: spans, their normalised hash, corpus-wide counts, removal.

A document is cut into spans (`lines`: split on newlines; `paragraphs`: split on blank lines). A span's hash is
xxh3-64 of its normalised form: surrounding whitespace stripped and every run of whitespace (Unicode included)
made one space; case, punctuation and digits are kept (a date or a price in a footer makes it another span, as in
Dolma; datatrove's `simplify_content` lower-cases and strips punctuation too: more removals, more false matches).
Spans whose normalised form is shorter than `min_chars` characters are neither counted nor removed: lengths are in
characters, so a Chinese line of 20 characters with no space in it is a span as an English line of 20 is.

Counting is over DISTINCT documents: a line repeated ten times in one page counts once (repetition inside one
document is the Gopher repetition filters' business). Each span hash has a count and a first document, the
smallest document reference (stable shard index << 32 | row, shards ordered by source then name), so the result
is the same whatever the worker count or the order tasks finish in. A span held by more than `max_docs`
documents is removed from every one of them but the first, which keeps every occurrence of it.

What was taken from the field:
* Dolma (`dolma dedupe --dedupe.paragraphs`): paragraphs are newline-separated spans hashed exactly; a duplicate
  span is marked as an attribute span and removed later by the mixer; a document with no text left goes. Dolma
  keeps the first occurrence *in processing order* through a shared Bloom filter (false positives, an order that
  depends on the process count) and removes from the second occurrence on (max_docs = 1). Here: exact 64-bit
  hashes, counts per hash instead of a Bloom filter, a first document by a stable order, and a threshold.
* datatrove (`SentenceDedupSignature` / `SentenceFindDedups` / `SentenceDedupFilter`, FineWeb's line filters):
  three distributed steps (signatures per task written sorted and bucketed by hash; per bucket, every occurrence
  but the first in (file, doc) order marked; per task, marked spans removed and a document under `min_doc_words`
  dropped). The same three steps here (`subdoc` stage: spans, count, apply), with the threshold of repetitions
  FineWeb's boilerplate line filters use instead of "any second occurrence", and lengths in characters, not
  words, so that Chinese counts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import xxhash

from tokenmill.documents import text_hashes_at

__all__ = ["Unit", "SEPARATORS", "split_spans", "normalize", "span_hash", "DocSpans", "doc_spans", "count_spans",
           "Counted", "Removal", "remove_spans", "remove_spans_batch", "span_texts", "dedup_texts"]

Unit = Literal["lines", "paragraphs"]

SEPARATORS: dict[str, re.Pattern[str]] = {
    "lines": re.compile(r"\n"),
    "paragraphs": re.compile(r"\n[^\S\n]*\n\s*"),
}
"""What separates two spans: a newline; or a blank line (whitespace only), with the blank lines and indentation
after it. A `\\r` before a newline stays in the span and normalisation strips it."""


def split_spans(text: str, unit: Unit) -> tuple[list[str], list[str]]:
    """(spans, separators): `spans[0] + separators[0] + spans[1] + ... + spans[-1] == text`."""
    if unit == "lines":  # str.split cuts where the one-character regex does, with no regex pass for the separators
        pieces = text.split("\n")
        return pieces, ["\n"] * (len(pieces) - 1)
    pieces = SEPARATORS[unit].split(text)
    seps = [m.group(0) for m in SEPARATORS[unit].finditer(text)]
    return pieces, seps


def normalize(span: str) -> str:
    """Stripped, with every run of whitespace (any Unicode space, tabs, `\\r`) one ASCII space; nothing else.

    `str.split()` cuts on exactly the characters `\\s` matches (`str.isspace`, `_WHITESPACE`), three times as fast as
    a regex substitution on long lines."""
    return " ".join(span.split())


def span_hash(normalized: str) -> int:
    """xxh3-64 of the normalised span's UTF-8 bytes."""
    return xxhash.xxh3_64_intdigest(normalized.encode("utf-8"))


@dataclass(frozen=True)
class DocSpans:
    """The distinct span hashes of a set of documents: one row per (document, hash), documents in input order."""

    row: np.ndarray
    """int64: the document's row in the input."""
    hash: np.ndarray
    """uint64: the span's hash."""


_WHITESPACE = ("\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007"
               "\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000")
"""The 29 characters Python's `\\s` and `str.isspace` match (a test checks it); spelled out for Arrow's RE2, whose
`\\s` is ASCII only, so that both engines cut and normalise spans alike."""
_RE2_SPACE = "".join(f"\\x{{{ord(c):x}}}" for c in _WHITESPACE)
_RE2_SPACE_NOT_NL = "".join(f"\\x{{{ord(c):x}}}" for c in _WHITESPACE if c != "\n")
_RE2_SEPARATORS = {"lines": None, "paragraphs": f"\\n[{_RE2_SPACE_NOT_NL}]*\\n[{_RE2_SPACE}]*"}
_RE2_SPACE_NOT_SPACE = "".join(f"\\x{{{ord(c):x}}}" for c in _WHITESPACE if c != " ")
_RE2_RUNS = f"[{_RE2_SPACE}]{{2,}}|[{_RE2_SPACE_NOT_SPACE}]"
"""The whitespace runs normalisation changes: two characters or more, or one that is not a space. Each is the whole
run (leftmost, greedy), so replacing these by a space is replacing every run; a lone space, the common run, is no
match, and RE2 replaces a few runs instead of every space (six times as fast)."""
_RE2_SPACE_NOT_NL_SPACE = "".join(f"\\x{{{ord(c):x}}}" for c in _WHITESPACE if c not in "\n ")
_RE2_LINE_RUNS = f"[{_RE2_SPACE_NOT_NL}]{{2,}}|[{_RE2_SPACE_NOT_NL_SPACE}]"
"""`_RE2_RUNS` without the newline: in a whole text its matches are those of `_RE2_RUNS` in each of its lines (no
match crosses a newline, none adds one), so a text is normalised once, before it is cut into lines."""


def _normalized_lines(column: pa.Array) -> pa.ListArray:
    """Each text's lines (cut at "\\n") with their whitespace runs made one space, not yet trimmed: as
    `replace_substring_regex(_RE2_RUNS)` of `split_pattern(column, "\\n")`'s lines. RE2 first finds the texts with a run
    to replace (about one in fifteen) and rewrites only those: a match scan costs half a replacing one."""
    changed = pc.match_substring_regex(column, _RE2_LINE_RUNS)
    if pc.any(changed).as_py():
        column = pc.replace_with_mask(column, changed,
                                      pc.replace_substring_regex(column.filter(changed), _RE2_LINE_RUNS, " "))
    return pc.split_pattern(column, "\n")


def doc_spans(texts: Iterable[str] | pa.Array | pa.ChunkedArray, unit: Unit, min_chars: int,
              skip: Iterable[bool] | None = None) -> DocSpans:
    """Each document's distinct span hashes (spans of at least `min_chars` normalised characters), rows ascending
    and hashes ascending within a row; documents with `skip` true (code kept whole) give none.

    Vectorised in Arrow (split, normalise, measure), the hash from the buffers: the same spans and hashes as
    `split_spans`, `normalize` and `span_hash` one span at a time (a test compares them)."""
    column = texts if isinstance(texts, (pa.Array, pa.ChunkedArray)) else pa.array(list(texts), pa.large_string())
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks() if column.num_chunks else pa.array([], pa.large_string())
    column = column.cast(pa.large_string())
    rows = np.arange(len(column), dtype=np.int64)
    if skip is not None:
        keep = ~np.fromiter(skip, bool, len(column)) if len(column) else np.zeros(0, bool)
        if not keep.all():  # most shards have no code document: no copy of their text
            column, rows = column.filter(pa.array(keep)), rows[keep]
    if not len(column):
        return DocSpans(np.zeros(0, np.int64), np.zeros(0, np.uint64))
    pattern = _RE2_SEPARATORS[unit]
    if pattern is None:  # lines: whitespace runs replaced in the whole texts, then cut
        split = _normalized_lines(column)
        spans = pc.list_flatten(split)
    else:
        split = pc.split_pattern_regex(column, pattern)
        spans = pc.replace_substring_regex(pc.list_flatten(split), _RE2_RUNS, " ")
    parent = rows[pc.list_parent_indices(split).to_numpy(zero_copy_only=False)]
    spans = pc.utf8_trim(spans, " ")
    long = np.flatnonzero(pc.greater_equal(pc.utf8_length(spans), min_chars).to_numpy(zero_copy_only=False))
    parent, hashes = parent[long], text_hashes_at(spans, long)
    order = np.lexsort((hashes, parent))
    parent, hashes = parent[order], hashes[order]
    first = np.r_[True, (parent[1:] != parent[:-1]) | (hashes[1:] != hashes[:-1])] if parent.size else \
        np.zeros(0, bool)
    return DocSpans(parent[first].astype(np.int64), hashes[first].astype(np.uint64))


@dataclass(frozen=True)
class Counted:
    """Per distinct span hash (ascending): the number of distinct documents holding it and the first of them."""

    hash: np.ndarray
    count: np.ndarray
    first: np.ndarray

    def repeated(self, max_docs: int) -> "Counted":
        """The hashes held by more than `max_docs` documents: those removed from all their documents but the first."""
        keep = self.count > max_docs
        return Counted(self.hash[keep], self.count[keep], self.first[keep])


def count_spans(hashes: np.ndarray, docs: np.ndarray) -> Counted:
    """Count (hash, document reference) rows, each pair given once (as `doc_spans` emits them per document)."""
    hashes = np.asarray(hashes, np.uint64)
    docs = np.asarray(docs, np.uint64)
    if not hashes.size:
        empty = np.zeros(0, np.uint64)
        return Counted(empty, np.zeros(0, np.int64), empty)
    order = np.lexsort((docs, hashes))
    h, d = hashes[order], docs[order]
    starts = np.flatnonzero(np.r_[True, h[1:] != h[:-1]])
    counts = np.diff(np.r_[starts, h.size]).astype(np.int64)
    return Counted(h[starts], counts, d[starts])


@dataclass(frozen=True)
class Removal:
    """One document after removal: its text, what went, and the removed spans' normalised text by hash."""

    text: str
    spans_removed: int
    chars_removed: int
    removed: dict[int, str]


def remove_spans(text: str, unit: Unit, min_chars: int, remove: set[int] | frozenset[int]) -> Removal:
    """The text without every span (of at least `min_chars` normalised characters) whose hash is in `remove`; a
    kept span keeps the separator before it (the first kept span none), so nothing removed gives the text back."""
    spans, seps = split_spans(text, unit)
    out: list[str] = []
    removed: dict[int, str] = {}
    n_removed = chars = 0
    for i, span in enumerate(spans):
        norm = normalize(span) if len(span) >= min_chars else ""  # normalising never lengthens a span
        if len(norm) >= min_chars:
            h = span_hash(norm)
            if h in remove:
                removed.setdefault(h, norm)
                n_removed += 1
                chars += len(span)
                continue
        if out:
            out.append(seps[i - 1])
        out.append(span)
    if not n_removed:
        return Removal(text, 0, 0, {})
    return Removal("".join(out), n_removed, chars, removed)


def remove_spans_batch(texts: list[str], unit: Unit, min_chars: int, removes: list[set[int]],
                       column: pa.Array | None = None) -> list[Removal]:
    """`remove_spans` of each text with its set of hashes. Lines are normalised and hashed in Arrow for all the texts
    at once, as `doc_spans` does (Python then only compares hashes and joins the kept lines); paragraphs, and a batch
    Arrow cannot hold (a lone surrogate), go one text at a time. `column`, when given, is `texts` already in Arrow
    (string or large_string, no nulls): the same texts, not converted again."""
    if unit != "lines" or not texts:
        return [remove_spans(t, unit, min_chars, r) for t, r in zip(texts, removes)]
    try:
        split = _normalized_lines(pa.array(texts, pa.large_string()) if column is None else column)
    except (pa.ArrowInvalid, UnicodeEncodeError):
        return [remove_spans(t, unit, min_chars, r) for t, r in zip(texts, removes)]
    norm = pc.utf8_trim(pc.list_flatten(split), " ")
    long_mask = pc.greater_equal(pc.utf8_length(norm), min_chars).to_numpy(zero_copy_only=False)
    long = long_mask.tolist()
    # Only the lines counted are hashed (most lines are short or empty); a short line's hash is never looked at.
    full = np.zeros(len(norm), np.uint64)
    at = np.flatnonzero(long_mask)
    full[at] = text_hashes_at(norm, at)
    hashes = full.tolist()
    bounds = (np.asarray(split.offsets) - split.offsets[0].as_py()).tolist()
    return [_removed_lines(text, bounds[i], bounds[i + 1], long, hashes, remove, min_chars)
            for i, (text, remove) in enumerate(zip(texts, removes))]


def _removed_lines(text: str, first: int, end: int, long: list[bool], hashes: list[int],
                   remove: set[int] | frozenset[int], min_chars: int) -> Removal:
    """`remove_spans(text, "lines", ...)` with each line's hash given: line k's at `hashes[first + k]`, counted when
    `long[first + k]` (Arrow's lines `first:end`; should they ever not be Python's, the text goes the old way)."""
    lines = text.split("\n")
    if len(lines) != end - first:
        return remove_spans(text, "lines", min_chars, remove)
    out: list[str] = []
    removed: dict[int, str] = {}
    n_removed = chars = 0
    for k, line in enumerate(lines, first):
        if long[k] and hashes[k] in remove:
            removed.setdefault(hashes[k], normalize(line))
            n_removed += 1
            chars += len(line)
        else:
            out.append(line)
    if not n_removed:
        return Removal(text, 0, 0, {})
    return Removal("\n".join(out), n_removed, chars, removed)


def span_texts(text: str, unit: Unit, min_chars: int, hashes: set[int] | frozenset[int]) -> dict[int, str]:
    """The normalised text of each span of `text` whose hash is in `hashes` (spans under `min_chars` ignored)."""
    found: dict[int, str] = {}
    for span in split_spans(text, unit)[0]:
        if len(span) >= min_chars:
            norm = normalize(span)
            h = span_hash(norm) if len(norm) >= min_chars else None
            if h in hashes:
                found.setdefault(h, norm)
    return found


def dedup_texts(texts: list[str], unit: Unit, *, min_chars: int, max_docs: int, min_doc_chars: int,
                skip: list[bool] | None = None) -> tuple[list[str], list[bool]]:
    """The whole algorithm in one process over texts in their stable order (the reference the stage's three
    phases must equal): each text after removal, and whether it is left too short (only texts that lost spans)."""
    found = doc_spans(texts, unit, min_chars, skip)
    counted = count_spans(found.hash, found.row.astype(np.uint64)).repeated(max_docs)
    first = dict(zip(counted.hash.tolist(), counted.first.tolist()))
    remove: dict[int, set[int]] = {}
    for row, h in zip(found.row.tolist(), found.hash.tolist()):
        if h in first and first[h] != row:
            remove.setdefault(row, set()).add(h)
    out, short = list(texts), [False] * len(texts)
    for row, hashes in remove.items():
        result = remove_spans(texts[row], unit, min_chars, hashes)
        out[row] = result.text
        short[row] = len(result.text.strip()) < min_doc_chars
    return out, short
