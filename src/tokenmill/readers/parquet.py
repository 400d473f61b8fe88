"""Parquet files of documents: one row per document, fields by (dotted) column name."""

from __future__ import annotations

from typing import Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from tokenmill.readers.base import Record, record_from_object

BATCH_ROWS = 1024


def read_parquet(path: str, source, max_doc_bytes: int, display: str) -> Iterator[Record]:
    """Yield one record per row, read a batch at a time; a damaged file ends with one `read_error`."""
    index = 0
    try:
        file = pq.ParquetFile(path)
        for batch in file.iter_batches(batch_size=BATCH_ROWS):
            for row in batch.to_pylist():
                where = f"{display}: row {index}"
                text = row.get(source.text_field.split(".")[0])
                if isinstance(text, str) and len(text) > max_doc_bytes:
                    yield Record(index, "", drop="too_large", message=f"{where}: text of more than {max_doc_bytes} bytes")
                else:
                    yield record_from_object(row, index, source, where)
                index += 1
    except (pa.ArrowException, OSError) as err:
        yield Record(index, "", drop="read_error", message=f"{display}: damaged after row {index}: {err}")
