"""Load, or train, a byte-level BPE tokenizer; encode documents as it does, special-token strings as text."""

from __future__ import annotations

import hashlib
import itertools
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from tokenmill.errors import ConfigError

EOS = "<|endoftext|>"


@dataclass(frozen=True)
class LoadedTokenizer:
    """A tokenizer as the tokenize stage uses it."""

    tokenizer: Tokenizer
    """The tokenizer as given: decodes, and knows the end-of-text id."""
    text_encoder: Tokenizer
    """The same with `encode_special_tokens` on: `<|endoftext|>` written in a forum post is encoded as the text it
    is, so no fake document boundary appears, while non-special added tokens (GPT-NeoX's runs of spaces) are kept,
    so ids equal the tokenizer's own `encode(text, add_special_tokens=False)`."""
    eos_id: int
    vocab_size: int
    sha256: str
    """Of the tokenizer's JSON: what the token files were made with."""

    def __reduce__(self):
        # A Ray worker receives the tokenizer with every task; unpickled, it is rebuilt once per process (GPT-2's
        # two Tokenizers take ~0.25 s to build), and `encode_special_tokens`, which a Tokenizer's serialized form
        # lacks, is set again (else `<|endoftext|>` written in a document would become a document boundary).
        return _restore, (self.tokenizer.to_str(), self.eos_id, self.vocab_size, self.sha256)

    def encode_documents(self, texts: Sequence[str]) -> list[np.ndarray]:
        """Token ids of each document followed by the end-of-text id (no BOS or other post-processing)."""
        encodings = self.text_encoder.encode_batch_fast(list(texts), add_special_tokens=False)
        eos = np.array([self.eos_id], dtype=np.int64)
        return [np.concatenate([np.asarray(e.ids, dtype=np.int64), eos]) for e in encodings]

    def encode_flat(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """`encode_documents` back to back in one array, and each document's length (its end-of-text id included)."""
        ids = [e.ids for e in self.text_encoder.encode_batch_fast(list(texts), add_special_tokens=False)]
        for doc in ids:
            doc.append(self.eos_id)
        lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
        return np.fromiter(itertools.chain.from_iterable(ids), dtype=np.int64, count=int(lengths.sum())), lengths

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=False)

    def count_special_strings(self, texts: Iterable[str]) -> int:
        """Documents that contain the text of a special token (counted in the manifest)."""
        specials = [t.content for t in self.tokenizer.get_added_tokens_decoder().values() if t.special]
        return sum(any(s in text for s in specials) for text in texts)


_RESTORED: dict[str, LoadedTokenizer] = {}


def _restore(data: str, eos_id: int, vocab_size: int, sha256: str) -> LoadedTokenizer:
    if sha256 not in _RESTORED:
        text_encoder = Tokenizer.from_str(data)
        text_encoder.encode_special_tokens = True
        _RESTORED[sha256] = LoadedTokenizer(Tokenizer.from_str(data), text_encoder, eos_id, vocab_size, sha256)
    return _RESTORED[sha256]


def _loaded(tokenizer: Tokenizer, eos_token: str) -> LoadedTokenizer:
    eos_id = tokenizer.token_to_id(eos_token)
    if eos_id is None:
        raise ConfigError(f"stages.tokenize.tokenizer: the tokenizer has no end-of-text token {eos_token!r}; "
                          "set eos_token to the one it has")
    text_encoder = Tokenizer.from_str(tokenizer.to_str())
    text_encoder.encode_special_tokens = True
    return LoadedTokenizer(tokenizer, text_encoder, int(eos_id),
                           tokenizer.get_vocab_size(with_added_tokens=True),
                           hashlib.sha256(tokenizer.to_str().encode("utf-8")).hexdigest())


def load_tokenizer(path: str, eos_token: str = EOS) -> LoadedTokenizer:
    """From a `tokenizer.json` (HF tokenizers); anything else is a ConfigError naming the file."""
    try:
        tokenizer = Tokenizer.from_file(path)
    except Exception as err:  # noqa: BLE001 - tokenizers raises a bare Exception for a file that is not a tokenizer
        raise ConfigError(f"stages.tokenize.tokenizer: {path} is not a tokenizer.json: {err}") from None
    return _loaded(tokenizer, eos_token)


def load_gpt2_files(encoder_json: str, vocab_bpe: str, eos_token: str = EOS) -> LoadedTokenizer:
    """From GPT-2's `encoder.json` and `vocab.bpe`: byte-level BPE, the end-of-text token added as special."""
    tokenizer = Tokenizer(models.BPE.from_file(encoder_json, vocab_bpe))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    if tokenizer.token_to_id(eos_token) is not None:
        tokenizer.add_special_tokens([eos_token])
    return _loaded(tokenizer, eos_token)


def train_bpe(texts: Iterable[str], vocab_size: int, eos_token: str = EOS) -> LoadedTokenizer:
    """A byte-level BPE trained on `texts` (a deterministic sample chosen by the caller), with `eos_token` special."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[eos_token], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(texts, trainer=trainer)
    return _loaded(tokenizer, eos_token)
