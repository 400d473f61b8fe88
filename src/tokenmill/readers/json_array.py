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
from tokenmill.readers.base import PREVIEW_CHARS, json_safe, open_source, record_from_object
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
# A surrogate's \u escape: a high one with a low one after it is a pair, one character; any other is lone, not Unicode
# text. Found from the literal `\u`, which re's scan jumps to; whether its backslash is itself escaped is counted after.
_SURROGATE = re.compile(rb'\\u[dD](?:[89abAB][0-9a-fA-F]{2}(?:\\u[dD][c-fC-F][0-9a-fA-F]{2})?|[c-fC-F][0-9a-fA-F]{2})')
_HIGH = re.compile(rb'\\u[dD][89abAB][0-9a-fA-F]{2}')
LONE_MARK = "\uffff"
"""What a lone surrogate's escape is rewritten to before ijson reads it (the noncharacter U+FFFF, an escape of the same
six bytes): ijson's C backend otherwise turns a lone high surrogate into '?' silently, and a lone low one into an
error that ends the file. A record holding it is then a `decode_error`, as a JSON line's is."""


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
        self.held = b""  # the end of the last read, whose escapes may go on in the next one
        self.lone_surrogates = 0  # escapes rewritten to LONE_MARK so far
        self.noncharacters = 0  # U+FFFF as the file wrote it (raw or escaped): a LONE_MARK may then be either

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
        want = BUF if size is None or size < 0 else size
        if want == 0:  # ijson reads 0 bytes first, to learn whether the stream gives bytes or text
            return b""
        data = self.stream.read(max(1, want - len(self.held)))
        if not self.first:
            self.first = data.lstrip(b" \t\r\n\xef\xbb\xbf")[:1]
        data = self._marked(data)
        cut = self._scan(data)
        if cut is not None:
            data = data[:cut]
        self.offset += len(data)
        return data

    def readinto(self, buffer) -> int:
        data = self.read(len(buffer))
        buffer[:len(data)] = data
        return len(data)

    def _marked(self, new: bytes) -> bytes:
        """The bytes to hand out now, each lone surrogate's escape rewritten to LONE_MARK; an escape that may go on
        in the next read (a backslash among the last 12 bytes, with its run of backslashes, or the low half of a
        pair after it) waits for it."""
        data, self.held = self.held + new, b""
        if new:
            cut = _safe_end(data)
            if cut:  # 0: no safe place (a run of backslashes to the end): all of it now
                data, self.held = data[:cut], data[cut:]
        # U+FFFF as the file wrote it, for the drop's message alone (`uffff` may also be text after a literal
        # backslash, or an escape of mixed case be missed: only the message's wording depends on it)
        self.noncharacters += data.count(b"\xef\xbf\xbf") + data.count(b"uffff") + data.count(b"uFFFF")
        return self._rewritten(data)

    def _rewritten(self, data: bytes) -> bytes:
        """`data` with each lone surrogate's escape (after an even run of backslashes: after an odd one the
        backslash is literal text) rewritten to LONE_MARK, of the same length."""
        parts, done, pos = [], 0, 0  # nearly every read has no surrogate escape: one search, no copy
        while (m := _SURROGATE.search(data, pos)) is not None:
            start = m.start()
            run = start
            while run > 0 and data[run - 1] == 0x5C:
                run -= 1
            if (start - run) % 2:  # `\\u...`: a literal backslash, then text; an escape may start just after
                pos = start + 1
                continue
            if m.end() - start == 6:
                parts += [data[done:start], LONE_MARK.encode("unicode_escape")]
                done = m.end()
                self.lone_surrogates += 1
            pos = m.end()
        return b"".join(parts) + data[done:] if parts else data

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


def _safe_end(data: bytes) -> int:
    """Where `data` may end so that no escape, pair of escapes or run of backslashes is cut: the start of the run of
    backslashes holding the first backslash among its last 12 bytes (a pair is 12), moved before a high surrogate's
    escape that ends there; len(data) when those bytes hold no backslash."""
    k = data.find(b"\\", max(0, len(data) - 12))
    if k < 0:
        return len(data)
    while k > 0 and data[k - 1] == 0x5C:
        k -= 1
    if k >= 6 and _HIGH.fullmatch(data, k - 6, k):  # the pair's low half starts at k
        k -= 6
        while k > 0 and data[k - 1] == 0x5C:
            k -= 1
    return k


def _holds(value, ch: str) -> bool:
    """Whether a parsed JSON value has `ch` in any string, key or value."""
    if isinstance(value, str):
        return ch in value
    if isinstance(value, dict):
        return any(ch in k or _holds(v, ch) for k, v in value.items())
    if isinstance(value, list):
        return any(_holds(v, ch) for v in value)
    return False


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
                if stream.lone_surrogates and _holds(value, LONE_MARK):
                    also = " (or the noncharacter U+FFFF, which this file also has)" if stream.noncharacters else ""
                    yield Record(index, str(value)[:PREVIEW_CHARS], drop="decode_error",
                                 message=f"{where}: a \\u escape of a lone surrogate (U+D800-U+DFFF without its "
                                         f"pair){also}: not Unicode text")
                elif isinstance(value, str):
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
