"""Unicode and whitespace normalization, each step counted and each can be turned off.

ftfy repairs mojibake only: its defaults would also unescape HTML entities (the escape step's job,
counted there), fold full-width characters including CJK punctuation, straighten quotes and
normalize to NFC, all of which are done, or not, by our own counted steps.

A document judged code as a whole keeps its characters: no mojibake repair, no NFC, no width folding, no
Unicode space, zero-width or control character touched inside a line (`CODE_CHANGES` lists what changes).
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field
from typing import Callable, Literal, Sequence

import ftfy
import numpy as np
import pyarrow as pa

from tokenmill.config_base import StrictModel
from tokenmill.text.code_blocks import code_block_lines
from tokenmill.text.escapes import content_kind
from tokenmill.text.mojibake import SIGNAL_CLASS, may_be_mojibake
from tokenmill.text.re2_batch import may_match

FTFY_CONFIG = ftfy.TextFixerConfig(
    unescape_html=False,
    fix_character_width=False,
    uncurl_quotes=False,
    fix_latin_ligatures=False,
    fix_line_breaks=False,
    remove_control_chars=False,
    normalization=None,
    fix_c1_controls=False,  # U+0085 is a line break in real dumps; our whitespace step handles C1 controls
    explain=False,
)


CodeMode = Literal["detect", "document", "blocks", "off"]


class NormalizeConfig(StrictModel):
    """Which normalization steps run, in this order, and where whitespace is code's own."""

    ftfy: bool = True
    """Repair mojibake (UTF-8 read as Windows-1252 and the like) with ftfy, nothing else of ftfy's; never in a
    document judged code (see `code`), whose strings may hold mojibake on purpose."""
    nfc: bool = True
    """Unicode NFC: one code point sequence per character; never in a document judged code (a decomposed
    character in a string or a regex class is the program's)."""
    whitespace: bool = True
    """As OPT did for the Pile, but never at code's expense: line breaks to `\\n`, zero-width, no-break and control
    characters handled everywhere; in prose, tabs and space runs inside a line to one space, trailing spaces
    stripped, more than two blank lines collapsed. Leading indentation is kept in prose too; code (see `code`)
    keeps its indentation, tabs, space runs, form feeds and blank lines; only its trailing spaces and tabs go. A
    document judged code as a whole also keeps its characters (`CODE_CHANGES`)."""
    code: CodeMode = "detect"
    """Where the whitespace step treats text as code. `detect`: a document whose content is code (the detector
    the escape checks use) is code as a whole; in any other document, Markdown fenced blocks, indented blocks
    (lines starting with a tab or 4 spaces) and C preprocessor lines are. `document`: every document is code as
    a whole (for sources of source files, e.g. `{source: pile, subset: Github, normalize: {code: document}}`:
    Makefiles, YAML and JSON carry few code signals). `blocks`: only those blocks, never a whole document. `off`:
    no code anywhere, OPT's rule (indentation is still kept). A document that is code as a whole keeps its
    characters: ftfy, NFC and full-width folding skip it, and the whitespace step changes only its layout
    (`CODE_CHANGES`); code blocks in prose get the document's character steps."""
    fullwidth: bool = True
    """Full-width ASCII letters and digits to half-width (CJK punctuation kept); never in a document judged code."""


NORMALIZE_STEPS = ("ftfy", "nfc", "whitespace", "fullwidth")
CODE_LAYOUT_STEPS = ("code_layout:document", "code_layout:blocks")
"""Not changes but what the whitespace step kept: a document treated as code as a whole, or with code blocks."""
CHARACTER_STEPS = ("ftfy", "nfc", "fullwidth")
"""The steps that change characters, not layout: none of them runs on a document judged code as a whole."""
CODE_KEPT_STEPS = tuple(f"code_kept:{step}" for step in CHARACTER_STEPS)
"""Not changes either: a document judged code that the step would have changed, counted in the report."""
CODE_CHANGES = ("line breaks \\r\\n and \\r to \\n", "a byte-order mark starting the text removed",
                "the Unicode spaces (no-break, thin, en...) of a run of blanks that indents a line, ends one or holds "
                "a space or a tab, to spaces", "spaces and tabs ending a line removed",
                "blank lines at the start and the end removed")
"""Everything normalization does to a document judged code as a whole: its layout, never a character of a line's
text. Unicode spaces standing between two other characters with no space or tab beside them (a French quote's
no-break space in `'«\u00a0'`, docutils' `'\u2001\u2001'` for TeX's `\\qquad`) are the program's; in a run with a
space or tab, or indenting or ending a line, they are layout (code in a web page indented with `&nbsp; `) and
become spaces one for one, so columns stay. U+0085, U+2028 and U+2029 are no line break in code (Python reads them
as characters in a string); zero-width and control characters stay."""

# Line breaks: \r\n, \r, NEL and the Unicode line and paragraph separators.
_LINE_BREAKS = re.compile("\r\n?|[\x85\u2028]")
# Zero-width characters with no meaning in running text; ZWJ and ZWNJ are kept (emoji, Persian, Indic).
_ZERO_WIDTH = dict.fromkeys(map(ord, "\u200b\u2060\ufeff\u180e"), None)
# Spaces that render as a space: no-break, thin, figure, en/em... (not U+3000, the CJK ideographic space).
_SPACES = dict.fromkeys([0x00A0, 0x1680, *range(0x2000, 0x200B), 0x202F, 0x205F], " ")
# Control characters (C0 and C1) other than newline, tab and form feed (a page break in C, Python and Lisp
# sources; removed from prose below); the paragraph separator becomes a blank line.
_CONTROLS = {**dict.fromkeys([*range(0x00, 0x09), 0x0B, *range(0x0E, 0x20), 0x7F, *range(0x80, 0x85),
                             *range(0x86, 0xA0)], None),
             0x2029: "\n\n"}
# One for one (or to nothing), so a line's columns stay where they were: code indented with no-break spaces
# (common in web pages) keeps its indentation as spaces.
_CHARACTER_TABLE = {**_ZERO_WIDTH, **_SPACES, **_CONTROLS}
_CHARACTER_STRINGS = {chr(c): v or "" for c, v in _CHARACTER_TABLE.items()}
# One substitution per (rare) character found: 4 to 10 times faster than str.translate with a dict on real text.
_TABLE_CHARACTER = re.compile("[" + "".join(f"\\u{c:04x}" for c in sorted(_CHARACTER_TABLE)) + "]")
# Each matches whole runs of blanks, starting only where a run starts and never backtracking: the plain forms
# (`[ \t]+$`, `[ \t]*\t[ \t]*`) retry from every position of a run, so a run of k spaces cost k² steps (a document
# with 40,000 spaces in a row took 16 s).
# A whole run with a tab, or of two spaces or more: it starts with a blank, so `re` jumps from blank to blank (the
# form `(?<![ \t])(?: *+\t[ \t]*+| {2,}+)` tried its look-behind at every position), and it is always a run's start
# (a match takes a run whole and a one-space run fails at once), so the matches are those of that form.
_RUN = re.compile(r"[ \t](?:[ \t]++|(?<=\t))")
_TRAILING = re.compile(r"(?<![ \t])[ \t]++$", re.M)
_PROSE_TRAILING = re.compile(r"(?<![ \t\f])[ \t\f]++$", re.M)
_BLANK_RUN = re.compile(r"\n{4,}")  # more than two blank lines
_LEADING_BLANK_LINES = re.compile(r"\A(?:[ \t]*\n)+")
_FIRST_LINE_INDENT = re.compile(r"\n*[ \t]")  # (matched at the start) the first line that is not empty is indented
_BOM = "\ufeff"
_CODE_LINE_BREAKS = re.compile("\r\n?")  # code's own: U+0085, U+2028 and U+2029 are characters in a string
_UNICODE_SPACE = "\u00a0\u1680\u2000-\u200a\u202f\u205f"  # _SPACES, as a regex class
_HAS_UNICODE_SPACE = re.compile(f"[{_UNICODE_SPACE}]")
# A whole run of blanks holding a Unicode space; it starts only where a run starts, and nothing backtracks, so a long
# run of plain spaces costs its length once (the naive `[ \t\xa0]*\xa0[ \t\xa0]*` costs its length squared).
_BLANKS_WITH_UNICODE_SPACE = re.compile(f"(?<![ \t{_UNICODE_SPACE}])(?:[ \t]*+[{_UNICODE_SPACE}])++[ \t]*+")
_UNICODE_SPACES = dict.fromkeys(_SPACES, " ")
# What prose changes and code keeps, apart from layout: whether judging the document can change the output.
_PROSE_ONLY = re.compile("[" + "".join(f"\\u{c:04x}" for c in sorted(_CHARACTER_TABLE)) + "\x85\u2028]")
# The table's ASCII characters (C0 controls but tab, newline, form feed and carriage return; DEL): in an ASCII text
# they are all `_TABLE_CHARACTER` and `_PROSE_ONLY` can match, and `bytes.translate` finds them about six times as
# fast as either regex's search.
_ASCII_TABLE = bytes(c for c in sorted(_CHARACTER_TABLE) if c < 0x80)
# What the whitespace step acts on or weighs inside a text, for one RE2 pass over a batch (`normalize_documents`): a
# character of the table, a line break but `\n`, a tab, a form feed, two spaces, a space ending a line, four line
# breaks in a row, an indented first line. In a text with none of them, `_whitespace` asks no code judgement, keeps
# no layout and changes nothing but the blanks at its ends (`_has_layout`, `_prose_only`, `_prose`'s tests and the
# blank-line run are all False; the trailing-space regex can only take a space ending the text, which the strip
# takes too): its result is `text.strip(" \t\n")`, as tests/text/test_normalize_speed.py checks against the
# whitespace step on every code point and on real text.
_WHITESPACE_WORK_CHARS = sorted({*_CHARACTER_TABLE, ord("\r"), 0x85, 0x2028, ord("\t"), ord("\f")})
_WHITESPACE_WORK_RE2 = ("[" + "".join(f"\\x{{{c:x}}}" for c in _WHITESPACE_WORK_CHARS) + "]"
                        + r"|  | \n|\n\n\n\n|\A\n*[ \t]")
_FULLWIDTH = {c: c - 0xFEE0 for c in [*range(0xFF10, 0xFF1A), *range(0xFF21, 0xFF3B), *range(0xFF41, 0xFF5B)]}
_FULLWIDTH_CHAR = re.compile("[" + "".join(f"\\u{c:04x}" for c in _FULLWIDTH) + "]")
_FULLWIDTH_CHARS = frozenset(map(chr, _FULLWIDTH))
# The mojibake pre-check's characters and the full-width ones, found in one pass over a non-ASCII text where both
# steps are on (each had its own pass). Only ftfy can add or remove a full-width character: NFC composes none and
# decomposes none (they have no canonical decomposition, and none is part of one), and the whitespace step touches
# blanks, line breaks and the table's characters only; so the pass answers the width step too while ftfy changed
# nothing (tests/text/test_speed_clean_batch.py).
_SIGNAL_OR_FULLWIDTH = re.compile("[" + SIGNAL_CLASS + _FULLWIDTH_CHAR.pattern[1:-1] + "]")
# Most prose has none of what these regexes look for, and a substring test (`in`) answers that many times faster
# than the regex engine, which tries its pattern at every position; each test below is exact for its regex.


def _has_layout(text: str) -> bool:
    """What alone makes prose and code normalize differently: a tab, a space run, a form feed, a blank-line run, or
    indentation on the first line that is not empty."""
    return ("\t" in text or "  " in text or "\f" in text or "\n\n\n\n" in text
            or _FIRST_LINE_INDENT.match(text) is not None)


def _has_trailing(text: str, chars: str) -> bool:
    """True when one of `chars` ends a line (is followed by a line break or ends the text): `[chars]+$` would match."""
    return text.endswith(tuple(chars)) or any(c + "\n" in text for c in chars)


def _ascii_controls(text: str) -> bool:
    """For an ASCII `text`: whether it holds a character of the table (`_ASCII_TABLE`)."""
    return len(text.encode("ascii").translate(None, _ASCII_TABLE)) != len(text)


def unify_characters(text: str) -> str:
    """Line breaks to `\\n`; Unicode spaces to a space, zero-width and control characters (but tab and form feed)
    removed, each one for one: what the whitespace step does to code and prose alike."""
    if "\r" in text or "\x85" in text or "\u2028" in text:
        text = _LINE_BREAKS.sub("\n", text)
    if text.isascii() and not _ascii_controls(text):
        return text  # nothing of the table: the substitution below would return the same text
    return _TABLE_CHARACTER.sub(lambda m: _CHARACTER_STRINGS[m.group()], text)


def _prose_only(text: str) -> bool:
    """Whether `text` holds a character that prose changes and code keeps (`_PROSE_ONLY`)."""
    return _ascii_controls(text) if text.isascii() else _PROSE_ONLY.search(text) is not None


def _inside_line(m: re.Match[str]) -> str:
    """A run inside a line becomes one space; a line's indentation stays."""
    start = m.start()
    return m.group() if start == 0 or m.string[start - 1] == "\n" else " "


def _prose(text: str) -> str:
    """Form feeds out; tabs and space runs inside a line to one space (indentation kept); trailing spaces out."""
    if "\f" in text:
        text = text.replace("\f", "")
    if _has_trailing(text, " \t"):  # form feeds are gone
        text = _PROSE_TRAILING.sub("", text)
    if "\t" in text or "  " in text:
        text = _RUN.sub(_inside_line, text)
    return text


def judge_code(text: str, code: CodeMode) -> bool:
    """Whether a document is code as a whole: every document with `code: document`; with `detect`, one whose content
    is code (`escapes.content_kind`, the detector the escape checks use), read with Unicode spaces as spaces (code
    in a web page indented with no-break spaces is code)."""
    if code == "document":
        return True
    return code == "detect" and content_kind(unify_characters(text)) == "code"


def code_document(text: str) -> str:
    """The whitespace step on a document judged code as a whole: `CODE_CHANGES` and nothing else."""
    if "\r" in text:
        text = _CODE_LINE_BREAKS.sub("\n", text)
    text = text.removeprefix(_BOM)
    if _HAS_UNICODE_SPACE.search(text):
        text = _BLANKS_WITH_UNICODE_SPACE.sub(_layout_blanks, text)
    if _has_trailing(text, " \t"):
        text = _TRAILING.sub("", text)
    return _LEADING_BLANK_LINES.sub("", text).rstrip("\n")


def _layout_blanks(m: re.Match[str]) -> str:
    """A run of blanks holding a Unicode space, in code: layout (its Unicode spaces to spaces) when it holds a space
    or a tab, or starts or ends a line; else the program's text, kept."""
    run, start, end, text = m.group(), m.start(), m.end(), m.string
    if (" " in run or "\t" in run or start == 0 or text[start - 1] == "\n" or end == len(text)
            or text[end] == "\n"):
        return run.translate(_UNICODE_SPACES)
    return run


def whitespace_layout(text: str, code: CodeMode = "detect") -> tuple[str, str | None]:
    """The whitespace step: the normalized text, and `"document"` when it was treated as code as a whole,
    `"blocks"` when code blocks in it were kept, else None.

    A document judged code as a whole (`judge_code`) changes only by `CODE_CHANGES`. Any other: line breaks
    unified, Unicode spaces, zero-width and control characters as in `unify_characters`, trailing spaces and tabs
    stripped, blank lines at the ends removed. Code blocks in it keep everything else byte for byte (indentation,
    tabs, space runs, form feeds, blank-line runs). Prose keeps its lines' indentation, and loses tabs and space
    runs inside lines (one space), form feeds and more than two blank lines in a row; its first line's indentation
    is removed with the leading blank lines, as OPT did.
    """
    return _whitespace(text, code, lambda: judge_code(text, code))


def _whitespace(text: str, code: CodeMode, is_code: Callable[[], bool]) -> tuple[str, str | None]:
    """`whitespace_layout`, asking `is_code` (the judgement, made once per document) only where the answer can
    change the text: where there is layout, or a character that prose changes and code keeps."""
    unified = unify_characters(text)
    layout = code != "off" and _has_layout(unified)  # asked once: both questions below are of the unified text
    if code != "off" and (layout or _prose_only(text)) and is_code():
        return code_document(text), "document"
    text = unified
    if code in ("detect", "blocks") and layout:
        lines = text.split("\n")
        mask = code_block_lines(lines)
        if any(mask):
            return _mixed(lines, mask), "blocks"
    text = _prose(text)
    if "\n\n\n\n" in text:
        text = _BLANK_RUN.sub("\n\n\n", text)
    return text.strip(" \t\n"), None


def _mixed(lines: list[str], mask: list[bool]) -> str:
    """Prose with code blocks: each line by its kind; blank-line runs collapsed outside the blocks only."""
    out: list[tuple[str, bool]] = []
    blanks = 0  # prose blank lines just written
    for line, is_code in zip(lines, mask):
        line = line.rstrip(" \t") if is_code else _prose(line)
        if is_code or line:
            blanks = 0
        else:
            blanks += 1
            if blanks > 2:
                continue
        out.append((line, is_code))
    start, end = 0, len(out)
    while start < end and not out[start][0].strip(" \t\f"):
        start += 1
    while end > start and not out[end - 1][0].strip(" \t\f"):
        end -= 1
    kept = [line for line, _ in out[start:end]]
    if kept and not out[start][1]:  # a prose first line loses its indentation, as in a document of prose
        kept[0] = kept[0].lstrip(" \t")
    return "\n".join(kept)


def normalize_whitespace(text: str, code: CodeMode = "detect") -> str:
    """The whitespace step's text (see `whitespace_layout`)."""
    return whitespace_layout(text, code)[0]


def normalize(text: str, config: NormalizeConfig) -> tuple[str, list[str]]:
    """The normalized text and the steps that changed it (names from NORMALIZE_STEPS)."""
    done = normalize_document(text, config)
    return done.text, done.changed


def normalize_with_layout(text: str, config: NormalizeConfig) -> tuple[str, list[str], str | None]:
    """`normalize`, and what the whitespace step kept as code: `code_layout:document`, `code_layout:blocks`
    (CODE_LAYOUT_STEPS) or None. Not a change, so not among the steps (the `clean_steps` column lists changes);
    the clean stage counts it in its report."""
    done = normalize_document(text, config)
    return done.text, done.changed, done.layout


@dataclass
class Normalized:
    """One document through normalization."""

    text: str
    changed: list[str] = field(default_factory=list)
    """The steps that changed the text, in order (names from NORMALIZE_STEPS): the `clean_steps` column."""
    layout: str | None = None
    """What the whitespace step kept as code (one of CODE_LAYOUT_STEPS), or None."""
    kept: list[str] = field(default_factory=list)
    """The character steps that would have changed this document judged code and did not (CODE_KEPT_STEPS)."""

    def counted(self) -> list[str]:
        """What the report counts for the document: its changes, the code layout kept, the code characters kept."""
        return [*self.changed, *([self.layout] if self.layout else []), *self.kept]


def normalize_documents(texts: Sequence[str], config: NormalizeConfig,
                        column: pa.StringArray | None = None) -> list[Normalized | None]:
    """`normalize_document` of each text, None where that changes and counts nothing. The whitespace step's work
    inside a text (`_WHITESPACE_WORK_RE2`) is looked for in one RE2 pass over the batch: a text without any is only
    stripped of the blanks at its ends, and an ASCII one has nothing else to do (ftfy finds no mojibake in ASCII,
    which is NFC and holds no full-width character). `column`: `texts` as Arrow strings already, or None."""
    busy = may_match(texts, _WHITESPACE_WORK_RE2, column) if config.whitespace else np.zeros(len(texts), dtype=bool)
    out: list[Normalized | None] = []
    for text, work in zip(texts, busy.tolist()):
        if work:
            out.append(normalize_document(text, config))
        elif text.isascii() and (not config.whitespace or len(text.strip(" \t\n")) == len(text)):
            out.append(None)
        else:
            done = normalize_document(text, config, plain=True)
            out.append(done if done.counted() else None)
    return out


def normalize_document(text: str, config: NormalizeConfig, *, plain: bool = False) -> Normalized:
    """The steps in order (ftfy, NFC, whitespace, full-width); a document judged code as a whole (`judge_code`,
    asked once, and only where a step would change the text) goes through the whitespace step alone. `plain`: the
    whitespace step has no work inside `text` (`normalize_documents`' scan), so while no step before it changed the
    text, that step is `text.strip(" \t\n")`."""
    done = Normalized(text)
    judged: list[bool] = []
    seen = (set(_SIGNAL_OR_FULLWIDTH.findall(text)) if config.ftfy and config.fullwidth and not text.isascii()
            else None)

    def is_code() -> bool:
        if not judged:
            judged.append(judge_code(text, config.code))
        return judged[0]

    def step(name: str, fixed: str) -> None:
        if fixed == done.text:
            return
        if name in CHARACTER_STEPS and is_code():
            done.kept.append("code_kept:" + name)
        else:
            done.changed.append(name)
            done.text = fixed

    # ftfy walks every line; its own badness test on the whole text first keeps clean documents (nearly all)
    # to one regex search, and `may_be_mojibake` most of them to none (pure ASCII holds no mojibake at all).
    if config.ftfy and may_be_mojibake(done.text, seen):
        step("ftfy", ftfy.fix_text(done.text, FTFY_CONFIG))
    wide = None if seen is None or done.text is not text else not _FULLWIDTH_CHARS.isdisjoint(seen)
    if config.nfc and not unicodedata.is_normalized("NFC", done.text):
        step("nfc", unicodedata.normalize("NFC", done.text))
    if config.whitespace and plain and not done.changed:
        step("whitespace", done.text.strip(" \t\n"))
    elif config.whitespace:
        fixed, kept = _whitespace(done.text, config.code, is_code)
        step("whitespace", fixed)
        if kept is not None:
            done.layout = "code_layout:" + kept
    if config.fullwidth and not done.text.isascii() and (_FULLWIDTH_CHAR.search(done.text) is not None
                                                          if wide is None else wide):
        step("fullwidth", done.text.translate(_FULLWIDTH))
    return done
