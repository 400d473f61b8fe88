"""The tokenize stage's config."""

from __future__ import annotations

from typing import Literal, Optional, Union

from pydantic import Field, field_validator

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
    rehydrate: Optional[dict[int, int]] = None
    """FineWeb-style rehydration, `{smallest cluster size: copies}`: a train document whose `cluster_size` (the dedup
    stage's column: the documents it stands for) is at least a key, and below the next, is written that many times,
    below the smallest key once; e.g. `{2: 2, 5: 3, 100: 2, 1000: 1}`. Valid documents are written once. Needs the
    dedup stage before tokenize. None: every document once (`tokenmill.stages.tokenize.rehydrate`)."""

    @field_validator("rehydrate")
    @classmethod
    def _rehydrate_table(cls, table: Optional[dict[int, int]]) -> Optional[dict[int, int]]:
        if table is None:
            return None
        if not table:
            raise ValueError("rehydrate: give at least one {cluster size: copies} entry, or leave it out")
        for size, n in table.items():
            if size < 1 or not 1 <= n <= 1000:
                raise ValueError(f"rehydrate: {size}: {n}: cluster sizes start at 1 and copies are 1 to 1000")
        return dict(sorted(table.items()))
