"""Open a source file as a byte stream, decompressing .gz and .zst with bounded memory."""

from __future__ import annotations

import gzip
import io
from typing import BinaryIO

import zstandard

# zstd frames may ask for windows up to 2 GB; 128 MB covers `zstd --long=27` and caps what one
# frame can make us allocate (a hostile file cannot demand more).
ZSTD_MAX_WINDOW = 2**27
BUFFER = 1 << 20

DECOMPRESSION_ERRORS = (EOFError, OSError, zstandard.ZstdError, gzip.BadGzipFile)


class ZstdFrames(io.RawIOBase):
    """Decompress a sequence of zstd frames; a file that ends inside a frame raises EOFError.

    (zstandard's stream_reader stops silently at a truncated frame, which would lose the damage.)
    Input is fed 1 KiB at a time: zstd tops out near 32,768:1, so one step yields at most ~32 MiB
    however hostile the file.
    """

    STEP = 1024

    def __init__(self, raw: BinaryIO):
        self.raw = raw
        self.dctx = zstandard.ZstdDecompressor(max_window_size=ZSTD_MAX_WINDOW)
        self.obj = self.dctx.decompressobj()
        self.in_frame = False
        self.pending = memoryview(b"")

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        while not self.pending:
            chunk = self.raw.read(self.STEP)
            if not chunk:
                if self.in_frame:
                    raise EOFError("zstd stream ended inside a frame (the file is truncated)")
                return 0
            self.pending = memoryview(self._feed(chunk))
        n = min(len(buffer), len(self.pending))
        buffer[:n] = self.pending[:n]
        self.pending = self.pending[n:]
        return n

    def _feed(self, data: bytes) -> bytes:
        out = []
        while data:
            out.append(self.obj.decompress(data))
            if self.obj.eof:  # frame complete: what is left starts the next frame
                data = self.obj.unused_data
                self.obj = self.dctx.decompressobj()
                self.in_frame = False
            else:
                data = b""
                self.in_frame = True
        return b"".join(out)

    def close(self) -> None:
        self.raw.close()
        super().close()


def open_binary(path: str) -> BinaryIO:
    """A buffered byte stream of the file's content; the compression is chosen by suffix."""
    raw = open(path, "rb")
    name = path.lower()
    if name.endswith(".gz"):
        # GzipFile reads multi-member files (one member per record, as Common Crawl writes them).
        return io.BufferedReader(gzip.GzipFile(fileobj=raw, mode="rb"), BUFFER)
    if name.endswith((".zst", ".zstd")):
        return io.BufferedReader(ZstdFrames(raw), BUFFER)
    return io.BufferedReader(raw, BUFFER)
