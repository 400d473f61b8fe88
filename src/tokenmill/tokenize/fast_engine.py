"""tiktoken as a faster engine for byte-level BPE tokenizers it implements exactly, checked on every shard.

tiktoken's built-in encodings download at run time, so the encoding is built offline from the tokenizer's own
vocabulary. It is used only when the tokenizer has no normalizer, a byte-level pre-tokenizer with the GPT-2 split
pattern and no prefix space, and a plain BPE model; and then only for a shard whose sample (its first documents and
every non-ASCII or whitespace-heavy one) encodes to identical ids with both engines. Otherwise `tokenizers` encodes
the whole shard, and the engine used is recorded.
"""

from __future__ import annotations

import json
from typing import Sequence

import numpy as np

from tokenmill.tokenize.tokenizer import LoadedTokenizer

GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
CHECK_FIRST = 32
CHECK_MAX = 256


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


def tiktoken_encoding(tok: LoadedTokenizer):
    """A tiktoken Encoding equivalent to `tok`'s text encoder, or None where it would not be exactly equivalent."""
    try:
        import tiktoken
    except ImportError:
        return None
    spec = json.loads(tok.text_encoder.to_str())
    pre, model = spec.get("pre_tokenizer") or {}, spec.get("model") or {}
    if spec.get("normalizer") is not None or pre.get("type") != "ByteLevel" or pre.get("add_prefix_space") \
            or not pre.get("use_regex", True) or model.get("type") != "BPE" or model.get("dropout") \
            or model.get("continuing_subword_prefix") or model.get("end_of_word_suffix"):
        return None
    u2b = _bytes_to_unicode()
    added = {a["content"] for a in json.loads(tok.tokenizer.to_str()).get("added_tokens", [])}
    try:
        ranks = {bytes(u2b[c] for c in token): i for token, i in model["vocab"].items() if token not in added}
    except KeyError:
        return None  # a token outside the byte-level alphabet
    if len(set(ranks.values())) != len(ranks) or len(ranks) != len(set(ranks)):
        return None
    return tiktoken.Encoding("tokenmill", pat_str=GPT2_PATTERN, mergeable_ranks=ranks, special_tokens={})


def encode_checked(tok: LoadedTokenizer, encoding, texts: Sequence[str]) -> tuple[list[np.ndarray], str]:
    """Every document's ids plus the end-of-text id, and the engine that made them (`tiktoken` or `tokenizers`)."""
    if encoding is None or not texts:
        return tok.encode_documents(texts), "tokenizers"
    fast = encoding.encode_ordinary_batch(list(texts), num_threads=1)
    tricky = [i for i, t in enumerate(texts) if not t.isascii() or "  " in t or "\t" in t or "\n\n\n" in t]
    sample = sorted(set(range(min(CHECK_FIRST, len(texts)))) | set(tricky[:CHECK_MAX]))
    reference = tok.text_encoder.encode_batch([texts[i] for i in sample], add_special_tokens=False)
    if any(fast[i] != r.ids for i, r in zip(sample, reference)):
        return tok.encode_documents(texts), "tokenizers"
    return [np.array([*ids, tok.eos_id], dtype=np.int64) for ids in fast], "tiktoken"
