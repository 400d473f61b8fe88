"""Dedup's band-key phase files: one per `signatures` task, a row group per band partition, read by partition."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from tokenmill.dedup.distributed_components import iter_parts, split_bytes
from tokenmill.pipeline import storage
from tokenmill.pipeline.contract import PlanContext, TaskContext
from tokenmill.pipeline.map_phase import shard_name

FOLDER = "_work/bands"


def band_bytes(tables: list[pa.Table]) -> bytes:
    """One shard's band rows, `tables[p]` those of partition p, as one file with a row group per partition (not a
    file per partition: shards x partitions files, each a commit and on an object store a PUT). Keys are random
    64-bit values, so plain (a dictionary only adds to them); the document references ascend within a partition,
    so delta-encoded (under a byte a row instead of about 2.5)."""
    dest = np.repeat(np.arange(len(tables)), [t.num_rows for t in tables])
    # One chunk: taking each partition's rows from it is several times cheaper than from one chunk per partition.
    return split_bytes(pa.concat_tables(tables).combine_chunks(), dest, use_dictionary=["band", "part"],
                       column_encoding={"key": "PLAIN", "doc": "DELTA_BINARY_PACKED", "exact": "PLAIN"})


def shard_names(ctx: PlanContext) -> list[str]:
    """The `signatures` tasks' keys, one per input shard: the band files a partition's reader opens."""
    return [shard_name(s["path"]) for s in ctx.input_shards]


def band_path(task_key: str) -> str:
    """The band file of the `signatures` task `task_key` (relative to the stage folder)."""
    return f"{FOLDER}/{task_key}.parquet"


def read_partition(ctx: TaskContext, part: int, names: list[str], columns: list[str] | None = None) -> pa.Table:
    """Partition `part`'s band rows of the `signatures` tasks `names` (every input shard's), in name order. Each file
    is opened by its name, never found by a listing: a missing one (lost, or a `_work` left by a version that laid
    band keys out otherwise) fails the task naming it, instead of giving a partition without its rows."""
    files = [storage.join(ctx.stage_dir, band_path(name)) for name in sorted(names)]
    tables = list(iter_parts(files, part, columns, ctx.fs))
    return pa.concat_tables(tables) if tables else _no_rows(files, columns, ctx)


def _no_rows(files: list[str], columns: list[str] | None, ctx: TaskContext) -> pa.Table | None:
    """No rows, with the band files' columns (those of `columns`); None when there are no files (no input shard)."""
    if not files:
        return None
    schema = pq.read_schema(files[0], filesystem=ctx.fs)
    names = [n for n in schema.names if n != "part"] if columns is None else columns
    return pa.Table.from_batches([], pa.schema([schema.field(n) for n in names]))
