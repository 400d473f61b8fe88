"""write_format_files: one format at any size, clean, deterministic, readable the way FORMAT_SOURCES says."""

from __future__ import annotations

import csv
import hashlib
import io
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.demo.parse import decompress, gzip_members, http_response, json_lines, warc_records, zstd_window_log
from tokenmill.demo import FORMAT_SOURCES, FORMATS, write_format_files

TARGET = 300_000
FILE_BYTES = 120_000  # small files, so that every format spreads over several


def _texts(fmt: str, paths: list[Path]) -> list[str]:
    """The document texts of the files, parsed here independently of the readers (HTML: the raw pages)."""
    out = []
    for path in paths:
        if fmt == "text":
            out.append(path.read_text(encoding="utf-8"))
        elif fmt == "parquet":
            out += pq.read_table(path).column("text").to_pylist()
        elif fmt == "csv":
            rows = list(csv.reader(io.StringIO(path.read_text(encoding="utf-8"), newline="")))
            assert rows[0] == ["id", "kind", "topic", "text"]
            out += [row[3] for row in rows[1:]]
        elif fmt == "json":
            items = json.loads(path.read_text(encoding="utf-8"))
            assert isinstance(items, list) and all(isinstance(i, dict) for i in items)
            out += [i["text"] for i in items]
        elif fmt in ("cc_wet", "cc_warc"):
            records = warc_records(decompress(path))
            assert records[0].type == "warcinfo" and gzip_members(path.read_bytes()) == len(records)
            if fmt == "cc_wet":
                out += [r.block.decode("utf-8") for r in records if r.type == "conversion"]
            else:
                out += [http_response(r.block).payload.decode("utf-8") for r in records if r.type == "response"]
        else:
            lines, _ = json_lines(decompress(path))
            for line in lines:
                obj = json.loads(line)
                if fmt == "reddit":
                    out.append(obj["body"] if "body" in obj else obj["title"] + "\n\n" + obj["selftext"])
                else:
                    out.append(obj["text"])
    return out


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> dict[str, tuple[Path, list[Path]]]:
    out = {}
    for fmt in FORMATS:
        folder = tmp_path_factory.mktemp(fmt)
        out[fmt] = folder, write_format_files(folder, fmt, TARGET, seed=11, file_bytes=FILE_BYTES)
    return out


@pytest.mark.parametrize("fmt", FORMATS)
def test_files_hold_at_least_the_target_text(written, fmt):
    folder, paths = written[fmt]
    assert paths and all(p.is_file() for p in paths)
    assert sorted(p for p in folder.rglob("*") if p.is_file()) == sorted(paths)  # nothing else in the folder
    texts = _texts(fmt, paths)
    assert all(t.strip() for t in texts) and len(set(texts)) == len(texts)
    total = sum(len(t.encode("utf-8")) for t in texts)
    assert total >= TARGET  # for HTML the pages, which hold at least their articles
    if fmt not in ("cc_warc", "text"):
        assert total < TARGET + 2 * FILE_BYTES
        assert len(paths) >= 3
    globbed = {p for pattern in FORMAT_SOURCES[fmt]["paths"] for p in folder.glob(pattern)}
    assert globbed == set(paths)


def test_same_arguments_same_bytes(written, tmp_path):
    for fmt in ("csv", "cc_warc", "reddit"):
        _, first = written[fmt]
        again = write_format_files(tmp_path / fmt, fmt, TARGET, seed=11, file_bytes=FILE_BYTES)
        assert [p.name for p in again] == [p.name for p in first]
        assert all(hashlib.sha256(a.read_bytes()).digest() == hashlib.sha256(b.read_bytes()).digest()
                   for a, b in zip(first, again))


def test_csv_quotes_commas_quotes_and_newlines(written):
    _, paths = written["csv"]
    raw = paths[0].read_text(encoding="utf-8")
    assert raw.startswith("id,kind,topic,text\n")
    texts = _texts("csv", paths)
    assert any("," in t for t in texts) and any('"' in t for t in texts) and any("\n" in t for t in texts)
    assert '""' in raw  # embedded quotes doubled inside a quoted field


def test_reddit_files_come_in_month_pairs_with_the_long_window(written):
    _, paths = written["reddit"]
    names = [p.name for p in paths]
    assert names[:2] == ["RC_2023-01.ndjson.zst", "RS_2023-01.ndjson.zst"] and len(names) % 2 == 0
    assert all(zstd_window_log(p.read_bytes()) == 31 for p in paths)


def test_text_files_are_one_document_each(written):
    _, paths = written["text"]
    assert all(p.suffix == ".txt" and p.parent.name == "00000" for p in paths)


def test_unknown_format_is_refused(tmp_path):
    with pytest.raises(ValueError, match="unknown format"):
        write_format_files(tmp_path, "xml", 1000)
    with pytest.raises(ValueError):
        write_format_files(tmp_path, "csv", 0)
