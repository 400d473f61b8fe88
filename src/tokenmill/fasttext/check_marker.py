"""Markers of fastText model files that passed the full check on this node, so that each Ray worker need not repeat it.

The full check (`model_file.read_model_file`) reads every weight, a pass over the whole file; a multi-GB classifier
would cost that pass in every worker, after the driver already made it at validation. As the token files' markers do
(`loader/verify.py`), a file that passed leaves a marker named by a hash of (real path, device, inode, size, mtime,
ctime, the sha256 the caller expects, the version of the checks) in the same node-local folder
(`$TOKENMILL_VERIFIED_CACHE`, else `$XDG_CACHE_HOME/tokenmill/verified`, else `~/.cache/tokenmill/verified`; `off`
for none). Any write to the file changes its mtime and ctime, so the marker no longer applies: the file is hashed
again and, holding the expected bytes, checked in full once more. A marker cannot see bit rot that leaves the
metadata alone, as for token files.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

log = logging.getLogger(__name__)

CHECKS = 2
"""The version of what the full check verifies: a marker written by older, weaker checks vouches for nothing (2: the
arguments, counts and pruned index fastText computes with, issue 31)."""


def describe(path: str | os.PathLike, st: os.stat_result, sha256: str) -> dict:
    """What a marker vouches for: the file as `st` shows it, holding the bytes of `sha256`, passed these checks."""
    return {"kind": "fasttext model", "checks": CHECKS, "path": os.path.realpath(path), "device": st.st_dev,
            "inode": st.st_ino, "bytes": st.st_size, "mtime_ns": st.st_mtime_ns, "ctime_ns": st.st_ctime_ns,
            "sha256": sha256}


def _name(description: dict) -> str:
    return "model-" + hashlib.sha256(json.dumps(description, sort_keys=True).encode("utf-8")).hexdigest()[:32]


def marked(description: dict, cache: Path | None) -> bool:
    """Whether this node checked the file as `description` describes it."""
    return cache is not None and (cache / _name(description)).is_file()


def mark(description: dict, cache: Path | None) -> None:
    """Record the file as `description` describes it as checked; a marker that cannot be written only costs a check
    later."""
    if cache is None:
        return
    name = _name(description)
    tmp = cache / f"{name}.{os.getpid()}.{threading.get_ident()}.tmp"
    try:
        cache.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps({**description, "checked_at": time.time()}) + "\n", encoding="utf-8")
        os.replace(tmp, cache / name)
    except OSError as err:
        tmp.unlink(missing_ok=True)
        log.debug("no checked-model marker for %s: %s", description["path"], err)


@contextmanager
def exclusive(description: dict, cache: Path | None) -> Iterator[None]:
    """Held while one process of this node checks the file, so that workers starting together check it once: the
    others wait, then find its marker. Without a writable folder, nothing is held (each checks it)."""
    lock = None
    if cache is not None:
        try:
            cache.mkdir(parents=True, exist_ok=True)
            lock = open(cache / f"{_name(description)}.lock", "a+b", buffering=0)  # noqa: SIM115 - closed below
        except OSError as err:
            log.debug("checked-model marker folder %s is not writable (%s): no lock", cache, err)
    if lock is None:
        yield
        return
    try:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        yield
    finally:
        Path(lock.name).unlink(missing_ok=True)  # a waiter holding the old lock finds the marker; harmless otherwise
        lock.close()
