"""The document schema every stage reads and writes: Arrow columns, canonical meta, shard file I/O."""

from __future__ import annotations

import hashlib
import json
import weakref
from typing import Any, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

NO_SUBSET = "(none)"
"""The subset key of documents whose source has no subset (the `subset` column is null): one owner for the literal."""

SCHEMA_VERSION = 2
"""Bump when the meaning or layout of a column changes: every stage then recomputes.

2: every shard carries `text_hash`."""

BASE_SCHEMA = pa.schema(
    [
        pa.field("id", pa.string(), nullable=False),
        pa.field("text", pa.string(), nullable=False),
        pa.field("source", pa.string(), nullable=False),
        pa.field("subset", pa.string()),
        pa.field("meta", pa.string(), nullable=False),
    ]
)
BASE_COLUMNS = frozenset(BASE_SCHEMA.names)
DROP_REASON = "drop_reason"

TEXT_HASH = "text_hash"
"""xxh3-64 of the UTF-8 bytes of `text` (seed 0), as uint64. `map_phase.split_and_write` computes it from the text
of every row it writes, kept or dropped, so no stage writes it and none can leave it stale."""
TEXT_HASH_FIELD = pa.field(TEXT_HASH, pa.uint64(), nullable=False)
WRITTEN_COLUMNS = frozenset({TEXT_HASH})
"""Columns the shard writer adds to every shard of every stage, whatever the stage declares."""

# Row groups of a fixed size keep the bytes of a shard independent of how it was assembled.
ROW_GROUP_SIZE = 2048
ZSTD_LEVEL = 3
"""zstd level of every Parquet file the pipeline writes. Arrow's default, 1, left text at about 0.30 of its size;
3 makes it about 0.26 (benchmarks/scale.py reports it per stage); zstd decodes as fast whatever the level."""
NO_DICTIONARY = frozenset({"id", "text", "meta", TEXT_HASH})
"""Columns whose values are (nearly) all distinct: a dictionary page only adds to them, and building it costs a hash
per value. Every other column (source, subset, languages, scores that repeat) keeps Arrow's dictionary encoding."""


def _writer_options(table: pa.Table) -> dict[str, Any]:
    return {"compression": "zstd", "compression_level": ZSTD_LEVEL,
            "use_dictionary": [name for name in table.column_names if name not in NO_DICTIONARY]}


# One encoder for every call: json.dumps with options builds a new JSONEncoder per call (ingest calls this once per
# record). `encode` keeps no state between calls, so one instance serves every thread.
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def canonical_json(value: Any) -> str:
    """JSON with sorted keys and no spaces: the same value always gives the same string."""
    return _CANONICAL.encode(value)


def digest(value: Any) -> str:
    """sha256 of a value's canonical JSON: the hash used for configs and manifests."""
    return hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()


def parquet_bytes(table: pa.Table) -> bytes:
    """A side table (clusters, hits, a phase's intermediate rows) as Parquet bytes (zstd), without the shard schema
    stamp that `shard_bytes` adds; identical tables give identical bytes."""
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, **_writer_options(table))
    return sink.getvalue().to_pybytes()


def shard_bytes(table: pa.Table) -> bytes:
    """A table serialized as a Parquet shard (zstd); identical tables give identical bytes."""
    sink = pa.BufferOutputStream()
    metadata = dict(table.schema.metadata or {})
    metadata[b"tokenmill.schema_version"] = str(SCHEMA_VERSION).encode()
    pq.write_table(
        table.replace_schema_metadata(metadata),
        sink,
        row_group_size=ROW_GROUP_SIZE,
        **_writer_options(table),
    )
    return sink.getvalue().to_pybytes()


_last_read: tuple[str, weakref.ref] | None = None
"""The path `read_shard` read last in this process, and a weak reference to the table it returned."""


def read_shard(path: str, filesystem=None) -> pa.Table:
    """Read one Parquet shard whole (shards are sized to fit a worker's memory)."""
    global _last_read
    table = pq.read_table(path, filesystem=filesystem).replace_schema_metadata(None)
    _last_read = (path, weakref.ref(table))
    return table


def read_rows(path: str, rows: np.ndarray, columns: list[str], filesystem=None) -> pa.Table:
    """The given rows (ascending) of one Parquet file, only `columns` (those it has), reading only the row groups
    that hold them: what dedup's verify and clusters and tokenize's sample read back."""
    rows = np.asarray(rows, dtype=np.int64)
    with (filesystem.open_input_file(path) if filesystem is not None else open(path, "rb")) as f:
        pf = pq.ParquetFile(f)
        meta = pf.metadata
        starts = np.r_[0, np.cumsum([meta.row_group(i).num_rows for i in range(meta.num_row_groups)])]
        groups = np.searchsorted(starts, rows, side="right") - 1
        wanted = np.unique(groups)
        names = set(pf.schema_arrow.names)
        table = pf.read_row_groups(wanted.tolist(), columns=[c for c in columns if c in names])
    # Row r of group g sits at (rows read before g) + r - starts[g] in the table just read.
    before = np.r_[0, np.cumsum(starts[wanted + 1] - starts[wanted])][np.searchsorted(wanted, groups)]
    return table.take(pa.array(before + rows - starts[groups], pa.int64())).replace_schema_metadata(None)


def last_read(path: str) -> pa.Table | None:
    """The table `read_shard` last returned, if it read `path` and the table is still alive: what a task that
    writes its input shard back unchanged can compare with, at no memory cost (the reference is weak)."""
    if _last_read is None or _last_read[0] != path:
        return None
    return _last_read[1]()


def utf8_lengths(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """Byte length of each string, without materialising Python strings."""
    import pyarrow.compute as pc

    return pc.binary_length(column).to_numpy(zero_copy_only=False).astype(np.int64)


_STRING_OFFSETS = {pa.string(): "<i4", pa.large_string(): "<i8"}
"""The offset width of each string type read in place; any other type is cast to large strings first, as before."""


def _string_chunks(column: pa.ChunkedArray | pa.Array) -> list[tuple[np.ndarray, Any]] | None:
    """Each non-empty chunk of a string column as (its n + 1 offsets, its data buffer), read in place: no
    combined copy and no cast of the whole column. None for a column of another type or with nulls."""
    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    width = _STRING_OFFSETS.get(column.type)
    if width is None or column.null_count:
        return None
    spans = []
    for chunk in chunks:
        if len(chunk):
            offsets = np.frombuffer(chunk.buffers()[1], dtype=width)[chunk.offset : chunk.offset + len(chunk) + 1]
            spans.append((offsets, chunk.buffers()[2]))
    return spans


def column_digest(hasher, column: pa.ChunkedArray | pa.Array) -> None:
    """Feed a string column to a hash as (lengths, bytes): independent of Arrow chunking."""
    spans = _string_chunks(column)
    if spans is None:
        return _column_digest_cast(hasher, column)
    # The same bytes as one update of all lengths then one of all text: a hash's updates concatenate.
    lengths = [np.diff(offsets).astype("<i8") for offsets, _ in spans]
    hasher.update(np.concatenate(lengths).tobytes() if lengths else b"")
    for offsets, data in spans:
        if data is not None and offsets[-1] > offsets[0]:
            hasher.update(memoryview(data)[offsets[0] : offsets[-1]])


def _column_digest_cast(hasher, column: pa.ChunkedArray | pa.Array) -> None:
    """`column_digest` of a column that is not plain strings without nulls: combined and cast to large strings."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks() if column.num_chunks else pa.array([], pa.string())
    column = column.cast(pa.large_string())
    hasher.update(utf8_lengths(column).astype("<i8").tobytes())
    offsets_buf, data_buf = column.buffers()[1], column.buffers()[2]
    if data_buf is None or len(column) == 0:
        return
    offsets = np.frombuffer(offsets_buf, dtype="<i8")[column.offset : column.offset + len(column) + 1]
    hasher.update(memoryview(data_buf)[offsets[0] : offsets[-1]])


def _span_hashes(data: Any, starts: list[int], ends: list[int]) -> np.ndarray:
    """xxh3-64 of `data[starts[i]:ends[i]]` for each i (uint64): map over slices, no generator frame per row, as this
    loop is the cost of every shard every stage writes."""
    import xxhash

    view = memoryview(data or b"")
    return np.fromiter(map(xxhash.xxh3_64_intdigest, map(view.__getitem__, map(slice, starts, ends))), np.uint64,
                       len(starts))


def text_hashes(column: pa.ChunkedArray | pa.Array) -> pa.Array:
    """xxh3-64 of each string's UTF-8 bytes (the `text_hash` column), hashed from Arrow's buffers, not Python strings.

    A null is an error: the schema says `text` is never null, and a null would have no hash to compare.
    """
    if column.null_count:
        raise ValueError(f"{column.null_count} null text(s): `text` must be a string in every row")
    spans = _string_chunks(column)
    if spans is None:
        if isinstance(column, pa.ChunkedArray):
            column = column.combine_chunks() if column.num_chunks else pa.array([], pa.string())
        spans = _string_chunks(column.cast(pa.large_string()))
    hashes = [_span_hashes(data, offsets[:-1].tolist(), offsets[1:].tolist()) for offsets, data in spans]
    return pa.array(np.concatenate(hashes) if hashes else np.empty(0, np.uint64), pa.uint64())


def text_hashes_at(column: pa.Array, rows: np.ndarray) -> np.ndarray:
    """`text_hashes(column.take(rows))` as uint64 for a string or large_string array without nulls, read in place:
    no copy of the strings taken."""
    spans = _string_chunks(column)
    if spans is None:
        raise ValueError(f"text_hashes_at takes strings without nulls, not {column.type} with {column.null_count} "
                         f"null(s)")
    if not spans:  # an empty array: no row to take
        return np.zeros(len(rows), np.uint64)
    ((offsets, data),) = spans
    return _span_hashes(data, offsets[rows].tolist(), offsets[rows + 1].tolist())


def replace_rows(column: pa.Array, rows: Sequence[int], texts: Sequence[str]) -> pa.Array:
    """`column` (strings, one chunk) with row `rows[i]` holding `texts[i]` (rows ascending): only those texts become
    Arrow strings. Raises as `pa.array` does for a text with no UTF-8 form (a lone surrogate)."""
    if not len(rows):
        return column
    fresh = pa.array(list(texts), column.type)
    mask = np.zeros(len(column), dtype=bool)
    mask[list(rows)] = True
    return pc.replace_with_mask(column, pa.array(mask), fresh)


def with_text_hash(table: pa.Table) -> pa.Table:
    """The table with `text_hash` computed from its `text`: replaced in place when present, else appended."""
    hashes = text_hashes(table.column("text"))
    if TEXT_HASH in table.column_names:
        return table.set_column(table.schema.get_field_index(TEXT_HASH), TEXT_HASH_FIELD, hashes)
    return table.append_column(TEXT_HASH_FIELD, hashes)


def content_hash(table: pa.Table) -> str:
    """sha256 over the ids and texts of a table, in order: what a shard holds, not how it is encoded."""
    h = hashlib.sha256()
    column_digest(h, table.column("id"))
    column_digest(h, table.column("text"))
    return h.hexdigest()
