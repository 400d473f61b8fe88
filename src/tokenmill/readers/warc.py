"""WARC and WET readers for Common Crawl (stub: being written)."""

from __future__ import annotations

from typing import Iterator

from tokenmill.readers.base import Reader, Record


def _not_yet(path: str, source, display: str) -> Iterator[Record]:
    raise NotImplementedError("cc_wet and cc_warc readers are being written")


CC_WET = Reader(_not_yet, (), line_based=False)
CC_WARC = Reader(_not_yet, ("not_html",), line_based=False)
