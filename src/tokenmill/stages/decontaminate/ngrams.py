"""N-gram hashing of evaluation fields and training documents for GPT-3-style decontamination.

Text is normalised the GPT-3 way: lowercased, punctuation dropped, split on whitespace. Concretely a token is a
maximal run of Unicode letters and digits (regex [^\\W_]+), lowercased; Chinese and Japanese, written without
spaces, use every letter/digit character as a token instead. Each token keeps its (start, end) character span in
the original text, so a matched n-gram can be cut out of the document exactly.

Hashing, deterministic across processes and machines: each token is hashed with xxh3_64 of its UTF-8 bytes; the
hash of the n-gram starting at token i is the polynomial sum_j t[i+j] * B^j mod 2^64 (computed for all i at once
from prefix sums), plus n times a constant, passed through the murmur3 fmix64 finaliser. The same n-gram always
gets the same hash; word and character n-grams of different n never share a hash by construction of the n term.

Which n, and short fields (GPT-3, appendix C): each evaluation set gets its own n, the 5th-percentile length of
its fields clamped to [8, 13] (`gpt3_n`), so that about 95% of its fields are long enough for one n-gram. A field
shorter than its set's n is matched as a whole: the hash of its entire token sequence is indexed (XOR _WHOLE_MIX),
and a document is hashed at that window length too, but only between segment boundaries (_BOUNDARY: line breaks,
sentence punctuation, brackets, quotes), so the field matches only as the same run of whole words standing as a
segment of its own, never inside a longer word or as a phrase inside a sentence. A field under `min_whole_words`
tokens or `min_whole_bytes` bytes of normalised text (a 1-word TriviaQA answer, an ARC choice like "the atom") says
nothing about an item on its own: it is not indexed, and counted as too short to check in the set's `SetCoverage`.
The unit is a segment: a field, or, for a multiple-choice prompt held in one field (`Question: ...\nChoices:\nA.
...`), its stem and each choice (`segments.split_field`), each checked by the rule its own length gives; the set's n
comes from its segments' lengths.

Documents are matched a batch at a time (`find_matches_batch`, the stage's way; `find_matches` is a batch of one):
tokens come from per-code-point tables and array operations over the batch's text rather than a regex per
document, with the same tokens, hashes and matches (`tokenize_batch`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import xxhash

from tokenmill.dedup.polyhash import fmix64 as _fmix64
from tokenmill.dedup.polyhash import powers as _powers
from tokenmill.stages.decontaminate.codepoints import char_table, code_points
from tokenmill.stages.decontaminate.segments import WHOLE as WHOLE_FIELD, split_field

CHAR_LANGS = frozenset({"zh", "ja"})  # languages tokenised by characters

_TOKEN_RE = re.compile(r"[^\W_]+")
_CHAR_RE = re.compile(r"[^\W_]")
_TOKEN_SPLIT = re.compile(r"([^\W_]+)")
_CHAR_SPLIT = re.compile(r"([^\W_])")
_U64 = np.uint64
_MASK = (1 << 64) - 1
_BASE = 0x9E3779B97F4A7C15  # odd, hence invertible mod 2^64
_LEN_MIX = 0xD6E8FEB86659FD93
# A field matched whole is indexed as its window hash XOR this: a different hash from the same words as an n-gram of
# a longer field, so only a match with a segment boundary on either side reaches its owners.
_WHOLE_MIX = _U64(0x6A09E667F3BCC909)
# Segment boundaries, in the non-word text between two tokens: a line break or tab, sentence punctuation, brackets,
# quotes (not the apostrophe), list bullets, table bars, and their CJK forms. Commas and hyphens are not: "the central
# nervous system, which" or "non-central" must not match a field "central nervous system".
_BOUNDARY = re.compile("[\n\r\t\f\v\u2028\u2029"  # line breaks and tabs
                       r'.?!:;()\[\]{}"“”«»|•*#>…'  # sentence punctuation, brackets, quotes, bullets, bars
                       "。？！：；（）「」『』【】《》、]")  # the same in Chinese and Japanese



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


class _TokenHashCache(dict):
    """token -> xxh3_64 of its UTF-8 bytes, computed on first use. Words repeat (Zipf), so most lookups are one C-level
    dict access instead of an encode and a hash call; cleared when it holds _CACHE_MAX tokens (bounded memory; the
    values never depend on what it holds)."""

    def __missing__(self, token: str) -> int:
        value = xxhash.xxh3_64_intdigest(token.encode("utf-8", "surrogatepass"))
        if len(token) <= 24:  # words, not the odd long run of digits or base64
            if len(self) >= _CACHE_MAX:
                self.clear()
            self[token] = value
        return value


_CACHE_MAX = 1 << 17  # about 20 MB per process
_TOKEN_HASHES = _TokenHashCache()


def token_hashes(tokens: list[str]) -> np.ndarray:
    """xxh3_64 of each token's UTF-8 bytes, as uint64."""
    return np.fromiter(map(_TOKEN_HASHES.__getitem__, tokens), dtype=_U64, count=len(tokens))


def ngram_hashes(tokens: list[str], n: int) -> np.ndarray:
    """uint64 hash of every n-gram of `tokens`, in order (length max(0, len(tokens) - n + 1))."""
    return _window_hashes(token_hashes(tokens), n)


def _window_hashes(units: np.ndarray, n: int) -> np.ndarray:
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    if len(units) - n + 1 <= 0:
        return np.empty(0, dtype=_U64)
    return _windows(*_prefix(units), n)


def _prefix(units: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Prefix sums of units * B^j and the inverse powers: every window length is then O(1) per window."""
    base_pow, inv_pow = _powers(len(units))
    prefix = np.zeros(len(units) + 1, dtype=_U64)
    np.cumsum(units * base_pow, out=prefix[1:])
    return prefix, inv_pow


def _windows(prefix: np.ndarray, inv_pow: np.ndarray, n: int) -> np.ndarray:
    """The hash of every window of n units, from _prefix (needs n <= number of units)."""
    m = len(prefix) - n
    out = prefix[n:] - prefix[:m]
    out *= inv_pow[:m]
    out += _U64((n * _LEN_MIX) & _MASK)
    _fmix64(out)
    return out


def gpt3_n(lengths: Iterable[int], *, percentile: float = 5.0, min_n: int = 8, max_n: int = 13) -> int:
    """GPT-3's n for one evaluation set (Brown et al. 2020, appendix C): the `percentile`-th percentile of its
    lengths (nearest rank: the smallest length with at least that share of lengths at or below it), clamped to
    [min_n, max_n]. An empty set gets max_n."""
    ordered = sorted(lengths)
    if not ordered:
        return max_n
    rank = max(1, math.ceil(percentile / 100 * len(ordered)))
    return min(max_n, max(min_n, ordered[rank - 1]))


class Bloom:
    """A one-probe Bloom filter of uint64 hashes, about 32 bits per hash: bit (h >> (64 - b)) is set for each hash
    added. A hash not added passes with probability ~1/32; one random memory access per hash tested."""

    def __init__(self, hashes: np.ndarray) -> None:
        self.bits = min(32, max(12, (max(1, len(hashes)) * 32 - 1).bit_length()))  # at most 512 MB
        self.words = np.zeros(1 << (self.bits - 6), dtype=_U64)
        key = np.asarray(hashes, dtype=_U64) >> _U64(64 - self.bits)
        np.bitwise_or.at(self.words, key >> _U64(6), _U64(1) << (key & _U64(63)))

    def maybe(self, hashes: np.ndarray) -> np.ndarray:
        """Positions i where hashes[i] may have been added (every added one does)."""
        key = hashes >> _U64(64 - self.bits)
        return np.flatnonzero((self.words[key >> _U64(6)] >> (key & _U64(63))) & _U64(1))

    @property
    def nbytes(self) -> int:
        return self.words.nbytes


# How a field is checked: RULES[i] names rule i (Owners.entry_rule); fields neither rule can check are counted under
# NOT_CHECKABLE's reasons.
RULES = ("ngram", "whole")
NGRAM, WHOLE = 0, 1
NOT_CHECKABLE = ("too_short", "no_text")


@dataclass
class Owners:
    """Which (set, item, field) entries contain each indexed hash, in CSR form.

    The owners of index.hashes[i] are entries entry[offsets[i]:offsets[i + 1]] (sorted, no repeats). Entry e is
    (set_names[entry_set[e]], item_ids[entry_item[e]], field_names[entry_field[e]]), checked by rule
    RULES[entry_rule[e]]: its n-grams ("ngram") or its whole normalised text ("whole").
    """

    offsets: np.ndarray      # int64, len(hashes) + 1
    entry: np.ndarray        # int32 entry ids, grouped by hash
    entry_set: np.ndarray    # int32 per entry: index into set_names
    entry_item: np.ndarray   # int32 per entry: index into item_ids
    entry_field: np.ndarray  # int32 per entry: index into field_names
    entry_rule: np.ndarray   # int8 per entry: index into RULES
    set_names: list[str]
    item_ids: list[str]
    field_names: list[str]

    def entry_tuple(self, e: int) -> tuple[str, str, str]:
        return (self.set_names[self.entry_set[e]], self.item_ids[self.entry_item[e]],
                self.field_names[self.entry_field[e]])

    def nbytes(self) -> int:
        arrays = self.offsets.nbytes + self.entry.nbytes + self.entry_set.nbytes + self.entry_item.nbytes \
            + self.entry_field.nbytes + self.entry_rule.nbytes
        tables = sum(len(s.encode("utf-8", "surrogatepass")) for s in self.set_names + self.item_ids
                     + self.field_names)
        return arrays + tables


@dataclass
class SetCoverage:
    """How one evaluation set is checked: its n, and its segments, fields and items counted by rule.

    The unit checked is a segment: a field, or each line of a multiple-choice prompt held in one field (its stem
    and each choice, `segments.split_field`). A segment with at least n tokens is checked by its n-grams
    (`ngram`); a shorter one by its whole normalised text (`whole`), unless it is too short to mean anything on its
    own (`too_short`: fewer than min_whole_words tokens or min_whole_bytes UTF-8 bytes) or has no letters or digits
    at all (`no_text`). A field counts under the best rule any of its segments has, an item under the best any of
    its fields has, in the order ngram, whole, too_short, no_text.
    """

    n: int
    n_rule: str          # "gpt3": from the set's lengths; "fixed": word_n / char_n given
    unit: str            # "words" or "characters"
    p5_length: int       # the 5th-percentile segment length in `unit` (what the GPT-3 rule clamps)
    fields: dict[str, int]
    items: dict[str, int]
    segments: dict[str, int] = field(default_factory=dict)  # "total", then by rule
    segmented_fields: int = 0  # fields cut into segments (multiple-choice prompts); the others are one segment

    def to_dict(self) -> dict:
        return {"n": self.n, "n_rule": self.n_rule, "unit": self.unit, "p5_length": self.p5_length,
                "fields": dict(self.fields), "items": dict(self.items), "segments": dict(self.segments),
                "segmented_fields": self.segmented_fields}


@dataclass
class EvalIndex:
    """Sorted unique hashes of evaluation fields (n-grams of long fields, whole texts of short ones), with the
    fields each came from, the window lengths a document is hashed at, and each set's coverage."""

    hashes: np.ndarray  # sorted unique uint64
    owners: Owners
    # Window lengths a document is hashed at, ascending: each set's n ("ngram") and each length of a field matched
    # whole ("whole"), in words, and in characters for Chinese and Japanese.
    word_lengths: dict[str, tuple[int, ...]] = field(default_factory=lambda: {"ngram": (), "whole": ()})
    char_lengths: dict[str, tuple[int, ...]] = field(default_factory=lambda: {"ngram": (), "whole": ()})
    coverage: dict[str, SetCoverage] = field(default_factory=dict)
    # Anchors: for each kind ("words", "characters") with several n-gram lengths, (a, Bloom of the hash of the first a
    # tokens of every indexed n-gram), a the shortest n: a document is hashed at length a only, and at the other n
    # only where an anchor may start (see find_matches).
    anchors: dict[str, tuple[int, Bloom]] = field(default_factory=dict)
    # Prefilter: only hashes that pass it go on to the binary search, whose cache misses dominate the lookup.
    filter: Bloom = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.hashes = np.asarray(self.hashes, dtype=_U64)
        self.filter = Bloom(self.hashes)

    def lookup(self, hashes: np.ndarray) -> np.ndarray:
        """Positions i with hashes[i] in the index (sorted), vectorised."""
        maybe = self.filter.maybe(hashes)
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
        return [owner[:3] for owner in self.owners_with_rule(h)]

    def owners_with_rule(self, h: int) -> list[tuple[str, str, str, str]]:
        """(set, item, field, rule) of every indexed field matched by hash `h`: rule "ngram" when `h` is one of the
        field's n-grams, "whole" when it is the field's whole text; [] if none."""
        i = self._position(h)
        if i < 0:
            return []
        o = self.owners
        return [(*o.entry_tuple(int(e)), RULES[o.entry_rule[e]]) for e in o.entry[o.offsets[i]:o.offsets[i + 1]]]

    @property
    def n(self) -> dict[str, int]:
        """Each set's n-gram length."""
        return {name: c.n for name, c in self.coverage.items()}

    def nbytes(self) -> int:
        """Approximate memory held: the arrays plus the UTF-8 size of the id tables."""
        return (self.hashes.nbytes + self.filter.nbytes + sum(b.nbytes for _, b in self.anchors.values())
                + self.owners.nbytes())


def build_index(fields: Iterable[tuple[str, str, str, str, str]], *, word_n: int | None = None,
                char_n: int | None = None, min_n: int = 8, max_n: int = 13, percentile: float = 5.0,
                min_whole_words: int = 3, min_whole_bytes: int = 12) -> EvalIndex:
    """Index (set name, item id, field name, text, language) evaluation fields.

    language "zh"/"ja" gives character tokens, anything else words. Each set gets its own n: word_n (char_n for
    character sets) when given, else GPT-3's rule, gpt3_n over the set's field lengths. A field of at least n
    tokens is indexed by its n-grams; a shorter one by the hash of its whole token sequence (a window of its own
    length), so it matches a document only as the same run of whole words, never inside a word; a field with fewer
    than min_whole_words tokens or a normalised text (tokens joined by one space for words) under min_whole_bytes
    UTF-8 bytes is too short to check, and counted. Repeated (set, item, field) triples are one entry. A
    multiple-choice prompt held in one field is indexed as its segments (`segments.split_field`: the stem and each
    choice, named `<field>:stem`, `<field>:A`...), each as a field of its own; the set's n comes from segments.
    """
    _check_lengths(word_n, char_n, min_n, max_n)
    per_set, set_chars, segmented = _segments_by_set(fields)

    set_ids: dict[str, int] = {}
    item_ids: dict[str, int] = {}
    field_ids: dict[str, int] = {}
    entry_ids: dict[tuple[int, int, int], int] = {}
    entry_rules: list[int] = []
    hash_parts: list[np.ndarray] = []
    entry_parts: list[np.ndarray] = []
    lengths: dict[bool, dict[str, set[int]]] = {False: {"ngram": set(), "whole": set()},
                                                 True: {"ngram": set(), "whole": set()}}
    coverage: dict[str, SetCoverage] = {}
    ngram_fields: dict[bool, list[tuple[np.ndarray, int]]] = {False: [], True: []}
    order = ("ngram", "whole", "too_short", "no_text")
    for set_name, entries in per_set.items():
        s = set_ids.setdefault(set_name, len(set_ids))
        chars = set_chars[set_name]
        fixed = char_n if chars else word_n
        segment_lengths = [len(units) for _, _, units, _, _ in entries]
        n = fixed if fixed is not None else gpt3_n(segment_lengths, percentile=percentile, min_n=min_n, max_n=max_n)
        segments_by_rule = dict.fromkeys(order, 0)
        field_best: dict[int, int] = {}
        item_best: dict[str, int] = {}
        for item_id, field_name, units, size, number in entries:
            k = len(units)
            if k == 0:
                rule = "no_text"
            elif k >= n:
                rule = "ngram"
            elif k < min_whole_words or size < min_whole_bytes:
                rule = "too_short"
            else:
                rule = "whole"
            segments_by_rule[rule] += 1
            rank = order.index(rule)
            field_best[number] = min(field_best.get(number, rank), rank)
            item_best[item_id] = min(item_best.get(item_id, rank), rank)
            if rule not in RULES:
                continue
            key = (s, item_ids.setdefault(item_id, len(item_ids)), field_ids.setdefault(field_name, len(field_ids)))
            e = entry_ids.get(key)
            if e is None:
                e = entry_ids[key] = len(entry_ids)
                entry_rules.append(RULES.index(rule))
            if rule == "ngram":
                h = _window_hashes(units, n)
                lengths[chars]["ngram"].add(n)
                ngram_fields[chars].append((units, n))
            else:
                h = _window_hashes(units, k) ^ _WHOLE_MIX
                lengths[chars]["whole"].add(k)
            hash_parts.append(h)
            entry_parts.append(np.full(len(h), e, dtype=np.int32))
        fields_by_rule, items_by_rule = dict.fromkeys(order, 0), dict.fromkeys(order, 0)
        for rank in field_best.values():
            fields_by_rule[order[rank]] += 1
        for rank in item_best.values():
            items_by_rule[order[rank]] += 1
        coverage[set_name] = SetCoverage(
            n=n, n_rule="gpt3" if fixed is None else "fixed", unit="characters" if chars else "words",
            p5_length=gpt3_n(segment_lengths, percentile=percentile, min_n=0, max_n=1 << 62),
            fields=fields_by_rule, items={"total": len(item_best), **items_by_rule},
            segments={"total": len(entries), **segments_by_rule}, segmented_fields=segmented[set_name])
    if hash_parts:
        all_h = np.concatenate(hash_parts)
        all_e = np.concatenate(entry_parts)
    else:
        all_h = np.empty(0, dtype=_U64)
        all_e = np.empty(0, dtype=np.int32)
    order_ix = np.lexsort((all_e, all_h))
    all_h, all_e = all_h[order_ix], all_e[order_ix]
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
                    entry_field=np.ascontiguousarray(keys[:, 2]), entry_rule=np.array(entry_rules, dtype=np.int8),
                    set_names=list(set_ids), item_ids=list(item_ids), field_names=list(field_ids))
    anchors = _anchors(lengths, ngram_fields)
    return EvalIndex(hashes=all_h[starts], owners=owners, anchors=anchors,
                     word_lengths={k: tuple(sorted(v)) for k, v in lengths[False].items()},
                     char_lengths={k: tuple(sorted(v)) for k, v in lengths[True].items()}, coverage=coverage)


def _check_lengths(word_n: int | None, char_n: int | None, min_n: int, max_n: int) -> None:
    if (word_n is not None and word_n < 1) or (char_n is not None and char_n < 1) or min_n < 1:
        raise ValueError("word_n, char_n and min_n must be >= 1")
    if min_n > max_n:
        raise ValueError(f"min_n ({min_n}) must be <= max_n ({max_n})")


def _segments_by_set(fields: Iterable[tuple[str, str, str, str, str]]) -> tuple[
        dict[str, list[tuple[str, str, np.ndarray, int, int]]], dict[str, bool], dict[str, int]]:
    """build_index's first pass: every segment's token hashes (8 bytes a token), grouped by set, to know each set's
    lengths; and per set, whether it is in characters and how many of its fields were split into segments.

    A field is one segment, or (a multiple-choice prompt) its stem and each choice, named `field:stem`, `field:A`...
    """
    per_set: dict[str, list[tuple[str, str, np.ndarray, int, int]]] = {}  # item, name, units, size, field number
    set_chars: dict[str, bool] = {}
    set_fields: dict[str, int] = {}
    segmented: dict[str, int] = {}
    for set_name, item_id, field_name, text, language in fields:
        chars = uses_chars(language)
        if set_chars.setdefault(set_name, chars) != chars:
            raise ValueError(f"evaluation set {set_name!r} mixes word and character languages")
        number = set_fields[set_name] = set_fields.get(set_name, 0) + 1
        parts = split_field(text)
        segmented[set_name] = segmented.get(set_name, 0) + (len(parts) > 1)
        for label, segment in parts:
            tokens, _ = tokenize(segment, language)
            size = len(("" if chars else " ").join(tokens).encode("utf-8", "surrogatepass"))
            name = field_name if label == WHOLE_FIELD else f"{field_name}:{label}"
            per_set.setdefault(set_name, []).append((item_id, name, token_hashes(tokens), size, number))
    return per_set, set_chars, segmented


def _anchors(lengths: dict[bool, dict[str, set[int]]], ngram_fields: dict[bool, list[tuple[np.ndarray, int]]]
             ) -> dict[str, tuple[int, Bloom]]:
    """Per unit with several n, the shortest n and a Bloom filter of every n-gram field's windows of that length."""
    anchors = {}
    for chars, kind in ((False, "words"), (True, "characters")):
        if len(lengths[chars]["ngram"]) > 1:
            a = min(lengths[chars]["ngram"])
            anchors[kind] = (a, Bloom(np.concatenate([_window_hashes(units, a)[:len(units) - n + 1]
                                                      for units, n in ngram_fields[chars]])))
    return anchors


@dataclass
class TokenBatch:
    """The tokens of several texts at once (what `tokenize` gives each, hashed as `token_hashes` does), as arrays.

    Tokens are numbered across the texts: those of text i are offsets[i]:offsets[i + 1]; starts and ends are
    character offsets in their own text. cuts[g] (when asked for) says whether gap g, the non-word text before token
    g (gap len(tokens): after the last), holds a segment boundary (_BOUNDARY) or is a text's start or end.
    """

    starts: np.ndarray   # int64
    ends: np.ndarray     # int64
    offsets: np.ndarray  # int64, len(texts) + 1
    hashes: np.ndarray   # uint64
    cuts: np.ndarray | None = None

    def limits(self) -> np.ndarray:
        """Per token, the end (exclusive) of its text's tokens: a window from token s may reach limits[s]."""
        return np.repeat(self.offsets[1:], np.diff(self.offsets))


def tokenize_batch(texts: list[str] | pa.Array, chars: bool, *, cuts: bool = False) -> TokenBatch:
    """`tokenize` (char_tokens if `chars`, else normalize_tokens) of every text, with array operations over the
    texts' code points instead of a regex pass and a Python string per token: only each distinct token is lowercased
    and hashed. The same tokens, spans and hashes: the token table is the regex's own, and a token lowercased alone
    is what it is within the tokens joined by spaces (the one context rule of str.lower, final sigma, stops at a
    space). `texts` may be an Arrow string array (no nulls): joined in Arrow, no Python string per text."""
    cps, lengths = _joined_code_points(texts)
    is_token = char_table(_CHAR_RE)[cps]
    text_starts = np.zeros(len(texts) + 1, dtype=np.int64)
    np.cumsum(lengths + 1, out=text_starts[1:])
    if chars:
        starts = np.flatnonzero(is_token)
        ends = starts + 1
    else:
        edges = np.diff(is_token.view(np.int8), prepend=np.int8(0), append=np.int8(0))
        starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
    offsets = np.searchsorted(starts, text_starts).astype(np.int64)
    hashes = _batch_hashes(cps, is_token, starts, ends, chars)
    cut = None
    if cuts:
        cut = np.zeros(len(starts) + 1, dtype=bool)
        # A boundary character at p lies in the gap before the first token starting after it.
        cut[np.searchsorted(starts, np.flatnonzero(char_table(_BOUNDARY)[cps]))] = True
        cut[offsets] = True
    text_of = np.repeat(text_starts[:-1], np.diff(offsets))
    return TokenBatch(starts=starts - text_of, ends=ends - text_of, offsets=offsets, hashes=hashes, cuts=cut)


def _joined_code_points(texts: list[str] | pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """The code points of the texts joined by "\\n" (no token character: no token spans two texts), one byte each
    when they are all ASCII (its bytes are its code points: no UTF-32 copy to make), and each text's length."""
    if isinstance(texts, pa.Array):
        lengths = pc.utf8_length(texts).to_numpy(zero_copy_only=False).astype(np.int64)
        joined = pc.binary_join(pa.ListArray.from_arrays(pa.array([0, len(texts)], pa.int32()), texts),
                                pa.scalar("\n", texts.type))[0]
        if pc.all(pc.string_is_ascii(texts)).as_py() is not False:
            return np.frombuffer(joined.as_buffer() or b"", dtype=np.uint8), lengths
        return code_points(joined.as_py()), lengths
    lengths = np.fromiter(map(len, texts), dtype=np.int64, count=len(texts))
    joined = "\n".join(texts)
    # str.isascii reads a flag.
    cps = np.frombuffer(joined.encode("ascii"), dtype=np.uint8) if joined.isascii() else code_points(joined)
    return cps, lengths


def _batch_hashes(cps: np.ndarray, is_token: np.ndarray, starts: np.ndarray, ends: np.ndarray, chars: bool
                  ) -> np.ndarray:
    """token_hashes of the lowercased tokens [starts, ends) of the code points `cps`: each distinct token hashed once."""
    lookup = _TOKEN_HASHES.__getitem__
    if len(starts) == 0:
        return np.empty(0, dtype=_U64)
    if chars:
        distinct, index = np.unique(cps[starts], return_inverse=True)
        return np.fromiter((lookup(chr(c).lower()) for c in distinct.tolist()), dtype=_U64,
                           count=len(distinct))[index]
    # The tokens' code points back to back (one byte each for ASCII, else four: UTF-32, no UTF-8 sizes to add up),
    # as an Arrow binary array: Arrow finds the distinct ones in C, decoded back to the same strings.
    data = cps[is_token]
    codec = "ascii" if data.itemsize == 1 else "utf-32-le"
    bounds = np.zeros(len(starts) + 1, dtype=np.int64)
    np.cumsum((ends - starts) * data.itemsize, out=bounds[1:])
    tokens = pa.Array.from_buffers(pa.large_binary(), len(starts), [None, pa.py_buffer(bounds), pa.py_buffer(data)])
    coded = tokens.dictionary_encode()
    distinct = coded.dictionary.to_pylist()
    return np.fromiter((lookup(t.decode(codec, "surrogatepass").lower()) for t in distinct), dtype=_U64,
                       count=len(distinct))[coded.indices.to_numpy(zero_copy_only=False)]


_BATCH_CHARS = 1 << 22  # characters tokenised at once: about 150 MB at the peak (tracemalloc, English text)


def find_matches(text: str, language: str | None, index: EvalIndex) -> list[tuple[int, int, int]]:
    """Every occurrence in `text` of an indexed hash: (start_char, end_char, hash), by start then end.

    Spans are in the original `text`, from the first character of the run's first token to the end of its last;
    occurrences may overlap (a 20-token copy of a field of a set with n = 13 gives 8 overlapping 13-gram matches).

    N-grams: the document is hashed at the shortest indexed n, a; with several n (sets differ), at each longer n
    only where the anchor Bloom filter says an indexed n-gram may start. Fields matched whole count only as a
    segment of their own: the text between the previous token and the field's first token, and between its last
    token and the next, must each hold a segment boundary (`_BOUNDARY`) or be the start or end of `text`, so a short
    field never matches inside a longer phrase of a sentence; the document is hashed only between boundaries.
    """
    return find_matches_batch([text], [language], index)[0]


def find_matches_batch(texts: list[str] | pa.Array, languages: list[str | None], index: EvalIndex
                       ) -> list[list[tuple[int, int, int]]]:
    """find_matches of each text (in its language), hashing and looking up the texts' tokens together, a few
    million characters at a time: per-document work is then a handful of array operations, not dozens. `texts` may
    be an Arrow string array (no nulls): a shard's text column, never made Python strings."""
    out: list[list[tuple[int, int, int]]] = [[] for _ in range(len(texts))]
    arrow = isinstance(texts, pa.Array)
    sizes = pc.utf8_length(texts).to_numpy(zero_copy_only=False).tolist() if arrow else list(map(len, texts))
    kinds = {lang: uses_chars(lang) for lang in set(languages)}
    for chars in (False, True):
        lengths = index.char_lengths if chars else index.word_lengths
        if not lengths["ngram"] and not lengths["whole"]:
            continue
        docs = [i for i, lang in enumerate(languages) if kinds[lang] == chars]
        start = 0
        while start < len(docs):
            stop, size = start, 0
            while stop < len(docs) and (size < _BATCH_CHARS or stop == start):
                size += sizes[docs[stop]]
                stop += 1
            chunk = docs[start:stop]
            part = texts.take(pa.array(chunk, pa.int64())) if arrow else [texts[i] for i in chunk]
            batch = tokenize_batch(part, chars, cuts=bool(lengths["whole"]))
            for j, start_char, end_char, h in _batch_matches(batch, index, chars):
                out[chunk[j]].append((start_char, end_char, h))
            start = stop
    return out


def _batch_matches(batch: TokenBatch, index: EvalIndex, chars: bool) -> list[tuple[int, int, int, int]]:
    """(text, start_char, end_char, hash) of every indexed window of the batch's texts, by text, start, end, and an
    n-gram before a whole-field match of the same span (the order find_matches promises)."""
    lengths = index.char_lengths if chars else index.word_lengths
    ngram_lengths, whole_lengths = lengths["ngram"], lengths["whole"]
    t = len(batch.hashes)
    limit = batch.limits()
    prefix, inv_pow = _prefix(batch.hashes)
    found: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # (start tokens, lengths, hashes), in rule order
    if ngram_lengths and t >= ngram_lengths[0]:
        a = ngram_lengths[0]
        first = _windows(prefix, inv_pow, a)
        if len(ngram_lengths) == 1:
            hit = index.lookup(first)
            hit = hit[hit + a <= limit[hit]]  # windows across two texts are no window of either
            found.append((hit, np.full(len(hit), a), first[hit]))
        else:
            # Every indexed n-gram's first a tokens are in the anchor filter (the a-grams themselves too): one pass
            # over the texts, then the exact lookups only where an indexed n-gram may start.
            maybe = index.anchors["characters" if chars else "words"][1].maybe(first)
            maybe = maybe[maybe + a <= limit[maybe]]
            hit = index.lookup(first[maybe])
            found.append((maybe[hit], np.full(len(hit), a), first[maybe[hit]]))
            found.append(_lookup_at(index, prefix, inv_pow, maybe, np.array(ngram_lengths[1:]), limit, 0))
    if whole_lengths:
        found.append(_lookup_at(index, prefix, inv_pow, np.flatnonzero(batch.cuts[:t]), np.array(whole_lengths),
                                limit, _WHOLE_MIX, batch.cuts))
    rule = np.concatenate([np.full(len(f[0]), r, dtype=np.int8) for r, f in enumerate(found)] or [np.empty(0, np.int8)])
    if len(rule) == 0:
        return []
    s = np.concatenate([f[0] for f in found]).astype(np.int64)
    e = s + np.concatenate([f[1] for f in found]).astype(np.int64)
    h = np.concatenate([f[2] for f in found])
    order = np.lexsort((rule, e, s))  # token order is text then character order within a text
    s, e, h = s[order], e[order], h[order]
    text = np.searchsorted(batch.offsets, s, side="right") - 1
    return list(zip(text.tolist(), batch.starts[s].tolist(), batch.ends[e - 1].tolist(), h.tolist()))


def _lookup_at(index: EvalIndex, prefix: np.ndarray, inv_pow: np.ndarray, starts: np.ndarray, lengths: np.ndarray,
               limit: np.ndarray, mix, ends: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The windows starting at `starts` of each of `lengths` (that end by limit[start], and where `ends` is True if
    given), hashed XOR `mix` and looked up at once: (starts, lengths, hashes) of those in the index."""
    s = np.repeat(starts, len(lengths))
    n = np.tile(lengths, len(starts))
    keep = s + n <= limit[s]
    s, n = s[keep], n[keep]
    if ends is not None:
        keep = ends[s + n]
        s, n = s[keep], n[keep]
    if len(s) == 0:
        return s, n, np.empty(0, dtype=_U64)
    hashes = _windows_at(prefix, inv_pow, s, n) ^ _U64(mix)
    hit = index.lookup(hashes)
    return s[hit], n[hit], hashes[hit]


def _windows_at(prefix: np.ndarray, inv_pow: np.ndarray, starts: np.ndarray, n) -> np.ndarray:
    """The hashes of the windows of n units (an int, or one per start) starting at `starts` (each <= len - n):
    _windows(...)[starts] for a single n."""
    out = prefix[starts + n] - prefix[starts]
    out *= inv_pow[starts]
    out += np.asarray(n).astype(_U64) * _U64(_LEN_MIX)  # n * _LEN_MIX mod 2^64
    _fmix64(out)
    return out
