"""The distinct words a worker has seen, each measured once: its hash, length and Gopher class, looked up by id.

A chunk's million words hold a few tens of thousands of distinct ones, and most of those recur from chunk to chunk:
hashing every word (`ngrams.token_hashes`), measuring and classing it costs several passes over all the words,
where one dictionary lookup per word (`map` over a dict, in C) and arrays indexed by id give the same values.
The same holds one level up: a text's whitespace-separated pieces (`the`, `said.`, `(see`) recur too, so each
distinct piece is cut into words by the tokenizer's regex once, and a text's word ids come from its pieces' ids.
numpy cuts a chunk's texts into pieces on their UTF-8 bytes (`split_pieces`) and Arrow finds the distinct ones
(`dictionary_encode`, in C++), so only those become Python strings: a chunk of 4 million characters holds about
700,000 pieces and a few thousand to tens of thousands of distinct ones.
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


_SPACES = [c for c in range(0x10000) if chr(c).isspace()]
"""The code points `str.split` cuts at (`str.isspace`; none lies beyond the BMP, as a test checks)."""
_WIDE_SPACES = np.array([c for c in _SPACES if c >= 0x80], dtype=np.int64)
"""Whitespace of two UTF-8 bytes (lead byte C2) or three (lead bytes E1 to E3)."""
if [c for c in _SPACES if c < 0x80] != [*range(9, 14), *range(28, 33)] or any(
        len(chr(c).encode()) > 3 or chr(c).encode()[0] not in (0xC2, 0xE1, 0xE2, 0xE3) for c in _WIDE_SPACES):
    raise ImportError("str.isspace has whitespace `split_pieces` does not look for")
_U8 = np.uint8


def _space_bytes(b: np.ndarray) -> np.ndarray:
    """True for each byte of UTF-8 `b` that is part of a whitespace character (`str.isspace`)."""
    space = ((b - _U8(9)) <= _U8(4)) | ((b - _U8(28)) <= _U8(4))  # 9-13, 28-32 (the bytes wrap below 9 and 28)
    lead = np.flatnonzero((b == _U8(0xC2)) | ((b - _U8(0xE1)) <= _U8(2)))  # never a continuation byte: a character
    if len(lead):
        last = len(b) - 1  # a character's bytes are all in `b`: the clip only keeps a 2-byte one's third in range
        b0, b1, b2 = (b[np.minimum(lead + k, last)].astype(np.int64) for k in range(3))
        two = b0 == 0xC2
        code = np.where(two, ((b0 & 0x1F) << 6) | (b1 & 0x3F), ((b0 & 0x0F) << 12) | ((b1 & 0x3F) << 6) | (b2 & 0x3F))
        wide = np.isin(code, _WIDE_SPACES)
        at = lead[wide]
        space[at] = space[at + 1] = True
        space[at[~two[wide]] + 2] = True
    return space


def split_pieces(column: pa.Array) -> tuple[pa.Array, np.ndarray]:
    """Every text's whitespace-separated pieces (`str.split()`), concatenated as one array, and each text's count.

    `column` is a large_string array as `pa.array` builds it (no offset). Its UTF-8 bytes are cut with numpy: the
    pieces and the gaps between them are the runs of non-whitespace and whitespace bytes, a run that spans two
    texts is cut where they meet, and Arrow takes the pieces from an array of pieces and gaps over the same bytes.
    About 3x faster than `pc.utf8_split_whitespace`, which decodes every character and builds each text's list."""
    offsets = np.frombuffer(column.buffers()[1], dtype=np.int64)[:len(column) + 1]
    data = column.buffers()[2]
    if data is None or offsets[-1] == 0:
        return pa.array([], pa.large_string()), np.zeros(len(column), dtype=np.int64)
    b = np.frombuffer(data, dtype=np.uint8)[:offsets[-1]]
    solid = np.zeros(len(b) + 2, dtype=bool)  # not whitespace, with whitespace before the first byte and after
    np.logical_not(_space_bytes(b), out=solid[1:-1])
    cuts = np.flatnonzero(solid[1:] != solid[:-1])  # a piece's start, its end, the next one's start, ...
    if not len(cuts):  # only whitespace: no piece
        return pa.array([], pa.large_string()), np.zeros(len(column), dtype=np.int64)
    inner = np.unique(offsets[1:-1])  # once each: an empty text puts two texts' edges at one place
    inner = inner[solid[inner] & solid[inner + 1]]  # texts that meet inside a run: an empty gap between them
    if len(inner):
        cuts = np.insert(cuts, np.repeat(np.searchsorted(cuts, inner), 2), np.repeat(inner, 2))
    runs = pa.LargeStringArray.from_buffers(len(cuts) - 1, pa.py_buffer(cuts), data)
    starts = cuts[0::2]
    pieces = runs.take(pa.array(np.arange(0, len(cuts) - 1, 2, dtype=np.int64)))
    return pieces, np.diff(np.searchsorted(starts, offsets)).astype(np.int64)


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

        Cut on the UTF-8 bytes (`split_pieces`) and deduplicated by Arrow (`dictionary_encode`), so that only a
        chunk's distinct pieces become Python strings and meet the dictionary: the ids are those `str.split` and one
        lookup per piece give, in the same order."""
        try:
            column = pa.array(texts, pa.large_string())
        except (pa.ArrowInvalid, UnicodeEncodeError):  # a lone surrogate has no UTF-8: the pieces one by one
            split = [t.split() for t in texts]
            per_text = np.fromiter(map(len, split), dtype=np.int64, count=len(split))
            return np.fromiter(map(self.pieces.__getitem__, chain.from_iterable(split)), dtype=np.int64,
                               count=int(per_text.sum())), per_text
        flat, per_text = split_pieces(column)
        encoded = pc.dictionary_encode(flat)
        distinct = encoded.dictionary.to_pylist()
        ids = np.fromiter(map(self.pieces.__getitem__, distinct), dtype=np.int64, count=len(distinct))
        pieces = ids[encoded.indices.to_numpy(zero_copy_only=False)] if len(flat) else _EMPTY
        return pieces, per_text


def text_units(texts: Sequence[str], vocab: Vocabulary) -> tuple[Units, np.ndarray]:
    """The texts' words (`split_words`) as units, and each word's id in `vocab` (which cuts, hashes and measures
    the pieces and words it has not seen yet)."""
    ids, count = vocab.text_ids(texts)
    return Units(vocab.hashes[ids], vocab.lengths[ids], count), ids
