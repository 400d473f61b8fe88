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
    def __init__(self, stream: BinaryIO):
        self.stream = stream
        self.offset = 0  # bytes consumed so far
        self.record_offset = 0

    def damage(self, message: str) -> WarcDamage:
        return WarcDamage(self.record_offset, message)

    def readline(self, limit: int) -> bytes:
        try:
            line = self.stream.readline(limit)
        except DECOMPRESSION_ERRORS as err:
            raise self.damage(f"damaged stream after byte {self.offset}: {err}") from None
        self.offset += len(line)
        return line

    def read_exact(self, size: int, body: Body) -> bytes:
        parts, got = [], 0
        while got < size:
            try:
                data = self.stream.read(size - got)
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
        fields: dict[str, str] = {}
        size, last = len(line), None
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
            text = line.decode("utf-8", "replace").rstrip("\r\n")
            if text[0] in " \t" and last is not None:  # a folded continuation line
                fields[last] += " " + text.strip()
                continue
            name, colon, value = text.partition(":")
            if not colon or not name.strip():
                raise self.damage(f"a WARC header line without a field name: {line[:60]!r}")
            last = name.strip().lower()
            fields.setdefault(last, value.strip())
        raw_length = fields.get("content-length")
        if raw_length is None or not raw_length.isdigit():
            raise self.damage(f"no valid Content-Length ({raw_length!r})")
        return WarcHeader(self.record_offset, match.group(1).decode("ascii"), fields, int(raw_length))


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
