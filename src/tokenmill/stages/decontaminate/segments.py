"""A multiple-choice prompt cut into its segments, the question stem and each choice, its scaffolding left out.

Many exports store a multiple-choice item as one prompt field, MosaicML's ICL tasks among them (CommonsenseQA):

    Question: A revolving door is convenient for two direction travel, but it also serves as a security measure at a what?
    Choices:
    A. bank
    B. department store
    ...
    Answer:

Matched as one field, its n-grams run across the stem and the choices, so a stem quoted alone in a web page holds
none of them. `split_field` gives each line its own segment, which the index checks by its own length
(`ngrams.build_index`): the stem (its lines before the choices, `Question:` or `Q:` dropped), and each choice after
its label. A field is in this layout when it ends with a block of at least two choice lines labelled `A.`, `A)` or
`(A)`, in order from A, followed by nothing but blank lines or an `Answer` line; label-only lines (`Choices:`,
`Options:`, `Answer:`) are scaffolding. Any other field is one segment, the whole text, as before: a passage's lines
(a LAMBADA story, a GSM8K solution, a HumanEval prompt) are not items of their own.
"""

from __future__ import annotations

import re

WHOLE = ""
"""The name of a field's only segment when it is not in the multiple-choice layout: the field is matched whole."""

# A choice line: `A. text`, `A) text` or `(A) text` (not `A: text`, the answer of a Q/A pair).
_CHOICE = re.compile(r"[ \t]*(?:\(([A-Z])\)|([A-Z])[.)])[ \t]+(\S.*)")
# Lines that only name what follows.
_LABEL = re.compile(r"[ \t]*(?:answer choices|choices|options|answer)[ \t]*:[ \t]*", re.I)
# What may follow the choices: the answer's label, with a letter or a choice's text after it at most.
_ANSWER = re.compile(r"[ \t]*answer[ \t]*:.*", re.I)
_QUESTION = re.compile(r"[ \t]*(?:question|q)[ \t]*:[ \t]*", re.I)
_MIN_CHOICES = 2


def split_field(text: str) -> list[tuple[str, str]]:
    """(segment name, text) of a field: `stem` (`stem2`, `stem3`... for a stem of several lines) and each choice by
    its letter (`A`, `B`, ...) for a multiple-choice prompt; else `[(WHOLE, text)]`."""
    if "\n" not in text:
        return [(WHOLE, text)]
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    end = len(lines)
    while end and (not lines[end - 1].strip() or _ANSWER.fullmatch(lines[end - 1])):
        end -= 1
    # Choice lines back from the end (blank lines between them allowed): (line index, letter, text), last first.
    block: list[tuple[int, str, str]] = []
    for i in range(end - 1, -1, -1):
        if not lines[i].strip():
            continue
        m = _CHOICE.fullmatch(lines[i])
        if m is None:
            break
        block.append((i, m.group(1) or m.group(2), m.group(3).rstrip()))
    # The choices read A, B, C... to the end; a choice line before their A ("I. ..." in a stem's list) is stem.
    choices: list[tuple[int, str, str]] = []
    for entry in block:
        choices.insert(0, entry)
        if entry[1] == "A":
            break
    letters = [letter for _, letter, _ in choices]
    if len(choices) < _MIN_CHOICES or letters != [chr(ord("A") + k) for k in range(len(choices))]:
        return [(WHOLE, text)]
    stem = [line.strip() for line in lines[:choices[0][0]] if line.strip() and not _LABEL.fullmatch(line)]
    if stem and (m := _QUESTION.match(stem[0])):
        stem[0] = stem[0][m.end():]
    stem = [line for line in stem if line]
    return [("stem" if k == 0 else f"stem{k + 1}", line) for k, line in enumerate(stem)] + \
        [(letter, choice) for _, letter, choice in choices]
