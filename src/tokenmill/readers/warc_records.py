"""A streaming WARC record parser over an already decompressed byte stream.

`iter_warc_records(stream)` yields `(header, body)` pairs: the record's named fields and a reader limited to its
`Content-Length` bytes. It never holds more than one header block (capped at `MAX_HEADER_BYTES`) and one body
chunk the caller asks for; a body the caller does not read is skipped `CHUNK` bytes at a time, and every byte of
every body is counted, so a `Content-Length` that runs past the end of the stream is seen even on records the
caller skips.

Damage raises `WarcDamage(offset, message)`, where `offset` is the byte offset in the decompressed stream of the
record that could not be read whole:

- the stream raises (truncated or corrupt gzip/zstd: `CorruptStream`, `EOFError`, or an I/O error);
- a record does not start with a `WARC/<major>.<minor>` line, a header line has no `:`, the header block is over
  `MAX_HEADER_BYTES` or ends with the stream, `Content-Length` is missing or not a number;
- the stream ends before `Content-Length` body bytes;
- with `verify_digests`, the body does not match its `WARC-Block-Digest` (sha1, sha256, sha512 or md5; base32,
  hex or base64). This is what catches a corrupt byte in a single-member gzip file: deflate decodes the damage
  into plausible garbage and only the member's CRC, at the end of the whole file, would notice. Common Crawl and
  wget write a sha1 block digest on every record; hashing costs ~0.15 s per 100 MB (a quarter of gzip decoding).

Nothing after damage is parsed: a wrong `Content-Length` puts every later "header" in the middle of some body, and
a resync on the next `WARC/1.` line could turn a quoted WARC (a WARC served over HTTP, a WET text about WARCs)
into records that never existed. The records before the damage are all delivered first.

Blank lines between records are skipped: the standard ends each record with CRLF CRLF, some writers use LF or
add none.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from dataclasses import dataclass
from typing import BinaryIO, Iterator, Optional

from tokenmill.readers.compression import DECOMPRESSION_ERRORS

CHUNK = 1 << 20
"""Bytes read at a time when skipping or reading a body."""
MAX_HEADER_BYTES = 1 << 20
"""A WARC header block longer than this is damage (Common Crawl headers are under 2 KB)."""
MAX_LINE = 64 * 1024

_VERSION = re.compile(rb"WARC/(\d+\.\d+)\r?\n\Z")


class WarcDamage(Exception):
    """The stream cannot be read as WARC from `offset` on (decompressed byte offset of the record)."""

    def __init__(self, offset: int, message: str):
        super().__init__(f"byte {offset}: {message}")
        self.offset = offset
        self.message = message


@dataclass(slots=True)
class WarcHeader:
    """A record's header: version and named fields (names lowercased; a repeated field keeps its first value)."""

    offset: int
    """Byte offset of the record's `WARC/` line in the decompressed stream."""
    version: str
    fields: dict[str, str]
    content_length: int

    def get(self, name: str, default: Optional[str] = None) -> Optional[str]:
        return self.fields.get(name.lower(), default)

    @property
    def type(self) -> str:
        return self.fields.get("warc-type", "").lower()


_HASHES = {"sha1": "sha1", "sha-1": "sha1", "sha256": "sha256", "sha-256": "sha256", "sha512": "sha512",
           "sha-512": "sha512", "md5": "md5"}


_SHA1_BASE32 = re.compile(r"[A-Z2-7]{32}\Z")
_BASE32_TO_INT = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", "0123456789abcdefghijklmnopqrstuv")
"""RFC 4648's base32 alphabet as the digits of `int(text, 32)`, in the same order of value."""


def _digest_check(value: Optional[str]):
    """(hasher, expected raw digest) for a `WARC-Block-Digest` we can verify, else None (absent, unknown algorithm)."""
    if not value:
        return None
    algo, _, encoded = value.partition(":")
    name = _HASHES.get(algo.strip().lower())
    if name is None or not encoded.strip():
        return None
    hasher = hashlib.new(name)
    encoded = encoded.strip()
    upper = encoded.upper()
    if name == "sha1" and _SHA1_BASE32.match(upper):  # what Common Crawl and wget write on every record
        # 32 base32 digits are 160 bits, no padding: read as one number, they are the bytes b32decode would give.
        return hasher, int(upper.translate(_BASE32_TO_INT), 32).to_bytes(20, "big")
    for decode in (lambda e: base64.b32decode(e.upper() + "=" * (-len(e) % 8)), bytes.fromhex,
                   lambda e: base64.b64decode(e, validate=True)):
        try:
            expected = decode(encoded)
        except (ValueError, binascii.Error):
            continue
        if len(expected) == hasher.digest_size:
            return hasher, expected
    return None


class Body:
    """The body of one record: at most `Content-Length` bytes of the stream."""

    __slots__ = ("_parser", "remaining", "length", "_check")

    def __init__(self, parser: "_Parser", length: int, check=None):
        self._parser = parser
        self.length = length
        self.remaining = length
        self._check = check

    def read(self, size: int = -1) -> bytes:
        """Up to `size` bytes (all that is left when negative); b"" at the end of the body.

        Raises WarcDamage when the stream breaks or ends before the body does.
        """
        if self.remaining <= 0:
            return b""
        want = self.remaining if size < 0 else min(size, self.remaining)
        data = self._parser.read_exact(want, self)
        self.remaining -= len(data)
        if self._check is not None:
            hasher, expected = self._check
            hasher.update(data)
            if self.remaining == 0 and hasher.digest() != expected:
                raise self._parser.damage(f"the record's body does not match its WARC-Block-Digest "
                                          f"({hasher.name}; the data is corrupt)")
        return data

    def skip(self) -> None:
        while self.remaining > 0:
            self.read(CHUNK)


class _Parser:
    """Headers and bodies of one stream. It keeps its own buffer of what the stream has ready (`read1`), so a header
    block is found and parsed in place (`_buffered_fields`), not read a line at a time. Every read still hands out or
    raises what the stream's own `readline` and `read` would: damage is met at the same byte and named the same."""

    def __init__(self, stream: BinaryIO):
        self.stream = stream
        self.offset = 0  # bytes consumed so far
        self.record_offset = 0
        self._buf = b""  # bytes taken from the stream, not yet consumed: self._buf[self._pos:]
        self._pos = 0
        self._read1 = getattr(stream, "read1", stream.read)

    def damage(self, message: str) -> WarcDamage:
        return WarcDamage(self.record_offset, message)

    def _more(self) -> bool:
        """The stream's next bytes (what one read of it gives) added to the buffer; False at its end."""
        data = self._read1(CHUNK)
        if not data:
            return False
        self._buf = self._buf[self._pos:] + data
        self._pos = 0
        return True

    def readline(self, limit: int) -> bytes:
        """Up to and including the next b"\n", at most `limit` bytes, or what is left at the end: `readline(limit)`."""
        try:
            while True:
                end = self._buf.find(b"\n", self._pos, self._pos + limit)
                if end != -1:
                    end += 1
                    break
                if len(self._buf) - self._pos >= limit:
                    end = self._pos + limit
                    break
                if not self._more():
                    end = len(self._buf)
                    break
        except DECOMPRESSION_ERRORS as err:
            raise self.damage(f"damaged stream after byte {self.offset}: {err}") from None
        line = self._buf[self._pos:end]
        self._pos = end
        self.offset += len(line)
        return line

    def _read(self, size: int) -> bytes:
        """`size` bytes, fewer only at the end of the stream: the buffered ones, then the stream's `read`."""
        ready = len(self._buf) - self._pos
        if ready >= size:
            data = self._buf[self._pos:self._pos + size]
            self._pos += size
            return data
        head = self._buf[self._pos:]
        self._buf, self._pos = b"", 0
        rest = self.stream.read(size - ready)  # raises as a read of all `size` would: damage ends the parse
        return head + rest if head else rest

    def read_exact(self, size: int, body: Body) -> bytes:
        parts, got = [], 0
        while got < size:
            try:
                data = self._read(size - got)
            except DECOMPRESSION_ERRORS as err:
                raise self.damage(f"damaged stream after byte {self.offset + got}: {err}") from None
            if not data:
                read = body.length - body.remaining + got
                raise self.damage(f"Content-Length {body.length} runs past the end of the stream "
                                  f"({read} body bytes there)")
            parts.append(data)
            got += len(data)
        self.offset += got
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def header(self) -> Optional[WarcHeader]:
        """The next record's header, or None at a clean end of the stream."""
        while True:  # blank lines between records
            self.record_offset = self.offset
            line = self.readline(MAX_LINE)
            if not line:
                return None
            if line not in (b"\r\n", b"\n"):
                break
        match = _VERSION.match(line)
        if match is None:
            raise self.damage(f"no WARC record here: the line is {line[:60]!r}")
        fields = self._buffered_fields()
        if fields is None:
            fields = self._read_fields(len(line))
        raw_length = fields.get("content-length")
        if raw_length is None or not raw_length.isdigit():
            raise self.damage(f"no valid Content-Length ({raw_length!r})")
        return WarcHeader(self.record_offset, match.group(1).decode("ascii"), fields, int(raw_length))

    def _buffered_fields(self) -> Optional[dict[str, str]]:
        """The header's fields parsed at once from the buffer, and consumed, when the whole block is there and every
        line is plain; else None with nothing consumed, and `_read_fields` reads it line by line (and raises whatever
        damage it holds)."""
        buf, start = self._buf, self._pos
        if buf.startswith((b"\n", b"\r\n"), start):
            return None  # no field at all: rare, left to the line-by-line read
        # The first blank line: a b"\n\n" only counts before the first b"\n\r\n", and a small window first, so that
        # neither search runs on through the body (Common Crawl's headers are under 2 KB).
        for stop in (start + 4096, start + MAX_LINE):
            crlf = buf.find(b"\n\r\n", start, stop)
            lf = buf.find(b"\n\n", start, stop if crlf == -1 else crlf + 1)
            if crlf != -1 or lf != -1:
                break
        else:
            return None  # the block runs past the buffer (or is too long): the line-by-line read
        end = (lf if lf != -1 else crlf) + 1  # the block's lines, each with its b"\n"; the blank line follows
        blank = 1 if buf[end:end + 1] == b"\n" else 2
        if end + blank - start >= MAX_LINE:  # every line and the header well under the limits `_read_fields` checks
            return None
        fields: dict[str, str] = {}
        last = None
        # UTF-8 decoding never joins bytes across a b"\n", so the block decodes as its lines one by one would.
        for text in buf[start:end].decode("utf-8", "replace").split("\n")[:-1]:
            text = text.rstrip("\r\n")
            if not text:
                return None  # a line of b"\r"s: left to the line-by-line read, as it always was
            last = _add_field(fields, last, text)
            if last is None:
                return None  # damage: the line-by-line read names it
        self._pos = end + blank
        self.offset += end + blank - start
        return fields

    def _read_fields(self, size: int) -> dict[str, str]:
        """The header's fields, a line at a time after its version line (`size` bytes); raises WarcDamage."""
        fields: dict[str, str] = {}
        last = None
        while True:
            line = self.readline(MAX_LINE)
            size += len(line)
            if not line.endswith(b"\n"):
                if not line or len(line) < MAX_LINE:
                    raise self.damage("the stream ends inside the WARC header")
                raise self.damage(f"a WARC header line of more than {MAX_LINE} bytes")
            if size > MAX_HEADER_BYTES:
                raise self.damage(f"a WARC header of more than {MAX_HEADER_BYTES} bytes")
            if line in (b"\r\n", b"\n"):
                break
            last = _add_field(fields, last, line.decode("utf-8", "replace").rstrip("\r\n"))
            if last is None:
                raise self.damage(f"a WARC header line without a field name: {line[:60]!r}")
        return fields


def _add_field(fields: dict[str, str], last: Optional[str], text: str) -> Optional[str]:
    """One header line (`text`, without its line break) into `fields`: a folded continuation of field `last`, or
    `name: value` (a repeated name keeps its first value); the field's name, or None for a line without one."""
    if not text:  # a line of b"\r"s: no field, and not the blank line that ends the header
        return None
    if text[0] in " \t" and last is not None:  # a folded continuation line
        fields[last] += " " + text.strip()
        return last
    name, colon, value = text.partition(":")
    if not colon or not name.strip():
        return None
    last = name.strip().lower()
    fields.setdefault(last, value.strip())
    return last


def iter_warc_records(stream: BinaryIO, verify_digests: bool = True) -> Iterator[tuple[WarcHeader, Body]]:
    """`(header, body)` for each record of an uncompressed WARC stream; see the module docstring.

    The body is valid until the next iteration, which skips (and counts, and hashes) whatever the caller left
    unread. The read that completes a body raises WarcDamage when its digest does not match.
    """
    parser = _Parser(stream)
    while True:
        header = parser.header()
        if header is None:
            return
        check = _digest_check(header.get("WARC-Block-Digest")) if verify_digests else None
        body = Body(parser, header.content_length, check)
        yield header, body
        body.skip()
