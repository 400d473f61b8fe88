"""Dedup's band-key phase files: one per `signatures` task, a row group per band partition, read by partition."""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from tokenmill.dedup.distributed_components import iter_parts, split_bytes
from tokenmill.pipeline import storage
from tokenmill.pipeline.contract import TaskContext

FOLDER = "_work/bands"


def band_bytes(tables: list[pa.Table]) -> bytes:
    """One shard's band rows, `tables[p]` those of partition p, as one file with a row group per partition (not a
    file per partition: shards x partitions files, each a commit and on an object store a PUT). Keys are random
    64-bit values, so plain (a dictionary only adds to them); the document references ascend within a partition,
    so delta-encoded (under a byte a row instead of about 2.5)."""
    dest = np.repeat(np.arange(len(tables)), [t.num_rows for t in tables])
    return split_bytes(pa.concat_tables(tables), dest, use_dictionary=["band", "part"],
                       column_encoding={"key": "PLAIN", "doc": "DELTA_BINARY_PACKED", "exact": "PLAIN"})


def band_path(task_key: str) -> str:
    """The band file of the `signatures` task `task_key` (relative to the stage folder)."""
    return f"{FOLDER}/{task_key}.parquet"


def read_partition(ctx: TaskContext, part: int, columns: list[str] | None = None) -> pa.Table | None:
    """Partition `part`'s band rows of every `signatures` task, in the order of the files' names; None when there
    are no band files."""
    files = storage.list_files(ctx.fs, storage.join(ctx.stage_dir, FOLDER), ".parquet")
    if not files:
        return None
    tables = list(iter_parts(files, part, columns, ctx.fs))
    return pa.concat_tables(tables) if tables else read_empty(files[0], columns, ctx)


def read_empty(path: str, columns: list[str] | None, ctx: TaskContext) -> pa.Table:
    """No rows, with the band files' columns (those of `columns`)."""
    import pyarrow.parquet as pq

    schema = pq.read_schema(path, filesystem=ctx.fs)
    names = [n for n in schema.names if n != "part"] if columns is None else columns
    return pa.Table.from_batches([], pa.schema([schema.field(n) for n in names]))
