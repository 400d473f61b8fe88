"""The jsonl reader: every bad line is a named drop with file and line; damage never loses the whole records before it."""

from __future__ import annotations

import gzip
import json

import pytest
import zstandard

from tokenmill.sources.config import SourceConfig
from tokenmill.readers.jsonl import read_jsonl

SRC = SourceConfig(name="s", format="jsonl", paths=["x"], id_field="id")


def lines(n):
    return b"".join(json.dumps({"id": f"d{i}", "text": f"text {i}"}).encode() + b"\n" for i in range(n))


def read(path, source=SRC, limit=1 << 20):
    source = source.model_copy(update={"max_record_bytes": limit})
    return list(read_jsonl(str(path), source, "s:f.jsonl"))


@pytest.mark.parametrize("suffix, pack", [
    (".jsonl", lambda b: b),
    (".jsonl.gz", lambda b: gzip.compress(b, mtime=0)),
    (".jsonl.zst", lambda b: zstandard.ZstdCompressor().compress(b)),
])
def test_plain_and_compressed(tmp_path, suffix, pack):
    path = tmp_path / f"f{suffix}"
    path.write_bytes(pack(lines(50)))
    records = read(path)
    assert [r.id for r in records] == [f"d{i}" for i in range(50)]
    assert all(r.drop is None for r in records)


def test_multi_member_gzip_and_multi_frame_zstd(tmp_path):
    (tmp_path / "m.jsonl.gz").write_bytes(gzip.compress(lines(3)) + gzip.compress(lines(2)))
    assert len(read(tmp_path / "m.jsonl.gz")) == 5
    z = zstandard.ZstdCompressor()
    (tmp_path / "m.jsonl.zst").write_bytes(z.compress(lines(3)) + z.compress(lines(2)))
    assert len(read(tmp_path / "m.jsonl.zst")) == 5


@pytest.mark.parametrize("suffix, pack", [
    (".jsonl.gz", lambda b: gzip.compress(b, mtime=0)),
    (".jsonl.zst", lambda b: zstandard.ZstdCompressor().compress(b)),
])
def test_truncated_file_yields_whole_records_then_read_error(tmp_path, suffix, pack):
    data = pack(lines(20_000))
    path = tmp_path / f"t{suffix}"
    path.write_bytes(data[: len(data) // 2])
    records = read(path)
    good = [r for r in records if r.drop is None]
    assert len(good) > 1000
    assert [r.id for r in good] == [f"d{i}" for i in range(len(good))]
    assert records[-1].drop == "read_error"
    assert "s:f.jsonl" in records[-1].message and "damaged stream" in records[-1].message
    assert all(r.drop in (None, "read_error", "bad_json") for r in records)


def test_each_bad_line_is_named(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_bytes(
        b'{"id": "ok", "text": "fine"}\n'
        b"{broken\n"
        b'{"id": "u", "text": "caf\xe9"}\n'
        b'["a", "list"]\n'
        b'{"id": "e", "text": "   "}\n'
        b'{"id": "m"}\n'
        b'{"id": "n", "text": 5}\n'
        b'{"text": "no id"}\n'
        b"\n"
        b'{"id": "nan", "text": "x", "v": NaN}\n'
        b'{"id": "last", "text": "no newline"}'
    )
    records = read(path)
    assert [(r.index, r.drop) for r in records] == [
        (0, None), (1, "bad_json"), (2, "decode_error"), (3, "not_an_object"), (4, "empty_text"),
        (5, "missing_text"), (6, "bad_text_type"), (7, "missing_id"), (9, "bad_json"), (10, None),
    ]
    assert records[2].message.startswith("s:f.jsonl:3: invalid utf-8")
    assert records[-1].text == "no newline"


def test_a_lone_surrogate_escape_is_a_named_drop_not_a_failed_file(tmp_path):
    # json decodes "\\ud800" alone into a str no UTF-8 writer takes: the ingest task of the whole file failed at
    # its first encode. A pair is one character; an escaped backslash before "ud800" is plain text.
    path = tmp_path / "s.jsonl"
    path.write_bytes(
        b'{"id": "a", "text": "fine"}\n'
        b'{"id": "b", "text": "lone \\ud800 high"}\n'
        b'{"id": "c", "text": "pair \\ud83d\\ude00 ok"}\n'
        b'{"id": "d", "text": "in meta", "author": "\\uDC00x"}\n'
        b'{"id": "e", "text": "a backslash then \\\\ud800 is text"}\n'
    )
    records = read(path)
    assert [(r.id, r.drop) for r in records] == [
        ("a", None), (None, "decode_error"), ("c", None), (None, "decode_error"), ("e", None)]
    assert records[1].message == ("s:f.jsonl:2: a \\u escape of a lone surrogate (U+D800-U+DFFF without its pair): "
                                  "not Unicode text")
    assert records[3].message.startswith("s:f.jsonl:4: ")
    assert records[2].text == "pair \U0001F600 ok"
    assert records[4].text == "a backslash then \\ud800 is text"
    for r in records:  # every record, kept or dropped, can be written
        (r.text + repr(r.meta)).encode("utf-8")


def test_record_too_large_line_is_skipped_without_holding_it(tmp_path):
    path = tmp_path / "big.jsonl"
    path.write_bytes(lines(2) + json.dumps({"id": "big", "text": "x" * 50_000}).encode() + b"\n" + lines(1))
    records = read(path, limit=4096)
    assert [r.drop for r in records] == [None, None, "record_too_large", None]
    assert records[2].text == "" and records[3].id == "d0"


def test_line_separator_inside_strings_is_not_a_line_break(tmp_path):
    path = tmp_path / "ls.jsonl"
    path.write_text(json.dumps({"id": "a", "text": "one\u2028two"}, ensure_ascii=False) + "\r\n", encoding="utf-8")
    (record,) = read(path)
    assert record.text == "one\u2028two"


def test_nested_fields_subset_and_meta(tmp_path):
    src = SourceConfig(name="f", format="jsonl", paths=["x"], text_field="post.body", id_field="post.id",
                       subset_field="post.board")
    path = tmp_path / "n.jsonl"
    path.write_text(json.dumps({"post": {"id": 7, "body": "hi", "board": "b1"}, "score": 3}) + "\n")
    (record,) = read(path, src)
    assert (record.id, record.text, record.subset) == ("7", "hi", "b1")
    assert record.meta == {"post": {"board": "b1"}, "score": 3}


def test_empty_file_has_no_records(tmp_path):
    (tmp_path / "e.jsonl").write_bytes(b"")
    assert read(tmp_path / "e.jsonl") == []
