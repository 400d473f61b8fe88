"""Where a document's whitespace is code's own: pure functions over lines, shared by normalization and its tests.

Code is recognised four ways:

* a whole document whose content is code (``escapes.content_kind``, the detector the escape checks use), or any
  document of a source or subset configured as code (``normalize: {code: document}``, e.g. the Pile's Github);
* Markdown fenced blocks in prose: a line of three or more backticks or tildes (indented at most 3 spaces) opens
  a block that runs to the closing fence of the same character and at least the same length, or to the end of
  the document when none closes it (CommonMark);
* indented blocks in prose: runs of lines that start with a tab or four spaces, with the blank lines between them.
  Unlike Markdown, no blank line is needed before the run: code pasted into a StackExchange answer or a web page
  usually follows its sentence directly ("I tried:\\n    for x in xs:");
* C preprocessor lines in prose (``#define X\\t0x06\\t/* ... */``, ``#include <a.h>\\t// why``): a long C header
  whose comments outweigh its code signals is judged prose as a whole, and its aligned directives are its layout.
"""

from __future__ import annotations

import re
from typing import Sequence

_FENCE_OPEN = re.compile(r" {0,3}(`{3,}|~{3,})(.*)")
_INDENTED = re.compile(r"(?:\t| {4})[ \t]*\S")  # a non-blank line indented by a tab or 4 spaces
_LEADING = re.compile(r"[ \t]*")
_DIRECTIVE = re.compile(r"#[ \t]*(?:include|define|undef|ifn?def|if|elif|else|endif|pragma|error|warning)\b")


def code_block_lines(lines: Sequence[str]) -> list[bool]:
    """For each line of a prose document, whether it belongs to a fenced or indented code block (fence lines
    included; blank lines inside a fence or between two lines of one indented block included) or is a C
    preprocessor directive."""
    n = len(lines)
    mask = [False] * n
    i = 0
    while i < n:
        line = lines[i]
        if _INDENTED.match(line):
            last = j = i
            while j < n and (not lines[j].strip() or _INDENTED.match(lines[j])):
                if lines[j].strip():
                    last = j
                j += 1
            mask[i:last + 1] = [True] * (last + 1 - i)
            i = last + 1
            continue
        m = _FENCE_OPEN.match(line)
        if m and not (m.group(1)[0] == "`" and "`" in m.group(2)):  # a backtick fence's info string has none
            fence = m.group(1)
            close = re.compile(r" {0,3}" + re.escape(fence[0]) + "{" + str(len(fence)) + r",}[ \t]*\Z")
            j = i + 1
            while j < n and not close.match(lines[j]):
                j += 1
            end = min(j, n - 1)
            mask[i:end + 1] = [True] * (end + 1 - i)
            i = end + 1
            continue
        if _DIRECTIVE.match(line):
            mask[i] = True
        i += 1
    return mask


def indentation(line: str) -> str:
    """The line's leading spaces and tabs."""
    return _LEADING.match(line).group()
