"""Generated files for each quirk real dumps throw at a reader: encodings, record caps, zstd windows, BOMs."""

from __future__ import annotations

import io
import json

import pytest
import zstandard

from tokenmill.errors import ConfigError
from tokenmill.pipeline.config import parse_config
from tokenmill.sources.config import SourceConfig
from tokenmill.sources.formats import READERS

CP1252_TEXT = "Café “quoted” – naïve résumé, it’s déjà vu"
ZH_TEXT = "专家认为，寺庙不仅能翻译手稿，而且还能带动档案的发展。在林明看来，条约和手稿并不是一回事。"


def read(path, fmt="jsonl", **kwargs):
    source = SourceConfig(name="s", format=fmt, paths=["x"], **kwargs)
    return list(READERS[fmt].read(str(path), source, "s:f"))


def jline(text, encoding="utf-8"):
    return json.dumps({"text": text}, ensure_ascii=False).encode(encoding) + b"\n"


def test_windows_1252_mixed_with_utf8(tmp_path):
    path = tmp_path / "mixed.jsonl"
    path.write_bytes(jline("plain ascii") + jline(CP1252_TEXT, "cp1252") + jline(CP1252_TEXT) + jline("Ünïcödé"))
    assert [r.text for r in read(path, encoding="auto")] == ["plain ascii", CP1252_TEXT, CP1252_TEXT, "Ünïcödé"]
    strict = read(path)  # utf-8 by default: the Windows-1252 line is a counted decode_error, not mojibake
    assert [r.drop for r in strict] == [None, "decode_error", None, None]
    assert "s:f:2" in strict[1].message
    assert read(tmp_path / "mixed.jsonl", encoding="cp1252")[1].text == CP1252_TEXT


def test_gb18030_news(tmp_path):
    path = tmp_path / "gb.jsonl"
    path.write_bytes(jline(ZH_TEXT, "gb18030") * 3)
    assert [r.text for r in read(path, encoding="gb18030")] == [ZH_TEXT] * 3
    assert [r.text for r in read(path, encoding="auto")] == [ZH_TEXT] * 3
    assert {r.drop for r in read(path)} == {"decode_error"}


def test_csv_with_windows_1252_row(tmp_path):
    path = tmp_path / "c.csv"
    path.write_bytes(b"id,text\n1,fine\n" + f'2,"{CP1252_TEXT}"\n'.encode("cp1252") + b"3,also fine\n")
    assert [r.drop for r in read(path, "csv")] == [None, "decode_error", None]
    assert [r.text for r in read(path, "csv", encoding="auto")] == ["fine", CP1252_TEXT, "also fine"]


@pytest.mark.parametrize("fmt, content", [
    ("jsonl", lambda big: jline("a") + jline(big) + jline("b")),
    ("csv", lambda big: b"text\na\n" + big.encode() + b"\nb\n"),
    ("json", lambda big: json.dumps(["a", big, "b"]).encode()),
])
def test_record_over_the_cap_is_skipped_and_the_next_reads(tmp_path, fmt, content):
    path = tmp_path / f"f.{fmt}"
    path.write_bytes(content("x" * 10_000))
    records = read(path, fmt, max_record_bytes=4096)
    assert [r.drop for r in records] == [None, "record_too_large", None]
    assert records[2].text == "b"


def test_text_file_over_the_cap(tmp_path):
    (tmp_path / "big.txt").write_text("y" * 5000)
    (record,) = read(tmp_path / "big.txt", "text", max_record_bytes=4096)
    assert record.drop == "record_too_large"


def test_zstd_frame_needing_window_log_31(tmp_path):
    data = b"".join(jline(f"doc {i}") for i in range(100))
    params = zstandard.ZstdCompressionParameters.from_level(3, window_log=31)
    buf = io.BytesIO()
    with zstandard.ZstdCompressor(compression_params=params).stream_writer(buf, closefd=False) as w:
        w.write(data)  # streamed: no content size, so the header asks for the whole 2 GiB window
    assert zstandard.get_frame_parameters(buf.getvalue()).window_size == 2**31
    path = tmp_path / "RC.ndjson.zst"
    path.write_bytes(buf.getvalue())
    (refused,) = read(path)
    assert refused.drop == "read_error" and "max_window_log" in refused.message
    assert len(read(path, max_window_log=31)) == 100


def test_bom_and_u2028_and_u0085(tmp_path):
    path = tmp_path / "b.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + jline("first") + jline("a\u2028b\u0085c"))
    assert [r.text for r in read(path)] == ["first", "a\u2028b\u0085c"]


@pytest.mark.parametrize("change, words", [
    ({"encoding": "klingon"}, "sources[0].encoding: unknown encoding 'klingon'"),
    ({"encoding": "utf-16"}, "cannot be split into lines"),
    ({"format": "csv", "options": {"delimeter": ";"}}, "options.delimeter: unknown key"),
    ({"format": "csv", "options": {"quoting": "all"}}, "options.quoting"),
    ({"max_window_log": 40}, "sources[0].max_window_log"),
])
def test_source_options_are_checked_before_any_work(tmp_path, change, words):
    (tmp_path / "a.jsonl").write_text('{"text": "x"}\n')
    source = {"name": "a", "format": "jsonl", "paths": ["*.jsonl"], **change}
    with pytest.raises(ConfigError) as err:
        parse_config({"output": "o", "sources": [source]}, tmp_path)
    assert words in str(err.value)


def test_csv_row_with_the_wrong_number_of_fields_is_a_bad_row(tmp_path):
    path = tmp_path / "r.csv"
    path.write_text("id,text\n1,fine\n2,too,many,fields\n3,also fine\n")
    records = read(path, "csv")
    assert [r.drop for r in records] == [None, "bad_row", None]
    assert "s:f:3" in records[1].message and "4 fields, expected 2" in records[1].message
