"""THE text preparation of quality classifiers: a normalized text to the one line fastText reads.

Training (`train.py`) and scoring (`score.py`, then the clean filter) both call `prepare` with the options the
model's sidecar records, so a text becomes the same line in both. It runs after the clean stage's normalization
(`stages/clean/normalize.py`), which the caller applies: the clean chain has done it by the time a filter sees a text.
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
