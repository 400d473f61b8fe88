"""Real text in pieces as a filter sees it: the shared data's prose, web pages, Reddit, Chinese news, and Python's
own source files (tabs, indentation, form feeds), decoded with lone surrogates where the bytes are not UTF-8."""

from __future__ import annotations

import gzip
import io
import sysconfig
from pathlib import Path

import zstandard

from tests.conftest import SHARED_DATA

FILES = ("pile/pearl_pile_texts.json", "pile/the_pile_hf_dummy_val.jsonl.zst",
         "commoncrawl/dolma_CC-MAIN-20190717121559-20190717143559-00140.jsonl.gz",
         "commoncrawl/whirlwind.warc.wet.gz", "commoncrawl/CC-MAIN-2016-50_filter_test_1.warc.wet.gz",
         "commoncrawl/dolma_wget_sample-0000.warc.gz", "reddit/pushshift_test_comments.ndjson",
         "chinese/thucnews_cnews.val.txt", "chinese/ChnSentiCorp_htl_all.csv")


def _read(path: Path, limit: int) -> bytes:
    if path.suffix == ".gz":
        with gzip.open(path) as f:
            return f.read(limit)
    if path.suffix == ".zst":
        with zstandard.ZstdDecompressor().stream_reader(path.open("rb")) as f:
            return io.BufferedReader(f).read(limit)
    with open(path, "rb") as f:
        return f.read(limit)


def real_pieces(piece_chars: int = 3000, per_file_bytes: int = 600_000) -> list[str]:
    """Pieces of about `piece_chars` characters of each shared file (the first `per_file_bytes` bytes, JSON
    escapes left as they are: they are what a cleaning bug would leave) and of 40 standard-library modules."""
    sources = [_read(SHARED_DATA / name, per_file_bytes) for name in FILES if (SHARED_DATA / name).is_file()]
    stdlib = sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py"))[:40]
    sources += [p.read_bytes() for p in stdlib]
    pieces = []
    for data in sources:
        text = data.decode("utf-8", "surrogateescape")  # a cut multi-byte character: a lone surrogate
        pieces += [text[i:i + piece_chars] for i in range(0, len(text), piece_chars)]
    return pieces
