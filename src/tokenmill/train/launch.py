"""`tokenmill train --nproc N`: N ranks on this machine joined through a file store, so nothing listens beyond 127.0.0.1.

torchrun's rendezvous store (torch's ``TCPStore``) binds the wildcard address whatever ``--master-addr`` says, and
anyone who reaches it can rewrite the addresses the ranks exchange. One machine needs no TCP rendezvous at all: the
ranks meet in a ``FileStore`` in a private temporary folder, and gloo (or NCCL's bootstrap) is pinned to ``lo``.
torchrun stays the launcher for several machines and for elastic restarts.

What the user reads when a run fails: one line. An error every rank shares (``EveryRankError``: a full disk, a
checkpoint or config that cannot be used) is said by rank 0; the other ranks stay quiet (``note_error`` marks the
error ``quiet``, which the CLI honours). Each rank that ends on such an error leaves a note in the launcher's folder,
so the launcher adds nothing to a status a rank explained, waits for rank 0 to say what a quiet rank left to it, and
says it itself if rank 0 never did. A rank that ends without a note (killed by a signal, a traceback) is named with
its status, as before.
"""

from __future__ import annotations

import contextlib
import json
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

from tokenmill.train.atomic import write_atomic
from tokenmill.train.watchdog import (DUMP_SIGNAL, HANG_DIR_ENV, HANG_EXIT, hang_message, read_stack, report_path,
                                     stack_path, this_run)

log = logging.getLogger(__name__)

STORE_ENV = "TOKENMILL_STORE_FILE"
#: How long the launcher waits for rank 0 to say an error that a quiet rank left to it (rank 0 raises the same error
#: at the same point; it is only slower to exit, behind its clean-up and the interpreter's teardown).
SPEAKER_GRACE_S = 15.0


def note_path(folder: Path, rank: int) -> Path:
    return folder / f"error-rank{rank}.json"


def note_error(err: BaseException, rank: int, world_size: int) -> None:
    """A rank of a run of ``world_size`` ends on ``err`` (a ``TokenmillError``, which the CLI prints as one line).

    Rank 0 says an error that every rank shares (``err.every_rank``); on another rank it is marked ``quiet``, which
    the CLI honours (N ranks, one line). Under ``tokenmill train --nproc``, a note in the launcher's folder tells the
    launcher that this rank's status is explained (by itself, or by rank 0), with the message and exit status."""
    if world_size <= 1:
        return
    quiet = rank != 0 and bool(getattr(err, "every_rank", False))
    if quiet:
        err.quiet = True  # type: ignore[attr-defined]
    folder = os.environ.get(HANG_DIR_ENV)
    if folder:
        # The status the CLI gives a TokenmillError: its own exit_code, else 2.
        note = {"rank": rank, "quiet": quiet, "message": str(err), "exit_code": getattr(err, "exit_code", 2)}
        with contextlib.suppress(OSError):  # the note must never hide the error itself
            write_atomic(note_path(Path(folder), rank), json.dumps(note))


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
                folder: Path | None = None, grace_s: float = SPEAKER_GRACE_S) -> int:
    """Stop the ranks still running, say which rank failed first unless it explained itself, and return its exit
    status.

    A rank killed by a signal is the cause when several are seen at once: its peers fail with gloo's "connection
    reset" a moment later; then a rank that its watchdog ended (a hang: ``_hang`` says which rank did not arrive);
    then a rank that left a note (``note_error``). The others would otherwise wait in a collective until gloo's
    timeout (30 minutes). A rank with a note said its error, or left it to rank 0 (quiet): then rank 0, which raises
    the same error, is given ``grace_s`` to end by itself and say it, and if it does not, the launcher says it.
    """
    notes = _notes(folder, len(procs))
    if any(notes[r]["quiet"] for r in failed if r in notes) and procs[0].poll() is None:
        deadline = time.monotonic() + grace_s
        while procs[0].poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        if procs[0].returncode:
            failed = sorted({*failed, 0})
        notes = _notes(folder, len(procs))

    def order(rank: int) -> tuple[int, int]:
        code = procs[rank].returncode
        if rank in notes:  # explained, whatever its exit (an abort in the interpreter's teardown included)
            return 2, rank
        return (0 if code < 0 else 1 if code == HANG_EXIT else 3), rank

    cause = min(failed, key=order)
    code = procs[cause].returncode
    if cause not in notes and code == HANG_EXIT and folder is not None:
        say(_hang(procs, folder))
        return HANG_EXIT
    running = [rank for rank, p in enumerate(procs) if p.poll() is None]
    for rank in running:
        procs[rank].terminate()
    _reap(procs)
    if cause in notes:
        note = notes[0] if 0 in notes and not notes[0]["quiet"] else notes[cause]
        if note["quiet"]:  # left to rank 0, which ended without saying it
            say(f"tokenmill train: rank {cause}: {note['message']}")
        return int(note["exit_code"])
    how = f"was killed by {signal.Signals(-code).name}" if code < 0 else f"exited with status {code}"
    stopped = f"; stopped rank(s) {', '.join(map(str, running))}" if running else ""
    say(f"tokenmill train: rank {cause} {how}{stopped}")
    return _status(code)


def _notes(folder: Path | None, nproc: int) -> dict[int, dict]:
    """The notes the ranks left (``note_error``), by rank; an unreadable one counts as none."""
    notes = {}
    for rank in range(nproc if folder is not None else 0):
        try:
            note = json.loads(note_path(folder, rank).read_text(encoding="utf-8"))
            notes[rank] = {"quiet": bool(note["quiet"]), "message": str(note["message"]),
                           "exit_code": int(note["exit_code"])}
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return notes


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
        _await_stacks(reports, signalled)
    for p in procs:
        if p.poll() is None:
            p.terminate()
    _reap(procs)
    return hang_message(reports, len(procs))


def _await_stacks(reports: list[Path], ranks: list[int], wait_s: float = 10.0) -> None:
    """Until each signalled rank's stack is in its file, or ``wait_s``: faulthandler writes from the signal handler at
    once, but a loaded machine may not run the rank for seconds (a fixed second once left "no stack written")."""
    folder = None
    for path in reports:
        with contextlib.suppress(OSError, ValueError, KeyError):
            folder = Path(json.loads(path.read_text(encoding="utf-8"))["watchdog_dir"])
            break
    if folder is None:
        time.sleep(1.0)
        return
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if all(this_run(read_stack(stack_path(folder, r))).strip() for r in ranks):
            return
        time.sleep(0.1)


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
