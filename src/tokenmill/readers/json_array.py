"""JSON documents holding many records: an array of objects or of strings, or one nested deeper.

Streamed with ijson, so a multi-GB array never sits in memory whole; `options.items` is the ijson
prefix of the records: `item` for a top-level array (default), `data.item.paragraphs.item` for
SQuAD-style files such as CMRC 2018. (Each record is held whole while it is parsed; use JSON lines
for records near `max_record_bytes`.)

Hostile files are bounded before ijson sees them (`_Guard`): ijson's memory grows with the square of the nesting
depth (20,000 nested `[` in a 40 KB file took ~1 GB, 100,000 exhausted 24 GB), so nesting deeper than
`MAX_DEPTH` ends the file with one `read_error`; and more than `max_record_bytes` read without a record
completing (one 10 GB string) ends it with one `record_too_large`. Neither can resync: the rest of the file
is not read, as after damage.
"""

from __future__ import annotations

import io
import re
from typing import Iterator

import ijson

from tokenmill.config_base import StrictModel
from tokenmill.readers.base import json_safe, open_source, record_from_object
from tokenmill.readers.compression import DECOMPRESSION_ERRORS
from tokenmill.readers.jsonl import JSON_DROP_REASONS
from tokenmill.sources.reader import Reader, Record

SAMPLE = 1 << 20
BUF = 64 * 1024
"""Bytes ijson reads at a time."""
MAX_DEPTH = 512
"""Deepest nesting of arrays and objects a `json` file may have (real files: under 10)."""

_STRUCTURE = re.compile(rb'["\[\]{}]')
_STRING_BODY = re.compile(rb'(?:[^"\\]++|\\.)*+', re.DOTALL)


class _TooDeep(Exception):
    def __init__(self, offset: int):
        super().__init__(f"nesting deeper than {MAX_DEPTH} levels at byte {offset}")
        self.offset = offset


class _TooLarge(Exception):
    def __init__(self, limit: int, offset: int):
        super().__init__(f"more than {limit} bytes without a complete record (at byte {offset})")


class _Guard(io.RawIOBase):
    """The byte stream ijson reads, checked on the way: nesting depth (a small scanner that skips strings with one
    regex each, so it costs little beside ijson) and bytes read since the last record was handed out."""

    def __init__(self, stream, max_gap: int):
        self.stream = stream
        self.max_gap = max_gap
        self.depth = 0
        self.in_string = False
        self.escape = False  # the previous chunk ended inside a string on a backslash
        self.offset = 0
        self.mark = 0  # offset at the last record handed out
        self.problem: Exception | None = None
        self.first: bytes = b""  # the first byte that is not whitespace

    def readable(self) -> bool:
        return True

    def record_done(self) -> None:
        self.mark = self.offset

    def read(self, size: int = -1) -> bytes:
        # A problem raises on the read after the bytes before it, so ijson first hands out every whole record.
        if self.problem is not None:
            raise self.problem
        if self.offset - self.mark > self.max_gap:
            raise _TooLarge(self.max_gap - 2 * BUF, self.offset)
        data = self.stream.read(BUF if size is None or size < 0 else size)
        if not self.first:
            self.first = data.lstrip(b" \t\r\n\xef\xbb\xbf")[:1]
        cut = self._scan(data)
        if cut is not None:
            data = data[:cut]
        self.offset += len(data)
        return data

    def readinto(self, buffer) -> int:
        data = self.read(len(buffer))
        buffer[:len(data)] = data
        return len(data)

    def _scan(self, data: bytes) -> int | None:
        """Track depth through `data`; the offset of a bracket too deep (the read stops before it), else None."""
        pos, end = 0, len(data)
        if self.escape and end:
            pos, self.escape = 1, False
        while pos < end:
            if self.in_string:
                pos = _STRING_BODY.match(data, pos).end()
                if pos >= end:
                    break
                if data[pos] == 0x5C:  # a backslash as the chunk's last byte: its escaped byte comes next read
                    self.escape = True
                    break
                self.in_string = False  # the closing quote
                pos += 1
                continue
            found = _STRUCTURE.search(data, pos)
            if found is None:
                break
            ch = data[found.start()]
            pos = found.end()
            if ch == 0x22:
                self.in_string = True
            elif ch in (0x5B, 0x7B):
                self.depth += 1
                if self.depth > MAX_DEPTH:
                    self.problem = _TooDeep(self.offset + found.start())
                    return found.start()
            else:
                self.depth -= 1
        return None

    def close(self) -> None:
        self.stream.close()
        super().close()


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
        with _Guard(_text_stream(path, source), source.max_record_bytes + 2 * BUF) as stream:
            for value in ijson.items(stream, prefix, use_float=True, buf_size=BUF):
                stream.record_done()
                where = f"{display}: item {index}"
                if isinstance(value, str):
                    if len(value) > source.max_record_bytes:
                        yield Record(index, "", drop="record_too_large", message=f"{where}: more than {source.max_record_bytes} bytes")
                    elif not value.strip():
                        yield Record(index, value, drop="empty_text", message=f"{where}: empty text")
                    else:
                        yield Record(index, value)
                else:
                    yield record_from_object(json_safe(value), index, source, where)
                index += 1
            if index == 0 and prefix == "item" and stream.first not in (b"[", b""):
                yield Record(0, "", drop="read_error", message=f"{display}: the file is not a JSON array (it starts "
                             f"with {stream.first!r}), so it holds no records at 'item'; set options.items to "
                             "where its records are")
    except _TooLarge as err:
        yield Record(index, "", drop="record_too_large", message=f"{display}: item {index}: {err}; the rest of the "
                                                                 "file is not read")
    except (ijson.JSONError, UnicodeDecodeError, _TooDeep, RecursionError, *DECOMPRESSION_ERRORS) as err:
        yield Record(index, "", drop="read_error", message=f"{display}: damaged after item {index}: {err}")


JSON = Reader("json", read_json, JSON_DROP_REASONS, JsonOptions, line_based=False)
