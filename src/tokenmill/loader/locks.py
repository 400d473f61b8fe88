"""Lock files (``fcntl.flock``) that a forked child lets go of: the token cache's and the verified-file markers'.

A flock belongs to the open file description, which a forked child's copy of the descriptor keeps alive: a lock the
parent holds at the fork (a prefetch thread downloading, a reservation under cache.lock, a pin, a thread hashing a
file for its marker) would outlive the parent's release for as long as the child runs, and block the child itself
(a DataLoader worker waiting forever in `TokenCache.pin`) or any process waiting for that lock. So the child closes
its copies at once: its own locks it takes afresh, and the parent's stay the parent's.
"""

from __future__ import annotations

import errno
import os
import weakref
from pathlib import Path

try:
    import fcntl
except ImportError:  # no flock (Windows): every lock is granted, so processes may do the same work twice
    fcntl = None

SHARED, EXCLUSIVE, NOWAIT = (fcntl.LOCK_SH, fcntl.LOCK_EX, fcntl.LOCK_NB) if fcntl else (1, 2, 4)

# Every lock file this process has open. Unbuffered files, whose close takes no lock a thread of the parent may have
# held at the fork.
_OPEN_LOCKS: weakref.WeakSet = weakref.WeakSet()


def open_lock(path: Path):
    """``path`` opened (created when absent) to be flocked; closed by the caller, or at once in a forked child."""
    f = open(path, "a+b", buffering=0)  # noqa: SIM115 - closed by the caller (or in a forked child)
    _OPEN_LOCKS.add(f)
    return f


def _close_inherited_locks() -> None:
    for f in list(_OPEN_LOCKS):
        try:
            f.close()
        except OSError:
            pass
    _OPEN_LOCKS.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_close_inherited_locks)


def flock(f, mode: int) -> bool:
    """``fcntl.flock(f, mode)`` (``SHARED`` or ``EXCLUSIVE``, with ``| NOWAIT`` not to wait); False when not waiting
    and another process holds a conflicting lock. Converting a held lock is not atomic: a failed ``EXCLUSIVE |
    NOWAIT`` over a shared lock leaves none."""
    if fcntl is None:
        return True
    try:
        fcntl.flock(f.fileno(), mode)
        return True
    except BlockingIOError:
        return False
    except OSError as err:
        if err.errno in (errno.EAGAIN, errno.EACCES):
            return False
        raise
