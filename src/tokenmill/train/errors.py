"""The errors that stop a training run as its ranks raise them: one every rank shares (rank 0 says it), and a full disk
(known by its errno, said in one line naming the folder, exit 74); and the one walk of an error's chain that finds
them (causes, contexts, DCP's per-rank failures)."""

from __future__ import annotations

import errno
import os
import shutil
import sys
from pathlib import Path
from typing import Any

from tokenmill.errors import TokenmillError

#: What the system says when a file system, or this user's quota on it, is full.
FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


class EveryRankError(TokenmillError):
    """An error that every rank of a run raises at the same point, having agreed on it (a collective) or computed it
    from the same values. Rank 0 says it; the others stay quiet (``launch.note_error``), so N ranks print one line."""

    every_rank = True


class DiskFullError(EveryRankError):
    """A write of the run failed because its disk (or quota) is full; nothing half-written was left."""

    #: ``tokenmill train``'s exit status for it: sysexits' EX_IOERR (the watchdog's hang is 75, bad input 2).
    exit_code = 74

    def __init__(self, message: str, *, every_rank: bool = True):
        super().__init__(message)
        self.every_rank = every_rank  # False: met by this rank alone, so this rank says it


def error_chain(e: BaseException) -> list[BaseException]:
    """``e`` and every error it carries, each once: causes, contexts, and the per-rank failures of DCP's
    ``CheckpointException`` (which a save or load raises on every rank, holding what each rank raised)."""
    # Looked up, not imported: this module stays free of torch, and without its module no such error exists.
    dcp_api = sys.modules.get("torch.distributed.checkpoint.api")
    found: list[BaseException] = []
    todo: list[Any] = [e]
    while todo:
        err = todo.pop()
        if not isinstance(err, BaseException) or any(err is f for f in found):
            continue
        found.append(err)
        todo += [err.__cause__, err.__context__]
        if dcp_api is not None and isinstance(err, dcp_api.CheckpointException):
            todo += [f[0] if isinstance(f, tuple) else f for f in (err.failures or {}).values()]
    return found


def full_errno(e: BaseException) -> int | None:
    """``ENOSPC`` or ``EDQUOT`` if ``e``, or an error in its chain (:func:`error_chain`), says the disk is full."""
    return next((err.errno for err in error_chain(e) if isinstance(err, OSError) and err.errno in FULL_ERRNOS), None)


def free_bytes(folder: Path) -> int | None:
    """Bytes this process may still write on ``folder``'s file system (None if unknown)."""
    for path in (folder, *folder.parents):
        try:
            return shutil.disk_usage(path).free
        except OSError:
            continue
    return None


def disk_full_message(what: str, folder: Path, code: int, done: str, previous: int | None,
                      free: int | None = None) -> str:
    """The one line for a full disk: ``what`` was not written, the folder whose disk is full, ``done`` (what was
    cleaned up), the checkpoint to resume from (``previous``: its step, None if there is none) and what to do."""
    free = free_bytes(folder) if free is None else free
    kept = (f"the previous checkpoint (step {previous}) is intact: free space there (or point output at a larger "
            "disk), then run the same command to resume from it") if previous is not None else \
        "no earlier checkpoint exists: free space there (or point output at a larger disk) and run it again"
    return (f"{what} not written: the disk holding {folder} is full ({os.strerror(code).lower()}, "
            f"{free if free is not None else 0:,} bytes free); {done} and {kept}")
