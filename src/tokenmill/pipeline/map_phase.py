"""The shard-wise map: one task per input shard, kept rows to `shards/`, dropped rows to `dropped/`."""

from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass, field
from typing import Any, Mapping

import pyarrow as pa
import pyarrow.compute as pc

from tokenmill.pipeline.stats import tally_table, text_bytes
from tokenmill.pipeline import storage
from tokenmill.pipeline.columns import with_fallbacks
from tokenmill.pipeline.contract import DriverPhase, Phase, PlanContext, Processed, ShardsResult, Stage, Task, TaskContext
from tokenmill.pipeline.manifest import DROPPED, SHARDS
from tokenmill.documents import (DROP_REASON, content_hash, last_read, read_shard, shard_bytes,
                                          with_text_hash)


def shard_path(name: str) -> str:
    """Where a stage writes a shard's kept rows, relative to its folder."""
    return f"{SHARDS}/{name}.parquet"


def dropped_path(name: str) -> str:
    """Where a stage writes a shard's dropped rows, relative to its folder."""
    return f"{DROPPED}/{name}.parquet"


def shard_name(path: str) -> str:
    """`shards/pile.00.ab12cd.p00000.parquet` -> `pile.00.ab12cd.p00000`: the stable name a shard keeps through stages."""
    return path.rsplit("/", 1)[-1].removesuffix(".parquet")


def split_and_write(
    stage: Stage, ctx: TaskContext, name: str, source: str, table: pa.Table, reasons: pa.Array,
    stats: Any = None, bytes_in: pa.Array | None = None,
) -> dict[str, Any]:
    """Write the kept and dropped rows of one processed shard of `source`; return its manifest entry.

    Every shard a stage writes passes here: `text_hash` is computed from the text being written (whatever the table
    carried in that column), so it is in every kept and dropped shard and always matches its text. `bytes_in`, each
    row's text size as the stage received it, is required of a stage that rewrites text (see `tally_table`).
    """
    stage.check_reasons(reasons)
    if bytes_in is not None and len(bytes_in) != table.num_rows:
        raise RuntimeError(f"stage {stage.name!r}, shard {name}: {len(bytes_in)} input sizes for {table.num_rows} rows; "
                           "a stage's process must return one row per input row")
    try:
        table = with_text_hash(table)
    except ValueError as err:
        raise RuntimeError(f"stage {stage.name!r}, shard {name}: {err}") from None
    kept_mask = pc.is_null(reasons)
    # A stage that keeps every row (tokenize always) needs no copy of the whole table.
    kept = table if reasons.null_count == len(reasons) else table.filter(kept_mask)
    kept_file = shard_path(name)
    unchanged = unchanged_input(ctx, name, kept)
    if unchanged is None or not ctx.link(kept_file, unchanged):
        ctx.write(kept_file, shard_bytes(kept))
    dropped_file = None
    if len(kept) < table.num_rows and getattr(stage.config, "keep_dropped", True):
        dropped = table.filter(pc.invert(kept_mask)).append_column(DROP_REASON, reasons.filter(pc.invert(kept_mask)))
        dropped_file = dropped_path(name)
        ctx.write(dropped_file, shard_bytes(dropped))
    others = set(table.column("source").unique().to_pylist()) - {source}
    if others:
        raise RuntimeError(f"shard {name} of source {source!r} holds rows of {sorted(others)}; a shard holds one source")
    tally = tally_table(table, reasons, bytes_in)
    entry = {
        "path": kept_file,
        "dropped_path": dropped_file,
        "source": source,
        "content_hash": content_hash(kept),
        **tally.to_json(),
    }
    if stats is not None:
        entry["stats"] = stats
    return entry


def unchanged_input(ctx: TaskContext, name: str, kept: pa.Table) -> str | None:
    """The input shard of the same name, when `kept` is exactly the table read from it (every row kept, every
    column equal, `text_hash` included): its file can be linked, not rewritten. None otherwise.

    Sample at fraction 1, decontaminate on a shard without hits and dedup on a shard without duplicates keep most
    shards whole; rewriting each would cost its encoding time and its bytes on disk again.
    """
    input_dir = getattr(ctx, "input_dir", None)
    if input_dir is None:
        return None
    path = storage.join(input_dir, shard_path(name))
    read = last_read(path)
    if read is None or read.num_rows != kept.num_rows or not read.schema.equals(kept.schema):
        return None
    return path if all(_same_values(a, b) for a, b in zip(kept.columns, read.columns)) else None


_BITS = {pa.float16(): pa.int16(), pa.float32(): pa.int32(), pa.float64(): pa.int64()}


def _same_values(a: pa.ChunkedArray, b: pa.ChunkedArray) -> bool:
    """Equal values and nulls. Floats are compared by their bits: NaN is not equal to itself (clean's scores hold
    NaN where a rule does not apply), and the same bits are what decides whether the written shard would differ."""
    bits = _BITS.get(a.type)
    if bits is not None:
        a, b = (pa.chunked_array([c.view(bits) for c in x.chunks], bits) for x in (a, b))
    return a.equals(b)


def shard_tasks(ctx: PlanContext) -> list[Task]:
    """One task per input shard, keyed by the shard's name, with its source as parameter."""
    return [Task(key=shard_name(s["path"]), inputs=(s["path"],), params={"source": s["source"]})
            for s in ctx.input_shards]


@dataclass(frozen=True)
class ShardOutput:
    """What a per-shard phase made of its input shard, for `split_and_write`."""

    table: pa.Table
    reasons: pa.Array
    """A drop reason per row (null = kept)."""
    stats: Any = None
    bytes_in: pa.Array | None = None
    """Each row's text size as received; required of a phase that rewrites text (see `split_and_write`)."""
    extra: Mapping[str, Any] = field(default_factory=dict)
    """Fields added to the shard's manifest entry (the tokenize stage's token files)."""


class ShardMap(Phase):
    """One task per input shard: the shard read whole, `map_shard` decides its rows, kept and dropped rows written
    (`split_and_write`); the manifest entry names the input shard. The one way a phase writes a stage's shards
    from its input's."""

    writes_shards = True

    def plan(self, stage: Stage, ctx: PlanContext) -> list[Task]:
        return shard_tasks(ctx)

    @abstractmethod
    def map_shard(self, stage: Stage, task: Task, ctx: TaskContext, table: pa.Table) -> ShardOutput:
        """Decide the rows of one input shard (`table`, read whole): what to keep, drop, count and record."""

    def run(self, stage: Stage, task: Task, ctx: TaskContext) -> ShardsResult:
        (relpath,) = task.inputs
        table = read_shard(storage.join(ctx.input_dir, relpath), ctx.fs)
        out = self.map_shard(stage, task, ctx, table)
        entry = split_and_write(stage, ctx, task.key, task.params["source"], out.table, out.reasons, out.stats,
                                bytes_in=out.bytes_in)
        entry["input"] = relpath
        entry.update(out.extra)
        return ShardsResult([entry])


class MapShards(ShardMap):
    """Apply `stage.process` to every input shard independently."""

    name = "map"

    def map_shard(self, stage: "MapStage", task: Task, ctx: TaskContext, table: pa.Table) -> ShardOutput:
        filled = [c for c in sorted(stage.uses) if c not in table.column_names]
        received = text_bytes(table)
        processed = stage.process(with_fallbacks(table, stage), ctx.shared)
        # Fallback columns stand in for an absent stage's annotation; they are not this stage's output.
        out = processed.table.drop_columns([c for c in filled if c not in {f.name for f in stage.adds}])
        return ShardOutput(out, processed.drop_reason, processed.stats, bytes_in=received)


class MapStage(Stage):
    """A stage whose core is `process`, a pure function of one shard's table, run by `MapShards` on every shard.

    Its phases default to that one map; a stage that needs global facts first puts phases before it (their
    `reduce` results reach `process` as `shared[phase.name]`)."""

    def phases(self) -> list[Phase | DriverPhase]:
        return [MapShards()]

    def process(self, table: pa.Table, shared: Mapping[str, Any]) -> Processed:
        """Decide, for every row of a shard, keep or drop (with a reason); add annotation columns."""
        raise NotImplementedError(f"stage {self.name!r} does not process tables")
