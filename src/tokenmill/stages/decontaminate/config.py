"""The decontaminate stage's config."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from tokenmill.config_base import StageConfig
from tokenmill.stages.decontaminate.evalsets import EvalSetConfig


class DecontaminateConfig(StageConfig):
    """GPT-3's method: n-gram overlap with evaluation fields, common n-grams ignored, matches excised."""

    evalsets: list[EvalSetConfig] = Field(min_length=1)
    """Evaluation sets to protect: `{name, path, format, fields, language}`; paths relative to the config file."""
    word_n: int | None = Field(default=None, ge=4)
    """Word n-gram length for every word evaluation set; unset (the default): GPT-3's rule per set, the
    5th-percentile field length in words clamped to [`min_n`, `max_n`]."""
    char_n: int | None = Field(default=None, ge=4)
    """Character n-gram length for every Chinese and Japanese evaluation set; unset: GPT-3's rule per set, counted
    in characters."""
    min_n: int = Field(default=8, ge=4)
    """GPT-3's rule: the smallest n a set gets (GPT-3: 8; shorter n-grams collide spuriously)."""
    max_n: int = Field(default=13, ge=4)
    """GPT-3's rule: the largest n a set gets (GPT-3: 13)."""
    min_whole_words: int = Field(default=3, ge=1)
    """A field shorter than its set's n is matched as a whole only with at least this many words (characters for
    Chinese and Japanese); shorter fields (a 1-word answer, a 2-word choice) are counted as too short to check."""
    min_whole_bytes: int = Field(default=12, ge=1)
    """... and only with at least this many UTF-8 bytes of normalised text (words joined by one space; a Chinese or
    Japanese character is 3 bytes), so "ice box" or "the atom" are too short to check."""
    max_doc_frequency: int = Field(default=10, ge=1)
    """An n-gram found in more training documents than this is a common phrase: ignored and listed."""
    policy: Literal["excise", "drop"] = "excise"
    """`excise`: cut each match and `margin` characters around it, keep the pieces; `drop`: drop the document."""
    margin: int = Field(default=200, ge=0)
    """Characters removed on either side of a match (GPT-3: 200)."""
    min_piece: int = Field(default=200, ge=0)
    """Pieces shorter than this are discarded (GPT-3: 200)."""
    max_pieces: int = Field(default=10, ge=1)
    """A document cut into more pieces than this is dropped (GPT-3: 10)."""

    @model_validator(mode="after")
    def _n_range(self) -> "DecontaminateConfig":
        if self.min_n > self.max_n:
            raise ValueError(f"min_n ({self.min_n}) must be <= max_n ({self.max_n}): lower min_n or raise max_n")
        return self
