"""The decontaminate stage's config."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from tokenmill.pipeline.config_base import StageConfig
from tokenmill.stages.decontaminate.evalsets import EvalSetConfig


class DecontaminateConfig(StageConfig):
    """GPT-3's method: n-gram overlap with evaluation fields, common n-grams ignored, matches excised."""

    evalsets: list[EvalSetConfig] = Field(min_length=1)
    """Evaluation sets to protect: `{name, path, format, fields, language}`; paths relative to the config file."""
    word_n: int = Field(default=13, ge=4)
    """Word n-gram length (GPT-3: 13)."""
    char_n: int = Field(default=13, ge=4)
    """Character n-gram length for Chinese and Japanese evaluation sets and documents."""
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
