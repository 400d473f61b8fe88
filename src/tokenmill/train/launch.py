"""`tokenmill train --nproc N`: N ranks on this machine joined through a file store, so nothing listens beyond 127.0.0.1.

torchrun's rendezvous store (torch's ``TCPStore``) binds the wildcard address whatever ``--master-addr`` says, and
anyone who reaches it can rewrite the addresses the ranks exchange. One machine needs no TCP rendezvous at all: the
ranks meet in a ``FileStore`` in a private temporary folder, and gloo (or NCCL's bootstrap) is pinned to ``lo``.
torchrun stays the launcher for several machines and for elastic restarts.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from tokenmill.train.watchdog import DUMP_SIGNAL, HANG_DIR_ENV, HANG_EXIT, hang_message, report_path

log = logging.getLogger(__name__)

STORE_ENV = "TOKENMILL_STORE_FILE"


def rank_env(rank: int, nproc: int, store: str, base: dict[str, str]) -> dict[str, str]:
    """The environment of one rank: torchrun's variables, the store file, and the loopback for every socket."""
    env = {**base, "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(nproc),
           "LOCAL_WORLD_SIZE": str(nproc), STORE_ENV: store, HANG_DIR_ENV: os.path.dirname(store)}
    env.setdefault("GLOO_SOCKET_IFNAME", "lo")
    env.setdefault("NCCL_SOCKET_IFNAME", "lo")
    # torch would otherwise start one OpenMP thread per core in every rank: N ranks would oversubscribe N-fold.
    env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // nproc)))
    return env


def launch(argv: Sequence[str], nproc: int, poll_s: float = 0.2, say: Callable[[str], None] = log.error) -> int:
    """Run ``python -m tokenmill.cli ARGV`` as ``nproc`` ranks; the first rank to fail stops the others.

    Returns 0 when every rank succeeded, else the exit status of the first rank that failed (128 + signal number
    for a rank killed by a signal, as a shell reports it), after telling ``say`` which rank it was (the library
    logs it; the CLI prints it).
    """
    folder = tempfile.mkdtemp(prefix="tokenmill-ranks-")  # mode 0700: no other user can join or spoil the group
    store = os.path.join(folder, "store")
    procs: list[subprocess.Popen] = []
    forwarded = {}

    def forward(signum, _frame):
        for p in procs:
            if p.poll() is None:
                p.send_signal(signum)

    for signum in (signal.SIGTERM, signal.SIGINT):
        forwarded[signum] = signal.signal(signum, forward)
    try:
        for rank in range(nproc):
            procs.append(subprocess.Popen([sys.executable, "-m", "tokenmill.cli", *argv],
                                          env=rank_env(rank, nproc, store, dict(os.environ))))
        # Every rank polled each round (a list, not a short-circuiting any()), until all end or one fails.
        while None in [p.poll() for p in procs] and not any(p.returncode for p in procs):
            time.sleep(poll_s)
        failed = [rank for rank, p in enumerate(procs) if p.returncode]
        return _stop_after(failed, procs, say, Path(folder)) if failed else 0
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        _reap(procs)
        for signum, handler in forwarded.items():
            signal.signal(signum, handler)
        shutil.rmtree(folder, ignore_errors=True)


def _stop_after(failed: list[int], procs: list[subprocess.Popen], say: Callable[[str], None],
                folder: Path | None = None) -> int:
    """Stop the ranks still running, say which rank failed first, and return its exit status.

    A rank killed by a signal is the cause when several are seen at once: its peers fail with gloo's "connection
    reset" a moment later; then a rank that its watchdog ended (a hang: ``_hang`` says which rank did not arrive).
    The others would otherwise wait in a collective until gloo's timeout (30 minutes).
    """
    cause = min(failed, key=lambda rank: (procs[rank].returncode >= 0, procs[rank].returncode != HANG_EXIT, rank))
    code = procs[cause].returncode
    if code == HANG_EXIT and folder is not None:
        say(_hang(procs, folder))
        return HANG_EXIT
    running = [rank for rank, p in enumerate(procs) if p.poll() is None]
    for rank in running:
        procs[rank].terminate()
    _reap(procs)
    how = f"was killed by {signal.Signals(-code).name}" if code < 0 else f"exited with status {code}"
    stopped = f"; stopped rank(s) {', '.join(map(str, running))}" if running else ""
    say(f"tokenmill train: rank {cause} {how}{stopped}")
    return _status(code)


def _hang(procs: list[subprocess.Popen], folder: Path, grace_s: float = 5.0) -> str:
    """A rank's watchdog ended it: give the others ``grace_s`` to write their own reports (their watchdogs fire
    about together), have those still silent dump their stacks (SIGUSR1: faulthandler answers even while Python
    waits in a collective), stop them all, and return the one message that names the rank that did not arrive."""

    def silent() -> list[int]:
        return [r for r, p in enumerate(procs) if p.poll() is None and not report_path(folder, r).exists()]

    deadline = time.monotonic() + grace_s
    while silent() and time.monotonic() < deadline:
        time.sleep(0.1)
    reports = [report_path(folder, r) for r in range(len(procs)) if report_path(folder, r).exists()]
    signalled = silent()
    for rank in signalled:
        procs[rank].send_signal(DUMP_SIGNAL)
    if signalled:
        time.sleep(1.0)  # faulthandler writes from the signal handler at once; the file system may lag a little
    for p in procs:
        if p.poll() is None:
            p.terminate()
    _reap(procs)
    return hang_message(reports, len(procs))


def _status(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode


def _reap(procs: list[subprocess.Popen], grace_s: float = 10.0) -> None:
    deadline = time.monotonic() + grace_s
    for p in procs:
        try:
            p.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
