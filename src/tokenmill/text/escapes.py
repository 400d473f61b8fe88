"""Escape leaks: text that still carries the escaping of an upstream serialization.

OPT-175B's team lost days to documents that held literal ``\\n`` and ``\\"`` left behind by a JSON step: the
model learned to predict them. This module finds such leftovers in the raw text of a document, repairs what can
be undone without guessing, and drops what still leaks. It is the first step of the ``clean`` stage.

Everything here is a pure function of the text: regular expressions compiled once at import, no per-character
Python loops (loops run per *match*, and ordinary prose has almost none: a document with no backslash, ``&`` or
``%`` is answered by three substring tests).

What counts as a leak (the kinds, ``ESCAPE_KINDS``):

========================  ==========================================================================
``literal_newline``       ``\\n`` (backslash, letter n) standing for a line break
``literal_tab``           ``\\t``
``literal_cr``            ``\\r``
``escaped_quote``         ``\\"`` or ``\\'``
``escaped_slash``         ``\\/`` (JSON encoders that escape ``/``, e.g. PHP's ``json_encode``)
``escaped_backslash``     exactly two backslashes, ``\\\\``
``backslash_run``         three or more backslashes in a row (``addslashes`` applied again and again)
``unicode_escape``        ``\\uXXXX`` / ``\\UXXXXXXXX`` (counted per escape)
``hex_escape``            ``\\xXX`` (counted per escape; Python bytes reprs, ``\\xe2\\x80\\x99``)
``double_escaped``        JSON escaping applied twice: ``\\\\n`` ``\\\\t`` ``\\\\r`` ``\\\\uXXXX`` ``\\\\\\"``
``html_entity``           ``&amp;`` ``&#39;`` ``&#x27;`` ``&nbsp;`` ... (named ones must be real HTML5 names)
``percent_encoding``      a run of two or more ``%XX`` in one token, outside URLs (counted per ``%XX``)
========================  ==========================================================================

What is not a leak (counted under ``EscapeScan.benign``, never scored):

* ``windows_path``: ``C:\\Users\\...``, ``.\\dir\\file``, ``\\\\server\\share``; their backslashes are masked.
* ``tex_command``: in prose, a TeX command that begins like an escape (``\\theta``, ``\\nabla``, ``\\right``).
* ``escape_mention``: in prose, an escape (or a run of them) written as a token of its own (``use "\\n" here``,
  ``the \\t key``, ``a \\r\\n pair``): text *about* escapes, not text *carrying* them.
* ``code_escape``: every backslash sequence in a document whose content is code or TeX (``content_kind``), where
  backslashes are the language's own (``printf("%d\\n")``, ``\\frac{a}{b}``, ``re.compile(r"\\s+")``), unless the
  document is serialized as a whole (below); in prose, an escape inside a code string literal (``x.split("\\n")``)
  or a backtick code span; in code and TeX, every HTML entity (an HTML template in a string, a codec test's
  ``b"&#12473;"``), unless the text is HTML-escaped as a whole (some ``<`` ``>`` ``&`` encoded and not one raw:
  ``if (a &lt; b)``), and then still those inside a string literal (``replace("&", "&amp;")``).
* ``markup_entity``: HTML entities in a document that is HTML/XML markup itself (``&amp;`` is correct there).
* ``url_percent``: percent-encoding inside a URL or path token (``https://x.org/a%20b``), where it is correct, and
  any percent-encoding in code or TeX.

A document is *serialized* when its line structure is carried by escapes: at least two newline escapes
(``\\n`` or ``\\\\n``) and at most one real line break per 20 of them. Code and TeX always have real lines, so a
serialized code or TeX document has all its backslash sequences counted as leaks, like prose.

Score: ``chars / len(text)``, where ``chars`` is the number of characters covered by leak matches (``\\n`` is
2, ``\\u00e9`` is 6, ``&nbsp;`` is 6, ``%20`` is 3). It reads as "leaked characters per character": 0.01 means 1
character in 100 is a leftover escape. See ``DEFAULT_THRESHOLD`` for the default cut.
"""

from __future__ import annotations

import html
import json
import re
from dataclasses import dataclass, field
from html.entities import html5 as _HTML5
from typing import Literal
from urllib.parse import unquote_to_bytes

from pydantic import Field

from tokenmill.config_base import StrictModel

__all__ = [
    "BENIGN_KINDS",
    "CONTENT_KINDS",
    "DEFAULT_THRESHOLD",
    "ESCAPE_DROP_REASONS",
    "ESCAPE_KINDS",
    "REPAIRS",
    "EscapeOutcome",
    "EscapePolicy",
    "EscapeScan",
    "apply_policy",
    "content_kind",
    "is_markup",
    "may_leak",
    "repair_escapes",
    "scan_escapes",
]

ESCAPE_KINDS: tuple[str, ...] = (
    "literal_newline",
    "literal_tab",
    "literal_cr",
    "escaped_quote",
    "escaped_slash",
    "escaped_backslash",
    "backslash_run",
    "unicode_escape",
    "hex_escape",
    "double_escaped",
    "html_entity",
    "percent_encoding",
)
"""Leak kinds, in a fixed order (also the tie-break order for the dominant kind)."""

ESCAPE_DROP_REASONS: tuple[str, ...] = tuple(f"escape_{k}" for k in ESCAPE_KINDS)
"""Every drop reason this module can give: ``escape_<dominant kind>``."""

BENIGN_KINDS: tuple[str, ...] = (
    "windows_path",
    "tex_command",
    "escape_mention",
    "code_escape",
    "markup_entity",
    "url_percent",
)
"""Look-alikes that are counted (``EscapeScan.benign``) but never scored."""

CONTENT_KINDS: tuple[str, ...] = ("prose", "code", "tex")

REPAIRS: tuple[str, ...] = (
    "json_unescape",
    "escaped_quotes",
    "unicode_escapes",
    "hex_escapes",
    "html_entities",
    "percent_encoding",
)
"""Names that can appear in ``EscapeOutcome.repaired``, in the order repairs run (``json_unescape`` once per pass)."""

DEFAULT_THRESHOLD = 0.0005
"""Default cut on ``EscapeScan.score``: more than 1 leaked character per 2,000 characters.

Why 0.0005. A document JSON-escaped as a whole carries a 2-character ``\\n`` per line break and a ``\\"`` per
quote. Measured on the shared real samples escaped with ``json.dumps(text, ensure_ascii=False)`` (every document that
the escaping changed): dolma CC pages score 0.0032 at least, HumanEval programs 0.038, THUCNews articles with quotes
0.0009, and the Pile sample (PubMed-style title + one abstract paragraph: often a single ``\\n`` in 2,000-4,000
characters) 0.0009. 0.0005 is under every one of them (0.001 would miss 31 of 1,789, 0.002 more than 890);
escaped twice, or with ``ensure_ascii``, they score higher still. On the other side, clean text scores exactly 0
almost always: in the Pile, dolma and THUCNews samples 8 documents of 2,697 score above 0, all real leaks (stray
``&#39;``, ``&nbsp;``, ``\\"``), and 0 after repair. Windows paths, TeX, code and markup never score. In ``repair``
mode the cut applies after repair, so it only decides about what could not be undone (literal ``\\n`` ``\\t``
``\\r`` in prose that has real lines, undecodable runs): a single stray ``\\n`` in a page of more than 4,000
characters stays; anything denser goes.
"""

_REAL_NL_PER_ESCAPE = 20  # serialized: at most one real line break per this many newline escapes
_MIN_NL_ESCAPES = 2
_MAX_JSON_PASSES = 3

# --------------------------------------------------------------------------------------------------------------
# Backslash sequences. Every alternative starts after one consumed backslash, so the regex engine searches for the
# literal backslash (fast) and, scanning left to right, always meets a run of backslashes at its first one.
# --------------------------------------------------------------------------------------------------------------

# TeX commands that begin with n, t, r (and so look like \n \t \r). Only in prose; whole-word matches only.
_TEX_NTR = (
    "theta|vartheta|tau|times|text|textbf|textit|textrm|textsf|texttt|textsc|textup|textnormal|textstyle|tilde|"
    "widetilde|tfrac|top|to|triangle|triangleq|trianglelefteq|therefore|tag|tt|tiny|tableofcontents|"
    "nu|nabla|neq|newline|newcommand|newpage|newtheorem|newenvironment|noindent|nonumber|nolimits|not|notin|"
    "nmid|neg|nleq|ngeq|nsubseteq|natural|normalsize|"
    "rho|varrho|right|rightarrow|Rightarrow|rightleftharpoons|rangle|rceil|rfloor|ref|rm|rbrace|rvert|rVert|"
    "renewcommand|raggedright|raisebox"
)

_BACKSLASH = re.compile(
    r"\\(?:"
    r"(?P<dq>\\\\\")"  # \\\" : 3 backslashes + quote
    r"|(?P<dnl>\\n)"  # \\n
    r"|(?P<dother>\\(?:[tr]|u[0-9a-fA-F]{4}))"  # \\t \\r \\uXXXX
    r"|(?P<run>\\{2,})"  # 3+ backslashes
    r"|(?P<ebs>\\)"  # exactly 2
    r"|(?P<tex>(?:" + _TEX_NTR + r")(?![A-Za-z]))"
    r"|(?P<mention>(?<=[\s\"'`(\[]\\)[ntr](?:\\[ntr0])*(?=[\s\"'`)\],.:;!?]|\Z))"  # "\n", the \r\n pair
    r"|(?P<nl>n)|(?P<tab>t)|(?P<cr>r)"
    r"|(?P<quote>[\"'])"
    r"|(?P<slash>/)"
    r"|(?P<uni>(?:u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8})(?:\\(?:u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}))*)"
    r"|(?P<hex>x[0-9a-fA-F]{2}(?:\\x[0-9a-fA-F]{2})*)"
    r")"
)
# group -> kind (None: benign, counted under its own name)
_GROUP_KIND = {
    "dq": "double_escaped",
    "dnl": "double_escaped",
    "dother": "double_escaped",
    "run": "backslash_run",
    "ebs": "escaped_backslash",
    "tex": None,
    "mention": None,
    "nl": "literal_newline",
    "tab": "literal_tab",
    "cr": "literal_cr",
    "quote": "escaped_quote",
    "slash": "escaped_slash",
    "uni": "unicode_escape",
    "hex": "hex_escape",
}
_SINGLE_KINDS = frozenset({"literal_newline", "literal_tab", "literal_cr", "escaped_quote", "unicode_escape",
                           "hex_escape"})
_BENIGN_GROUP = {"tex": "tex_command", "mention": "escape_mention"}
_MULTI_GROUPS = frozenset({"uni", "hex"})  # one match holds a run of escapes: count its backslashes

# Windows paths: drive-letter (C:\Users\...), relative (.\x, ..\x) and UNC (\\server\share). Intermediate segments
# may hold up to 4 words ("Program Files") since they end at a backslash; the last one may not hold a space.
# Separators are single backslashes: a doubled one (C:\\Users) is what JSON makes of a path, so it stays visible
# as escaped_backslash.
_SEG = r"[^\\\s\"<>|*?:]+"
_PATH_TAIL = (
    r"(?:" + _SEG + r"(?: [A-Za-z0-9(][^\\\s\"<>|*?:]*){0,3}\\(?!\\))*(?:[^\\\s\"<>|*?:,;]|[,;](?!\s|$))*"
)
_WINPATH = re.compile(  # starts at the first backslash (the engine then only stops at backslashes)
    r"\\(?:(?<=(?<![A-Za-z0-9_])[A-Za-z]:\\)|(?<=(?<![^\s\"'(=])\.\\)|(?<=(?<![^\s\"'(=])\.\.\\))"
    r"(?!\\)(?![ntr](?:[^a-z0-9]|$))" + _PATH_TAIL
    + r"|\\(?<=(?<![^\s\"'(=])\\)\\(?=[A-Za-z0-9][\w.$-]*\\(?!\\)[\w$])" + _PATH_TAIL,
    re.M,
)

# HTML entities; named ones are checked against the HTML5 table (so `&did;` in PL/SQL is not one).
_ENTITY = re.compile(r"&(?:#[0-9]{1,7}|#[xX][0-9A-Fa-f]{1,6}|[A-Za-z][A-Za-z0-9]{1,31});")
_ENTITY_NAMES = frozenset(k for k in _HTML5 if k.endswith(";"))

# Percent-encoding: two or more %XX in one token, with only URL-safe ASCII between (so "73%2009年" is not one).
_PERCENT = re.compile(r"%[0-9A-Fa-f]{2}(?:[A-Za-z0-9._~+\-]*%[0-9A-Fa-f]{2})+")
_UP_TO_LAST_SPACE = re.compile(r".*\s", re.S)  # on a bounded window before a percent run: where its token starts
_URLISH = re.compile(r"(?:[A-Za-z][A-Za-z0-9+.-]*:)?//|www\.|^[\"'(<=]?/|[?&][\w.-]+=|\.(?:com|org|net|html?|php)\b")

# Markup: the text is HTML/XML itself (then its entities are correct).
_TAG = re.compile(r"</?[A-Za-z][A-Za-z0-9:-]{0,30}(?:\s[^<>]{0,400})?/?>|<!--.{0,2000}?-->", re.S)
_PROLOG = re.compile(r"\A\s*<(?:!DOCTYPE|\?xml|html\b)", re.I)
_MARKUP_MIN_TAGS = 3
_MARKUP_MIN_SHARE = 0.05  # tags cover at least this share of the text

# --------------------------------------------------------------------------------------------------------------
# Content kind
# --------------------------------------------------------------------------------------------------------------

_TEX_SIGNAL = re.compile(
    r"\\(?:begin|end)\{[A-Za-z*]+\}"
    r"|\\(?:documentclass|usepackage|section|subsection|subsubsection|paragraph|chapter|cite[pt]?|citealp|eqref|"
    r"ref|label|frac|dfrac|tfrac|sqrt|sum|prod|int|iint|oint|lim|limsup|liminf|sup|inf|max|min|log|exp|sin|cos|"
    r"alpha|beta|gamma|Gamma|delta|Delta|epsilon|varepsilon|zeta|eta|theta|vartheta|iota|kappa|lambda|Lambda|mu|"
    r"nu|xi|Xi|pi|Pi|rho|sigma|Sigma|tau|upsilon|phi|varphi|Phi|chi|psi|Psi|omega|Omega|partial|nabla|infty|cdot|"
    r"cdots|ldots|dots|times|div|pm|mp|leq|geq|le|ge|neq|approx|equiv|sim|simeq|propto|in|notin|subset|subseteq|"
    r"supset|cup|cap|setminus|emptyset|forall|exists|to|rightarrow|Rightarrow|leftarrow|Leftarrow|mapsto|"
    r"mathbf|mathrm|mathcal|mathbb|mathit|mathsf|boldsymbol|operatorname|text|textbf|textit|emph|hat|bar|vec|"
    r"tilde|dot|ddot|overline|underline|left|right|big|Big|bigg|langle|rangle|quad|qquad|displaystyle|item|"
    r"hline|noindent|footnote|url|href|begingroup|endgroup|newcommand|renewcommand|def|over|choose|binom|"
    r"mathop|limits|nolimits|circ|prime|ell|hbar|Re|Im|vee|wedge|oplus|otimes|perp|parallel|angle|triangle)"
    r"(?![A-Za-z])"
    r"|\\[(\[]"
    r"|\$[^$\n]{0,200}?[\\^_{][^$\n]{0,200}?\$"
)
_TEX_MIN = 3

# Code signals, strong (count 2) and weak (count 1). Every alternative starts with a literal character so the regex
# engine only stops at those characters (a line break, `#`, `"`, `(`, `.`, `{`, `)`, an operator's first character).
# Semicolons at line ends are not signals: prose lists and verse end lines so. `stages.subdoc.CODE_SIGNAL_RE2` must
# match wherever any of these three does (tests/subdoc/test_speed_spans.py checks it): widen it with any change here.
_CODE_STRONG = re.compile(
    r"(?:"
    r"\n[ \t]*(?:(?:def|class|fn|func|function|sub)[ \t]+\w+[ \t]*[(:<{]"
    r"|import[ \t]+[\w.]+[ \t]*;?[ \t]*\r?$|from[ \t]+[\w.]+[ \t]+import[ \t]|using[ \t]+[\w.:]+[ \t]*;"
    r"|package[ \t]+[\w.]+[ \t]*;|>>>[ \t]+\S)"
    r"|#[ \t]*(?:include|define|ifn?def|endif|pragma|undef)\b"
    r"|\"\"\""
    r"|\)[ \t]*;[ \t]*\r?$"
    r"|\((?:" + "|".join(
        rf"(?<={re.escape(name)}\()"
        for name in (
            "printf", "fprintf", "sprintf", "snprintf", "println", "console.log", "System.out.print",
            "System.out.println", "re.compile", "re.match", "re.fullmatch", "re.search", "re.sub", "re.subn",
            "re.findall", "re.finditer", "re.split", "preg_match", "preg_replace", "preg_split",
        )
    ) + r")"
    r")",
    re.M,
)
_CODE_WEAK = re.compile(
    r"\n(?:[ \t]{2,}(?:return|if|for|while|elif|else|try|except|finally|with|raise|yield|assert|break|continue)\b"
    r"|[ \t]*(?:public|private|protected|static)[ \t]+\w"
    r"|[ \t]*\}[ \t]*;?[ \t]*\r?$"
    r"|[ \t]*[A-Za-z_][\w.]*(?:\[[^\]\n]*\])?[ \t]*[+\-*/|&]?=[ \t]*[^=\s])"
    r"|\{[ \t]*\r?$"
    r"|\.(?:join|split|replace|strip|rstrip|lstrip|startswith|endswith|append|format|encode|decode)\("
    r"|\((?:" + "|".join(
        rf"(?<={name}\()" for name in ("len", "range", "enumerate", "isinstance", "sorted", "strlen", "strcmp",
                                       "strcpy", "malloc", "free")
    ) + r")"
    r"|/(?=[^/\s])[^/\n]{0,80}?\\[dswbDSWB][^/\n]{0,80}?/[gimsuy]*(?![A-Za-z0-9])",  # a regex literal: /\d+/g
    re.M,
)
# Operators: weak too, and together they count at most _CODE_MAX_OPERATORS (a game manual full of "==" and "->"
# is not code).
_CODE_OPERATOR = re.compile(r"==(?!=)(?<!===)|!==?|&&|\|\||\+=|-=|\*=|->|=>|::(?!:)(?<!:::)|\+\+")
_CODE_MAX_OPERATORS = 2
_CODE_MIN = 4
_CODE_LINES_PER_SIGNAL = 10


def content_kind(text: str) -> Literal["prose", "code", "tex"]:
    """Whether the text is prose, code or TeX, judged by content alone (whatever source it came from).

    TeX: TeX commands (``\\begin{``, ``\\frac``, ``\\section``, ``\\cite``, Greek letters ...), ``\\(``/``\\[``
    delimiters and ``$...$`` spans holding ``\\``, ``^``, ``_`` or ``{``: three or more signals.
    Code: strong signals (``def f(``, ``class X:``, ``#include``, ``import x``, ``>>>`` doctests, ``\"\"\"``,
    ``call(...);`` statements, ``printf(`` / ``re.compile(`` / ``console.log(``) count 2, weak ones (lines ending
    in ``{`` or holding only ``}``, indented keywords, assignments, ``.join(`` / ``len(``, ``==`` ``&&`` ``->``
    ``::`` (at most 2 from operators), regex literals ``/\\d+/g``) count 1. Code when the sum reaches 4 and at
    least one per 10 lines, so a long page with one stray brace stays prose. When both pass, the larger count wins
    (TeX on a tie). Semicolons ending lines are no signal: prose lists and verse end lines so.
    """
    tex = 0
    if "\\" in text or "$" in text:
        tex = _count(_TEX_SIGNAL, text, _TEX_MIN * 4)
    need = max(_CODE_MIN, text.count("\n") // _CODE_LINES_PER_SIGNAL)
    lines = text if text[:1] == "\n" else "\n" + text  # so that line-start signals see line 1
    code = 2 * _count(_CODE_STRONG, lines, (need + 1) // 2)
    if code < need:
        code += _count(_CODE_OPERATOR, text, min(need - code, _CODE_MAX_OPERATORS))
    if code < need:
        code += _count(_CODE_WEAK, lines, need - code)
    if tex >= _TEX_MIN and tex >= code:
        return "tex"
    if code >= need:
        return "code"
    if tex >= _TEX_MIN:
        return "tex"
    return "prose"


def _count(pattern: re.Pattern[str], text: str, cap: int) -> int:
    n = 0
    for _ in pattern.finditer(text):
        n += 1
        if n >= cap:
            break
    return n


def is_markup(text: str) -> bool:
    """Whether the text is HTML/XML markup itself: it opens with a doctype, XML prolog or ``<html``, or holds three
    or more tags (or comments) covering at least 5% of it. A page of prose with a few leftover ``<br />`` is not."""
    if "<" not in text:
        return False
    if _PROLOG.match(text):
        return True
    n = chars = 0
    for m in _TAG.finditer(text):
        n += 1
        chars += m.end() - m.start()
    return n >= _MARKUP_MIN_TAGS and chars >= _MARKUP_MIN_SHARE * len(text)


# --------------------------------------------------------------------------------------------------------------
# Scan
# --------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class EscapeScan:
    """What one document holds. Deterministic: the same text always gives an equal scan."""

    length: int
    """len(text), in characters."""
    counts: dict[str, int] = field(default_factory=dict)
    """Leak kind (from ESCAPE_KINDS) -> occurrences; only kinds seen, in ESCAPE_KINDS order."""
    chars: int = 0
    """Characters covered by leak matches."""
    benign: dict[str, int] = field(default_factory=dict)
    """Look-alike kind (from BENIGN_KINDS) -> occurrences: counted, never scored."""
    content: Literal["prose", "code", "tex"] | None = None
    """content_kind(text), or None when nothing depended on it: no backslash sequence, entity or %XX run, or a
    serialized text (whose backslash sequences count as leaks whatever its content)."""
    serialized: bool = False
    """Line structure carried by escapes: >= 2 newline escapes and <= 1 real line break per 20 of them."""
    markup: bool | None = None
    """is_markup(text), or None when the text had no HTML entity (the only thing it decides)."""
    kind_chars: dict[str, int] = field(default_factory=dict)
    """Leak kind -> characters covered (what `dominant` compares), in ESCAPE_KINDS order."""

    @property
    def score(self) -> float:
        """chars / length: leaked characters per character (0.0 for empty text)."""
        return self.chars / self.length if self.length else 0.0

    @property
    def dominant(self) -> str | None:
        """The kind covering the most characters (ties: ESCAPE_KINDS order), or None when nothing leaks."""
        best, best_chars = None, 0
        for kind in ESCAPE_KINDS:
            c = self.kind_chars.get(kind, 0)
            if c > best_chars:
                best, best_chars = kind, c
        return best


def _mask(text: str, pattern: re.Pattern[str]) -> tuple[str, int]:
    """Replace each match by as many spaces (offsets unchanged); return the masked text and the match count."""
    n = 0

    def blank(m: re.Match[str]) -> str:
        nonlocal n
        n += 1
        return " " * (m.end() - m.start())

    return pattern.sub(blank, text), n


def may_leak(text: str) -> bool:
    """False when ``scan_escapes`` finds nothing in ``text``: it holds no backslash, ``&`` or ``%`` (most prose), so
    ``apply_policy`` keeps it as it is with a score of 0 and no counts, whatever the policy."""
    return "\\" in text or "&" in text or "%" in text


def scan_escapes(text: str) -> EscapeScan:
    """Count the escape leaks in ``text`` (see the module docstring for the kinds and the score)."""
    has_bs = "\\" in text
    has_amp = "&" in text
    has_pct = "%" in text
    if not (has_bs or has_amp or has_pct):
        return EscapeScan(length=len(text))

    counts: dict[str, int] = {}
    kind_chars: dict[str, int] = {}
    benign: dict[str, int] = {}
    content: str | None = None
    serialized = False
    markup: bool | None = None
    if has_bs:
        serialized, content = _scan_backslashes(text, counts, kind_chars, benign)
    if has_amp:
        markup, content = _scan_entities(text, content, counts, kind_chars, benign)
    if has_pct:
        content = _scan_percents(text, content, counts, kind_chars, benign)

    counts = {k: counts[k] for k in ESCAPE_KINDS if k in counts}
    kind_chars = {k: kind_chars[k] for k in ESCAPE_KINDS if k in kind_chars}
    benign = {k: benign[k] for k in BENIGN_KINDS if k in benign}
    return EscapeScan(
        length=len(text),
        counts=counts,
        chars=sum(kind_chars.values()),
        benign=benign,
        content=content,
        serialized=serialized,
        markup=markup,
        kind_chars=kind_chars,
    )


# scan_escapes' three parts: each adds to the leaked counts, their characters and the benign counts, and returns
# what it learnt of the text (the content kind is computed at most once, by the first part that needs it).


def _add(counts: dict[str, int], kind_chars: dict[str, int], kind: str, n: int, chars: int) -> None:
    counts[kind] = counts.get(kind, 0) + n
    kind_chars[kind] = kind_chars.get(kind, 0) + chars


def _add_benign(benign: dict[str, int], kind: str, n: int) -> None:
    if n:
        benign[kind] = benign.get(kind, 0) + n


def _scan_backslashes(text: str, counts: dict[str, int], kind_chars: dict[str, int],
                      benign: dict[str, int]) -> tuple[bool, str | None]:
    """Backslash sequences: leaks in prose or a serialized text, code's own escapes otherwise; (serialized, content)."""
    content: str | None = None
    bs_counts, bs_chars, bs_benign, nl_escapes = _backslash_matches(text)
    serialized = nl_escapes >= _MIN_NL_ESCAPES and text.count("\n") * _REAL_NL_PER_ESCAPE <= nl_escapes
    if bs_counts and not serialized:  # a serialized text's escapes count whatever its content
        content = content_kind(text)
        if content == "prose" and any(k in _SINGLE_KINDS for k in bs_counts):
            bs_counts, bs_chars, bs_benign, _ = _backslash_matches(text, code_strings=True)
    for k, n in bs_benign.items():
        _add_benign(benign, k, n)
    if bs_counts:
        if content == "prose" or serialized:
            for k, n in bs_counts.items():
                _add(counts, kind_chars, k, n, bs_chars[k])
        else:
            _add_benign(benign, "code_escape", sum(bs_counts.values()))
    return serialized, content


def _scan_entities(text: str, content: str | None, counts: dict[str, int], kind_chars: dict[str, int],
                   benign: dict[str, int]) -> tuple[bool | None, str | None]:
    """HTML entities: markup's own, code's own, or leaks; (markup, content), markup None when there is none."""
    markup: bool | None = None
    entities = [m for m in _ENTITY.finditer(text) if _valid_entity(m.group())]
    if entities:
        markup = is_markup(text)
        if markup:
            _add_benign(benign, "markup_entity", len(entities))
        else:
            if content is None:
                content = content_kind(text)
            if content != "prose":
                # Code's own entities: '&amp;' in escape_html(), an HTML template in a triple-quoted string, a
                # codec test's b"&#12473;" (the line-based string test misses the last two). Code leaks them
                # only when HTML-escaped as a whole; even then those in its string literals are its own.
                if _html_escaped(text):
                    kept = [m for m in entities if not _in_code_string(text, m.start())]
                else:
                    kept = []
                _add_benign(benign, "code_escape", len(entities) - len(kept))
                entities = kept
            if entities:
                _add(counts, kind_chars, "html_entity", len(entities), sum(m.end() - m.start() for m in entities))
    return markup, content


def _scan_percents(text: str, content: str | None, counts: dict[str, int], kind_chars: dict[str, int],
                   benign: dict[str, int]) -> str | None:
    """Percent-encoded runs: leaks in prose outside URLs, benign otherwise; the content kind."""
    leaks, in_urls = _percent_runs(text)
    if leaks or in_urls:
        if content is None:
            content = content_kind(text)
        if content == "prose" and leaks:
            _add(counts, kind_chars, "percent_encoding", sum(n for _, _, n in leaks), sum(3 * n for _, _, n in leaks))
        else:
            in_urls += sum(n for _, _, n in leaks)
        _add_benign(benign, "url_percent", in_urls)
    return content


def _mask_paths(text: str) -> tuple[str, int]:
    if ":\\" in text or ".\\" in text or "\\\\" in text:
        return _mask(text, _WINPATH)
    return text, 0


# An escape inside a string literal opened after code punctuation (`printf("a\n")`, `x = 'a\tb'`,
# `.split("\n")`) or inside a backtick code span is the code's own, even in a prose page.
_OPEN_CODE_STRING = re.compile(
    r"(?:[(=,\[{+:]|\breturn|\bprint|\becho|\bputs)[ \t]*[rbuRBUfF]?([\"'])(?:(?!\1)[^\\\n]|\\.)*\Z"
    r"|(?:^|[\s(])`[^`\n]*\Z"
)
_STRING_CONTEXT = 300  # characters of the line looked at before an escape
_IN_STRING_GROUPS = frozenset({"nl", "tab", "cr", "quote", "uni", "hex"})


def _in_code_string(text: str, pos: int) -> bool:
    start = max(text.rfind("\n", 0, pos) + 1, pos - _STRING_CONTEXT)
    return _OPEN_CODE_STRING.search(text, start, pos) is not None


def _backslash_matches(text: str, code_strings: bool = False):
    """Per-kind counts and chars of backslash sequences, benign counts, and the number of newline escapes.

    With ``code_strings``, single escapes inside a code string literal are benign (``code_escape``): a second pass,
    run only on prose that is not serialized and has such escapes (a per-match look at the line before each).
    """
    masked, paths = _mask_paths(text)
    counts: dict[str, int] = {}
    chars: dict[str, int] = {}
    benign: dict[str, int] = {"windows_path": paths} if paths else {}
    nl = 0
    for m in _BACKSLASH.finditer(masked):
        g = m.lastgroup
        kind = _GROUP_KIND[g]
        if kind is None:
            b = _BENIGN_GROUP[g]
            benign[b] = benign.get(b, 0) + 1
            continue
        if code_strings and g in _IN_STRING_GROUPS and _in_code_string(masked, m.start()):
            benign["code_escape"] = benign.get("code_escape", 0) + 1
            continue
        n = m.group().count("\\") if g in _MULTI_GROUPS else 1
        counts[kind] = counts.get(kind, 0) + n
        chars[kind] = chars.get(kind, 0) + m.end() - m.start()
        if g == "nl" or g == "dnl":
            nl += 1
    return counts, chars, benign, nl


def _valid_entity(entity: str) -> bool:
    if entity[1] != "#":
        return entity[1:] in _ENTITY_NAMES
    cp = int(entity[3:-1], 16) if entity[2] in "xX" else int(entity[2:-1])
    return 0 < cp <= 0x10FFFF


def _percent_runs(text: str) -> tuple[list[tuple[int, int, int]], int]:
    """(start, end, number of %XX) of the leaking runs, and the number of %XX inside URL/path tokens."""
    leaks: list[tuple[int, int, int]] = []
    in_urls = 0
    for m in _PERCENT.finditer(text):
        start = m.start()
        window = text[max(0, start - 2048) : start]
        before = _UP_TO_LAST_SPACE.match(window)
        token = window[before.end() if before else 0 :] + m.group()
        n = m.group().count("%")
        if _URLISH.search(token):
            in_urls += n
        else:
            leaks.append((start, m.end(), n))
    return leaks, in_urls


# --------------------------------------------------------------------------------------------------------------
# Repair
# --------------------------------------------------------------------------------------------------------------

_BACKSLASH_KINDS = frozenset(k for k in ESCAPE_KINDS if k not in ("html_entity", "percent_encoding"))
_LOCAL_KINDS = frozenset({"escaped_quote", "escaped_slash", "escaped_backslash", "backslash_run", "unicode_escape",
                          "hex_escape", "double_escaped"})


def _json_candidate(text: str, scan: EscapeScan) -> bool:
    """A document that may be JSON-escaped as a whole: backslash leaks, and few or no real line breaks."""
    if not any(k in _BACKSLASH_KINDS for k in scan.counts):
        return False
    if scan.serialized:
        return True
    if scan.content != "prose":
        return False
    real_nl = text.count("\n")
    nl_escapes = scan.counts.get("literal_newline", 0) + scan.counts.get("double_escaped", 0)
    return real_nl == 0 or real_nl * _REAL_NL_PER_ESCAPE <= nl_escapes


def _json_unescape(text: str) -> str | None:
    try:
        out = json.loads('"' + text + '"', strict=False)
    except ValueError:
        return None
    try:
        out.encode("utf-8")  # a lone surrogate (\ud800) would not survive writing
    except UnicodeEncodeError:
        return None
    return out


def _decode_unicode_run(run: str) -> str | None:
    parts = run.split("\\")[1:]
    try:  # \U escapes are not JSON: read every escape as a code unit, then let UTF-16 pair the surrogates
        units = "".join(chr(int(p[1:], 16)) for p in parts)
        out = units.encode("utf-16-le", "surrogatepass").decode("utf-16-le")
    except (ValueError, OverflowError, UnicodeDecodeError):
        return None
    try:
        out.encode("utf-8")
    except UnicodeEncodeError:
        return None
    if any(c < " " and c not in "\n\t" for c in out):  # per match, and matches are short
        return None
    return out


def _decode_hex_run(run: str) -> str | None:
    data = bytes(int(p[1:], 16) for p in run.split("\\")[1:])
    try:
        out = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if any(c < " " and c not in "\n\t" for c in out):
        return None
    return out


def _local_repairs(text: str) -> tuple[str, tuple[str, ...]]:
    """Undo, in prose, the escapes that have one reading: \\" \\' \\/ (and runs of backslashes before a quote),
    \\uXXXX runs and \\xXX runs that decode to UTF-8 text. Literal \\n \\t \\r stay (they may be mentions)."""
    masked, _ = _mask_paths(text)
    pieces: list[str] = []
    pos = 0
    done: set[str] = set()
    for m in _BACKSLASH.finditer(masked):
        g = m.lastgroup
        start, end = m.start(), m.end()
        repl: str | None = None
        if g == "quote" or g == "dq":
            repl, name = text[end - 1], "escaped_quotes"
        elif g == "slash":
            repl, name = "/", "escaped_quotes"
        elif (g == "run" or g == "ebs") and end < len(text) and text[end] in "\"'":
            repl, name, end = text[end], "escaped_quotes", end + 1
        elif g == "uni":
            repl, name = _decode_unicode_run(m.group()), "unicode_escapes"
        elif g == "hex":
            repl, name = _decode_hex_run(m.group()), "hex_escapes"
        if repl is None or start < pos:
            continue
        pieces.append(text[pos:start])
        pieces.append(repl)
        pos = end
        done.add(name)
    if not done:
        return text, ()
    pieces.append(text[pos:])
    return "".join(pieces), tuple(r for r in REPAIRS if r in done)


_SYNTAX_CHARS = frozenset("<>&\"'")


def _decode_entities(text: str, code: bool, syntax: bool) -> str:
    """Decode each valid entity. In ``code``, leave those inside string literals and, unless ``syntax``, those that
    decode to < > & " ' (the language's own characters)."""

    def one(m: re.Match[str]) -> str:
        e = m.group()
        if not _valid_entity(e) or (code and _in_code_string(text, m.start())):
            return e
        out = html.unescape(e)
        return out if syntax or out not in _SYNTAX_CHARS else e

    return _ENTITY.sub(one, text)


_BARE_AMP = re.compile(r"&(?!(?:#[0-9]{1,7}|#[xX][0-9A-Fa-f]{1,6}|[A-Za-z][A-Za-z0-9]{1,31});)")


def _entities_consistent(text: str) -> bool:
    """Code whose every < > & is entity-encoded (so it was HTML-escaped as a whole, not an escape function)."""
    return "<" not in text and ">" not in text and _BARE_AMP.search(text) is None


# An entity for one of < > & (what HTML escaping must encode), named or numeric.
_SYNTAX_ENTITY = re.compile(r"&(?:lt|gt|amp|#0*(?:60|62|38)|#[xX]0*(?:3[cCeE]|26));")


def _html_escaped(text: str) -> bool:
    """Code HTML-escaped as a whole: some < > & encoded, none raw. A text without any (a codec test whose bytes
    literals hold ``&real;``) shows no escaping: its entities are its own."""
    return _entities_consistent(text) and _SYNTAX_ENTITY.search(text) is not None


def _decode_percent(text: str) -> tuple[str, bool]:
    leaks, _ = _percent_runs(text)
    pieces: list[str] = []
    pos = 0
    changed = False
    for start, end, _n in leaks:
        try:
            decoded = unquote_to_bytes(text[start:end]).decode("utf-8")
        except UnicodeDecodeError:
            continue
        if any(c < " " and c not in "\n\t" for c in decoded):
            continue
        pieces.append(text[pos:start])
        pieces.append(decoded)
        pos = end
        changed = True
    if not changed:
        return text, False
    pieces.append(text[pos:])
    return "".join(pieces), True


def repair_escapes(text: str, scan: EscapeScan | None = None) -> tuple[str, tuple[str, ...]]:
    """Undo what is unambiguous; return the new text and the repairs applied (names from REPAIRS, in order).

    1. ``json_unescape``: a document JSON-escaped as a whole (backslash leaks, few or no real line breaks, prose or
       serialized) whose text decodes as a JSON string body (``json.loads('"' + text + '"')``) into fewer leaked
       characters; repeated while it still qualifies (twice for double escaping, at most three passes).
    2. In prose only: ``escaped_quotes`` (``\\"`` ``\\'`` ``\\/``, and backslash runs before a quote),
       ``unicode_escapes`` (``\\uXXXX`` runs), ``hex_escapes`` (``\\xXX`` runs that decode as UTF-8).
       Code and TeX backslashes are never touched; literal ``\\n`` ``\\t`` ``\\r`` left in prose with real line
       breaks stay (they may be mentions); the threshold decides about them.
    3. ``html_entities``: each valid entity decoded with ``html.unescape`` (twice, for ``&amp;lt;``), unless the text
       is markup. In code and TeX, only when every ``<`` ``>`` ``&`` in the text is encoded (code HTML-escaped as a
       whole: ``if (a &lt; b)``), and not inside string literals (``'&amp;'`` in an HTML-escaping function): an
       entity in code otherwise is the program's text, and decoding it would change the program.
    4. ``percent_encoding``: in prose, runs outside URLs that decode to valid UTF-8 text.
    """
    if scan is None:
        scan = scan_escapes(text)
    if not scan.counts:
        return text, ()
    repaired: list[str] = []

    text, scan = _json_passes(text, scan, repaired)
    if not scan.counts:
        return text, tuple(repaired)

    if any(k in _LOCAL_KINDS for k in scan.counts) and (scan.content or content_kind(text)) == "prose":
        text, names = _local_repairs(text)
        repaired.extend(names)

    if "html_entity" in scan.counts:
        text = _entity_passes(text, scan, repaired)

    if "percent_encoding" in scan.counts:  # counted in prose only
        text, changed = _decode_percent(text)
        if changed:
            repaired.append("percent_encoding")

    return text, tuple(repaired)


def _json_passes(text: str, scan: EscapeScan, repaired: list[str]) -> tuple[str, EscapeScan]:
    """Repair 1: JSON-unescape while the text qualifies and leaks less after (each pass named in ``repaired``);
    the text and its scan, stopping once nothing leaks."""
    for _ in range(_MAX_JSON_PASSES):
        if not _json_candidate(text, scan):
            break
        decoded = _json_unescape(text)
        if decoded is None or decoded == text:
            break
        after = scan_escapes(decoded)
        if after.chars >= scan.chars:
            break
        text, scan = decoded, after
        repaired.append("json_unescape")
        if not scan.counts:
            break
    return text, scan


def _entity_passes(text: str, scan: EscapeScan, repaired: list[str]) -> str:
    """Repair 3: decode HTML entities, twice at most, stopping when decoding made markup (named in ``repaired``)."""
    code = (scan.content or content_kind(text)) != "prose"
    syntax = not code or _entities_consistent(text)
    for _ in range(2):
        decoded = _decode_entities(text, code, syntax)
        if decoded == text:
            break
        text = decoded
        if "html_entities" not in repaired:
            repaired.append("html_entities")
        if is_markup(text):  # decoding made tags: stop before it decodes markup's own entities
            break
    return text


# --------------------------------------------------------------------------------------------------------------
# Policy
# --------------------------------------------------------------------------------------------------------------


class EscapePolicy(StrictModel):
    """What the clean stage does about escape leaks."""

    mode: Literal["repair", "drop", "flag"] = "repair"
    """repair: undo what is unambiguous, then drop what still leaks above `threshold`; drop: never repair; flag: only count."""

    threshold: float = Field(default=DEFAULT_THRESHOLD, ge=0.0, le=1.0)
    """Drop a document whose escape score (leaked characters per character, after repair in `repair` mode) is above
    this. The default, 0.0005 (1 leaked character in 2,000), is under the score of practically every document
    JSON-escaped as a whole, while clean text scores 0 (see DEFAULT_THRESHOLD). 0 drops any leak; 1 never drops."""


@dataclass(frozen=True, slots=True)
class EscapeOutcome:
    """The result of applying a policy to one document."""

    text: str
    """The text to keep (repaired in `repair` mode, else unchanged); still set when the document is dropped."""
    scan: EscapeScan
    """The scan of the input text."""
    after: EscapeScan | None
    """The scan of the repaired text, or None when nothing was repaired."""
    drop_reason: str | None
    """None to keep, else ``escape_<dominant kind>`` (one of ESCAPE_DROP_REASONS)."""
    repaired: tuple[str, ...]
    """The repairs applied (names from REPAIRS), empty when none."""


def apply_policy(text: str, policy: EscapePolicy) -> EscapeOutcome:
    """Scan ``text`` and act by ``policy``: repair (repair mode), then drop above the threshold (repair, drop)."""
    scan = scan_escapes(text)
    if policy.mode == "flag" or not scan.counts:
        return EscapeOutcome(text, scan, None, None, ())
    final, after, repaired = scan, None, ()
    if policy.mode == "repair":
        new_text, repaired = repair_escapes(text, scan)
        if repaired:
            text, after = new_text, scan_escapes(new_text)
            final = after
    reason = None
    if final.score > policy.threshold:
        dominant = final.dominant
        if dominant is not None:
            reason = f"escape_{dominant}"
    return EscapeOutcome(text, scan, after, reason, repaired)
