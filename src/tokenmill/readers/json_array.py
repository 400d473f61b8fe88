"""JSON documents holding many records: an array of objects or of strings, or one nested deeper.

Streamed with ijson, so a multi-GB array never sits in memory whole; `options.items` is the ijson
prefix of the records: `item` for a top-level array (default), `data.item.paragraphs.item` for
SQuAD-style files such as CMRC 2018. (Each record is held whole while it is parsed; use JSON lines
for records near `max_record_bytes`.)
"""

from __future__ import annotations

import io
from typing import Iterator

import ijson

from tokenmill.pipeline.config_base import StrictModel
from tokenmill.readers.base import Reader, Record, open_source, record_from_object
from tokenmill.readers.compression import DECOMPRESSION_ERRORS
from tokenmill.readers.jsonl import JSON_DROP_REASONS

SAMPLE = 1 << 20


class JsonOptions(StrictModel):
    """Options of the `json` reader."""

    items: str = "item"
    """ijson prefix of the records: `item` for a top-level array, dotted with `item` for nested arrays."""


def _text_stream(path: str, source):
    """A UTF-8 byte stream for ijson; other encodings are decoded and re-encoded on the fly."""
    stream = open_source(path, source)
    encoding = source.encoding
    if encoding == "auto":
        head = stream.peek(SAMPLE)[:SAMPLE]
        try:
            head.decode("utf-8")
            encoding = "utf-8"
        except UnicodeDecodeError as err:
            encoding = "utf-8" if err.start > len(head) - 4 else _detect(head)
    if encoding.replace("-", "").lower() in ("utf8", "utf8sig"):
        return stream
    return io.BufferedReader(_Recode(io.TextIOWrapper(stream, encoding=encoding)))


def _detect(sample: bytes) -> str:
    from charset_normalizer import from_bytes

    from tokenmill.readers.base import AUTO_CANDIDATES

    best = from_bytes(sample, cp_isolation=AUTO_CANDIDATES).best()
    return best.encoding if best is not None else "utf-8"


class _Recode(io.RawIOBase):
    def __init__(self, text: io.TextIOBase):
        self.text, self.pending = text, b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        while not self.pending:
            chunk = self.text.read(1 << 16)
            if not chunk:
                return 0
            self.pending = chunk.encode("utf-8")
        n = min(len(buffer), len(self.pending))
        buffer[:n], self.pending = self.pending[:n], self.pending[n:]
        return n


def read_json(path: str, source, display: str) -> Iterator[Record]:
    """One record per array item: a string is the text, an object is read by the source's fields."""
    prefix = source.reader_options().items
    index = 0
    try:
        with _text_stream(path, source) as stream:
            for value in ijson.items(stream, prefix, use_float=True):
                where = f"{display}: item {index}"
                if isinstance(value, str):
                    if len(value) > source.max_record_bytes:
                        yield Record(index, "", drop="record_too_large", message=f"{where}: more than {source.max_record_bytes} bytes")
                    elif not value.strip():
                        yield Record(index, value, drop="empty_text", message=f"{where}: empty text")
                    else:
                        yield Record(index, value)
                else:
                    yield record_from_object(value, index, source, where)
                index += 1
    except (ijson.JSONError, UnicodeDecodeError, *DECOMPRESSION_ERRORS) as err:
        yield Record(index, "", drop="read_error", message=f"{display}: damaged after item {index}: {err}")


JSON = Reader(read_json, JSON_DROP_REASONS, JsonOptions, line_based=False)
