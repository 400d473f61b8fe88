"""The distinct words a worker has seen, each measured once: its hash, length and Gopher class, looked up by id.

A chunk's million words hold a few tens of thousands of distinct ones, and most of those recur from chunk to chunk:
hashing every word (`ngrams.token_hashes`), measuring and classing it costs several passes over all the words,
where one dictionary lookup per word (`map` over a dict, in C) and arrays indexed by id give the same values.
The same holds one level up: a text's whitespace-separated pieces (`the`, `said.`, `(see`) recur too, so each
distinct piece is cut into words by the tokenizer's regex once, and a text's word ids come from its pieces' ids.
Arrow cuts a chunk's texts into pieces and finds its distinct ones (`utf8_split_whitespace`, `dictionary_encode`,
in C++), so only those become Python strings: a chunk of 4 million characters holds about 700,000 pieces and a
few thousand to tens of thousands of distinct ones.
"""

from __future__ import annotations

from itertools import chain
from typing import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from datatrove.utils.text import PUNCTUATION_SET

from tokenmill.text.quality.ngrams import Units, token_hashes
from tokenmill.text.quality.words import split_words

WORD = 1
"""Class bit: the token has a character that is not punctuation (a Gopher "word")."""
ALPHA = 2
"""Class bit: the token has a letter."""

_EMPTY = np.zeros(0, dtype=np.int64)


def token_class(token: str) -> int:
    """`WORD | ALPHA` bits of a token, as datatrove's Gopher quality filter tells words and alphabetic words."""
    if token.isalpha():
        return WORD | ALPHA
    return any(c not in PUNCTUATION_SET for c in token) * WORD | any(c.isalpha() for c in token) * ALPHA


class _Pieces(dict):
    """piece -> id, for `Vocabulary.text_ids`: a piece seen for the first time is cut into words here, once."""

    def __init__(self, words: "Vocabulary") -> None:
        super().__init__()
        self.words = words
        self.new_tokens: list[int] = []
        """Word ids of the pieces added since the last `Vocabulary._commit`, concatenated."""
        self.new_sizes: list[int] = []
        """Words in each of those pieces."""

    def __missing__(self, piece: str) -> int:
        i = self[piece] = len(self)
        tokens = split_words(piece)
        self.new_tokens.extend(map(self.words.__getitem__, tokens))
        self.new_sizes.append(len(tokens))
        return i


class Vocabulary(dict):
    """token -> id, with `hashes`, `lengths` and `classes` indexed by id; new tokens get theirs in one batch.

    Emptied, between chunks, once it holds `limit` tokens or pieces (about 30 MB each), so memory stays bounded on
    text whose words never repeat (numbers, URLs, code).
    """

    limit = 300_000

    def __init__(self) -> None:
        super().__init__()
        self._new: list[str] = []
        self.hashes = np.zeros(0, dtype=np.uint64)
        self.lengths = np.zeros(0, dtype=np.int64)
        self.classes = np.zeros(0, dtype=np.uint8)
        self.pieces = _Pieces(self)
        self._piece_tokens = _EMPTY  # every piece's word ids, concatenated in piece id order
        self._piece_starts = _EMPTY  # where each piece's ids start in `_piece_tokens`
        self._piece_sizes = _EMPTY

    def __missing__(self, token: str) -> int:
        i = self[token] = len(self)
        self._new.append(token)
        return i

    def _reset_if_full(self) -> None:
        if len(self) >= self.limit or len(self.pieces) >= self.limit:
            self.clear()
            self.hashes, self.lengths, self.classes = self.hashes[:0], self.lengths[:0], self.classes[:0]
            self.pieces.clear()  # their word ids are gone with the words
            self._piece_tokens = self._piece_starts = self._piece_sizes = _EMPTY

    def _commit(self) -> None:
        """Measure the tokens, and lay out the pieces, added since the last call."""
        if self._new:
            new, self._new = self._new, []
            self.hashes = np.concatenate((self.hashes, token_hashes(new)))
            self.lengths = np.concatenate((self.lengths, np.fromiter(map(len, new), dtype=np.int64, count=len(new))))
            self.classes = np.concatenate((self.classes, np.fromiter(map(token_class, new), dtype=np.uint8,
                                                                     count=len(new))))
        p = self.pieces
        if p.new_sizes:
            sizes = np.array(p.new_sizes, dtype=np.int64)
            starts = np.zeros(len(sizes), dtype=np.int64)
            np.cumsum(sizes[:-1], out=starts[1:])
            self._piece_starts = np.concatenate((self._piece_starts, starts + len(self._piece_tokens)))
            self._piece_sizes = np.concatenate((self._piece_sizes, sizes))
            self._piece_tokens = np.concatenate((self._piece_tokens, np.array(p.new_tokens, dtype=np.int64)))
            p.new_tokens, p.new_sizes = [], []

    def text_ids(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """The ids of the words (`split_words`) of every text, concatenated (int64), and each text's word count.

        The same words as `split_words` on the whole text: no token holds whitespace (`str.split` and the regex's
        `\\s` are the same test, `str.isspace`), and the one lookahead (after a number) sees end of text where it
        saw a space, which it treats alike.
        """
        self._reset_if_full()
        pieces, per_text = self._piece_ids(texts)
        self._commit()
        sizes = self._piece_sizes[pieces]
        ends = np.zeros(len(pieces) + 1, dtype=np.int64)  # words before each piece
        np.cumsum(sizes, out=ends[1:])
        ids = self._piece_tokens[np.arange(ends[-1], dtype=np.int64)
                                 + np.repeat(self._piece_starts[pieces] - ends[:-1], sizes)]
        bounds = np.zeros(len(texts) + 1, dtype=np.int64)  # pieces before each text
        np.cumsum(per_text, out=bounds[1:])
        return ids, np.diff(ends[bounds])

    def _piece_ids(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """The ids of every text's whitespace-separated pieces, concatenated, and each text's piece count.

        Cut and deduplicated by Arrow (`utf8_split_whitespace`, whose whitespace is `str.split`'s: the 29 characters
        `str.isspace` accepts, as a test checks; it gives an empty piece for whitespace at either end, dropped here,
        and `dictionary_encode`), so that only a chunk's distinct pieces become Python strings and meet the
        dictionary: the ids are those `str.split` and one lookup per piece give, in the same order."""
        try:
            column = pa.array(texts, pa.string())
        except (pa.ArrowInvalid, UnicodeEncodeError):  # a lone surrogate has no UTF-8: the pieces one by one
            split = [t.split() for t in texts]
            per_text = np.fromiter(map(len, split), dtype=np.int64, count=len(split))
            return np.fromiter(map(self.pieces.__getitem__, chain.from_iterable(split)), dtype=np.int64,
                               count=int(per_text.sum())), per_text
        lists = pc.utf8_split_whitespace(column)
        flat = lists.flatten()
        nonempty = pc.greater(pc.binary_length(flat), 0)
        parent = pc.list_parent_indices(lists).filter(nonempty).to_numpy()
        encoded = pc.dictionary_encode(flat.filter(nonempty))
        distinct = encoded.dictionary.to_pylist()
        ids = np.fromiter(map(self.pieces.__getitem__, distinct), dtype=np.int64, count=len(distinct))
        pieces = ids[encoded.indices.to_numpy(zero_copy_only=False)] if len(parent) else _EMPTY
        return pieces, np.bincount(parent, minlength=len(texts)).astype(np.int64)


def text_units(texts: Sequence[str], vocab: Vocabulary) -> tuple[Units, np.ndarray]:
    """The texts' words (`split_words`) as units, and each word's id in `vocab` (which cuts, hashes and measures
    the pieces and words it has not seen yet)."""
    ids, count = vocab.text_ids(texts)
    return Units(vocab.hashes[ids], vocab.lengths[ids], count), ids
