"""The token-file bundle: per token file a ``.bin`` and ``.idx`` (Megatron, `indexed`), a ``.docs.parquet`` sidecar
(which document each sequence is) and an ``.engine`` record (the encoder that made it), and its `tokens.json` entry;
the names of these files, their one writer (`write_bundle`: per shard through `SplitFiles`, and for the files the
tokenize stage's merge joins from those) and their readers.

pyarrow is imported only where a sidecar is written or read: the loader and the trainer take the names from here
(through `tokens_json`) without tokenmill's pipeline extra.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any, Callable, Mapping, Protocol

import numpy as np

from tokenmill.tokenize.indexed import BIN, IDX, IndexedWriter, parse_index

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["BIN", "DOCS", "DOCS_COLUMNS", "ENGINE", "HASHED", "HEAD_BYTES", "SplitFiles", "by_source", "docs_schema",
           "head_record", "read_docs", "read_entry", "recorded_entry", "write_bundle"]

DOCS = ".docs.parquet"
"""The sidecar: row i names the document of sequence i (id, source, subset, tokens)."""
ENGINE = ".engine"
"""The encoder that wrote the file (``tiktoken``, ``tokenizers`` or both joined by ``+``), as text."""
HASHED = (BIN, IDX, DOCS)
"""The files of a `tokens.json` entry, each with its sha256."""
DOCS_COLUMNS = ("id", "source", "subset", "tokens")
HEAD_BYTES = 128 * 1024
"""The range of a ``.bin`` whose sha256 an entry's ``head`` records: a sample's ``seq_len + 1`` tokens fit in it up to
``seq_len`` 65,535 (uint16) or 32,767 (uint32); a longer one reads the whole next file."""
ENTRY_KEYS = ("prefix", "documents", "tokens", "by_source", "engine", "sha256", "head")
"""What a file's `tokens.json` entry holds (``head`` only for a ``.bin`` longer than `HEAD_BYTES`)."""


def docs_schema() -> "pa.Schema":
    """The sidecar's columns (`DOCS_COLUMNS`): which document each sequence of a token file is, for attribution."""
    import pyarrow as pa

    return pa.schema([("id", pa.string()), ("source", pa.string()), ("subset", pa.string()), ("tokens", pa.int64())])


def head_record(bin_bytes, head_bytes: int = HEAD_BYTES) -> dict | None:
    """A file entry's ``head``: the sha256 of the first ``head_bytes`` of a ``.bin`` (None for a file no longer,
    which a loader fetches whole)."""
    if len(bin_bytes) <= head_bytes:
        return None
    return {"bytes": head_bytes, "sha256": hashlib.sha256(memoryview(bin_bytes)[:head_bytes]).hexdigest()}


def read_docs(source, columns: list[str] | None = None) -> "pa.Table":
    """A sidecar's `columns` (None: all), from its path or its bytes."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if isinstance(source, (bytes, bytearray, memoryview)):
        source = pa.BufferReader(source)
    return pq.read_table(source, columns=columns)


def by_source(side: "pa.Table") -> dict[str, dict[str, Any]]:
    """Documents and tokens of a token file per source and subset, from its sidecar table."""
    from tokenmill.documents import NO_SUBSET  # the manifests' name for "no subset" (pyarrow, as the sidecar)

    per_source: dict[str, dict[str, Any]] = {}
    # One row per (source, subset), not per document: a file holds up to millions of documents.
    groups = side.group_by(["source", "subset"], use_threads=False).aggregate(
        [("tokens", "count"), ("tokens", "sum")]).to_pylist()
    for row in groups:
        s = per_source.setdefault(row["source"], {"documents": 0, "tokens": 0, "subsets": {}})
        subset = row["subset"] if row["subset"] is not None else NO_SUBSET
        sub = s["subsets"].setdefault(subset, {"documents": 0, "tokens": 0})
        for tally in (s, sub):
            tally["documents"] += row["tokens_count"]
            tally["tokens"] += row["tokens_sum"]
    return per_source


class Writer(Protocol):
    def write(self, relpath: str, data) -> None: ...


class SplitFiles:
    """One split's token files of one shard, ``<folder><split>/<key>.<part>``: documents arrive a batch at a time; a
    file is closed (its bundle written through `out.write`) after the document that brings it to `max_tokens` tokens.
    `files` holds the `tokens.json` entry of each file written, with its files' sizes (``bytes``)."""

    def __init__(self, split: str, key: str, dtype, max_tokens: int, table: "pa.Table", engines: set, out: Writer,
                 folder: str = ""):
        self.split, self.key, self.dtype, self.max_tokens, self.folder = split, key, dtype, max_tokens, folder
        self.table, self.engines, self.out = table, engines, out
        self.files: list[dict] = []
        self.tokens = self.documents = 0
        self._writer: IndexedWriter | None = None
        self._rows: list[np.ndarray] = []
        self._lengths: list[np.ndarray] = []
        self._in_file = 0

    def add(self, rows: np.ndarray, lengths: np.ndarray, tokens: np.ndarray) -> None:
        """Documents at `rows` of the shard, `lengths` tokens each, `tokens` back to back."""
        self.tokens += int(lengths.sum())
        self.documents += len(rows)
        while len(rows):
            ends = np.cumsum(lengths)
            k = int(np.searchsorted(ends, self.max_tokens - self._in_file))  # the document that fills the file
            take = min(k + 1, len(rows))
            if self._writer is None:
                self._writer = IndexedWriter(self.dtype)
            self._writer.add_documents(tokens[:ends[take - 1]], lengths[:take])
            self._rows.append(rows[:take])
            self._lengths.append(lengths[:take])
            self._in_file += int(ends[take - 1])
            if self._in_file >= self.max_tokens:
                self.flush()
            rows, lengths, tokens = rows[take:], lengths[take:], tokens[ends[take - 1]:]

    def flush(self) -> None:
        """Write the open file, if any: `.bin`, `.idx`, `.docs.parquet` and `.engine`."""
        import pyarrow as pa

        if self._writer is None:
            return
        writer, self._writer = self._writer, None
        bin_bytes, idx_bytes = writer.finalize()
        rows = pa.array(np.concatenate(self._rows))
        side = [self.table.column(c).take(rows).combine_chunks() for c in ("id", "source", "subset")]
        side.append(pa.array(np.concatenate(self._lengths), pa.int64()))
        stem = f"{self.folder}{self.split}/{self.key}.{len(self.files):04d}"
        self.files.append(write_bundle(self.out, stem, bin_bytes, idx_bytes, pa.table(side, schema=docs_schema()),
                                       "+".join(sorted(self.engines)) or "tokenizers"))
        self._rows, self._lengths, self._in_file = [], [], 0


def write_bundle(out: Writer, stem: str, bin_bytes, idx_bytes: bytes, side_table: "pa.Table", engine: str) -> dict:
    """Write one token file's bundle at `stem` (relative to the stage folder) through `out`: `.bin`, `.idx`,
    `.docs.parquet` (`side_table`, a row per sequence) and `.engine`; return its `tokens.json` entry with its files'
    sizes (``bytes``), for the index phase's check. The digests and tallies are made here, in parallel, from the bytes
    in hand: the index phase is one task, and reading every token file back there grew with the whole run."""
    from tokenmill.documents import parquet_bytes

    index_file = parse_index(idx_bytes, stem + IDX)
    if side_table.num_rows != len(index_file.sequence_lengths):
        raise ValueError(f"{stem}: {side_table.num_rows} sidecar rows for {len(index_file.sequence_lengths)} sequences")
    digests = {BIN: hashlib.sha256(bin_bytes).hexdigest(), IDX: hashlib.sha256(idx_bytes).hexdigest()}
    sizes = {BIN: len(bin_bytes), IDX: len(idx_bytes)}
    head = head_record(bin_bytes)
    out.write(f"{stem}{BIN}", bin_bytes)
    out.write(f"{stem}{IDX}", idx_bytes)
    docs_bytes = parquet_bytes(side_table)
    digests[DOCS], sizes[DOCS] = hashlib.sha256(docs_bytes).hexdigest(), len(docs_bytes)
    out.write(f"{stem}{DOCS}", docs_bytes)
    entry = {"prefix": stem, "documents": len(index_file.sequence_lengths), "tokens": index_file.num_tokens,
             "by_source": by_source(side_table), "engine": engine, "sha256": digests, "bytes": sizes}
    if head is not None:
        entry["head"] = head
    out.write(f"{stem}{ENGINE}", engine.encode())
    return entry


def recorded_entry(info: Mapping[str, Any] | None, sizes: Mapping[str, int], prefix: str, itemsize: int
                   ) -> dict | None:
    """The `tokens.json` entry `write_bundle` made for the files at `prefix`, where the files there are the ones it
    wrote (`sizes`: the size of each file by path agrees with the ``bytes`` it recorded); None otherwise."""
    if info is None or not all(sizes.get(prefix + ext) == n for ext, n in info["bytes"].items()) \
            or info["bytes"][BIN] != info["tokens"] * itemsize:
        return None
    return {k: info[k] for k in ENTRY_KEYS if k in info}


def read_entry(read: Callable[[str], bytes], prefix: str, name: str) -> dict:
    """The `tokens.json` entry of the bundle at `prefix`, named `name` (its prefix relative to the index), from its
    files read back through `read` (path -> bytes), each once. Raises ValueError for a ``.bin`` whose size is not
    what its ``.idx`` describes."""
    data = {ext: read(prefix + ext) for ext in HASHED}
    index_file = parse_index(data[IDX], prefix + IDX)
    if len(data[BIN]) != index_file.num_tokens * index_file.dtype.itemsize:
        raise ValueError(f"{prefix}{BIN}: {len(data[BIN])} bytes, but its {IDX} describes "
                         f"{index_file.num_tokens * index_file.dtype.itemsize}")
    side = read_docs(data[DOCS], columns=["source", "subset", "tokens"])
    return {
        "prefix": name, "documents": len(index_file.sequence_lengths), "tokens": index_file.num_tokens,
        "by_source": by_source(side),
        "engine": read(prefix + ENGINE).decode(),
        "sha256": {ext: hashlib.sha256(raw).hexdigest() for ext, raw in data.items()},
        **({"head": head} if (head := head_record(data[BIN])) is not None else {}),
    }
