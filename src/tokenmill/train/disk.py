"""One rank's writes to a run's folder between checkpoints (logs, config.json, summary.json, faulty_ranks.json): a
full disk stops the run with one line naming the folder (exit 74), on every rank at the same point.

Most of these files are written by rank 0 alone, while the other ranks go on to the next collective. A rank 0 that
stopped there by itself would leave them waiting in it (until gloo's 30-minute timeout, or the watchdog), and its own
last barrier would meet theirs out of order. So on several ranks a full disk is *held*: the rank that met it skips its
later writes (a row after a lost one would leave a hole in a log) and every rank learns of it at the next point they
all pass, the step's loss all-reduce (:meth:`RunDisk.flag` rides in it, free) or a :meth:`RunDisk.check` before a
checkpoint and at the end, and raises the same :class:`DiskFullError` there. On one rank it is raised at once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import torch.distributed as dist

from tokenmill.train.errors import DiskFullError, disk_full_message, full_errno

log = logging.getLogger(__name__)

T = TypeVar("T")

#: What a full disk left behind, as every message says it: a JSON-lines file is cut back to whole lines, a file
#: replaced whole (``atomic.write_atomic``) is as it was.
DONE = "the run stopped with its files whole"


class RunDisk:
    """The run folder's disk as this rank's writes meet it. ``d``: the run's ``Distributed`` (rank, world size,
    ``all_mean``); ``previous``: the step of the newest committed checkpoint, for the message."""

    def __init__(self, d: Any, previous: Callable[[], int | None]):
        self.d, self.previous = d, previous
        self.held: str | None = None

    def write(self, path: Path, write: Callable[[], T]) -> T | None:
        """``write()``, which writes ``path``. A full disk raises :class:`DiskFullError` on one rank, and on several
        is held (None returned); once one is held, later writes are skipped. Any other error goes through."""
        if self.held is not None:
            return None
        try:
            return write()
        except OSError as err:
            code = full_errno(err)
            if code is None:
                raise
            message = disk_full_message(path.name, path.parent, code, DONE, self.previous())
            if self.d.world_size == 1:
                raise DiskFullError(message) from err
            log.debug("rank %d: %s (held until the ranks next meet)", self.d.rank, message, exc_info=True)
            self.held = message
            return None

    @property
    def flag(self) -> float:
        """1.0 while this rank holds a full disk: a value to add to a collective every rank makes anyway."""
        return 1.0 if self.held is not None else 0.0

    def agree(self, flagged: float) -> None:
        """Every rank, with the ranks' :attr:`flag` reduced (sum or mean) by one collective: when any rank holds a
        full disk, every rank raises its message (the lowest such rank's)."""
        if flagged > 0:
            held: list[str | None] = [None] * self.d.world_size
            dist.all_gather_object(held, self.held)
            raise DiskFullError(next(m for m in held if m is not None))

    def check(self) -> None:
        """Every rank: :meth:`agree` through a collective of its own (before a checkpoint, at the end of a run)."""
        if self.d.world_size > 1:
            flagged, = self.d.all_mean([self.flag], "disk check")
            self.agree(flagged)
