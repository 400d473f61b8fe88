"""The shard-wise map phase: one task per input shard, kept rows to `shards/`, dropped rows to `dropped/`."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from tokenmill.pipeline.stats import tally_table, text_bytes
from tokenmill.pipeline import storage
from tokenmill.pipeline.columns import with_fallbacks
from tokenmill.pipeline.documents import DROP_REASON, content_hash, read_shard, shard_bytes, with_text_hash
from tokenmill.pipeline.stage import Phase, Stage, Task
from tokenmill.pipeline.tasks import PlanContext, TaskContext


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
    kept = table.filter(kept_mask)
    shard_path = f"shards/{name}.parquet"
    ctx.write(shard_path, shard_bytes(kept))
    dropped_path = None
    if len(kept) < table.num_rows and getattr(stage.config, "keep_dropped", True):
        dropped = table.filter(pc.invert(kept_mask)).append_column(DROP_REASON, reasons.filter(pc.invert(kept_mask)))
        dropped_path = f"dropped/{name}.parquet"
        ctx.write(dropped_path, shard_bytes(dropped))
    others = set(table.column("source").unique().to_pylist()) - {source}
    if others:
        raise RuntimeError(f"shard {name} of source {source!r} holds rows of {sorted(others)}; a shard holds one source")
    tally = tally_table(table, reasons, bytes_in)
    entry = {
        "path": shard_path,
        "dropped_path": dropped_path,
        "source": source,
        "content_hash": content_hash(kept),
        **tally.to_json(),
    }
    if stats is not None:
        entry["stats"] = stats
    return entry


class MapShards(Phase):
    """Apply `stage.process` to every input shard independently."""

    name = "map"

    def plan(self, stage: Stage, ctx: PlanContext) -> list[Task]:
        return [Task(key=shard_name(s["path"]), inputs=(s["path"],), params={"source": s["source"]})
                for s in ctx.input_shards]

    def run(self, stage: Stage, task: Task, ctx: TaskContext) -> dict[str, Any]:
        (relpath,) = task.inputs
        table = read_shard(storage.join(ctx.input_dir, relpath), ctx.fs)
        filled = [c for c in sorted(stage.uses) if c not in table.column_names]
        received = text_bytes(table)
        processed = stage.process(with_fallbacks(table, stage), ctx.shared)
        # Fallback columns stand in for an absent stage's annotation; they are not this stage's output.
        out = processed.table.drop_columns([c for c in filled if c not in {f.name for f in stage.adds}])
        entry = split_and_write(stage, ctx, task.key, task.params["source"], out, processed.drop_reason,
                                processed.stats, bytes_in=received)
        entry["input"] = relpath
        return {"shards": [entry]}
