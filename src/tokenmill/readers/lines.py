"""Split a byte stream into lines on b"\\n" only, never holding a line longer than a limit."""

from __future__ import annotations

from typing import BinaryIO, Iterator, NamedTuple, Optional

from tokenmill.readers.compression import DECOMPRESSION_ERRORS

CHUNK = 1 << 20
BOM = b"\xef\xbb\xbf"


class Line(NamedTuple):
    """A line (1-based `number`), or a reason it has no data: `record_too_large`, or `read_error` with a message."""

    number: int
    data: Optional[bytes]
    offset: int
    """Offset of the line's first byte in the decompressed stream."""
    problem: Optional[str] = None
    message: Optional[str] = None
    # A named tuple, not a frozen dataclass: as read-only, and made in a quarter of the time (a frozen dataclass sets
    # each field through object.__setattr__), once per line of every JSON-lines file.


def iter_lines(stream: BinaryIO, max_bytes: int) -> Iterator[Line]:
    """Yield the lines of a stream; splitting on b"\\n" only keeps U+2028 inside JSON strings intact.

    A line over `max_bytes` is skipped chunk by chunk and reported as `record_too_large`. Damage in the
    stream (truncated or corrupt compression) ends the iteration with one `read_error` line, after
    every whole line before it.
    """
    number, offset = 0, 0
    while True:
        try:
            line = stream.readline(max_bytes + 1)
        except DECOMPRESSION_ERRORS as err:
            yield Line(number + 1, None, offset, "read_error", f"damaged stream after byte {offset}: {err}")
            return
        if not line:
            return
        number += 1
        start = offset
        offset += len(line)
        if len(line) > max_bytes and not line.endswith(b"\n"):
            try:
                while not line.endswith(b"\n"):
                    line = stream.readline(CHUNK)
                    if not line:
                        break
                    offset += len(line)
            except DECOMPRESSION_ERRORS as err:
                yield Line(number, None, start, "read_error", f"damaged stream after byte {offset}: {err}")
                return
            yield Line(number, None, start, "record_too_large", f"line of more than {max_bytes} bytes")
            continue
        if number == 1 and line.startswith(BOM):
            line = line[len(BOM):]  # a UTF-8 byte-order mark is not part of the first record
        if line.endswith(b"\n"):
            line = line[:-1]
            if line.endswith(b"\r"):
                line = line[:-1]
        yield Line(number, line, start)
