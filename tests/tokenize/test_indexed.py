"""The Megatron indexed-dataset writer and reader, checked against an independent parser of the layout."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

from tokenmill.tokenize.indexed import (
    DTYPE_CODES,
    IndexedReader,
    IndexedWriter,
    dtype_for_vocab,
)

# Megatron-LM's codes, written out here rather than imported.
MEGATRON_CODES = {1: np.uint8, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64, 6: np.float64, 7: np.float32, 8: np.uint16}


def parse_idx(raw: bytes) -> dict:
    """Independent parser of the .idx layout (megatron/core/datasets/indexed_dataset.py); no tokenmill code."""
    magic = raw[:9]
    (version,) = struct.unpack("<Q", raw[9:17])
    (code,) = struct.unpack("<B", raw[17:18])
    (s,) = struct.unpack("<Q", raw[18:26])
    (d,) = struct.unpack("<Q", raw[26:34])
    off = 34
    lengths = np.frombuffer(raw, dtype="<i4", count=s, offset=off)
    off += 4 * s
    pointers = np.frombuffer(raw, dtype="<i8", count=s, offset=off)
    off += 8 * s
    docs = np.frombuffer(raw, dtype="<i8", count=d, offset=off)
    off += 8 * d
    return dict(magic=magic, version=version, code=code, s=s, d=d, lengths=lengths, pointers=pointers, docs=docs, end=off)


def random_docs(rng, n, high):
    docs = [rng.integers(0, high, size=int(rng.integers(1, 300))) for _ in range(n)]
    docs.insert(n // 2, np.array([], dtype=np.int64))  # an empty document
    docs.append(np.array([high - 1, 0], dtype=np.int64))  # extremes of the vocabulary
    return docs


def write(tmp_path: Path, dtype, docs, name="shard") -> Path:
    w = IndexedWriter(dtype)
    for doc in docs:
        w.add_document(doc)
    bin_bytes, idx_bytes = w.finalize()
    (tmp_path / f"{name}.bin").write_bytes(bin_bytes)
    (tmp_path / f"{name}.idx").write_bytes(idx_bytes)
    return tmp_path / name


def test_dtype_codes_match_megatron():
    assert {code: np.dtype(t) for code, t in MEGATRON_CODES.items()} == {c: d for d, c in DTYPE_CODES.items()}


def test_dtype_for_vocab():
    assert dtype_for_vocab(50257) == np.uint16
    assert dtype_for_vocab(65536) == np.uint16
    assert dtype_for_vocab(65537) == np.int32
    assert dtype_for_vocab(100_001) == np.int32
    assert dtype_for_vocab(128_256) == np.int32


@pytest.mark.parametrize("dtype,high", [(np.uint16, 65536), (np.int32, 100_001)])
def test_round_trip_and_independent_parse(tmp_path, dtype, high):
    rng = np.random.default_rng(7)
    docs = random_docs(rng, 40, high)
    prefix = write(tmp_path, dtype, docs)

    raw = (tmp_path / "shard.idx").read_bytes()
    ref = parse_idx(raw)
    s = len(docs)
    itemsize = np.dtype(dtype).itemsize
    assert ref["magic"] == b"MMIDIDX\x00\x00"
    assert ref["version"] == 1
    assert ref["code"] == {np.uint16: 8, np.int32: 4}[dtype]
    assert ref["s"] == s and ref["d"] == s + 1
    assert ref["end"] == len(raw)  # no trailing bytes (no multimodal modes)
    assert ref["lengths"].tolist() == [len(d) for d in docs]
    # Pointers are byte offsets, consecutive: each starts where the previous ended.
    expected_ptrs = np.concatenate([[0], np.cumsum([len(d) * itemsize for d in docs])[:-1]])
    assert ref["pointers"].tolist() == expected_ptrs.tolist()
    assert ref["docs"].tolist() == list(range(s + 1))
    bin_raw = (tmp_path / "shard.bin").read_bytes()
    assert len(bin_raw) == sum(len(d) for d in docs) * itemsize
    flat = np.frombuffer(bin_raw, dtype=np.dtype(dtype).newbyteorder("<"))
    assert flat.tolist() == np.concatenate(docs).tolist()

    reader = IndexedReader(prefix)
    assert reader.dtype == np.dtype(dtype)
    assert len(reader) == s
    assert reader.sequence_lengths.tolist() == ref["lengths"].tolist()
    assert reader.sequence_pointers.tolist() == ref["pointers"].tolist()
    assert reader.document_indices.tolist() == ref["docs"].tolist()
    for i, doc in enumerate(docs):
        got = reader[i]
        assert got.dtype == np.dtype(dtype)
        assert got.tolist() == doc.tolist()
    assert reader[-1].tolist() == docs[-1].tolist()
    assert isinstance(reader._bin, np.memmap)
    assert not reader[0].flags.writeable


def test_large_vocab_switches_to_int32(tmp_path):
    dtype = dtype_for_vocab(100_001)
    docs = [np.array([0, 65535, 65536, 99_999, 100_000]), np.arange(70_000, 70_100)]
    prefix = write(tmp_path, dtype, docs)
    assert parse_idx((tmp_path / "shard.idx").read_bytes())["code"] == 4
    reader = IndexedReader(prefix)
    assert reader.dtype == np.int32
    assert [reader[i].tolist() for i in range(2)] == [d.tolist() for d in docs]


def test_uint16_rejects_ids_it_cannot_hold():
    w = IndexedWriter(np.uint16)
    with pytest.raises(ValueError, match="uint16"):
        w.add_document(np.array([1, 65536]))
    with pytest.raises(ValueError):
        w.add_document(np.array([-1]))


def test_reader_accepts_paths_and_suffixes(tmp_path):
    prefix = write(tmp_path, np.uint16, [np.array([1, 2, 3])])
    for arg in (str(prefix), str(prefix) + ".idx", (prefix.with_suffix(".idx"), prefix.with_suffix(".bin"))):
        assert IndexedReader(arg)[0].tolist() == [1, 2, 3]


def test_empty_shard(tmp_path):
    prefix = write(tmp_path, np.uint16, [])
    assert parse_idx((tmp_path / "shard.idx").read_bytes())["docs"].tolist() == [0]
    reader = IndexedReader(prefix)
    assert len(reader) == 0
    w = IndexedWriter(np.uint16)
    w.add_document(np.array([], dtype=np.int64))
    bin_bytes, idx_bytes = w.finalize()
    assert bin_bytes == b"" and parse_idx(idx_bytes)["lengths"].tolist() == [0]


def test_corrupted_magic_names_file(tmp_path):
    prefix = write(tmp_path, np.uint16, [np.array([1, 2, 3])])
    idx = tmp_path / "shard.idx"
    raw = bytearray(idx.read_bytes())
    raw[0:1] = b"X"
    idx.write_bytes(bytes(raw))
    with pytest.raises(ValueError, match="shard.idx.*magic"):
        IndexedReader(prefix)


@pytest.mark.parametrize("keep", [0, 20, 34, 40, -1])
def test_truncated_idx_names_file(tmp_path, keep):
    prefix = write(tmp_path, np.int32, [np.array([1, 2, 3]), np.array([4])])
    idx = tmp_path / "shard.idx"
    raw = idx.read_bytes()
    idx.write_bytes(raw[:keep])
    with pytest.raises(ValueError, match="shard.idx"):
        IndexedReader(prefix)


@pytest.mark.parametrize(
    "field,value",
    [("version", struct.pack("<Q", 2)), ("code", struct.pack("<B", 9))],
)
def test_bad_version_or_dtype_code(tmp_path, field, value):
    prefix = write(tmp_path, np.uint16, [np.array([1, 2, 3])])
    idx = tmp_path / "shard.idx"
    raw = bytearray(idx.read_bytes())
    start = {"version": 9, "code": 17}[field]
    raw[start : start + len(value)] = value
    idx.write_bytes(bytes(raw))
    with pytest.raises(ValueError, match=f"shard.idx.*{'version' if field == 'version' else 'dtype code'}"):
        IndexedReader(prefix)


def test_bin_size_mismatch_names_file(tmp_path):
    prefix = write(tmp_path, np.uint16, [np.array([1, 2, 3])])
    (tmp_path / "shard.bin").write_bytes(b"\x00" * 4)
    with pytest.raises(ValueError, match="shard.bin"):
        IndexedReader(prefix)


def test_inconsistent_pointers_rejected(tmp_path):
    prefix = write(tmp_path, np.uint16, [np.array([1, 2]), np.array([3])])
    idx = tmp_path / "shard.idx"
    raw = bytearray(idx.read_bytes())
    ptr1 = 34 + 4 * 2 + 8  # second pointer
    raw[ptr1 : ptr1 + 8] = struct.pack("<q", 2)  # should be 4 (2 tokens * 2 bytes)
    idx.write_bytes(bytes(raw))
    with pytest.raises(ValueError, match="shard.idx.*pointers"):
        IndexedReader(prefix)


def test_finalize_once():
    w = IndexedWriter(np.uint16)
    w.finalize()
    with pytest.raises(ValueError):
        w.add_document(np.array([1]))
    with pytest.raises(ValueError):
        w.finalize()


@pytest.mark.parametrize("lengths", [[], [5], [3, 1, 4, 1, 5, 9, 2, 6]])
def test_index_bytes_is_the_size_build_index_writes(lengths):
    """What the streaming loader budgets for a .idx before fetching it: the size the writer makes."""
    from tokenmill.tokenize.indexed import build_index, index_bytes

    for dtype in (np.uint16, np.int32):
        assert index_bytes(len(lengths)) == len(build_index(np.dtype(dtype), lengths))
