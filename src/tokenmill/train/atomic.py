"""Small files replaced whole or not at all, and appends made whole or not at all: a write that fails (a full disk)
leaves no temporary file and no half of what it was writing."""

from __future__ import annotations

import contextlib
import os
import uuid
from pathlib import Path


def write_atomic(path: Path, text: str, *, fsync: bool = False) -> None:
    """Write ``text`` to ``path`` through a temporary name beside it and ``os.replace``: a reader sees the old file or
    the new one, never half of one. ``fsync``: the data and the folder's entry are on disk when it returns. On any
    failure the temporary file is removed and ``path`` is as it was."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{uuid.uuid4().hex[:12]}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            if fsync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise
    if fsync:
        fsync_dir(path.parent)


def append_whole(path: Path, data: bytes) -> None:
    """Append ``data`` to ``path`` (created if absent) entirely or not at all: a write cut short (a full disk fills
    in the middle of it, or an interrupt) is cut back, so a JSON-lines file never ends in half a line. Unbuffered:
    the error comes from the write here, not from a later flush, and no buffered rest is retried at close."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    try:
        start = os.fstat(fd).st_size
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(fd, view):]
        except BaseException:
            with contextlib.suppress(OSError):  # a truncation frees space; it never needs any
                os.ftruncate(fd, start)
            raise
    finally:
        os.close(fd)


def fsync_dir(path: Path) -> None:
    """Flush a folder's entries (a rename into it) to disk, where the platform allows it."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)
