"""Arrow IPC files of documents: Hugging Face `datasets` folders (`save_to_disk`), Feather v2; one row per document.

`datasets` writes the IPC stream format (`data-00000-of-00004.arrow` in a `save_to_disk` folder, the `cache-*.arrow`
files of its cache); pyarrow, polars and Feather v2 write the IPC file format, which begins `ARROW1`. Both are read
a record batch at a time, fields by (dotted) column name as for Parquet; the schema's `huggingface` metadata (the
features) is not needed: a class label is its integer, a nested feature a nested field (`meta.url`).
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import pyarrow as pa
import pyarrow.ipc as ipc

from tokenmill.readers.rows import batch_records
from tokenmill.sources import uris
from tokenmill.sources.reader import Reader, Record

FILE_MAGIC = b"ARROW1"
"""The first bytes of the IPC file format."""
STREAM_START = b"\xff\xff\xff\xff"
"""The first bytes of an IPC stream (since Arrow 0.15): a message's continuation marker, then its length."""


def read_arrow(path: str, source, display: str) -> Iterator[Record]:
    """One record per row, read a batch at a time; a damaged file ends with one `read_error`, which a stream cut
    short gives after every whole batch before the cut."""
    with contextlib.ExitStack() as stack:
        yield from batch_records(lambda: _batches(path, stack), source, display)


def _batches(path: str, stack: contextlib.ExitStack) -> Iterator[pa.RecordBatch]:
    """The record batches of an IPC file or stream, in order, one in memory at a time."""
    # A local file memory-mapped: a length field that claims more than the file holds is refused by a bounds check,
    # where reading it into memory would first allocate what it claims. An object through a seekable buffered
    # stream (the file format reads its footer first), in ranged GETs.
    opened = stack.enter_context(uris.open_object(path) if uris.is_remote(path) else pa.memory_map(path))
    head = opened.read(8)
    opened.seek(0)
    if not head:
        raise pa.ArrowInvalid("the file is empty, not an Arrow IPC stream or file")
    if head.startswith(FILE_MAGIC):
        try:
            reader = ipc.open_file(opened)
        except (pa.ArrowException, OSError) as err:
            raise pa.ArrowInvalid(f"an Arrow IPC file (it starts with {FILE_MAGIC.decode()}) whose footer is missing or "
                                  f"damaged: cut short? ({err})") from None
        return (reader.get_batch(i) for i in range(reader.num_record_batches))
    try:
        return iter(ipc.open_stream(opened))
    except (pa.ArrowException, OSError) as err:
        if head.startswith(STREAM_START):
            raise
        raise pa.ArrowInvalid(f"not an Arrow IPC stream or file: it starts with {head!r} ({err})") from None


ARROW = Reader("arrow", read_arrow, line_based=False)
