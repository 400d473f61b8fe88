"""Unicode and whitespace normalization, each step counted and each can be turned off.

ftfy repairs mojibake only: its defaults would also unescape HTML entities (the escape step's job,
counted there), fold full-width characters including CJK punctuation, straighten quotes and
normalize to NFC, all of which are done, or not, by our own counted steps.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Literal

import ftfy

from tokenmill.pipeline.config_base import StrictModel
from tokenmill.stages.clean.code_blocks import code_block_lines
from tokenmill.stages.clean.escapes import content_kind
from tokenmill.stages.clean.mojibake import may_be_mojibake

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
    """Repair mojibake (UTF-8 read as Windows-1252 and the like) with ftfy, nothing else of ftfy's."""
    nfc: bool = True
    """Unicode NFC: one code point sequence per character."""
    whitespace: bool = True
    """As OPT did for the Pile, but never at code's expense: line breaks to `\\n`, zero-width, no-break and control
    characters handled everywhere; in prose, tabs and space runs inside a line to one space, trailing spaces
    stripped, more than two blank lines collapsed. Leading indentation is kept in prose too; code (see `code`)
    keeps its indentation, tabs, space runs, form feeds and blank lines; only its trailing spaces and tabs go."""
    code: CodeMode = "detect"
    """Where the whitespace step treats text as code. `detect`: a document whose content is code (the detector
    the escape checks use) is code as a whole; in any other document, Markdown fenced blocks, indented blocks
    (lines starting with a tab or 4 spaces) and C preprocessor lines are. `document`: every document is code as
    a whole (for sources of source files, with `ftfy: false` so that strings stay as written, e.g.
    `{source: pile, subset: Github, normalize: {code: document, ftfy: false}}`: Makefiles, YAML and JSON carry
    few code signals). `blocks`: only those blocks, never a whole document. `off`: no code anywhere, OPT's rule
    (indentation is still kept)."""
    fullwidth: bool = True
    """Full-width ASCII letters and digits to half-width (CJK punctuation kept)."""


NORMALIZE_STEPS = ("ftfy", "nfc", "whitespace", "fullwidth")
CODE_LAYOUT_STEPS = ("code_layout:document", "code_layout:blocks")
"""Not changes but what the whitespace step kept: a document treated as code as a whole, or with code blocks."""

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
_RUN = re.compile(r"[ \t]*\t[ \t]*| {2,}")
_TRAILING = re.compile(r"[ \t]+$", re.M)
_PROSE_TRAILING = re.compile(r"[ \t\f]+$", re.M)
_BLANK_RUN = re.compile(r"\n{4,}")  # more than two blank lines
_LEADING_BLANK_LINES = re.compile(r"\A(?:[ \t]*\n)+")
_FIRST_LINE_INDENT = re.compile(r"\n*[ \t]")  # (matched at the start) the first line that is not empty is indented
_FULLWIDTH = {c: c - 0xFEE0 for c in [*range(0xFF10, 0xFF1A), *range(0xFF21, 0xFF3B), *range(0xFF41, 0xFF5B)]}
_FULLWIDTH_CHAR = re.compile("[" + "".join(f"\\u{c:04x}" for c in _FULLWIDTH) + "]")
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


def unify_characters(text: str) -> str:
    """Line breaks to `\\n`; Unicode spaces to a space, zero-width and control characters (but tab and form feed)
    removed, each one for one: what the whitespace step does to code and prose alike."""
    if "\r" in text or "\x85" in text or "\u2028" in text:
        text = _LINE_BREAKS.sub("\n", text)
    return _TABLE_CHARACTER.sub(lambda m: _CHARACTER_STRINGS[m.group()], text)


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


def whitespace_layout(text: str, code: CodeMode = "detect") -> tuple[str, str | None]:
    """The whitespace step: the normalized text, and `"document"` when it was treated as code as a whole,
    `"blocks"` when code blocks in it were kept, else None.

    Everywhere: line breaks unified, Unicode spaces, zero-width and control characters as in `unify_characters`,
    trailing spaces and tabs stripped, blank lines at the ends removed. Code keeps everything else byte for byte
    (indentation, tabs, space runs, form feeds, blank-line runs). Prose keeps its lines' indentation, and loses
    tabs and space runs inside lines (one space), form feeds and more than two blank lines in a row; its first
    line's indentation is removed with the leading blank lines, as OPT did.
    """
    text = unify_characters(text)
    if code != "off" and _has_layout(text):  # else prose and code give the same text: skip the detection
        if code == "document" or (code == "detect" and content_kind(text) == "code"):
            text = _TRAILING.sub("", text)
            return _LEADING_BLANK_LINES.sub("", text).rstrip("\n"), "document"
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
    text, changed, _ = normalize_with_layout(text, config)
    return text, changed


def normalize_with_layout(text: str, config: NormalizeConfig) -> tuple[str, list[str], str | None]:
    """`normalize`, and what the whitespace step kept as code: `code_layout:document`, `code_layout:blocks`
    (CODE_LAYOUT_STEPS) or None. Not a change, so not among the steps (the `clean_steps` column lists changes);
    the clean stage counts it in its report."""
    changed = []
    layout = None
    # ftfy walks every line; its own badness test on the whole text first keeps clean documents (nearly all)
    # to one regex search, and `may_be_mojibake` most of them to none (pure ASCII holds no mojibake at all).
    if config.ftfy and may_be_mojibake(text):
        fixed = ftfy.fix_text(text, FTFY_CONFIG)
        if fixed != text:
            changed.append("ftfy")
            text = fixed
    if config.nfc and not unicodedata.is_normalized("NFC", text):
        text = unicodedata.normalize("NFC", text)
        changed.append("nfc")
    if config.whitespace:
        fixed, kept = whitespace_layout(text, config.code)
        if fixed != text:
            changed.append("whitespace")
            text = fixed
        if kept is not None:
            layout = "code_layout:" + kept
    if config.fullwidth and not text.isascii() and _FULLWIDTH_CHAR.search(text):
        fixed = text.translate(_FULLWIDTH)
        if fixed != text:
            changed.append("fullwidth")
            text = fixed
    return text, changed, layout
