"""Rows of Arrow record batches as records: what the columnar readers (Parquet, Arrow IPC) share."""

from __future__ import annotations

from typing import Callable, Iterable, Iterator

import pyarrow as pa

from tokenmill.readers.base import json_safe, record_from_object, text_fields
from tokenmill.sources.reader import Record

ROWS = 1024
"""Rows made Python objects at a time: a writer's record batch may hold a whole file (polars writes one per chunk)."""


def batch_records(batches: Callable[[], Iterable[pa.RecordBatch]], source, display: str) -> Iterator[Record]:
    """One record per row, a batch at a time (its rows made Python objects `ROWS` at a time), fields by (dotted)
    column name; a row whose text columns exceed `max_record_bytes` is dropped as `record_too_large`. `batches` is
    called here, so a file damaged anywhere, its header included, ends with one `read_error` after every row before
    the damage."""
    columns = {f.split(".")[0] for f in text_fields(source)}
    index = 0
    try:
        for batch in batches():
            for row in _rows(batch):
                where = f"{display}: row {index}"
                size = sum(len(row[c]) for c in columns if isinstance(row.get(c), str))
                if size > source.max_record_bytes:
                    yield Record(index, "", drop="record_too_large",
                                 message=f"{where}: text of more than {source.max_record_bytes} bytes")
                else:
                    yield record_from_object(json_safe(row), index, source, where)
                index += 1
    except (pa.ArrowException, OSError) as err:
        yield Record(index, "", drop="read_error", message=f"{display}: damaged after row {index}: {err}")


def _rows(batch: pa.RecordBatch) -> Iterator[dict]:
    """The rows of `batch` as dicts, `ROWS` at a time (a slice is a view: nothing is copied)."""
    for start in range(0, batch.num_rows, ROWS):
        yield from batch.slice(start, ROWS).to_pylist()
