"""Small independent parsers of the demo's file formats, written for the tests (not the pipeline's readers).

They check the wire format as they go (CRLF WARC headers, exact Content-Length, record separators), so a
test that parses a file also checks that the file is well formed.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import zlib
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq
import zstandard

ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


def decompress(path: Path) -> bytes:
    data = path.read_bytes()
    if path.name.endswith(".gz"):
        return gzip.decompress(data)  # every member
    if path.name.endswith(".zst"):
        # A frame written as a stream has no content size: one-shot decompress() refuses it.
        return zstandard.ZstdDecompressor(max_window_size=2**31).decompressobj().decompress(data)
    return data


def gzip_members(data: bytes) -> int:
    """Number of gzip members in a file's bytes."""
    members = 0
    while data:
        d = zlib.decompressobj(31)
        d.decompress(data)
        assert d.eof, "truncated gzip member"
        members += 1
        data = d.unused_data
    return members


def zstd_window_log(data: bytes) -> int | None:
    """log2 of the window a zstd frame declares in its header; None for a single-segment frame (window = content)."""
    assert data[:4] == ZSTD_MAGIC
    descriptor = data[4]
    if descriptor & 0x20:  # Single_Segment_flag: no Window_Descriptor byte
        return None
    window = data[5]
    assert window & 0x07 == 0, "window with a mantissa"
    return 10 + (window >> 3)


def json_lines(data: bytes) -> tuple[list[bytes], bool]:
    """(lines, whether the last line ends in a newline)."""
    final = data.endswith(b"\n")
    lines = data.split(b"\n")
    if final:
        lines.pop()
    return lines, final


@dataclass
class WarcRecord:
    index: int  # ordinal in the file, every record counted
    headers: dict[str, str]
    block: bytes

    @property
    def type(self) -> str:
        return self.headers["WARC-Type"]


def warc_records(data: bytes) -> list[WarcRecord]:
    """Every record; asserts CRLF header lines, Content-Length = block bytes, and CRLF CRLF after each block."""
    out, pos = [], 0
    while pos < len(data):
        end = data.index(b"\r\n\r\n", pos)
        lines = data[pos:end].split(b"\r\n")
        assert lines[0] == b"WARC/1.0", lines[0]
        headers = {}
        for line in lines[1:]:
            assert b"\n" not in line and b"\r" not in line, line  # CRLF, never a bare LF, in headers
            name, value = line.decode("utf-8").split(": ", 1)
            headers[name] = value
        length = int(headers["Content-Length"])
        block = data[end + 4 : end + 4 + length]
        assert len(block) == length, "Content-Length runs past the end"
        assert data[end + 4 + length : end + 8 + length] == b"\r\n\r\n", "record not followed by CRLF CRLF"
        if "WARC-Block-Digest" in headers:
            expected = "sha1:" + base64.b32encode(hashlib.sha1(block).digest()).decode()
            assert headers["WARC-Block-Digest"] == expected, "wrong block digest"
        out.append(WarcRecord(len(out), headers, block))
        pos = end + 8 + length
    return out


@dataclass
class HttpResponse:
    status: int
    headers: dict[str, str]  # names lowercased
    payload: bytes


def http_response(block: bytes) -> HttpResponse:
    head, _, payload = block.partition(b"\r\n\r\n")
    lines = head.decode("ascii").split("\r\n")
    version, status, _ = lines[0].split(" ", 2)
    assert version == "HTTP/1.1"
    headers = {k.lower(): v for k, v in (line.split(": ", 1) for line in lines[1:])}
    return HttpResponse(int(status), headers, payload)


def dotted(record, path: str):
    for key in path.split("."):
        if not isinstance(record, dict) or key not in record:
            return None
        record = record[key]
    return record


@dataclass
class Item:
    """One record a reader of the source sees: its index, the parsed object and the text it should give."""

    index: int
    value: object  # dict (JSON, Parquet), WarcRecord, or raw bytes that do not parse
    text: str | None  # None when it does not parse or cannot be computed here (HTML)
    line: bytes | None = None


def source_items(root: Path, src: dict, path: Path) -> list[Item]:
    """The records of one file of a demo.yaml source, as the source's reader would index them."""
    fmt = src["format"]
    if fmt == "parquet":
        return [Item(i, row, row.get(src["text_field"])) for i, row in enumerate(pq.read_table(path).to_pylist())]
    data = decompress(path)
    if fmt in ("cc_wet", "cc_warc"):
        wanted = ("conversion",) if fmt == "cc_wet" else ("response", "resource")
        return [Item(r.index, r, r.block.decode("utf-8") if fmt == "cc_wet" else None)
                for r in warc_records(data) if r.type in wanted]
    lines, _ = json_lines(data)
    items = []
    for i, line in enumerate(lines):
        try:
            value = json.loads(line.decode(src.get("encoding", "utf-8")))
        except (UnicodeDecodeError, ValueError):
            items.append(Item(i, line, None, line))
            continue
        text = None
        if isinstance(value, dict):
            if fmt == "reddit":
                if "body" in value:
                    text = value["body"]
                else:
                    text = value["title"] + ("\n\n" + value["selftext"] if value["selftext"] else "")
            else:
                text = dotted(value, src.get("text_field", "text"))
        items.append(Item(i, value, text, line))
    return items
