"""tiktoken as a faster engine for the byte-level BPE tokenizers it implements exactly, by construction.

tiktoken's built-in encodings download at run time, so the encoding is built offline from the tokenizer's own
merges. The two engines merge differently: `tokenizers` merges the adjacent pair of lowest priority in the merges
list; tiktoken merges the adjacent pair whose concatenated bytes have the lowest rank, and emits a whole pre-token
at once when it is a token. With ranks taken from the merge order (the token made by merge i ranks below the one
made by merge j exactly when i < j) the two are the same algorithm when, checked at load:

1. every merge's two parts are single bytes or tokens made by earlier merges, and no two merges make the same
   token (so `tokenizers` applies merges in non-decreasing priority, level by level); and
2. every token made by a merge is what `tokenizers`' BPE gives for that token's own text.

Proof sketch: run both on one pre-token; until they differ they hold the same tokens. tiktoken differs only by
merging an adjacent pair x, y that is not in the merges list while x + y is a token t made by merge j, with j no
higher than `tokenizers`' next merge k. By 1, every merge below k has been applied; x starts and y ends at token
boundaries that no merge crossed, so the tokens between them are what BPE gives on the text of t alone, which by 2
is t itself by merge j (j < k), or its parts just before merge j (j = k) -- never x, y. So the pair cannot occur.
The whole-pre-token shortcut is 2 itself. Ties go to the leftmost pair in both.

Otherwise the engine is used only when the tokenizer has no normalizer, a byte-level pre-tokenizer with the GPT-2
split pattern and no prefix space, a plain BPE model with every byte in its vocabulary; and non-special added
tokens (GPT-NeoX's runs of spaces) are split off first exactly as `tokenizers` does: leftmost-longest, the
non-normalized ones before the normalized ones, none with `single_word`, `lstrip` or `rstrip`, none overlapping a
special token's text. Anything else encodes with `tokenizers`, and the reason is logged. The engine of every token
file is recorded in `tokens.json`; tests/tokenize/test_fast_engine.py checks identical ids on adversarial text.
"""

from __future__ import annotations

import itertools
import json
import logging
import re
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

from tokenmill.tokenize.tokenizer import LoadedTokenizer

log = logging.getLogger(__name__)

GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
SPLIT_PATTERN = r"""(?:'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+$)|\s+(?!\S)|\s"""
r"""`GPT2_PATTERN` in fewer regex steps: the same pieces, and tiktoken's encode 1.3-1.4x faster than with the pattern
as its own GPT-2 encoding writes it (the demo's mix, a trained vocabulary of 4096). The contractions are the same
seven, no two sharing a first letter; a whitespace run that ends the text is taken whole by `\s+$`, as by
`\s+(?!\S)`; and where `\s+(?!\S)` fails, the run is one character before a non-space, which `\s` takes as `\s+` did.
The alternatives without a lookahead are one group, and none of them possessive: fancy-regex hands such a group
whole to the `regex` crate (one automaton search per piece, not its backtracking VM trying five alternatives, or an
atomic group each); nothing follows the group in its alternative, so its first match in the alternatives' order is
what backtracking takes."""
SEPARATOR = "\x1f"
"""Joins a batch's texts for one tiktoken call (`FastEncoder.encode_flat`): ASCII, so that ASCII text stays one byte
a character and reaches tiktoken without a copy; the unit separator, which text hardly holds (a batch where one does
is encoded a text at a time)."""
_ALLOWED = frozenset({SEPARATOR})


def _bytes_to_unicode() -> dict[str, int]:
    """GPT-2's reversible byte <-> printable character map, as unicode character -> byte."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


@dataclass(frozen=True)
class FastEncoder:
    """tiktoken, plus what `tokenizers` does around its BPE: the added-token split and the rank -> id map."""

    encoding: object
    """A `tiktoken.Encoding` with ranks in merge order."""
    id_of_rank: Optional[np.ndarray]
    """Token id of each rank; None where ranks are the ids (merge order is id order, as in GPT-2)."""
    added_passes: tuple[re.Pattern, ...]
    """Non-special added tokens, non-normalized then normalized: each a leftmost-longest alternation."""
    added_ids: dict[str, int]
    separator_rank: int = -1
    """The rank of `SEPARATOR`, a special token of `encoding` (one past the last rank): where `encode_flat` cuts;
    -1 where tiktoken is older than `encode_to_numpy` (0.9), and each text is encoded alone."""

    def _ids(self, ranks: list[int]) -> np.ndarray:
        ids = np.asarray(ranks, dtype=np.int64)
        return ids if self.id_of_rank is None else self.id_of_rank[ids]

    def encode(self, texts: Sequence[str]) -> list[np.ndarray]:
        """Each text's ids, equal to `tokenizers`' `encode(text, add_special_tokens=False)` with special-token
        strings as text."""
        if not self.added_passes:
            return [self._ids(self.encoding.encode_ordinary(t)) for t in texts]  # no thread pool per batch
        pieces: list[list[str | int]] = [self._split(t) for t in texts]
        plain = [p for doc in pieces for p in doc if isinstance(p, str)]
        encoded = iter([self.encoding.encode_ordinary(t) for t in plain])
        out = []
        for doc in pieces:
            ranks: list[int] = []
            added: list[tuple[int, int]] = []  # (position in ranks, added id): added ids are not ranks
            for p in doc:
                if isinstance(p, str):
                    ranks.extend(next(encoded))
                else:
                    added.append((len(ranks), p))
            ids = self._ids(ranks)
            if added:
                ids = np.insert(ids, [pos for pos, _ in added], [i for _, i in added])
            out.append(ids)
        return out

    def encode_flat(self, texts: Sequence[str], eos_id: int) -> tuple[np.ndarray, np.ndarray]:
        """`encode`'s ids of every text, each followed by `eos_id`, back to back in one array, and each document's
        length (its end-of-text id included): one conversion per batch, not one array per document."""
        if self.added_passes:
            return _flat([np.concatenate([ids, np.array([eos_id], dtype=np.int64)]) for ids in self.encode(texts)])
        joined = self._joined(texts)
        if joined is None:
            return self._each_flat(texts, eos_id)
        ends = np.flatnonzero(joined == self.separator_rank)
        if self.id_of_rank is None:
            out = joined.astype(np.int64)
        else:
            out = np.take(self.id_of_rank, joined, mode="clip")  # the separators' are set below
        out[ends] = eos_id
        return out, np.diff(ends, prepend=-1)

    def _joined(self, texts: Sequence[str]) -> Optional[np.ndarray]:
        """The ranks of the texts, each followed by `separator_rank`, from one tiktoken call on the texts joined by
        `SEPARATOR`; None where a text holds the separator or a lone surrogate, or tiktoken is too old (then each
        text is encoded alone).

        tiktoken's `encode` runs the split pattern and BPE on the text between two allowed special tokens on its
        own, as `encode_ordinary` does on a whole text, so each document's ranks are its own; the separator is one
        character, so no match of it can straddle a document's edge. The batch's ranks come back as one uint32
        buffer instead of a Python int per token."""
        if self.separator_rank < 0:
            return None
        joined = SEPARATOR.join(texts) + SEPARATOR
        if joined.count(SEPARATOR) != len(texts):
            return None
        try:
            return self.encoding.encode_to_numpy(joined, allowed_special=_ALLOWED)
        except UnicodeEncodeError:  # a lone surrogate: `encode_ordinary` replaces it per text, as before
            return None

    def _each_flat(self, texts: Sequence[str], eos_id: int) -> tuple[np.ndarray, np.ndarray]:
        """`encode_flat` with a tiktoken call per text."""
        ranks = [self.encoding.encode_ordinary(t) for t in texts]  # no thread pool: a Ray worker has one core
        lengths = np.fromiter(map(len, ranks), dtype=np.int64, count=len(ranks))
        flat = np.fromiter(itertools.chain.from_iterable(ranks), dtype=np.int64, count=int(lengths.sum()))
        del ranks  # the Python ints take ~36 bytes a token; drop them before the array below
        if self.id_of_rank is not None:
            flat = self.id_of_rank[flat]
        lengths += 1
        out = np.empty(int(lengths.sum()), dtype=np.int64)
        ends = np.cumsum(lengths) - 1
        body = np.ones(out.size, dtype=bool)
        body[ends] = False
        out[body] = flat
        out[ends] = eos_id
        return out, lengths

    def _split(self, text: str) -> list[str | int]:
        parts: list[str | int] = [text]
        for pattern in self.added_passes:
            nxt: list[str | int] = []
            for part in parts:
                if not isinstance(part, str):
                    nxt.append(part)
                    continue
                last = 0
                for m in pattern.finditer(part):
                    if m.start() > last:
                        nxt.append(part[last:m.start()])
                    nxt.append(self.added_ids[m.group()])
                    last = m.end()
                if last < len(part):
                    nxt.append(part[last:])
            parts = nxt
        return parts


def _refusal(tok: LoadedTokenizer) -> tuple[Optional[FastEncoder], str]:
    try:
        import tiktoken
    except ImportError:
        return None, "tiktoken is not installed"
    spec = json.loads(tok.tokenizer.to_str())
    reason = _pipeline_refusal(spec)
    if reason:
        return None, reason
    u2b = _bytes_to_unicode()
    vocab: dict[str, int] = spec["model"]["vocab"]
    rank_of, made, reason = _merged_tokens(spec["model"], vocab, u2b)
    if reason:
        return None, reason
    made_ids = [vocab[t] for t in made]
    if all(x < y for x, y in zip(made_ids, made_ids[1:])):
        ranks, id_of_rank = dict(rank_of), None  # merge order is id order: the ids are the ranks
    else:
        ranks = {c: u2b[c] for c in u2b} | {t: 256 + i for i, t in enumerate(made)}
        id_of_rank = np.empty(256 + len(made), dtype=np.int64)
        for t, r in ranks.items():
            id_of_rank[r] = vocab[t]
    reason = _bpe_refusal(tok, made, vocab)
    if reason:
        return None, reason

    added = [a for a in spec.get("added_tokens", [])]
    special = [a["content"] for a in added if a["special"]]
    plain = [a for a in added if not a["special"]]
    reason = _added_refusal(plain, special)
    if reason:
        return None, reason
    passes = []
    for normalized in (False, True):
        contents = sorted({a["content"] for a in plain if bool(a["normalized"]) == normalized},
                          key=lambda c: (-len(c), c))  # longest first: Python's re takes the first alternative
        if contents:
            passes.append(re.compile("|".join(map(re.escape, contents))))
    byte_ranks = {bytes(u2b[c] for c in t): r for t, r in ranks.items()}
    separator_rank = max(byte_ranks.values()) + 1  # no rank's: `encode_ordinary` never gives it
    # tiktoken 0.9 brought `encode_to_numpy` (pyproject allows 0.7): an older one keeps GPT-2's pattern, text by text
    recent = hasattr(tiktoken.Encoding, "encode_to_numpy")
    encoding = tiktoken.Encoding("tokenmill", pat_str=SPLIT_PATTERN if recent else GPT2_PATTERN,
                                 mergeable_ranks=byte_ranks, special_tokens={SEPARATOR: separator_rank})
    separator_rank = separator_rank if recent else -1
    return FastEncoder(encoding, id_of_rank, tuple(passes), {a["content"]: a["id"] for a in plain}, separator_rank), ""


def _pipeline_refusal(spec: dict) -> str:
    """Why the tokenizer's normalizer, pre-tokenizer or model is not the one tiktoken runs, or ""."""
    pre, model = spec.get("pre_tokenizer") or {}, spec.get("model") or {}
    if spec.get("normalizer") is not None:
        return f"the tokenizer has a normalizer ({spec['normalizer'].get('type')})"
    if pre.get("type") != "ByteLevel" or pre.get("add_prefix_space") or not pre.get("use_regex", True):
        return f"the pre-tokenizer is not byte-level with the GPT-2 pattern and no prefix space ({pre})"
    if model.get("type") != "BPE" or model.get("dropout") or model.get("continuing_subword_prefix") \
            or model.get("end_of_word_suffix") or model.get("ignore_merges"):
        return "the model is not a plain BPE (dropout, subword affixes or ignore_merges)"
    return ""


def _merged_tokens(model: dict, vocab: dict[str, int], u2b: dict[str, int]) -> tuple[dict[str, int], list[str], str]:
    """({token: id} of the bytes and every merged token, the merged tokens in merge order, "") when condition 1
    holds and every byte is in the vocabulary, else ({}, [], why not)."""
    if len(set(vocab.values())) != len(vocab):
        return {}, [], "two vocabulary entries share an id"
    rank_of: dict[str, int] = {}
    for char in u2b:
        if char not in vocab:
            return {}, [], f"byte {u2b[char]} is not in the vocabulary"
        rank_of[char] = vocab[char]
    merges = [m.split(" ", 1) if isinstance(m, str) else m for m in model.get("merges", [])]
    made: list[str] = []
    for i, (a, b) in enumerate(merges):
        if a not in rank_of or b not in rank_of:
            return {}, [], f"merge {i} ({a!r}, {b!r}) uses a part that no earlier merge made"
        if a + b in rank_of or a + b not in vocab:
            return {}, [], f"merge {i} makes {a + b!r}, which another merge also makes or the vocabulary lacks"
        rank_of[a + b] = vocab[a + b]
        made.append(a + b)
    return rank_of, made, ""


def _bpe_refusal(tok: LoadedTokenizer, made: list[str], vocab: dict[str, int]) -> str:
    """Condition 2: BPE alone (no pre-tokenizer, no added tokens) gives every merged token back whole; else why not."""
    bare = json.loads(tok.tokenizer.to_str())
    bare.update(normalizer=None, pre_tokenizer=None, post_processor=None, added_tokens=[])
    from tokenizers import Tokenizer

    alone = Tokenizer.from_str(json.dumps(bare)).encode_batch_fast(made, add_special_tokens=False)
    for t, e in zip(made, alone):
        if e.ids != [vocab[t]]:
            return f"BPE encodes the text of token {t!r} as {e.tokens}, not as the token itself"
    return ""


def _added_refusal(plain: list[dict], special: list[str]) -> str:
    """Why the non-special added tokens cannot be split off first as `tokenizers` does, or ""."""
    for a in plain:
        if a["single_word"] or a["lstrip"] or a["rstrip"] or not a["content"]:
            return f"added token {a['content']!r} has single_word, lstrip or rstrip set"
        for s in special:
            c = a["content"]
            if c in s or s in c or any(s.endswith(c[:k]) or c.endswith(s[:k]) for k in range(1, min(len(c), len(s)))):
                return f"added token {c!r} overlaps the special token {s!r}"
    return ""


_CACHE: dict[str, tuple[Optional[FastEncoder], str]] = {}


def tiktoken_encoding(tok: LoadedTokenizer) -> Optional[FastEncoder]:
    """The tiktoken engine for `tok`, or None (the reason logged) where it would not be exactly `tokenizers`.
    Built once per process and tokenizer."""
    if tok.sha256 not in _CACHE:
        encoder, reason = _refusal(tok)
        if encoder is None:
            log.info("tokenize: encoding with tokenizers, not tiktoken: %s", reason)
        _CACHE[tok.sha256] = encoder, reason
    return _CACHE[tok.sha256][0]


def why_not_fast(tok: LoadedTokenizer) -> str:
    """Why `tiktoken_encoding(tok)` is None ("" when it is not)."""
    tiktoken_encoding(tok)
    return _CACHE[tok.sha256][1]


def _flat(docs: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    lengths = np.fromiter(map(len, docs), dtype=np.int64, count=len(docs))
    return (np.concatenate(docs) if docs else np.empty(0, dtype=np.int64)), lengths


def encode_flat(tok: LoadedTokenizer, encoder: Optional[FastEncoder],
                texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray, str]:
    """`encode_checked` for a batch written as one: every document's ids and end-of-text id back to back, the length
    of each, and the engine that made them."""
    if encoder is None or not texts:
        return (*tok.encode_flat(texts), "tokenizers")
    return (*encoder.encode_flat(texts, tok.eos_id), "tiktoken")


def encode_checked(tok: LoadedTokenizer, encoder: Optional[FastEncoder],
                   texts: Sequence[str]) -> tuple[list[np.ndarray], str]:
    """Every document's ids plus the end-of-text id, and the engine that made them: `tiktoken` where
    `tiktoken_encoding` gave an encoder (checked equal to `tokenizers` at load, see above), else `tokenizers`."""
    if encoder is None or not texts:
        return tok.encode_documents(texts), "tokenizers"
    eos = np.array([tok.eos_id], dtype=np.int64)
    return [np.concatenate([ids, eos]) for ids in encoder.encode(texts)], "tiktoken"
