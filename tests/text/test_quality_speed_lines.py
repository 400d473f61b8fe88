"""The chunk-wide line measures (`quality/lines.py`) and the grouped sentence regex give the values of the forms they
replace, bit for bit: each old form is copied here as the reference (as it stood at 95de848), and run on real text
(Common Crawl, Pile, Reddit, Chinese news) and on hostile inputs."""

from __future__ import annotations

import json
import random
import re

import numpy as np
import pytest
from datatrove.pipeline.filters.c4_filters import CITATION_REGEX, ELLIPSIS, END_PUNCTUATION, POLICY_SUBSTRINGS
from datatrove.utils.text import TERMINAL_PUNCTUATION

from tests.conftest import SHARED_DATA
from tests.text.test_quality import english_web, thucnews
from tokenmill.text.quality import C4Config, QualityConfig, quality_scores
from tokenmill.text.quality.words import SENTENCE_END_RE

# ---- the forms replaced, as they were --------------------------------------------------------------------------

_TERMINAL = "".join(re.escape(c) for c in sorted(TERMINAL_PUNCTUATION))
_TERMINAL_BMP = "".join(re.escape(c) for c in sorted(TERMINAL_PUNCTUATION) if ord(c) < 0x10000)
_ABBREVIATIONS = (r"\b[A-Z]", r"\bMr", r"\bMrs", r"\bMs", r"\bDr", r"\bSt", r"\bvs", r"\be\.g", r"\bi\.e", r"\betc")
OLD_SENTENCE_END_RE = re.compile(
    rf"[{_TERMINAL_BMP}\U00010000-\U0010FFFF](?<=[{_TERMINAL}])"
    + "".join(rf"(?<!{a}(?s:.))" for a in _ABBREVIATIONS)
    + rf"[{_TERMINAL}]*[\"'”’»)\]]*(?=\s+\S)"
)


def old_count_line_sentences(lines: list[str]) -> int:
    if not lines:
        return 0
    joined = "\x00".join(lines)
    if joined.count("\x00") != len(lines) - 1 or any(line[-1:].isspace() for line in lines):
        return sum(1 + len(OLD_SENTENCE_END_RE.findall(line)) for line in lines)
    return len(lines) + len(OLD_SENTENCE_END_RE.findall(joined))


def old_line_marks(lines: list[str], text: str) -> tuple[float, float]:
    if not lines:
        return float("nan"), float("nan")
    bullets = sum(1 for s in lines if s.lstrip().startswith(("•", "-"))) if any(map(text.__contains__, ("•", "-"))) \
        else 0
    ellipses = sum(1 for s in lines if s.rstrip().endswith(("...", "…"))) if any(map(text.__contains__, ("...", "…"))) \
        else 0
    return bullets / len(lines), ellipses / len(lines)


def old_c4_scores(text: str, lines: list[str], cfg: C4Config) -> tuple[float, ...]:
    if not text:
        return 0.0, 0.0, 0.0, float("nan")
    cited = cfg.remove_citations and "[" in text
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
            if words is None:
                words = raw.split(None, min_words - 1)
            if len(words) < min_words:
                continue
        if need_lower:
            line_l = line.lower()
            if want_lorem and "lorem ipsum" in line_l:
                lorem += 1
                continue
            if want_js and "javascript" in line_l:
                continue
        if want_curly and "{" in line:
            curly += 1
            continue
        if need_lower and want_policy and any(map(line_l.__contains__, POLICY_SUBSTRINGS)):
            continue
        kept.append(line)
        kept_chars += len(line)
    return float(old_count_line_sentences(kept)), float(lorem), float(curly), 1.0 - kept_chars / len(text)


# ---- inputs ----------------------------------------------------------------------------------------------------

HOSTILE = [
    "", " ", "\n", "\n\n\n", "\r\n\r\n", "\t \u3000\xa0\u2028", "x" * 5000, ("word " * 3000) + ".",
    "a" * 1001 + " b c.\n" + "short line one two.\n" + "b" * 999 + " c d.", "one two three.\r\nfour five six.\r\n",
    "one\u2003two\u2009three four.\u2028Five six seven.\u2029 eight nine ten.\x85eleven twelve thirteen.",
    "中文没有空格的句子。另一句话！\n第三句话？", "Lorem Ipsum dolor sit amet.\nSecond line is fine here.",
    "We use cookies on this site.\nPlease read the Terms of Use now.\nThe rest is fine text.",
    "Enable JavaScript now please.\nThis line stays in the text.", "The \u212aelvin sign: our coo\u212aie policy here.",
    "\u0130stanbul uses cook\u0130es here.\nJavaScr\u0130pt is off for now.", "{code} here is fine.\nA { brace line.",
    "Text with [1] citation here.\nAnother [edit] line ends here [2]", "NUL \x00 inside a line here.\nOther one here.",
    "Mr. Smith went. Dr. Who came! e.g. this. U.S. is big. etc. and more.\nSt. Louis vs. Mrs. Jones i.e. them.",
    "It ends like this...\nOr like this…\nOr not at all", "- a\n• b\n  - c\n\t• d\nplain", "\x1c\x1d\x1e\x85 separators.",
    "   leading and trailing space.   \n\t tabbed line here too. \t", "ALL CAPS JAVASCRIPT LINE HERE.",
    "lorem ipsum\nLOREM IPSUM DOLOR SIT.\nlorem  ipsum two spaces here.", "one two\n\n\nthree four five six.",
    "Quote ends \"here.\"\nParen ends (here.)\nSingle 'here.'", "\U0001F600 emoji line here. \U00011047 astral end.",
]
SURROGATE = "bad \udc80 piece of text.\nA second line of it here."

CONFIGS = [
    C4Config(),
    C4Config(filter_no_terminal_punct=False, min_words_per_line=None),  # empty lines reach the kept list
    C4Config(max_word_length=8, min_words_per_line=1, remove_citations=False),
    C4Config(max_word_length=None, min_words_per_line=5, filter_policy=False, filter_curly_bracket=False),
    C4Config(filter_lorem_ipsum=False, filter_javascript=False, filter_policy=False, min_words_per_line=0),
]


@pytest.fixture(scope="module")
def real() -> list[str]:
    """Common Crawl and Pile pages, Reddit comments, and Chinese news (measured as words: no spaces at all)."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real-data samples not found at {SHARED_DATA} (they sit beside the repository in CI)")
    shared_data = SHARED_DATA
    with open(shared_data / "reddit" / "pushshift_test_comments.ndjson", encoding="utf-8") as f:
        reddit = [json.loads(line)["body"] for line in f if line.strip()]
    texts = english_web(shared_data) + reddit + thucnews(shared_data)[:300]
    assert len(texts) == 1697 + 27 + 300
    return texts


def _bits(values) -> list[int]:
    return np.asarray(values, dtype=np.float64).view(np.uint64).tolist()


def _check(texts: list[str], c4: C4Config) -> None:
    config = QualityConfig(gopher_repetition=None, cjk=None, c4=c4)
    got = quality_scores(texts, ["en"] * len(texts), config)
    lines = [t.splitlines() for t in texts]
    want_c4 = np.array([old_c4_scores(t, ls, c4) for t, ls in zip(texts, lines)]).reshape(len(texts), 4)
    want_marks = np.array([old_line_marks(ls, t) for t, ls in zip(texts, lines)]).reshape(len(texts), 2)
    for k, name in enumerate(("c4_sentences", "c4_lorem_ipsum_lines", "c4_curly_bracket_lines", "c4_removed_char_frac")):
        assert _bits(got[name]) == _bits(want_c4[:, k]), name
    for k, name in enumerate(("gopher_bullet_line_ratio", "gopher_ellipsis_line_ratio")):
        assert _bits(got[name]) == _bits(want_marks[:, k]), name


@pytest.mark.parametrize("c4", CONFIGS, ids=["default", "no_line_rules", "short_words", "five_words", "no_phrases"])
def test_chunk_line_measures_are_the_per_document_ones(real, c4):
    """C4's four scores and Gopher's two line ratios, measured over a chunk's lines by Arrow, equal (bit for bit)
    the per-document Python loop they replace, on real text and hostile inputs, under rule settings that take every
    branch (empty lines kept, long lines split, phrase lines looked at in Python)."""
    texts = real + HOSTILE if c4 == CONFIGS[0] else real[::4] + HOSTILE
    _check(texts, c4)


def test_real_text_takes_the_arrow_branches():
    """The inputs above reach every branch of `c4_lines`: documents it measures with lines dropped for each rule,
    phrase lines in Python, and a document left to the per-document form (citations)."""
    from tokenmill.text.quality.lines import ChunkLines, c4_lines, c4_simple

    cfg = C4Config()
    lines = [t.splitlines() for t in HOSTILE]
    simple = c4_simple(HOSTILE, cfg)
    out = c4_lines(ChunkLines.of(lines), HOSTILE, simple, np.array([float(len(t)) for t in HOSTILE]), cfg)
    assert set(out) == set(np.flatnonzero(simple).tolist())
    citing = HOSTILE.index("Text with [1] citation here.\nAnother [edit] line ends here [2]")
    assert not simple[citing] and not simple[HOSTILE.index("")] and not simple[HOSTILE.index("NUL \x00 inside a line "
                                                                                              "here.\nOther one here.")]
    assert out[HOSTILE.index("lorem ipsum\nLOREM IPSUM DOLOR SIT.\nlorem  ipsum two spaces here.")][1] == 1.0
    assert out[HOSTILE.index("{code} here is fine.\nA { brace line.")][2] == 2.0
    kelvin = out[HOSTILE.index("The \u212aelvin sign: our coo\u212aie policy here.")]
    assert kelvin[3] == 1.0  # its one line is a policy line once lowered (`K` -> `k`): C4 removes it all


def test_a_chunk_arrow_refuses_takes_the_per_document_forms():
    """A lone surrogate has no UTF-8: the chunk's lines are measured one document at a time, with the same values."""
    from tokenmill.text.quality.lines import ChunkLines

    assert ChunkLines.of([[SURROGATE]]) is None
    _check(HOSTILE + [SURROGATE], CONFIGS[0])


def test_arrow_trims_the_whitespace_of_str_strip():
    """`utf8_trim_whitespace` (and its left and right forms) must strip what `str.strip` strips, code point by code
    point: an Arrow whose Unicode tables differ would measure other lines."""
    import pyarrow as pa
    import pyarrow.compute as pc

    points = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
    texts = [f"{chr(c)}a{chr(c)}" for c in points]
    array = pa.array(texts)
    for fn, method in ((pc.utf8_trim_whitespace, str.strip), (pc.utf8_ltrim_whitespace, str.lstrip),
                       (pc.utf8_rtrim_whitespace, str.rstrip)):
        got = pc.utf8_length(fn(array)).to_numpy()
        assert got.tolist() == [len(method(t)) for t in texts], method.__name__


def test_sentence_boundaries_by_width_are_those_of_one_lookbehind_each(real):
    """SENTENCE_END_RE's three lookbehinds (abbreviations grouped by width) find the boundaries of the ten it replaces,
    on real text and on random runs of abbreviations, terminal characters and spaces."""
    rng = random.Random(7)
    pieces = ["Mr.", "Mrs.", "e.g.", "i.e.", "etc.", "U.S.", " ", "\n", "A.", "x.", "!!", "?\"", ".)", "…", "。", "vs.",
              "St.", "a", "Dr.", "1.", "\u2028", "'", "”", "\t", "?.", ".!", "Ms.", "E.g.", "\xa0", "\U0001F600",
              "\U00011047", "Mrs", "Etc.", "mr.", "\u0964", "]", "»", "\x00", "word", "sMr.", "ie.", "e.g"]
    texts = ["".join(rng.choice(pieces) for _ in range(rng.randint(0, 40))) for _ in range(10_000)] + real + HOSTILE
    assert [[m.span() for m in SENTENCE_END_RE.finditer(t)] for t in texts] == \
        [[m.span() for m in OLD_SENTENCE_END_RE.finditer(t)] for t in texts]
