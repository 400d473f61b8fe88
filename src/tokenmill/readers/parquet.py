"""Parquet files of documents: one row per document, fields by (dotted) column name."""

from __future__ import annotations

import contextlib
from typing import Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from tokenmill.pipeline import uris
from tokenmill.readers.base import Reader, Record, json_safe, record_from_object, text_fields

BATCH_ROWS = 1024


def read_parquet(path: str, source, display: str) -> Iterator[Record]:
    """One record per row, read a batch at a time; a damaged file ends with one `read_error`."""
    columns = {f.split(".")[0] for f in text_fields(source)}
    # An object through a seekable buffered stream: the footer, then column chunks, in ranged GETs.
    with contextlib.ExitStack() as stack:
        opened = stack.enter_context(uris.open_object(path)) if uris.is_remote(path) else path
        yield from _rows(opened, source, display, columns)


def _rows(opened, source, display: str, columns: set[str]) -> Iterator[Record]:
    """The records of an opened Parquet file (a path, or an object's stream)."""
    index = 0
    try:
        # Row group by row group: pyarrow's default pre-buffering reads every row group's bytes before the first
        # batch (a whole file in memory, and one GET the size of the object from a store).
        file = pq.ParquetFile(opened, pre_buffer=False)
        for batch in file.iter_batches(batch_size=BATCH_ROWS):
            for row in batch.to_pylist():
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


PARQUET = Reader(read_parquet, ("not_an_object",), line_based=False)
