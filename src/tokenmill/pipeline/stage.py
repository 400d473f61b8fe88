"""The stage contract: declared columns and drop reasons, a pure core over Arrow tables, ordered phases."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Mapping

import pyarrow as pa

from tokenmill.pipeline.config_base import StageConfig

if TYPE_CHECKING:
    from tokenmill.pipeline.config import SourceConfig
    from tokenmill.pipeline.tasks import PlanContext, TaskContext


@dataclass(frozen=True)
class RunContext:
    """What a stage may know about the run besides its own config."""

    seed: int
    sources: Mapping[str, "SourceConfig"]
    base_dir: str = "."
    """The config file's folder, for files a stage config names (never part of a stage's identity)."""


@dataclass(frozen=True)
class Processed:
    """A stage's verdict on one table: the rows (with added columns) and a drop reason per row (null = kept)."""

    table: pa.Table
    drop_reason: pa.Array
    stats: Mapping[str, Any] | None = None
    """Stage-specific counts for this shard (nested dicts of numbers, lists of examples): summed over shards
    with `merge_stats`, then shaped by `Stage.report` into the manifest's `report`."""

    def __post_init__(self) -> None:
        if len(self.drop_reason) != self.table.num_rows:
            raise ValueError(f"{len(self.drop_reason)} drop reasons for {self.table.num_rows} rows")


@dataclass(frozen=True)
class Task:
    """One unit of work of a phase; `key` is unique in the phase and names its completion record."""

    key: str
    inputs: tuple[str, ...] = ()
    params: Mapping[str, Any] = field(default_factory=dict)


class Phase(ABC):
    """A set of independent tasks; a stage's phases run in order, each task committed on its own.

    A phase's tasks return a small JSON-able `result`; after the whole phase, `reduce` turns the
    results into one object that every task of the later phases receives through the object store
    (a dedup cluster table, a decontamination index, a trained tokenizer).
    The stage's shards and their manifest entries come from the last phase whose results hold `shards`; a
    phase after it may only gather reports (e.g. join per-shard hit files into one).
    """

    name: ClassVar[str]

    @abstractmethod
    def plan(self, stage: "Stage", ctx: "PlanContext") -> list[Task]:
        """The tasks of this phase, in a stable order (driver side, no I/O beyond listing)."""

    @abstractmethod
    def run(self, stage: "Stage", task: Task, ctx: "TaskContext") -> Any:
        """Do one task in a worker; write files through `ctx.write`; return a small JSON-able result."""

    def reduce(self, stage: "Stage", results: Mapping[str, Any], ctx: "PlanContext") -> Any:
        """Combine the task results (by task key) into what later phases need; default: nothing.

        Runs on the driver; `ctx.fs` and `ctx.stage_dir` reach files the tasks wrote (a large index, say)."""
        return None


class Stage(ABC):
    """A pipeline stage. Its core, `process`, is a pure function of an Arrow table.

    Subclasses declare what they need and add, so that the runner checks the whole chain of
    stages before any task is submitted, and the drop reasons they may emit, so that a manifest
    can be checked against them.
    """

    name: ClassVar[str]
    needs: ClassVar[frozenset[str]] = frozenset({"id", "text", "source"})
    """Columns that an earlier stage (or ingest) must provide."""
    uses: ClassVar[frozenset[str]] = frozenset()
    """Columns used when present, else filled from a fallback (`lang` from the source's `language`)."""
    adds: ClassVar[tuple[pa.Field, ...]] = ()
    """Annotation columns this stage adds to every row."""
    drop_reasons: ClassVar[tuple[str, ...]] = ()
    """The closed set of reasons this stage may drop a document for."""

    def __init__(self, config: StageConfig, run: RunContext):
        self.config = config
        self.run = run

    def identity(self) -> dict[str, Any]:
        """What determines this stage's output besides its input: hashed into the resume key."""
        return {"config": self.config.model_dump(mode="json"), "seed": self.run.seed}

    def phases(self) -> list[Phase]:
        """The ordered phases; most stages are one shard-wise map."""
        from tokenmill.pipeline.map_phase import MapShards

        return [MapShards()]

    def setup(self, shared: Mapping[str, Any]) -> None:
        """Load models or indexes once per worker, before the first `process`."""

    def process(self, table: pa.Table, shared: Mapping[str, Any]) -> Processed:
        """Decide, for every row of a shard, keep or drop (with a reason); add annotation columns."""
        raise NotImplementedError(f"stage {self.name!r} does not process tables")

    def report(self, stats: Mapping[str, Any]) -> dict[str, Any]:
        """Shape the summed per-shard `stats` into the manifest's `report` (e.g. keep the worst examples only)."""
        return dict(stats)

    def check_reasons(self, reasons: pa.Array) -> None:
        """A drop reason outside the declared set is a bug in the stage: fail the task loudly."""
        import pyarrow.compute as pc

        used = set(pc.unique(reasons.drop_null()).to_pylist()) if reasons.null_count < len(reasons) else set()
        unknown = used - set(self.drop_reasons)
        if unknown:
            raise RuntimeError(f"stage {self.name!r} emitted undeclared drop reasons {sorted(unknown)}")
