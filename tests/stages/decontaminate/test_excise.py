"""GPT-3-style excision of matched spans."""

from __future__ import annotations

import pytest

from tokenmill.stages.decontaminate.excise import excise, removal_intervals


def _text(n: int) -> str:
    return "".join(chr(ord("a") + i % 26) for i in range(n))


def test_no_spans_returns_text_whole():
    assert excise("short", []) == (["short"], 0)


def test_margins_removed_and_rest_intact():
    text = _text(2000)
    pieces, removed = excise(text, [(1000, 1050)], margin=200, min_piece=200)
    assert pieces == [text[:800], text[1250:]]
    assert removed == 450


def test_margins_clip_at_edges():
    text = _text(1000)
    pieces, removed = excise(text, [(50, 60), (950, 990)], margin=100, min_piece=10)
    assert pieces == [text[160:850]]
    assert removed == 1000 - 690


def test_overlapping_removals_merge():
    text = _text(3000)
    # removals [700, 1150) and [1100, 1600) overlap: one removal, two pieces
    pieces, removed = excise(text, [(900, 950), (1300, 1400)], margin=200, min_piece=200)
    assert pieces == [text[:700], text[1600:]]
    assert removed == 900
    assert removal_intervals(3000, [(1300, 1400), (900, 950)], 200) == [(700, 1600)]
    # touching removals merge too
    assert removal_intervals(100, [(10, 20), (30, 40)], 5) == [(5, 45)]
    assert removal_intervals(100, [(10, 20), (31, 40)], 5) == [(5, 25), (26, 45)]


def test_short_pieces_discarded():
    text = _text(2000)
    # gap between removals [300, 700) and [850, 1250) is 150 chars < min_piece
    pieces, removed = excise(text, [(500, 500), (1050, 1050)], margin=200, min_piece=200)
    assert pieces == [text[:300], text[1250:]]
    assert removed == 2000 - 300 - 750
    pieces, _ = excise(text, [(500, 500), (1050, 1050)], margin=200, min_piece=150)
    assert pieces == [text[:300], text[700:850], text[1250:]]


def test_everything_removed():
    text = _text(500)
    assert excise(text, [(200, 300)], margin=200, min_piece=200) == ([], 500)


def test_max_pieces_drops_document():
    text = _text(10_000)
    spans = [(i, i + 10) for i in range(500, 10_000, 1000)]  # 10 removals -> 11 pieces of 580/590 chars
    assert excise(text, spans, margin=200, max_pieces=10) == (None, 10_000)
    pieces, removed = excise(text, spans, margin=200, max_pieces=11)
    assert len(pieces) == 11 and removed == 10 * 410
    expected = [(0, 300)] + [(i + 210, i + 1000 - 200) for i in range(500, 9500, 1000)] + [(9710, 10_000)]
    assert pieces == [text[a:b] for a, b in expected]
    # discarded short pieces do not count towards max_pieces: the 290-char tail goes, 10 pieces remain
    pieces, removed = excise(text, spans, margin=200, min_piece=300, max_pieces=10)
    assert pieces == [text[a:b] for a, b in expected[:-1]]
    assert removed == 10 * 410 + 290


def test_invalid_arguments():
    with pytest.raises(ValueError):
        excise("abc", [(0, 1)], margin=-1)

