"""Open a source file as a byte stream, decompressing gzip and zstd with bounded memory and loud truncation.

The compression is read from the file's first bytes, not trusted from its name: a gzip file named `.zst` would
otherwise be one `read_error`, and a `.jsonl` that is really zstd a file of `bad_json` drops."""

from __future__ import annotations

import io
import logging
import zlib
from typing import BinaryIO, Callable

import zstandard

from tokenmill.sources import uris

log = logging.getLogger(__name__)

# zstd frames may ask for windows up to 2 GB; a source's `max_window_log` (default 27: 128 MB, as
# `zstd --long=27`) caps what one frame can make us allocate. Pushshift dumps need 31.
DEFAULT_WINDOW_LOG = 27
BUFFER = 1 << 20


class CorruptStream(OSError):
    """The compressed stream is damaged or cut short; every byte before the damage was delivered."""


DECOMPRESSION_ERRORS = (EOFError, OSError, zstandard.ZstdError, zlib.error)


class Members(io.RawIOBase):
    """Decompress a sequence of gzip members or zstd frames, as one stream.

    Both standard readers lose data here: gzip's raises on a truncated member and drops what it
    had decoded in that read; zstandard's stream_reader stops silently at a truncated frame. This
    one hands out every decoded byte, then raises CorruptStream. Input is fed 1 KiB at a time: zstd
    tops out near 32,768:1 and deflate near 1,032:1, so one step yields at most ~32 MiB however
    hostile the file.
    """

    STEP = 1024

    def __init__(self, raw: BinaryIO, new_decoder: Callable[[], object], kind: str, skip_padding: bool = False):
        self.raw = raw
        self.new_decoder = new_decoder
        self.kind = kind
        self.skip_padding = skip_padding  # gzip writers may pad members with NUL bytes
        self.decoder = new_decoder()
        self.in_member = False
        self.consumed = 0
        self.pending = memoryview(b"")
        self.error: CorruptStream | None = None
        self.failed: Exception | None = None  # a read of `raw` that failed while filling a buffer, raised next

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        while not self.pending:
            if self.error is not None:
                raise self.error
            if self.failed is not None:  # raised in its turn, after the bytes before it; not read again
                failed, self.failed = self.failed, None
                raise failed
            chunk = self.raw.read(self.STEP)
            if not chunk:
                if self.in_member:
                    raise CorruptStream(f"{self.kind} stream ends inside a {self.kind} member at compressed byte "
                                        f"{self.consumed} (the file is truncated)")
                return 0
            self.pending = memoryview(self._feed(chunk))
            self.consumed += len(chunk)
        n = self._take(buffer, 0)
        # Fill the caller's buffer (a megabyte at most) from further steps, so the buffered reader above sees a
        # megabyte per read, not a few kilobytes: its readline, read1 and read loop less. Stopped by damage, the end
        # of the input or a failed read, what it hands out is what single steps would have handed out before them;
        # the next call meets the damage or the end again, or raises the failed read, as a single step does.
        while n < min(len(buffer), BUFFER) and self.error is None:
            try:
                chunk = self.raw.read(self.STEP)
            except Exception as err:  # noqa: BLE001 - raised by the next call, after these bytes
                self.failed = err  # not retried: a failed read may have moved the file's position
                break
            if not chunk:
                break
            self.pending = memoryview(self._feed(chunk))
            self.consumed += len(chunk)
            n = self._take(buffer, n)
        return n

    def _take(self, buffer, n: int) -> int:
        """Copy pending bytes into `buffer` from `n` on; the new fill."""
        k = min(len(buffer) - n, len(self.pending))
        buffer[n:n + k] = self.pending[:k]
        self.pending = self.pending[k:]
        return n + k

    def _feed(self, data: bytes) -> bytes:
        out = []
        while data:
            if not self.in_member and self.skip_padding:
                data = data.lstrip(b"\x00")
                if not data:
                    break
            try:
                out.append(self.decoder.decompress(data))
            except (zlib.error, zstandard.ZstdError) as err:
                # Deliver what decoded before the damage; raise on the next read.
                hint = ""
                if "too much memory" in str(err):
                    hint = " (the frame's window is larger than the source's max_window_log allows: raise it, e.g. 31 for Pushshift)"
                self.error = CorruptStream(f"corrupt {self.kind} data near compressed byte {self.consumed}: {err}{hint}")
                break
            if self.decoder.eof:  # member complete: what is left starts the next one
                data = self.decoder.unused_data
                self.decoder = self.new_decoder()
                self.in_member = False
            else:
                data = b""
                self.in_member = True
        return b"".join(out)

    def close(self) -> None:
        self.raw.close()
        super().close()


SUFFIXES = {".gz": "gzip", ".zst": "zstd", ".zstd": "zstd"}
"""The compression a file name claims."""

UNSUPPORTED = frozenset({"bzip2", "xz", "lz4"})
"""Compressions recognised by their magic bytes only to be refused by name (none bounds its memory here)."""


def sniff(head: bytes) -> str | None:
    """The compression that a file's first bytes announce: `gzip`, `zstd` (a frame, or a skippable frame that may
    precede one), `bzip2`, `xz`, `lz4`, or None. None of these magics is a plausible start of text: 0x8b and 0xb5
    cannot follow an ASCII byte in UTF-8, and bzip2's is 10 bytes with its block magic."""
    if head[:2] == b"\x1f\x8b":
        return "gzip"
    if head[:4] == b"\x28\xb5\x2f\xfd" or (len(head) >= 4 and head[1:4] == b"\x2a\x4d\x18" and head[0] & 0xF0 == 0x50):
        return "zstd"
    if len(head) >= 10 and head[:3] == b"BZh" and head[3:4].isdigit() and head[4:10] == b"1AY&SY":
        return "bzip2"
    if head[:6] == b"\xfd7zXZ\x00":
        return "xz"
    if head[:4] == b"\x04\x22\x4d\x18":
        return "lz4"
    return None


def compression_of(path: str, head: bytes) -> str | None:
    """The compression to read `path` with: what its first bytes announce, else what its suffix claims (so a file
    named `.gz` that is not gzip fails loudly as damaged gzip rather than being read as text). A disagreement
    between the two is logged: a gzip file named `.zst` is read as gzip, a `.jsonl` that is zstd as zstd."""
    claimed = next((kind for suffix, kind in SUFFIXES.items() if path.lower().endswith(suffix)), None)
    found = sniff(head)
    if found is not None and found != claimed and found not in UNSUPPORTED:
        log.warning("%s: its first bytes are %s data although its name says %s; reading it as %s",
                    path, found, claimed or "uncompressed", found)
    return found or claimed


def open_binary(path: str, zstd_window_log: int = DEFAULT_WINDOW_LOG) -> BinaryIO:
    """A buffered byte stream of the file's (or object URI's) content, decompressed by what its first bytes announce
    (by its suffix when they announce nothing: see `compression_of`). Reading bzip2, xz or lz4 data raises
    CorruptStream naming it."""
    # An object URI reads through pyarrow.fs in 8 MiB ranged GETs (`uris.open_object`), seekable like a file.
    raw = uris.open_object(path) if uris.is_remote(path) else open(path, "rb")  # noqa: SIM115 - closed with the stream
    try:
        head = raw.read(16)
        raw.seek(0)
        kind = compression_of(path, head)
    except BaseException:
        raw.close()
        raise
    if kind == "gzip":
        # wbits=31: a gzip header and trailer; members follow one another (Common Crawl writes one per record).
        return io.BufferedReader(Members(raw, lambda: zlib.decompressobj(31), "gzip", skip_padding=True), BUFFER)
    if kind == "zstd":
        dctx = zstandard.ZstdDecompressor(max_window_size=2**zstd_window_log)
        return io.BufferedReader(Members(raw, dctx.decompressobj, "zstd"), BUFFER)
    if kind in UNSUPPORTED:
        raw.close()
        return io.BufferedReader(_Refused(CorruptStream(
            f"{kind} data (by its first bytes), which tokenmill does not read; recompress it with zstd or gzip "
            f"(e.g. `{kind} -dc FILE | zstd -o FILE.zst`)")), BUFFER)
    return io.BufferedReader(raw, BUFFER)


class _Refused(io.RawIOBase):
    """A stream whose first read raises `error`, so every reader reports it as the damage it already handles."""

    def __init__(self, error: CorruptStream):
        self.error = error

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        raise self.error
