"""The distinct words a worker has seen, each measured once: its hash, length and Gopher class, looked up by id.

A chunk's million words hold a few tens of thousands of distinct ones, and most of those recur from chunk to chunk:
hashing every word (`ngrams.token_hashes`), measuring and classing it costs several passes over all the words,
where one dictionary lookup per word (`map` over a dict, in C) and arrays indexed by id give the same values.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
from datatrove.utils.text import PUNCTUATION_SET

from tokenmill.stages.clean.quality.ngrams import token_hashes

WORD = 1
"""Class bit: the token has a character that is not punctuation (a Gopher "word")."""
ALPHA = 2
"""Class bit: the token has a letter."""


def token_class(token: str) -> int:
    """`WORD | ALPHA` bits of a token, as datatrove's Gopher quality filter tells words and alphabetic words."""
    if token.isalpha():
        return WORD | ALPHA
    return any(c not in PUNCTUATION_SET for c in token) * WORD | any(c.isalpha() for c in token) * ALPHA


class Vocabulary(dict):
    """token -> id, with `hashes`, `lengths` and `classes` indexed by id; new tokens get theirs in one batch.

    Emptied, between chunks, once it holds `limit` tokens (about 30 MB), so memory stays bounded on text whose
    words never repeat (numbers, URLs, code).
    """

    limit = 300_000

    def __init__(self) -> None:
        super().__init__()
        self._new: list[str] = []
        self.hashes = np.zeros(0, dtype=np.uint64)
        self.lengths = np.zeros(0, dtype=np.int64)
        self.classes = np.zeros(0, dtype=np.uint8)

    def __missing__(self, token: str) -> int:
        i = self[token] = len(self)
        self._new.append(token)
        return i

    def ids(self, tokens: Sequence[str]) -> np.ndarray:
        """The id of each token (int64), measuring the tokens never seen before."""
        if len(self) >= self.limit:
            self.clear()
            self.hashes, self.lengths, self.classes = self.hashes[:0], self.lengths[:0], self.classes[:0]
        ids = np.fromiter(map(self.__getitem__, tokens), dtype=np.int64, count=len(tokens))
        if self._new:
            new, self._new = self._new, []
            self.hashes = np.concatenate((self.hashes, token_hashes(new)))
            self.lengths = np.concatenate((self.lengths, np.fromiter(map(len, new), dtype=np.int64, count=len(new))))
            self.classes = np.concatenate((self.classes, np.fromiter(map(token_class, new), dtype=np.uint8,
                                                                     count=len(new))))
        return ids
