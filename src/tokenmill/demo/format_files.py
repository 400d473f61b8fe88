"""Files of one format at any size, for reader benchmarks: clean records (nothing planted), same generators as the demo.

    paths = write_format_files("bench/csv", "csv", 200_000_000)

writes CSV files holding at least 200 MB of document text into bench/csv and returns their paths.
`FORMAT_SOURCES[fmt]` is the source config that reads them (paths relative to that folder); every
format keeps its text where the reader looks by default, so `{"format": fmt}` alone also works
(reddit needs `max_window_log: 31`).
"""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
import pyarrow as pa

from . import sources, streams
from .catalog import _pile_dumps
from .documents import DocumentMaker
from .formats import CsvShard, JsonArrayShard, JsonlShard, ParquetShard, TextFiles
from .sources import TOPICS, Records, Unique, _Cover, unique_texts
from .warc import WarcShard, WetShard

FORMATS = ("pile", "cc_wet", "cc_warc", "reddit", "jsonl", "parquet", "csv", "json", "text")
FILE_TEXT_BYTES = 32_000_000
"""Text per file: 200 MB become 7 files, enough for a few workers to share."""

FORMAT_SOURCES: dict[str, dict] = {
    "pile": {"format": "pile", "paths": ["*.jsonl.zst"]},
    "cc_wet": {"format": "cc_wet", "paths": ["*.warc.wet.gz"]},
    "cc_warc": {"format": "cc_warc", "paths": ["*.warc.gz"]},
    "reddit": {"format": "reddit", "paths": ["*.ndjson.zst"], "max_window_log": 31},
    "jsonl": {"format": "jsonl", "paths": ["*.jsonl"], "id_field": "id", "subset_field": "topic"},
    "parquet": {"format": "parquet", "paths": ["*.parquet"], "id_field": "id", "subset_field": "topic"},
    "csv": {"format": "csv", "paths": ["*.csv"], "id_field": "id", "subset_field": "topic"},
    "json": {"format": "json", "paths": ["*.json"], "id_field": "id", "subset_field": "topic"},
    "text": {"format": "text", "paths": ["**/*.txt"]},
}

_TABLE_SCHEMA = pa.schema([("id", pa.string()), ("kind", pa.string()), ("topic", pa.string()), ("text", pa.string())])
_CSV_COLUMNS = ["id", "kind", "topic", "text"]


def mixed_records(maker: DocumentMaker, unique: Unique) -> Records:
    """English documents of mixed length and shape: web pages, forum posts (quotes, newlines), books (dialogue)."""
    cover = _Cover(maker, TOPICS)
    rnd = maker.rnd
    i = 0
    while True:
        topic = cover()
        r = rnd.random()
        if r < 0.6:
            kind, text = "web", maker.web_article(topic)[1]
        elif r < 0.88:
            kind, text = "forum", maker.forum_post(topic, None)[0]
        else:
            kind, text = "book", maker.book(topic, dialogue_rate=0.6)
        if unique(text):
            yield {"id": f"doc-{i:09d}", "kind": kind, "topic": topic, "text": text}, text
            i += 1


def book_texts(maker: DocumentMaker, unique: Unique) -> Records:
    for record, text in sources.book_records(maker, unique):
        yield {"text": text}, text


def _month(n: int) -> str:
    return f"{2023 + n // 12}-{n % 12 + 1:02d}"


def _plan(fmt: str) -> Iterator[tuple[str, float, Callable[[Path, str], object], str]]:
    """(file name, share of FILE_TEXT_BYTES, writer factory, stream name) for file 0, 1, 2, ..."""
    started = streams.CRAWL_START
    segment = "CC-MAIN-20240517233122-20240518023122-{:05d}"
    n = 0
    while True:
        if fmt == "pile":
            yield f"{n:02d}.jsonl.zst", 1.0, lambda p, k: JsonlShard(p, "zstd", dumps=_pile_dumps), "main"
        elif fmt == "cc_wet":
            yield segment.format(n) + ".warc.wet.gz", 1.0, lambda p, k: WetShard(p, k, started=started), "main"
        elif fmt == "cc_warc":
            yield segment.format(n) + ".warc.gz", 1.0, lambda p, k: WarcShard(p, k, started=started), "main"
        elif fmt == "reddit":
            # A month is a comments dump and a submissions dump, both with the 2 GB window of the real ones.
            writer = lambda p, k: JsonlShard(p, "zstd", window_log=31)  # noqa: E731
            yield f"RC_{_month(n)}.ndjson.zst", 0.75, writer, f"comments/{_month(n)}"
            yield f"RS_{_month(n)}.ndjson.zst", 0.25, writer, f"submissions/{_month(n)}"
        elif fmt == "jsonl":
            yield f"part-{n:05d}.jsonl", 1.0, lambda p, k: JsonlShard(p, None), "main"
        elif fmt == "parquet":
            yield f"part-{n:05d}.parquet", 1.0, lambda p, k: ParquetShard(p, _TABLE_SCHEMA), "main"
        elif fmt == "csv":
            yield f"part-{n:05d}.csv", 1.0, lambda p, k: CsvShard(p, _CSV_COLUMNS), "main"
        elif fmt == "json":
            yield f"part-{n:05d}.json", 1.0, lambda p, k: JsonArrayShard(p), "main"
        n += 1


def write_format_files(out_dir: str | os.PathLike, fmt: str, target_bytes: int, seed: int = 1234, *,
                       file_bytes: int = FILE_TEXT_BYTES) -> list[Path]:
    """Write files of one format into `out_dir` holding at least `target_bytes` of document text; return their paths.

    Formats: pile (.jsonl.zst), cc_wet (.warc.wet.gz, gzip per record), cc_warc (.warc.gz: warcinfo, then
    request/response/metadata per page; the text counted is each page's article), reddit (RC_/RS_ month
    pairs, .ndjson.zst with window log 31), jsonl, parquet, csv (header row; quoted fields with commas,
    quotes, newlines), json (one array of objects per file), text (one book per .txt file, 1,000 per
    folder). Deterministic: the same arguments write the same bytes.
    """
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; known: {', '.join(FORMATS)}")
    if target_bytes <= 0 or file_bytes <= 0:
        raise ValueError("target_bytes and file_bytes must be positive")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rnd = random.Random(f"tokenmill-formats/{seed}/{fmt}")
    maker = DocumentMaker(rnd, np.random.default_rng([seed, FORMATS.index(fmt), 7]))
    unique = unique_texts()

    def stream_for(name: str) -> Records:
        kind, _, month = name.partition("/")
        if fmt == "reddit":
            make = streams.reddit_comments if kind == "comments" else streams.reddit_submissions
            return make(maker, unique, month)
        return {"pile": streams.pile_records, "cc_wet": streams.wet_records, "cc_warc": streams.html_records,
                "text": book_texts}.get(fmt, mixed_records)(maker, unique)

    if fmt == "text":
        writer = TextFiles(out)
        stream, total = stream_for("main"), 0
        while total < target_bytes:
            record, text = next(stream)
            writer.add_record(record)
            total += len(text.encode("utf-8"))
        return list(writer.paths)

    paths: list[Path] = []
    total = 0
    main = None
    budget = 0.0
    for name, share, make_writer, stream_name in _plan(fmt):
        if total >= target_bytes:
            break
        if stream_name == "main":
            main = main or stream_for("main")
            stream = main
        else:
            stream = stream_for(stream_name)
        if share == 1.0 or name.startswith("RC_"):  # a new file, or the first of a month's pair
            budget = min(file_bytes, target_bytes - total)
        path = out / name
        writer = make_writer(path, f"tokenmill-formats/{seed}/{fmt}/{name}")
        written = 0
        while written < share * budget or writer.count == 0:
            record, text = next(stream)
            writer.add_record(record)
            written += len(text.encode("utf-8"))
        writer.close()
        total += written
        paths.append(path)
    return paths
