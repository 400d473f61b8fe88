"""The sha256 of a file, one way for every caller (token files, checkpoints, source stamps, classifier models)."""

from __future__ import annotations

import hashlib
import os


def file_sha256(path: str | os.PathLike) -> str:
    """The sha256 of a file (`hashlib.file_digest`: about 2 GB/s with SHA-NI; the GIL is released while hashing)."""
    with open(path, "rb", buffering=0) as f:
        return hashlib.file_digest(f, "sha256").hexdigest()
