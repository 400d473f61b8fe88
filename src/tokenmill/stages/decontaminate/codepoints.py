"""Texts as numpy arrays of code points, and per-code-point tables of one-character regex classes: a whole batch of
documents is classified (token character, segment boundary) in a few array operations instead of a regex pass."""

from __future__ import annotations

import re
from functools import lru_cache

import numpy as np

CODE_POINTS = 0x110000


@lru_cache(maxsize=None)
def char_table(pattern: re.Pattern) -> np.ndarray:
    """bool per code point: whether `pattern`, a class matching one character, matches that character. Built by the
    regex itself over every code point (about 0.2 s, once per process and pattern), so a lookup agrees with it
    exactly, whatever Unicode version Python's `re` follows."""
    every = "".join(map(chr, range(CODE_POINTS)))
    table = np.zeros(CODE_POINTS, dtype=bool)
    table[np.fromiter((m.start() for m in pattern.finditer(every)), dtype=np.int64)] = True
    return table


def code_points(text: str) -> np.ndarray:
    """uint32 code point of each character of `text`, lone surrogates included."""
    return np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)

