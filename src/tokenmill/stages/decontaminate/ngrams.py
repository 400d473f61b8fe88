"""N-gram hashing of evaluation fields and training documents for GPT-3-style decontamination.

Text is normalised the GPT-3 way: lowercased, punctuation dropped, split on whitespace. Concretely a token is a
maximal run of Unicode letters and digits (regex [^\\W_]+), lowercased; Chinese and Japanese, written without
spaces, use every letter/digit character as a token instead. Each token keeps its (start, end) character span in
the original text, so a matched n-gram can be cut out of the document exactly.

Hashing, deterministic across processes and machines: each token is hashed with xxh3_64 of its UTF-8 bytes; the
hash of the n-gram starting at token i is the polynomial sum_j t[i+j] * B^j mod 2^64 (computed for all i at once
from prefix sums), plus n times a constant, passed through the murmur3 fmix64 finaliser. The same n-gram always
gets the same hash; word and character n-grams of different n never share a hash by construction of the n term.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

import xxhash

from tokenmill.dedup.polyhash import fmix64 as _fmix64
from tokenmill.dedup.polyhash import powers as _powers

CHAR_LANGS = frozenset({"zh", "ja"})  # languages tokenised by characters

_TOKEN_RE = re.compile(r"[^\W_]+")
_CHAR_RE = re.compile(r"[^\W_]")
_U64 = np.uint64
_MASK = (1 << 64) - 1
_BASE = 0x9E3779B97F4A7C15  # odd, hence invertible mod 2^64
_LEN_MIX = 0xD6E8FEB86659FD93



def normalize_tokens(text: str) -> tuple[list[str], list[tuple[int, int]]]:
    """Lowercased maximal runs of letters and digits of `text`, with each one's (start, end) span in `text`."""
    tokens: list[str] = []
    spans: list[tuple[int, int]] = []
    for m in _TOKEN_RE.finditer(text):
        tokens.append(m.group().lower())
        spans.append(m.span())
    return tokens, spans


def char_tokens(text: str) -> tuple[list[str], list[tuple[int, int]]]:
    """Every letter or digit character of `text`, lowercased, as a token, with its (i, i + 1) span."""
    tokens: list[str] = []
    spans: list[tuple[int, int]] = []
    for m in _CHAR_RE.finditer(text):
        tokens.append(m.group().lower())
        spans.append(m.span())
    return tokens, spans


def uses_chars(language: str | None) -> bool:
    """Whether a text tagged `language` is tokenised by characters: "zh", "ja" (also "zh-Hant", "ja_JP", "ZH")."""
    return bool(language) and re.split(r"[-_]", language.lower(), maxsplit=1)[0] in CHAR_LANGS


def tokenize(text: str, language: str | None) -> tuple[list[str], list[tuple[int, int]]]:
    """char_tokens for Chinese/Japanese, normalize_tokens otherwise."""
    return char_tokens(text) if uses_chars(language) else normalize_tokens(text)


def token_hashes(tokens: list[str]) -> np.ndarray:
    """xxh3_64 of each token's UTF-8 bytes, as uint64."""
    return np.fromiter((xxhash.xxh3_64_intdigest(t.encode("utf-8", "surrogatepass")) for t in tokens),
                       dtype=_U64, count=len(tokens))


def ngram_hashes(tokens: list[str], n: int) -> np.ndarray:
    """uint64 hash of every n-gram of `tokens`, in order (length max(0, len(tokens) - n + 1))."""
    return _window_hashes(token_hashes(tokens), n)


def _window_hashes(units: np.ndarray, n: int) -> np.ndarray:
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    m = len(units) - n + 1
    if m <= 0:
        return np.empty(0, dtype=_U64)
    base_pow, inv_pow = _powers(len(units))
    prefix = np.zeros(len(units) + 1, dtype=_U64)
    np.cumsum(units * base_pow, out=prefix[1:])
    out = prefix[n:] - prefix[:m]
    out *= inv_pow[:m]
    out += _U64((n * _LEN_MIX) & _MASK)
    _fmix64(out)
    return out






@dataclass
class Owners:
    """Which (set, item, field) entries contain each indexed hash, in CSR form.

    The owners of index.hashes[i] are entries entry[offsets[i]:offsets[i + 1]] (sorted, no repeats). Entry e is
    (set_names[entry_set[e]], item_ids[entry_item[e]], field_names[entry_field[e]]).
    """

    offsets: np.ndarray      # int64, len(hashes) + 1
    entry: np.ndarray        # int32 entry ids, grouped by hash
    entry_set: np.ndarray    # int32 per entry: index into set_names
    entry_item: np.ndarray   # int32 per entry: index into item_ids
    entry_field: np.ndarray  # int32 per entry: index into field_names
    set_names: list[str]
    item_ids: list[str]
    field_names: list[str]

    def entry_tuple(self, e: int) -> tuple[str, str, str]:
        return (self.set_names[self.entry_set[e]], self.item_ids[self.entry_item[e]],
                self.field_names[self.entry_field[e]])

    def nbytes(self) -> int:
        arrays = self.offsets.nbytes + self.entry.nbytes + self.entry_set.nbytes + self.entry_item.nbytes \
            + self.entry_field.nbytes
        tables = sum(len(s.encode("utf-8", "surrogatepass")) for s in self.set_names + self.item_ids
                     + self.field_names)
        return arrays + tables


@dataclass
class EvalIndex:
    """Sorted unique n-gram hashes of evaluation fields, with the fields each came from."""

    hashes: np.ndarray  # sorted unique uint64
    owners: Owners
    word_n: int
    char_n: int
    skipped_short_fields: dict[str, int] = field(default_factory=dict)  # eval set -> fields with < n tokens
    # Prefilter: bit (h >> (64 - filter_bits)) is set for every indexed h; about 16 bits per hash, so a hash not in
    # the index passes with probability <= 1/16 and only those go on to the binary search (cache misses dominate).
    filter_bits: int = field(init=False, repr=False, default=0)
    filter: np.ndarray = field(init=False, repr=False, default_factory=lambda: np.zeros(1, dtype=_U64))

    def __post_init__(self) -> None:
        self.hashes = np.asarray(self.hashes, dtype=_U64)
        bits = min(32, max(12, (max(1, len(self.hashes)) * 16 - 1).bit_length()))
        self.filter_bits = bits
        self.filter = np.zeros(1 << (bits - 6), dtype=_U64)
        key = self.hashes >> _U64(64 - bits)
        np.bitwise_or.at(self.filter, key >> _U64(6), _U64(1) << (key & _U64(63)))

    def lookup(self, hashes: np.ndarray) -> np.ndarray:
        """Positions i with hashes[i] in the index (sorted), vectorised."""
        key = hashes >> _U64(64 - self.filter_bits)
        maybe = np.flatnonzero((self.filter[key >> _U64(6)] >> (key & _U64(63))) & _U64(1))
        if len(maybe) == 0 or len(self.hashes) == 0:
            return maybe
        cand = hashes[maybe]
        pos = np.searchsorted(self.hashes, cand)
        np.minimum(pos, len(self.hashes) - 1, out=pos)
        return maybe[self.hashes[pos] == cand]

    def __len__(self) -> int:
        return len(self.hashes)

    def _position(self, h: int) -> int:
        i = int(np.searchsorted(self.hashes, _U64(h)))
        return i if i < len(self.hashes) and int(self.hashes[i]) == int(h) else -1

    def __contains__(self, h: int) -> bool:
        return self._position(h) >= 0

    def owners_of(self, h: int) -> list[tuple[str, str, str]]:
        """(set, item, field) of every indexed field containing the n-gram with hash `h`; [] if none."""
        i = self._position(h)
        if i < 0:
            return []
        o = self.owners
        return [o.entry_tuple(int(e)) for e in o.entry[o.offsets[i]:o.offsets[i + 1]]]

    def nbytes(self) -> int:
        """Approximate memory held: the arrays plus the UTF-8 size of the id tables."""
        return self.hashes.nbytes + self.filter.nbytes + self.owners.nbytes()


def build_index(fields: Iterable[tuple[str, str, str, str, str]], *, word_n: int = 13,
                char_n: int = 13) -> EvalIndex:
    """Index the n-grams of (set name, item id, field name, text, language) evaluation fields.

    language "zh"/"ja" gives character n-grams of length char_n, anything else word n-grams of length word_n. A
    field with fewer tokens than n holds no n-gram: it is not indexed, and counted in skipped_short_fields under
    its set. Repeated (set, item, field) triples are one entry.
    """
    if word_n < 1 or char_n < 1:
        raise ValueError("word_n and char_n must be >= 1")
    set_ids: dict[str, int] = {}
    item_ids: dict[str, int] = {}
    field_ids: dict[str, int] = {}
    entry_ids: dict[tuple[int, int, int], int] = {}
    skipped: dict[str, int] = {}
    hash_parts: list[np.ndarray] = []
    entry_parts: list[np.ndarray] = []
    for set_name, item_id, field_name, text, language in fields:
        s = set_ids.setdefault(set_name, len(set_ids))
        tokens, _ = tokenize(text, language)
        n = char_n if uses_chars(language) else word_n
        if len(tokens) < n:
            skipped[set_name] = skipped.get(set_name, 0) + 1
            continue
        key = (s, item_ids.setdefault(item_id, len(item_ids)), field_ids.setdefault(field_name, len(field_ids)))
        e = entry_ids.setdefault(key, len(entry_ids))
        h = ngram_hashes(tokens, n)
        hash_parts.append(h)
        entry_parts.append(np.full(len(h), e, dtype=np.int32))
    if hash_parts:
        all_h = np.concatenate(hash_parts)
        all_e = np.concatenate(entry_parts)
    else:
        all_h = np.empty(0, dtype=_U64)
        all_e = np.empty(0, dtype=np.int32)
    order = np.lexsort((all_e, all_h))
    all_h, all_e = all_h[order], all_e[order]
    keep = np.ones(len(all_h), dtype=bool)
    keep[1:] = (all_h[1:] != all_h[:-1]) | (all_e[1:] != all_e[:-1])  # drop repeats within one entry
    all_h, all_e = all_h[keep], all_e[keep]
    new_hash = np.ones(len(all_h), dtype=bool)
    new_hash[1:] = all_h[1:] != all_h[:-1]
    starts = np.flatnonzero(new_hash)
    offsets = np.empty(len(starts) + 1, dtype=np.int64)
    offsets[:-1] = starts
    offsets[-1] = len(all_h)
    keys = np.array(list(entry_ids), dtype=np.int32).reshape(-1, 3)
    owners = Owners(offsets=offsets, entry=all_e.astype(np.int32, copy=False),
                    entry_set=np.ascontiguousarray(keys[:, 0]), entry_item=np.ascontiguousarray(keys[:, 1]),
                    entry_field=np.ascontiguousarray(keys[:, 2]), set_names=list(set_ids),
                    item_ids=list(item_ids), field_names=list(field_ids))
    return EvalIndex(hashes=all_h[starts], owners=owners, word_n=word_n, char_n=char_n,
                     skipped_short_fields=skipped)


def find_matches(text: str, language: str | None, index: EvalIndex) -> list[tuple[int, int, int]]:
    """Every occurrence in `text` of an indexed n-gram: (start_char, end_char, hash), in document order.

    Spans are in the original `text`, from the first character of the n-gram's first token to the end of its
    last; occurrences may overlap (a 20-token copy of an eval field gives 8 overlapping 13-gram matches).
    """
    chars = uses_chars(language)
    n = index.char_n if chars else index.word_n
    if chars:
        tokens = [c.lower() for c in _CHAR_RE.findall(text)]
    else:
        # findall is faster than finditer; spans are only worked out for documents with a match (few).
        # str.lower never yields a space, so one lower() of the joined tokens splits back token for token.
        tokens = " ".join(_TOKEN_RE.findall(text)).lower().split(" ") if text else []
        if tokens == [""]:
            tokens = []
    hashes = ngram_hashes(tokens, n)
    if len(hashes) == 0:
        return []
    hit = index.lookup(hashes)
    if len(hit) == 0:
        return []
    spans = [m.span() for m in (_CHAR_RE if chars else _TOKEN_RE).finditer(text)]
    return [(spans[i][0], spans[i + n - 1][1], int(hashes[i])) for i in hit.tolist()]
