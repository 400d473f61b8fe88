"""Open a source file as a byte stream, decompressing .gz and .zst with bounded memory and loud truncation."""

from __future__ import annotations

import io
import zlib
from typing import BinaryIO, Callable

import zstandard

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

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        while not self.pending:
            if self.error is not None:
                raise self.error
            chunk = self.raw.read(self.STEP)
            if not chunk:
                if self.in_member:
                    raise CorruptStream(f"{self.kind} stream ends inside a {self.kind} member at compressed byte "
                                        f"{self.consumed} (the file is truncated)")
                return 0
            self.pending = memoryview(self._feed(chunk))
            self.consumed += len(chunk)
        n = min(len(buffer), len(self.pending))
        buffer[:n] = self.pending[:n]
        self.pending = self.pending[n:]
        return n

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


def open_binary(path: str, zstd_window_log: int = DEFAULT_WINDOW_LOG) -> BinaryIO:
    """A buffered byte stream of the file's content; the compression is chosen by suffix."""
    raw = open(path, "rb")
    name = path.lower()
    if name.endswith(".gz"):
        # wbits=31: a gzip header and trailer; members follow one another (Common Crawl writes one per record).
        return io.BufferedReader(Members(raw, lambda: zlib.decompressobj(31), "gzip", skip_padding=True), BUFFER)
    if name.endswith((".zst", ".zstd")):
        dctx = zstandard.ZstdDecompressor(max_window_size=2**zstd_window_log)
        return io.BufferedReader(Members(raw, dctx.decompressobj, "zstd"), BUFFER)
    return io.BufferedReader(raw, BUFFER)
