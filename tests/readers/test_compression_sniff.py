"""Compression is read from a file's first bytes, not trusted from its name (issue 17, item 13)."""

from __future__ import annotations

import bz2
import gzip
import json
import logging
import lzma
import struct

import pytest
import zstandard

from tokenmill.sources.config import SourceConfig
from tokenmill.readers.compression import open_binary, sniff
from tokenmill.readers.jsonl import read_jsonl
from tokenmill.readers.plaintext import TEXT

SRC = SourceConfig(name="s", format="jsonl", paths=["x"], id_field="id")
DATA = b"".join(json.dumps({"id": f"d{i}", "text": f"text {i}"}).encode() + b"\n" for i in range(20))
SKIPPABLE = struct.pack("<II", 0x184D2A53, 3) + b"pad"


def read(path):
    return list(read_jsonl(str(path), SRC, f"s:{path.name}"))


@pytest.mark.parametrize("name, pack, kind", [
    ("gzip_named.jsonl.zst", lambda b: gzip.compress(b, mtime=0), "gzip"),
    ("zstd_named.jsonl.gz", lambda b: zstandard.ZstdCompressor().compress(b), "zstd"),
    ("zstd_unnamed.jsonl", lambda b: zstandard.ZstdCompressor().compress(b), "zstd"),
    ("gzip_unnamed.jsonl", lambda b: gzip.compress(b, mtime=0), "gzip"),
    ("skippable_first.jsonl", lambda b: SKIPPABLE + zstandard.ZstdCompressor().compress(b), "zstd"),
])
def test_misnamed_files_are_read_by_their_content_and_logged(tmp_path, caplog, name, pack, kind):
    path = tmp_path / name
    path.write_bytes(pack(DATA))
    with caplog.at_level(logging.WARNING, logger="tokenmill.readers.compression"):
        records = read(path)
    assert [r.id for r in records] == [f"d{i}" for i in range(20)]
    assert all(r.drop is None for r in records)
    assert f"its first bytes are {kind} data although its name says" in caplog.text
    assert name in caplog.text


@pytest.mark.parametrize("name, pack", [
    ("plain.jsonl", lambda b: b),
    ("a.jsonl.gz", lambda b: gzip.compress(b, mtime=0)),
    ("a.jsonl.zst", lambda b: zstandard.ZstdCompressor().compress(b)),
])
def test_rightly_named_files_read_without_a_warning(tmp_path, caplog, name, pack):
    path = tmp_path / name
    path.write_bytes(pack(DATA))
    with caplog.at_level(logging.WARNING, logger="tokenmill.readers.compression"):
        assert len([r for r in read(path) if r.drop is None]) == 20
    assert caplog.text == ""


def test_a_gz_name_on_plain_text_is_still_damage(tmp_path):
    """No magic: the name decides, so a file claiming gzip that is not is one loud read_error, not text."""
    path = tmp_path / "a.jsonl.gz"
    path.write_bytes(DATA)
    records = read(path)
    assert [r.drop for r in records] == ["read_error"]
    assert "damaged stream" in records[0].message


@pytest.mark.parametrize("kind, pack", [("xz", lzma.compress), ("bzip2", bz2.compress)])
def test_unsupported_compression_is_a_read_error_naming_it(tmp_path, kind, pack):
    path = tmp_path / "a.jsonl"
    path.write_bytes(pack(DATA))
    records = read(path)
    assert [r.drop for r in records] == ["read_error"]
    assert f"{kind} data (by its first bytes), which tokenmill does not read" in records[0].message


def test_text_format_sniffs_too(tmp_path):
    path = tmp_path / "book.txt.zst"
    path.write_bytes(gzip.compress("a whole book".encode(), mtime=0))
    source = SourceConfig(name="t", format="text", paths=["x"])
    assert [r.text for r in TEXT.read(str(path), source, "t:book.txt.zst")] == ["a whole book"]


def test_sniff_is_not_fooled_by_text():
    for text in [b"", b"{", b"BZh9 is a word", b"(\xc2\xb5/", "\u00b5 plain".encode(), b"\x1f"]:
        assert sniff(text) is None
    with open_binary(__file__) as f:
        assert f.read(3) == b'"""'
