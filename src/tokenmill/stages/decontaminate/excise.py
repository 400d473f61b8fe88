"""Cutting matched evaluation n-grams out of a training document, as GPT-3 did (Brown et al. 2020, appendix C).

Each matched span is removed together with `margin` characters on either side; overlapping or touching removals
merge. The document falls apart into the pieces between removals; pieces shorter than `min_piece` characters are
discarded, and a document left in more than `max_pieces` pieces is considered contaminated and dropped whole.
"""

from __future__ import annotations

from collections.abc import Iterable


def removal_intervals(length: int, spans: Iterable[tuple[int, int]], margin: int) -> list[tuple[int, int]]:
    """Sorted, disjoint, non-touching [start, end) intervals to remove: each span widened by `margin`, clipped to
    [0, length], overlapping or adjacent ones merged. Empty spans (end <= start) still remove their margin."""
    widened = sorted((max(0, s - margin), min(length, max(s, e) + margin)) for s, e in spans)
    merged: list[tuple[int, int]] = []
    for s, e in widened:
        if s >= e:
            continue
        if merged and s <= merged[-1][1]:
            if e > merged[-1][1]:
                merged[-1] = (merged[-1][0], e)
        else:
            merged.append((s, e))
    return merged


def excise(text: str, spans: list[tuple[int, int]], *, margin: int = 200, min_piece: int = 200,
           max_pieces: int = 10) -> tuple[list[str] | None, int]:
    """Remove each span of `text` with `margin` characters either side; return (kept pieces, removed_chars).

    Pieces are the stretches of `text` between removals, in order and unchanged; those shorter than `min_piece`
    characters are discarded. removed_chars is how many characters of `text` are not in the kept pieces (the
    removals plus the discarded short pieces). With no spans the text comes back whole: ([text], 0). When more
    than `max_pieces` pieces are kept the result is (None, len(text)): the caller drops the document. The stage
    joins the kept pieces with "\\n\\n"; an empty list means nothing survived.
    """
    if margin < 0 or min_piece < 0 or max_pieces < 0:
        raise ValueError("margin, min_piece and max_pieces must be >= 0")
    removals = removal_intervals(len(text), spans, margin)
    if not removals:
        return [text], 0
    pieces: list[str] = []
    cursor = 0
    for s, e in removals:
        if s - cursor >= min_piece and s > cursor:
            pieces.append(text[cursor:s])
        cursor = e
    if len(text) - cursor >= min_piece and len(text) > cursor:
        pieces.append(text[cursor:])
    if len(pieces) > max_pieces:
        return None, len(text)
    return pieces, len(text) - sum(map(len, pieces))
