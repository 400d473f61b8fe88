"""Plain text files, one document per file (books, OCR scans, legal texts)."""

from __future__ import annotations

from typing import Iterator

from tokenmill.readers.base import PREVIEW_CHARS, decode, open_source
from tokenmill.readers.compression import DECOMPRESSION_ERRORS
from tokenmill.readers.lines import BOM
from tokenmill.sources.reader import Reader, Record


def read_text(path: str, source, display: str) -> Iterator[Record]:
    """The whole file is the document; one larger than `max_record_bytes` is dropped unread past the cap."""
    try:
        with open_source(path, source) as stream:
            data = stream.read(source.max_record_bytes + 1)
    except DECOMPRESSION_ERRORS as err:
        yield Record(0, "", drop="read_error", message=f"{display}: damaged: {err}")
        return
    if len(data) > source.max_record_bytes:
        yield Record(0, "", drop="record_too_large", message=f"{display}: more than {source.max_record_bytes} bytes")
        return
    if data.startswith(BOM):
        data = data[len(BOM):]
    try:
        text = decode(data, source.encoding)
    except UnicodeDecodeError as err:
        yield Record(0, data.decode("utf-8", "replace")[:PREVIEW_CHARS], drop="decode_error",
                     message=f"{display}: invalid {source.encoding} at byte {err.start}")
        return
    if not text.strip():
        yield Record(0, text, drop="empty_text", message=f"{display}: empty file")
        return
    yield Record(0, text)


TEXT = Reader("text", read_text, line_based=False)
