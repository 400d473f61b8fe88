"""The tokenize stage's config."""

from __future__ import annotations

from typing import Literal, Union

from pydantic import Field

from tokenmill.config_base import StageConfig, StrictModel


class Gpt2Files(StrictModel):
    """GPT-2-style tokenizer files."""

    encoder: str
    """`encoder.json` (token -> id), relative to the config file."""
    merges: str
    """`vocab.bpe` (merges), relative to the config file."""


class TrainSpec(StrictModel):
    """Train a byte-level BPE on a deterministic sample of the stage's input."""

    vocab_size: int = Field(ge=260, le=2**31 - 1)
    """Vocabulary size, the end-of-text token included."""
    sample_docs: int = Field(default=20_000, ge=1)
    """Documents in the training sample (chosen by a keyed hash of their ids, so any sharding gives the same)."""


class TrainTokenizer(StrictModel):
    train: TrainSpec
    """Train a tokenizer (`tokenmill` saves it as `tokenizer.json` beside the tokens)."""


class TokenizeConfig(StageConfig):
    """Byte-level BPE into `.bin`/`.idx` pairs per source and split (train and valid), and `tokens.json`."""

    tokenizer: Union[str, Gpt2Files, TrainTokenizer]
    """A `tokenizer.json` path, `{encoder, merges}` GPT-2 files, or `{train: {vocab_size, sample_docs}}`."""
    eos_token: str = "<|endoftext|>"
    """The end-of-text token; its id is read from the tokenizer (a tokenizer without it is an error)."""
    valid_fraction: float = Field(default=0.001, ge=0.0, lt=1.0)
    """Share of documents, chosen by a keyed hash of their ids, written to the `valid` split."""
    max_tokens_per_file: int = Field(default=2**28, ge=1)
    """The size of the token files: each source's documents of each split are written as ``ceil(tokens / this)``
    `.bin`/`.idx` pairs of about equal size, cut at documents (so a file may pass it by its last document); a split
    of a source with fewer tokens is one file. The default, 268,435,456 tokens, is 512 MiB of uint16 (1 GiB of
    int32): few files for a trainer that blends files (Megatron), each well over a sample. A streaming loader with
    `shuffle_block: file` reads `shuffle_window` whole files per window, so streaming from a small cache wants smaller
    files (docs/tokenize.md)."""
    batch_docs: int = Field(default=1_000, ge=1)
    """Documents per `encode_batch` call."""
    engine: Literal["auto", "tokenizers"] = "auto"
    """`auto`: tiktoken where it is proven at load to give the tokenizer's own ids (merge-order ranks, every merged
    token its own encoding; `tokenmill.tokenize.fast_engine`), else `tokenizers`, the reason logged; the engine per
    token file is recorded in `tokens.json`."""
