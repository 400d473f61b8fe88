"""Base classes for config models: strict (unknown keys are errors), frozen, a docstring per field."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class StrictModel(BaseModel):
    """A config block: unknown keys are errors, values are immutable once validated."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


class StageConfig(StrictModel):
    """Options every stage has; a stage's own config model extends this."""

    keep_dropped: bool = True
    """Write dropped documents, with a `drop_reason` column, under `<output>/<stage>/dropped/`."""
