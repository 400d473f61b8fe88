"""Deterministic shard writers: JSON lines (plain, gzip, zstd; any encoding), Parquet, CSV, JSON arrays, text files.

Every writer has `add_record(record) -> index` (the 0-based index the reader gives the record),
`count` (records a reader sees) and `close()`; `line_based` says whether index + 1 is a line number.
"""

from __future__ import annotations

import csv
import gzip
import io
from pathlib import Path
from typing import Callable

import pyarrow as pa
import pyarrow.parquet as pq
import zstandard

from .planted import dumps

# Fixed settings: same input -> byte-identical files. gzip gets mtime=0 and no
# file name in its header; zstd compresses each file in one call, so the frame
# header carries the content size and readers may use either one-shot or
# streaming decompression.
GZIP_LEVEL = 4  # ~3x faster than 6 for ~7% larger files; generation speed matters more
ZSTD_LEVEL = 3
PARQUET_ROW_GROUP_SIZE = 64
PARQUET_COMPRESSION = "zstd"


class JsonlShard:
    """Collects lines in memory (a shard is at most tens of MB) and writes the file on close.

    `window_log` writes the zstd frame as a stream of unknown size with that window (Pushshift dumps
    use 31, so readers need `--long=31`); otherwise the frame carries its content size and the window
    shrinks to fit. `final_newline=False` leaves the last line unterminated, as some dumps do.
    """

    line_based = True

    def __init__(self, path: Path, compression: str | None, *, encoding: str = "utf-8",
                 dumps: Callable[[object], str] = dumps, final_newline: bool = True, window_log: int | None = None):
        if compression not in (None, "gzip", "zstd"):
            raise ValueError(f"unknown compression {compression!r}")
        if window_log is not None and compression != "zstd":
            raise ValueError("window_log needs zstd compression")
        self.path = path
        self.compression = compression
        self.encoding = encoding
        self.dumps = dumps
        self.final_newline = final_newline
        self.window_log = window_log
        self._lines: list[bytes] = []

    @property
    def count(self) -> int:
        return len(self._lines)

    def add_record(self, record: dict) -> int:
        """Append a record; return its 0-based index (line number - 1)."""
        return self.add_raw(self.dumps(record).encode(self.encoding))

    def add_raw(self, line: bytes) -> int:
        if b"\n" in line:
            raise ValueError("a JSON lines record must not contain a raw newline")
        self._lines.append(line)
        return len(self._lines) - 1

    def close(self) -> None:
        data = b"\n".join(self._lines)
        if self._lines and self.final_newline:
            data += b"\n"
        if self.compression == "gzip":
            data = gzip.compress(data, compresslevel=GZIP_LEVEL, mtime=0)
        elif self.compression == "zstd" and self.window_log is not None:
            params = zstandard.ZstdCompressionParameters.from_level(ZSTD_LEVEL, window_log=self.window_log)
            stream = zstandard.ZstdCompressor(compression_params=params).compressobj()  # size unknown: window kept
            data = stream.compress(data) + stream.flush()
        elif self.compression == "zstd":
            data = zstandard.ZstdCompressor(level=ZSTD_LEVEL).compress(data)
        self.path.write_bytes(data)


class ParquetShard:
    """Collects rows column-wise and writes one Parquet file on close."""

    line_based = False

    def __init__(self, path: Path, schema: pa.Schema):
        self.path = path
        self.schema = schema
        self._columns: dict[str, list] = {name: [] for name in schema.names}

    @property
    def count(self) -> int:
        return len(self._columns[self.schema.names[0]])

    def add_record(self, record: dict) -> int:
        """Append a row; return its 0-based row index."""
        for name, values in self._columns.items():
            values.append(record.get(name))
        return self.count - 1

    def add_raw(self, line: bytes) -> int:
        raise TypeError("raw (unparseable) records cannot be planted in Parquet files")

    def close(self) -> None:
        table = pa.table(self._columns, schema=self.schema)
        pq.write_table(
            table,
            self.path,
            row_group_size=PARQUET_ROW_GROUP_SIZE,
            compression=PARQUET_COMPRESSION,
            use_dictionary=[n for n in ("genre", "topic") if n in self.schema.names],  # not on long texts
        )


class CsvShard:
    """CSV with a header row; fields with commas, quotes or newlines are quoted (quotes doubled), rows end in \\n."""

    line_based = False  # a quoted field may span lines, so the index is the data row, not a line

    def __init__(self, path: Path, columns: list[str]):
        self.path = path
        self.columns = columns
        self._buffer = io.StringIO()
        self._writer = csv.writer(self._buffer, lineterminator="\n")
        self._writer.writerow(columns)
        self.count = 0

    def add_record(self, record: dict) -> int:
        self._writer.writerow([record.get(c, "") for c in self.columns])
        self.count += 1
        return self.count - 1

    def close(self) -> None:
        self.path.write_bytes(self._buffer.getvalue().encode("utf-8"))


class JsonArrayShard:
    """One JSON array of objects per file, one object per line inside the brackets."""

    line_based = False

    def __init__(self, path: Path):
        self.path = path
        self._items: list[str] = []

    @property
    def count(self) -> int:
        return len(self._items)

    def add_record(self, record: dict) -> int:
        self._items.append(dumps(record))
        return self.count - 1

    def close(self) -> None:
        self.path.write_bytes(("[\n" + ",\n".join(self._items) + "\n]\n").encode("utf-8"))


class TextFiles:
    """One document per .txt file (UTF-8, no BOM), 1,000 files per folder."""

    line_based = False
    PER_FOLDER = 1000

    def __init__(self, folder: Path, start: int = 0):
        self.folder = folder
        self.start = start
        self.paths: list[Path] = []

    @property
    def count(self) -> int:
        return len(self.paths)

    def add_record(self, record: dict) -> int:
        n = self.start + len(self.paths)
        path = self.folder / f"{n // self.PER_FOLDER:05d}" / f"doc-{n:08d}.txt"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(record["text"].encode("utf-8"))
        self.paths.append(path)
        return self.count - 1

    def close(self) -> None:
        pass
