"""THE text preparation of quality classifiers: a normalized text to the one line fastText reads.

Training (`train.py`) and scoring (`score.py`, then the clean filter) both call `prepare` with the options the
model's sidecar records, so a text becomes the same line in both. It runs after the clean stage's normalization
(`text/normalize.py`), which the caller applies: the clean chain has done it by the time a filter sees a text.
Scoring hands fastText `predict_line(text)`: the same words as `prepare(text)`, as UTF-8 bytes, whitespace runs left
for fastText to skip, about 3x cheaper (tests/classifier/test_prepare.py checks the words, test_score the scores).
"""

from __future__ import annotations

from tokenmill.classifier.config import LABEL_PREFIX, PrepareOptions

_NOT_A_LABEL = "_label_"
"""What `__label__` inside a text becomes: fastText would take a word starting with it as a label (in training, a
second label on the line; in scoring, a word silently left out)."""


def prepare(text: str, options: PrepareOptions) -> str:
    """The fastText line for `text`: lower-cased (if asked), `__label__` defused, whitespace runs (newlines
    included) to one space, ends stripped, cut to `max_chars`; text that is not valid UTF-8 (a lone surrogate)
    gets `?` for the bad code points, as fastText's C++ side could not take it."""
    if options.lowercase:
        text = text.lower()
    if LABEL_PREFIX in text:
        text = text.replace(LABEL_PREFIX, _NOT_A_LABEL)
    if "\x00" in text:
        text = text.replace("\x00", " ")
    # Whitespace runs (newlines included) to one space, ends dropped: what fastText splits words on (space, tab,
    # newline, vertical tab, carriage return, form feed, NUL) and every other Unicode space. `str.split()` splits
    # on exactly the characters `\s` matches (both are Py_UNICODE_ISSPACE) about 3x faster than a regex `sub`,
    # whose time was two thirds of the classifier filter's (benchmarks/classifier.py); NUL is not among them.
    text = " ".join(text.split())
    if options.max_chars is not None and len(text) > options.max_chars:
        text = text[:options.max_chars].rstrip()
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            text = text.encode("utf-8", "replace").decode("utf-8")
    return text


_SPACES_FASTTEXT_KEEPS = "\x1c\x1d\x1e\x1f\x85\xa0\u1680" + "".join(map(chr, range(0x2000, 0x200B))) + \
    "\u2028\u2029\u202f\u205f\u3000"
"""The characters `str.split()` splits on (Py_UNICODE_ISSPACE) that fastText does not: it splits on space, `\\t`,
`\\n`, `\\v`, `\\f`, `\\r` and NUL only (`Dictionary::readWord`). A text holding one takes `prepare`'s path."""
_NEWLINE_AND_NUL_TO_SPACE = bytes.maketrans(b"\n\x00", b"  ")


def predict_line(text: str, options: PrepareOptions) -> bytes:
    """What fastText's predict reads for `text`: exactly `prepare(text, options)`'s words, UTF-8, ending in `\\n`.

    fastText skips runs of its own whitespace between words, so the collapse `prepare` does is left to it: only the
    newline (which would end the line) and NUL go, by a byte table. A text holding a space fastText would keep as a
    character (`_SPACES_FASTTEXT_KEEPS`, such as U+00A0), or with `max_chars` set (its cut counts collapsed
    characters), goes through `prepare` itself. Single-character `in` tests are a memchr over the text (none at all
    above the text's widest character), so the check is about a tenth of the split and join it spares.
    """
    line = text.lower() if options.lowercase else text
    if options.max_chars is not None:
        return prepare(text, options).encode("utf-8") + b"\n"
    for space in _SPACES_FASTTEXT_KEEPS:  # a plain loop: a fifth cheaper than any() over a generator
        if space in line:
            return prepare(text, options).encode("utf-8") + b"\n"
    if LABEL_PREFIX in line:
        line = line.replace(LABEL_PREFIX, _NOT_A_LABEL)
    try:
        data = line.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: `?`, as prepare does
        data = line.encode("utf-8", "replace")
    return data.translate(_NEWLINE_AND_NUL_TO_SPACE) + b"\n"
