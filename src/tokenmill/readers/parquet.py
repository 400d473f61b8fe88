"""Parquet files of documents: one row per document, fields by (dotted) column name."""

from __future__ import annotations

import contextlib
from typing import Iterator

import pyarrow.parquet as pq

from tokenmill.readers.rows import batch_records
from tokenmill.sources import uris
from tokenmill.sources.reader import Reader, Record

BATCH_ROWS = 1024


def read_parquet(path: str, source, display: str) -> Iterator[Record]:
    """One record per row, read a batch at a time; a damaged file ends with one `read_error`."""
    # An object through a seekable buffered stream: the footer, then column chunks, in ranged GETs.
    with contextlib.ExitStack() as stack:
        opened = stack.enter_context(uris.open_object(path)) if uris.is_remote(path) else path
        # Row group by row group: pyarrow's default pre-buffering reads every row group's bytes before the first
        # batch (a whole file in memory, and one GET the size of the object from a store).
        yield from batch_records(lambda: pq.ParquetFile(opened, pre_buffer=False).iter_batches(batch_size=BATCH_ROWS),
                                 source, display)


PARQUET = Reader("parquet", read_parquet, ("not_an_object",), line_based=False)
