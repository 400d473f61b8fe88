"""Unicode and whitespace normalization, each step counted and each can be turned off.

ftfy repairs mojibake only: its defaults would also unescape HTML entities (the escape step's job,
counted there), fold full-width characters including CJK punctuation, straighten quotes and
normalize to NFC, all of which are done, or not, by our own counted steps.
"""

from __future__ import annotations

import re
import unicodedata

import ftfy
from ftfy.badness import is_bad

from tokenmill.pipeline.config_base import StrictModel

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


class NormalizeConfig(StrictModel):
    """Which normalization steps run, in this order."""

    ftfy: bool = True
    """Repair mojibake (UTF-8 read as Windows-1252 and the like) with ftfy, nothing else of ftfy's."""
    nfc: bool = True
    """Unicode NFC: one code point sequence per character."""
    whitespace: bool = True
    """As OPT did for the Pile: line breaks to `\\n`, tabs and space runs to one space, trailing spaces stripped,
    more than two blank lines collapsed, zero-width and non-breaking spaces handled, control characters removed."""
    fullwidth: bool = True
    """Full-width ASCII letters and digits to half-width (CJK punctuation kept)."""


NORMALIZE_STEPS = ("ftfy", "nfc", "whitespace", "fullwidth")

# Zero-width characters with no meaning in running text; ZWJ and ZWNJ are kept (emoji, Persian, Indic).
_ZERO_WIDTH = dict.fromkeys(map(ord, "\u200b\u2060\ufeff\u180e"), None)
# Spaces that render as a space: no-break, thin, figure, en/em... (not U+3000, the CJK ideographic space).
_SPACES = dict.fromkeys([0x00A0, 0x1680, *range(0x2000, 0x200B), 0x202F, 0x205F], " ")
# Control characters (C0 and C1) other than newline and tab; line and paragraph separators become newlines.
_CONTROLS = {**dict.fromkeys([*range(0x00, 0x09), 0x0B, 0x0C, *range(0x0E, 0x20), 0x7F, *range(0x80, 0x85),
                             *range(0x86, 0xA0)], None),
             0x85: "\n", 0x2028: "\n", 0x2029: "\n\n"}
_WHITESPACE_TABLE = {**_ZERO_WIDTH, **_SPACES, **_CONTROLS, ord("\t"): " "}
_SPACE_RUN = re.compile(r" {2,}")
_TRAILING = re.compile(r" +\n")
_LEADING_SPACE_LINES = re.compile(r"\n +\n")
_BLANK_RUN = re.compile(r"\n{4,}")  # more than two blank lines
_FULLWIDTH = {c: c - 0xFEE0 for c in [*range(0xFF10, 0xFF1A), *range(0xFF21, 0xFF3B), *range(0xFF41, 0xFF5B)]}


def normalize_whitespace(text: str) -> str:
    text = text.replace("\r\n", "\n").replace("\r", "\n").translate(_WHITESPACE_TABLE)
    text = _SPACE_RUN.sub(" ", text)
    text = _TRAILING.sub("\n", text)
    text = _LEADING_SPACE_LINES.sub("\n\n", text)
    text = _BLANK_RUN.sub("\n\n\n", text)
    return text.strip(" \n")


def normalize(text: str, config: NormalizeConfig) -> tuple[str, list[str]]:
    """The normalized text and the steps that changed it."""
    changed = []
    # ftfy walks every line; its own badness test on the whole text first keeps clean documents (nearly all)
    # to one regex search. Pure ASCII holds no mojibake at all.
    if config.ftfy and not text.isascii() and is_bad(text):
        fixed = ftfy.fix_text(text, FTFY_CONFIG)
        if fixed != text:
            changed.append("ftfy")
            text = fixed
    if config.nfc and not unicodedata.is_normalized("NFC", text):
        text = unicodedata.normalize("NFC", text)
        changed.append("nfc")
    if config.whitespace:
        fixed = normalize_whitespace(text)
        if fixed != text:
            changed.append("whitespace")
            text = fixed
    if config.fullwidth:
        fixed = text.translate(_FULLWIDTH)
        if fixed != text:
            changed.append("fullwidth")
            text = fixed
    return text, changed
