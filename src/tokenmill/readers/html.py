"""HTTP responses to page text: status and headers, transfer and content encodings, HTML or not, charset, extraction.

Used by the `cc_warc` reader; every function works on one record already in memory (at most the source's
`max_record_bytes`). Problems are raised as `PayloadProblem(reason, message)` so the reader can drop the record
with that reason.

Charset: a byte-order mark, else the HTTP `Content-Type` charset, else the page's `<meta charset>` / uchardet
(resiliparse's `detect_encoding`), with WHATWG names mapped to Python codecs. The bytes are decoded strictly with
that codec, then as UTF-8 (pages mislabelled as Latin-1 are common); when neither fits, they are decoded with the
chosen codec replacing the bad bytes (what a browser shows: a page with a few stray bytes is still a page), and the
record's meta counts them in `replaced_chars`, so nothing is replaced silently. Over `MAX_REPLACED_SHARE` of the
text replaced means the charset is wrong, not a few bytes: the reader drops the page as `decode_error`.

Extraction (see benchmarks/html_extraction.py for the comparison behind the default):

- `resiliparse` (default): `extract_plain_text(main_content=True)`, a C++ DOM walk with main-content heuristics.
  On the 23 shared HTML pages: ~49 MB of HTML/s per core, 15x trafilatura; 1.8x the text, keeping 99% of the
  pages' long paragraphs (trafilatura 54%: it keeps only the first post of a blog's front page and dropped the
  first paragraph of a bio); the same near-zero boilerplate. Its one miss: a page whose content is one list of
  links (60 characters left of soldaini.net/facts).
- `trafilatura`: `trafilatura.extract`, XPath rules with readability/jusText fallbacks (~3 MB/s per core).

Both run with comments, links, images/alt texts and form fields left out, tables kept.
"""

from __future__ import annotations

import codecs
import re
import zlib
from dataclasses import dataclass
from typing import Callable, Optional

HTML_TYPES = frozenset({"text/html", "application/xhtml+xml", "application/vnd.wap.xhtml+xml"})
"""Media types that are HTML."""
UNDECLARED_TYPES = frozenset({"", "application/octet-stream", "binary/octet-stream", "application/unknown",
                              "unknown/unknown", "application/x-unknown-content-type", "unk"})
"""Media types that say nothing: the payload is sniffed."""

_STATUS = re.compile(rb"HTTP/\d(?:\.\d)?[ \t]+(\d{3})(?:[ \t]+([^\r\n]*))?\r?\n?\Z")
_BINARY_MAGIC = (b"%PDF", b"\x89PNG", b"GIF8", b"\xff\xd8\xff", b"PK\x03\x04", b"\x1f\x8b", b"RIFF",
                 b"\x00\x00\x01\x00", b"OggS", b"ID3", b"\xd0\xcf\x11\xe0", b"wOFF", b"wOF2", b"\x7fELF")
_HTML_MARKERS = (b"<!doctype html", b"<html", b"<head", b"<body", b"<title", b"<meta", b"<div", b"<p>", b"<script")
_CHARSET = re.compile(r"""charset\s*=\s*["']?([A-Za-z0-9_.:+-]+)""", re.IGNORECASE)
_BOMS = ((codecs.BOM_UTF8, "utf-8-sig"), (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16"))
# WHATWG labels (as resiliparse returns them) that Python spells differently, or that the web means as a superset.
_PYTHON_CODEC = {"gbk": "gb18030", "gb2312": "gb18030", "x-gbk": "gb18030", "big5": "big5hkscs",
                 "x-mac-cyrillic": "mac_cyrillic", "iso-8859-8-i": "iso-8859-8", "windows-874": "cp874",
                 "x-user-defined": "latin-1", "iso-8859-1": "windows-1252", "us-ascii": "windows-1252",
                 "ascii": "windows-1252", "latin1": "windows-1252"}

EXTRACTORS = ("resiliparse", "trafilatura")
MAX_REPLACED_SHARE = 0.01
"""A page whose decoded text is more than this share of replacement characters is a `decode_error`."""


class PayloadProblem(Exception):
    """The record is not a usable page: `reason` is the drop reason."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason
        self.message = message


@dataclass(slots=True)
class HttpResponse:
    status: int
    reason: str
    headers: dict[str, str]
    """Lowercased names; repeated headers joined by ', '."""
    payload: bytes

    @property
    def content_type(self) -> str:
        return self.headers.get("content-type", "")


def parse_http_response(block: bytes) -> HttpResponse:
    """Split an `application/http; msgtype=response` block into status, headers and (raw) payload."""
    end = block.find(b"\r\n\r\n")
    cut = 4
    lf_end = block.find(b"\n\n")
    if lf_end != -1 and (end == -1 or lf_end < end):
        end, cut = lf_end, 2
    if end == -1:
        head, payload = block, b""
        if not block.endswith(b"\n"):
            raise PayloadProblem("bad_http", "the HTTP header block does not end")
    else:
        head, payload = block[:end], block[end + cut:]
    lines = head.split(b"\n")
    match = _STATUS.match(lines[0].rstrip(b"\r") + b"\n")
    if match is None:
        raise PayloadProblem("bad_http", f"no HTTP status line: {lines[0][:60]!r}")
    headers: dict[str, str] = {}
    for raw in lines[1:]:
        line = raw.rstrip(b"\r").decode("latin-1")
        if not line.strip():
            continue
        name, colon, value = line.partition(":")
        if not colon:
            continue  # servers send junk lines; browsers ignore them too
        name = name.strip().lower()
        headers[name] = f"{headers[name]}, {value.strip()}" if name in headers else value.strip()
    return HttpResponse(int(match.group(1)), (match.group(2) or b"").decode("latin-1").strip(), headers, payload)


def dechunk(data: bytes) -> Optional[bytes]:
    """The payload of a `Transfer-Encoding: chunked` body, or None when it is not chunked after all.

    Crawlers often keep the header but store the body already dechunked, so a body that does not parse as
    chunks is taken as it is (as warcio does).
    """
    out, pos, n = [], 0, len(data)
    while True:
        eol = data.find(b"\n", pos, pos + 1024)
        if eol == -1:
            return None
        size_text = data[pos:eol].split(b";", 1)[0].strip()
        try:
            size = int(size_text, 16)
        except ValueError:
            return None
        pos = eol + 1
        if size == 0:
            return b"".join(out)
        if pos + size > n:
            return None
        out.append(data[pos:pos + size])
        pos += size
        if data[pos:pos + 2] == b"\r\n":
            pos += 2
        elif data[pos:pos + 1] == b"\n":
            pos += 1
        elif pos < n:
            return None
        if pos >= n:  # the terminating zero chunk is missing: keep what came
            return b"".join(out)


def _inflate(data: bytes, wbits: int, limit: int) -> bytes:
    d = zlib.decompressobj(wbits)
    out = d.decompress(data, limit + 1)
    if len(out) > limit:
        raise PayloadProblem("record_too_large", f"the payload inflates to more than {limit} bytes")
    if not d.eof:
        raise zlib.error("incomplete compressed payload")
    return out


def decode_content(payload: bytes, encoding: str, limit: int) -> bytes:
    """Undo `Content-Encoding` (gzip, deflate, br), never inflating past `limit` bytes.

    Crawlers also store payloads already decoded under the original header: a payload that does not decode and
    does not look compressed is used as it is.
    """
    for coding in reversed([c.strip().lower() for c in encoding.split(",") if c.strip()]):
        if coding in ("identity", "none", "utf-8", "text", "binary"):
            continue
        try:
            if coding in ("gzip", "x-gzip"):
                payload = _inflate(payload, 47, limit)  # 47: gzip or zlib header
            elif coding == "deflate":
                try:
                    payload = _inflate(payload, 15, limit)
                except zlib.error:
                    payload = _inflate(payload, -15, limit)
            elif coding == "br":
                try:
                    import brotli
                except ImportError:
                    raise PayloadProblem("bad_http", "Content-Encoding br and no brotli module") from None
                decompressor = brotli.Decompressor()
                out = decompressor.process(payload, output_buffer_limit=limit + 1)
                if len(out) > limit:
                    raise PayloadProblem("record_too_large", f"the payload inflates to more than {limit} bytes")
                if not decompressor.is_finished():
                    raise zlib.error("incomplete brotli payload")
                payload = out
            else:
                raise zlib.error(f"unknown coding {coding!r}")
        except PayloadProblem:
            raise
        except Exception as err:  # noqa: BLE001 - zlib.error, brotli.error
            if payload[:2] == b"\x1f\x8b" or _looks_binary(payload):
                raise PayloadProblem("bad_http", f"Content-Encoding {coding} does not decode: {err}") from None
            break  # stored decoded under the original header
    return payload


def media_type(content_type: str) -> str:
    return content_type.split(";", 1)[0].strip().lower()


def _looks_binary(payload: bytes) -> bool:
    head = payload[:1024]
    if head.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return False  # UTF-16 text is full of NUL bytes
    return head.startswith(_BINARY_MAGIC) or b"\x00" in head


def sniff_html(payload: bytes) -> bool:
    head = payload[:1024].lstrip(b"\xef\xbb\xbf \t\r\n").lower()
    return not _looks_binary(payload) and any(marker in head for marker in _HTML_MARKERS)


def is_html(declared: str, payload: bytes, identified: Optional[str] = None) -> bool:
    """Declared HTML (and not binary bytes), or undeclared and identified or sniffed as HTML."""
    mime = media_type(declared)
    if mime in HTML_TYPES:
        return not _looks_binary(payload)
    if mime in UNDECLARED_TYPES:
        if identified and media_type(identified) not in UNDECLARED_TYPES:
            return media_type(identified) in HTML_TYPES
        return sniff_html(payload)
    return False


def _codec(label: Optional[str]) -> Optional[str]:
    """A Python codec for a charset label, or None when Python has none."""
    if not label:
        return None
    label = label.strip().strip("\"'").lower()
    label = _PYTHON_CODEC.get(label, label)
    try:
        return codecs.lookup(label).name
    except LookupError:
        return None


def declared_charset(content_type: str) -> Optional[str]:
    match = _CHARSET.search(content_type)
    return match.group(1) if match else None


def decode_html(payload: bytes, http_charset: Optional[str]) -> tuple[str, str, int]:
    """(text, codec, replaced characters); see the module docstring for the order of evidence."""
    codec = next((name for bom, name in _BOMS if payload.startswith(bom)), None)
    codec = codec or _codec(http_charset)
    if codec is None:
        from resiliparse.parse.encoding import detect_encoding

        codec = _codec(detect_encoding(payload, from_html_meta=True)) or "utf-8"
    for attempt in (codec, "utf-8"):
        try:
            return payload.decode(attempt), attempt, 0
        except UnicodeDecodeError:
            continue
    text = payload.decode(codec, "replace")
    return text, codec, text.count("\ufffd") - payload.decode(codec, "ignore").count("\ufffd")


def _resiliparse(html: str, url: Optional[str]) -> str:
    from resiliparse.extract.html2text import extract_plain_text

    return extract_plain_text(html, main_content=True, preserve_formatting=True, list_bullets=True, alt_texts=False,
                              links=False, form_fields=False, noscript=False, comments=False)


def _trafilatura(html: str, url: Optional[str]) -> str:
    import trafilatura

    text = trafilatura.extract(html, url=url, output_format="txt", include_comments=False, include_tables=True,
                               include_images=False, include_links=False, deduplicate=False, with_metadata=False)
    return text or ""


def extractor(name: str) -> Callable[[str, Optional[str]], str]:
    """`extract(html, url) -> text` for `resiliparse` or `trafilatura`."""
    if name == "resiliparse":
        return _resiliparse
    if name == "trafilatura":
        return _trafilatura
    raise ValueError(f"unknown extractor {name!r}; known: {', '.join(EXTRACTORS)}")
