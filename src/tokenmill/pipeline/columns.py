"""Column bookkeeping: the chain check before any work, and fallbacks for annotations of absent stages."""

from __future__ import annotations

from typing import Callable, Sequence

import pyarrow as pa

from tokenmill.errors import StageChainError
from tokenmill.pipeline.contract import RunContext, SourceStage, Stage
from tokenmill.documents import WRITTEN_COLUMNS


def _source_language(table: pa.Table, run: RunContext) -> pa.Array:
    languages = {name: s.language for name, s in run.sources.items()}
    return pa.array([languages[s] for s in table.column("source").to_pylist()], pa.string())


FALLBACKS: dict[str, Callable[[pa.Table, RunContext], pa.Array]] = {
    # Without the clean stage's language identification, trust the source's configured language.
    "lang": _source_language,
}


def check_chain(stages: Sequence[Stage]) -> dict[str, frozenset[str]]:
    """Check that every stage's needs are provided by the stages before it; returns each stage's input columns."""
    provided: frozenset[str] = frozenset()
    inputs: dict[str, frozenset[str]] = {}
    for i, stage in enumerate(stages):
        if isinstance(stage, SourceStage) != (i == 0):
            where = "first" if i == 0 else f"number {i + 1}"
            raise StageChainError(f"stage {stage.name!r} is {where} in the chain: the first stage, and only it, "
                                  "reads the sources (a SourceStage such as ingest)")
        inputs[stage.name] = provided
        missing = stage.needs - provided
        if missing:
            raise StageChainError(
                f"stages.{stage.name}: needs column(s) {sorted(missing)} that no earlier stage provides"
            )
        no_fallback = {c for c in stage.uses - provided if c not in FALLBACKS}
        if no_fallback:
            raise StageChainError(
                f"stages.{stage.name}: uses column(s) {sorted(no_fallback)} that no earlier stage provides "
                "and that have no fallback"
            )
        # The shard writer adds `text_hash` to every shard, whatever the stage declares.
        provided = provided | {f.name for f in stage.adds} | WRITTEN_COLUMNS
    return inputs


def with_fallbacks(table: pa.Table, stage: Stage) -> pa.Table:
    """Add the columns a stage uses but that no earlier stage wrote, from their fallbacks."""
    for column in sorted(stage.uses):
        if column not in table.column_names:
            table = table.append_column(column, FALLBACKS[column](table, stage.run))
    return table
