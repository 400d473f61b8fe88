"""The Megatron-LM indexed-dataset format (``.bin`` + ``.idx``): the one writer and the one reader.

Layout (as in ``megatron/core/datasets/indexed_dataset.py``), little-endian, no padding:

``.idx``::

    magic           9 bytes   b"MMIDIDX\\x00\\x00"
    version         <Q        1
    dtype code      <B        see DTYPE_CODES
    sequence count  <Q        S
    document count  <Q        D + 1 (the length of the document-index array below)
    lengths         int32[S]  tokens per sequence
    pointers        int64[S]  byte offset of each sequence in .bin
    doc indices     int64[D+1] sequence number where each document starts: 0, ..., S
    (modes          int8[S]   multimodal data only; never written here, accepted when present)

``.bin`` holds the tokens of every sequence back to back, in the dtype of the code, with no header.

tokenmill writes one sequence per document, so the document indices are ``0, 1, ..., S``.
"""

from __future__ import annotations

import io
import os
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

MAGIC = b"MMIDIDX\x00\x00"
VERSION = 1
BIN = ".bin"
"""The tokens' file: ``<prefix>.bin``."""
IDX = ".idx"
"""The index's file: ``<prefix>.idx``."""

DTYPE_CODES: dict[np.dtype, int] = {
    np.dtype(np.uint8): 1,
    np.dtype(np.int8): 2,
    np.dtype(np.int16): 3,
    np.dtype(np.int32): 4,
    np.dtype(np.int64): 5,
    np.dtype(np.float64): 6,
    np.dtype(np.float32): 7,
    np.dtype(np.uint16): 8,
}
CODE_DTYPES: dict[int, np.dtype] = {code: dtype for dtype, code in DTYPE_CODES.items()}

_HEADER = struct.Struct("<9sQBQQ")  # magic, version, dtype code, sequence count, document count


def dtype_for_vocab(vocab_size: int) -> np.dtype:
    """uint16 when every id fits (``vocab_size <= 65536``, ids < 65536), else int32 (as Megatron chooses)."""
    if vocab_size <= 0:
        raise ValueError(f"vocab_size must be positive, got {vocab_size}")
    if vocab_size <= 65536:
        return np.dtype(np.uint16)
    if vocab_size <= 2**31:
        return np.dtype(np.int32)
    raise ValueError(f"vocab_size {vocab_size} does not fit int32 token ids")


def _checked_dtype(dtype) -> np.dtype:
    dt = np.dtype(dtype)
    if dt.newbyteorder("=") not in DTYPE_CODES:
        raise ValueError(f"dtype {dt} has no Megatron dtype code (allowed: {sorted(str(d) for d in DTYPE_CODES)})")
    return dt.newbyteorder("<") if dt.itemsize > 1 else dt


class IndexedWriter:
    """Builds one ``.bin``/``.idx`` pair in memory; the caller writes both through its own atomic commit.

    Tokens are appended to an in-memory binary stream as each document arrives (the ``.bin`` bytes; no
    list of arrays is kept), plus 12 bytes of index per document. Shards are sized by the pipeline (split
    at a token count), so one shard's bytes fit in memory. Usage::

        w = IndexedWriter(dtype_for_vocab(tokenizer_vocab_size))
        for tokens in docs:
            w.add_document(tokens)
        bin_bytes, idx_bytes = w.finalize()
        ctx.write("shard-00000.bin", bin_bytes); ctx.write("shard-00000.idx", idx_bytes)
    """

    def __init__(self, dtype: np.dtype):
        self.dtype = _checked_dtype(dtype)
        self._bin = io.BytesIO()
        self._lengths: list[int] = []
        self._finalized = False

    @property
    def num_documents(self) -> int:
        return len(self._lengths)

    @property
    def num_tokens(self) -> int:
        return sum(self._lengths)

    @property
    def num_bytes(self) -> int:
        """Bytes of ``.bin`` so far."""
        return self._bin.tell()

    def add_document(self, tokens) -> None:
        """Append one document as one sequence. Raises ValueError on ids the dtype cannot hold."""
        arr = np.asarray(tokens)
        if arr.ndim != 1:
            raise ValueError(f"a document must be a 1-D token array, got shape {arr.shape}")
        self.add_documents(arr, [arr.size])

    def add_documents(self, tokens, lengths) -> None:
        """Append several documents at once: ``tokens`` back to back, ``lengths`` tokens each (one range check and
        one write for a whole batch, not one per document). Raises ValueError on ids the dtype cannot hold."""
        if self._finalized:
            raise ValueError("IndexedWriter already finalized")
        arr = np.asarray(tokens)
        lens = np.asarray(lengths, dtype=np.int64)
        if arr.ndim != 1 or lens.ndim != 1:
            raise ValueError(f"documents must be a 1-D token array and 1-D lengths, got shapes {arr.shape}, {lens.shape}")
        if int(lens.sum()) != arr.size or (lens.size and int(lens.min()) < 0):
            raise ValueError(f"lengths {lens.tolist()[:8]}... do not split {arr.size} tokens")
        if arr.size and self.dtype.kind in "iu":
            if arr.dtype.kind not in "iub":
                raise ValueError(f"token ids must be integers, got dtype {arr.dtype}")
            info = np.iinfo(self.dtype)
            lo, hi = int(arr.min()), int(arr.max())
            if lo < info.min or hi > info.max:
                raise ValueError(
                    f"token ids [{lo}, {hi}] do not fit {self.dtype.name} [{info.min}, {info.max}]"
                )
        if lens.size and int(lens.max()) > np.iinfo(np.int32).max:
            raise ValueError(f"document of {int(lens.max())} tokens exceeds the int32 sequence length")
        self._bin.write(np.ascontiguousarray(arr, dtype=self.dtype).data)
        self._lengths.extend(lens.tolist())

    def finalize(self) -> tuple[memoryview, bytes]:
        """Return ``(bin_bytes, idx_bytes)``; the writer cannot be used afterwards. ``bin_bytes`` is a read-only
        view of the stream's buffer, not a copy: a shard's tokens are held once, not twice, while they are written."""
        if self._finalized:
            raise ValueError("IndexedWriter already finalized")
        self._finalized = True
        bin_bytes = self._bin.getbuffer().toreadonly()
        idx_bytes = build_index(self.dtype, self._lengths)
        return bin_bytes, idx_bytes

    def write(self, prefix: str | os.PathLike) -> tuple[Path, Path]:
        """Convenience (tests, tools): finalize and write ``prefix.bin`` and ``prefix.idx`` directly."""
        bin_bytes, idx_bytes = self.finalize()
        bin_path, idx_path = Path(f"{os.fspath(prefix)}{BIN}"), Path(f"{os.fspath(prefix)}{IDX}")
        bin_path.write_bytes(bin_bytes)
        idx_path.write_bytes(idx_bytes)
        return bin_path, idx_path


def index_bytes(documents: int) -> int:
    """The size of the ``.idx`` `build_index` writes for ``documents`` documents (one sequence each): the header,
    then int32 lengths, int64 pointers and ``documents + 1`` int64 document indices."""
    return _HEADER.size + 4 * documents + 8 * documents + 8 * (documents + 1)


def build_index(dtype: np.dtype, lengths) -> bytes:
    """``.idx`` bytes for one sequence per document with these lengths (tokens), in this dtype."""
    dt = _checked_dtype(dtype)
    lens = np.asarray(lengths, dtype=np.int64)
    s = int(lens.size)
    pointers = np.zeros(s, dtype="<i8")
    if s > 1:
        np.cumsum(lens[:-1] * dt.itemsize, out=pointers[1:])
    doc_idx = np.arange(s + 1, dtype="<i8")
    header = _HEADER.pack(MAGIC, VERSION, DTYPE_CODES[dt.newbyteorder("=")], s, s + 1)
    return b"".join(
        (header, lens.astype("<i4").tobytes(), pointers.tobytes(), doc_idx.tobytes())
    )


def _fail(path, why: str):
    raise ValueError(f"{path}: not a valid Megatron indexed dataset: {why}")


@dataclass(frozen=True)
class ParsedIndex:
    """The arrays of one ``.idx`` file, checked against each other."""

    dtype: np.dtype
    sequence_lengths: np.ndarray
    sequence_pointers: np.ndarray
    document_indices: np.ndarray
    sequence_modes: np.ndarray | None
    num_tokens: int


def parse_index(raw: bytes, p) -> ParsedIndex:
    """Parse and check ``.idx`` bytes (``p`` names the file in errors); no ``.bin`` needed, so any filesystem works."""
    if len(raw) < _HEADER.size:
        _fail(p, f"{len(raw)} bytes, shorter than the {_HEADER.size}-byte header")
    magic, version, code, s, d = _HEADER.unpack_from(raw, 0)
    if magic != MAGIC:
        _fail(p, f"bad magic {magic!r} (expected {MAGIC!r})")
    if version != VERSION:
        _fail(p, f"unsupported version {version} (expected {VERSION})")
    if code not in CODE_DTYPES:
        _fail(p, f"unknown dtype code {code}")
    dtype = CODE_DTYPES[code].newbyteorder("<") if CODE_DTYPES[code].itemsize > 1 else CODE_DTYPES[code]
    if d < 1:
        _fail(p, f"document count {d} (must be at least 1: the indices end with S)")
    body = len(raw) - _HEADER.size
    need = 4 * s + 8 * s + 8 * d
    if body == need:
        modes = False
    elif body == need + s:
        modes = True
    else:
        _fail(
            p, f"{len(raw)} bytes, but {s} sequences and {d} document indices need {_HEADER.size + need}"
        )
    off = _HEADER.size
    lengths = np.frombuffer(raw, dtype="<i4", count=s, offset=off)
    off += 4 * s
    pointers = np.frombuffer(raw, dtype="<i8", count=s, offset=off)
    off += 8 * s
    doc_indices = np.frombuffer(raw, dtype="<i8", count=d, offset=off)
    off += 8 * d
    mode_array = np.frombuffer(raw, dtype=np.int8, count=s, offset=off) if modes else None

    if s and int(lengths.min()) < 0:
        _fail(p, "negative sequence length")
    itemsize = dtype.itemsize
    expected = np.zeros(s, dtype=np.int64)
    if s > 1:
        np.cumsum(lengths[:-1].astype(np.int64) * itemsize, out=expected[1:])
    if not np.array_equal(pointers, expected):
        _fail(p, "sequence pointers are not consecutive byte offsets of the lengths")
    if doc_indices[0] != 0 or doc_indices[-1] != s or (d > 1 and bool(np.any(np.diff(doc_indices) < 0))):
        _fail(p, f"document indices must rise from 0 to the sequence count {s}")
    total = int(lengths.astype(np.int64).sum())
    return ParsedIndex(dtype, lengths, pointers, doc_indices, mode_array, total)


def _paths(prefix_or_paths) -> tuple[Path, Path]:
    if isinstance(prefix_or_paths, (tuple, list)):
        if len(prefix_or_paths) != 2:
            raise ValueError("expected (idx_path, bin_path)")
        a, b = (Path(p) for p in prefix_or_paths)
        # Accept either order when the suffixes say which is which.
        if a.suffix == BIN and b.suffix == IDX:
            a, b = b, a
        return a, b
    text = os.fspath(prefix_or_paths)
    for suffix in (IDX, BIN):
        if text.endswith(suffix):
            text = text[: -len(suffix)]
    return Path(text + IDX), Path(text + BIN)


class IndexedReader:
    """Reads a ``.bin``/``.idx`` pair: ``.idx`` is parsed and checked, ``.bin`` is memory-mapped read-only.

    ``prefix_or_paths`` is a prefix (``.../shard-00000``; a trailing ``.idx``/``.bin`` is tolerated) or a
    pair ``(idx_path, bin_path)``. Every inconsistency raises ValueError naming the file.
    """

    def __init__(self, prefix_or_paths):
        self.idx_path, self.bin_path = _paths(prefix_or_paths)
        try:
            raw = self.idx_path.read_bytes()
        except FileNotFoundError:
            raise ValueError(f"{self.idx_path}: index file not found") from None
        self._parse_index(raw)
        self._map_bin()

    def _parse_index(self, raw: bytes) -> None:
        parsed = parse_index(raw, self.idx_path)
        self.dtype = parsed.dtype
        self.sequence_lengths = parsed.sequence_lengths
        self.sequence_pointers = parsed.sequence_pointers
        self.document_indices = parsed.document_indices
        self.sequence_modes = parsed.sequence_modes
        self._total_tokens = parsed.num_tokens

    def _map_bin(self) -> None:
        p = self.bin_path
        try:
            size = p.stat().st_size
        except FileNotFoundError:
            raise ValueError(f"{p}: data file not found") from None
        want = self._total_tokens * self.dtype.itemsize
        if size != want:
            _fail(p, f"{size} bytes, but {self.idx_path.name} describes {want}")
        # np.memmap cannot map an empty file.
        self._bin = np.memmap(p, dtype=self.dtype, mode="r") if size else np.empty(0, dtype=self.dtype)

    @property
    def tokens(self) -> np.ndarray:
        """Every token of the file, back to back: the read-only memory map of ``.bin``."""
        return self._bin

    @property
    def num_documents(self) -> int:
        return len(self.document_indices) - 1

    @property
    def num_tokens(self) -> int:
        return self._total_tokens

    def __len__(self) -> int:
        return len(self.sequence_lengths)

    def __getitem__(self, i: int) -> np.ndarray:
        """Tokens of sequence ``i`` (a read-only view into the memory map)."""
        n = len(self)
        i = int(i)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"sequence {i} out of range for {n} sequences")
        start = int(self.sequence_pointers[i]) // self.dtype.itemsize
        return self._bin[start : start + int(self.sequence_lengths[i])]

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]

    def __repr__(self) -> str:
        return f"IndexedReader({str(self.idx_path)[:-4]!r}, dtype={self.dtype}, sequences={len(self)})"
