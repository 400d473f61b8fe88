"""The demo sources: their files, the record streams that fill them, and the writer of each format."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pyarrow as pa

from . import sources, streams
from .formats import JsonlShard, ParquetShard
from .sources import Records
from .warc import WarcShard, WetShard


@dataclass(frozen=True)
class Stream:
    """A generator of (record, text) and where a record keeps its text and id (for planters)."""

    records: Callable[..., Records]
    text_path: tuple[str, ...]
    id_path: tuple[str, ...] | None


@dataclass(frozen=True)
class FileSpec:
    path: str  # relative to the corpus folder
    stream: str = "main"
    weight: float = 1.0  # share of the source's records (and bytes) relative to its other files
    args: tuple[tuple[str, object], ...] = ()  # stream arguments; files with equal (stream, args) share one stream
    options: tuple[tuple[str, object], ...] = ()  # writer options of this file


@dataclass(frozen=True)
class SourceSpec:
    name: str
    writer: str  # jsonl, parquet, pile, reddit, cc_wet, cc_warc
    files: tuple[FileSpec, ...]
    streams: dict[str, Stream]
    share: float  # fraction of target_bytes this source provides
    scale: float = 1.0  # records written per `docs_per_source` (HTML pages are slow to extract: fewer)
    compression: str | None = None
    encoding: str = "utf-8"
    schema: pa.Schema | None = None
    clean: tuple[str, ...] = ()  # the source's globs in demo.yaml: files an earlier run left there are removed

    @property
    def n_files(self) -> int:
        return len(self.files)


def _numbered(pattern: str, n: int, **kw) -> tuple[FileSpec, ...]:
    return tuple(FileSpec(pattern.format(i), **kw) for i in range(n))


def _pile_dumps(record) -> str:
    return json.dumps(record)  # ensure_ascii, as the Pile was written: non-ASCII as \uXXXX escapes


_SEGMENT = "CC-MAIN-20240517233122-20240518023122-{:05d}"

SOURCES: tuple[SourceSpec, ...] = (
    SourceSpec("web_en", "jsonl", _numbered("web_en/part-{:05d}.jsonl.zst", 4),
               {"main": Stream(sources.web_records, ("text",), ("id",))}, 0.12, compression="zstd",
               clean=("web_en/*.jsonl.zst",)),
    SourceSpec("books_en", "parquet", _numbered("books_en/books-{:05d}.parquet", 3),
               {"main": Stream(sources.book_records, ("text",), ("doc_id",))}, 0.25,
               schema=pa.schema([("doc_id", pa.string()), ("text", pa.string()), ("genre", pa.string()),
                                 ("year", pa.int32())]),
               clean=("books_en/*.parquet",)),
    SourceSpec("news_zh", "jsonl", _numbered("news_zh/news-{:05d}.jsonl.gz", 3),
               {"main": Stream(sources.news_records, ("content",), ("id",))}, 0.08, compression="gzip",
               clean=("news_zh/*.jsonl.gz",)),
    SourceSpec("forum_en", "jsonl", _numbered("forum_en/threads-{:05d}.jsonl", 4),
               {"main": Stream(sources.forum_records, ("post", "body"), ("post", "id"))}, 0.05,
               clean=("forum_en/*.jsonl",)),
    SourceSpec("pile", "pile", _numbered("pile/{:02d}.jsonl.zst", 3),
               {"main": Stream(streams.pile_records, ("text",), None)}, 0.15, scale=0.5,
               clean=("pile/*.jsonl.zst",)),
    SourceSpec("cc_wet", "cc_wet", (
        FileSpec("cc/" + _SEGMENT.format(0) + ".warc.wet.gz"),  # one gzip member per record
        FileSpec("cc/" + _SEGMENT.format(1) + ".warc.wet.gz", options=(("single_member", True),)),
    ), {"main": Stream(streams.wet_records, ("text",), None)}, 0.12, scale=0.5,
        clean=("cc/*.warc.wet.gz",)),
    SourceSpec("cc_html", "cc_warc", _numbered("cc_html/" + _SEGMENT + ".warc.gz", 2),
               {"main": Stream(streams.html_records, ("html",), None)}, 0.08, scale=0.25,
               clean=("cc_html/*.warc.gz",)),
    SourceSpec("reddit", "reddit", (
        FileSpec("reddit/RC_2023-01.ndjson.zst", "comments", 3, (("month", "2023-01"),), (("window_log", 31),)),
        FileSpec("reddit/RS_2023-01.ndjson.zst", "submissions", 1, (("month", "2023-01"),),
                 (("final_newline", False),)),
        FileSpec("reddit/RC_2023-02.ndjson.zst", "comments", 3, (("month", "2023-02"),)),
        FileSpec("reddit/RS_2023-02.ndjson.zst", "submissions", 1, (("month", "2023-02"),)),
    ), {"comments": Stream(streams.reddit_comments, ("body",), ("id",)),
        "submissions": Stream(streams.reddit_submissions, ("selftext",), ("id",))}, 0.10,
        clean=("reddit/*.ndjson.zst",)),
    SourceSpec("news_zh_gb", "jsonl", (FileSpec("news_zh_gb/news-gb18030-00000.jsonl"),),
               {"main": Stream(streams.gb_news_records, ("content",), ("id",))}, 0.05, scale=0.25,
               encoding="gb18030", clean=("news_zh_gb/*.jsonl",)),
)


def open_writer(spec: SourceSpec, file: FileSpec, path: Path, key: str):
    """The writer of one file; `key` (seed and file) seeds what the writer derives, such as WARC record ids."""
    options = dict(file.options)
    if spec.writer == "jsonl":
        return JsonlShard(path, spec.compression, encoding=spec.encoding, **options)
    if spec.writer == "parquet":
        return ParquetShard(path, spec.schema)
    if spec.writer == "pile":
        return JsonlShard(path, "zstd", dumps=_pile_dumps, **options)
    if spec.writer == "reddit":
        return JsonlShard(path, "zstd", **options)
    if spec.writer == "cc_wet":
        return WetShard(path, key, started=streams.CRAWL_START, **options)
    if spec.writer == "cc_warc":
        return WarcShard(path, key, started=streams.CRAWL_START, **options)
    raise ValueError(f"unknown writer {spec.writer!r}")
