"""Small files replaced whole or not at all, with no temporary file left behind when a write fails (a full disk)."""

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
