"""The hang watchdog (issue 22): per rank, a daemon thread that ends a run in which no step finishes in time.

Every rank keeps a ``Progress`` (the step in progress, the phase inside it, the last completed collective, and a
count of progress points) that the trainer, ``Distributed.all_mean`` and a forward pre-hook update; the watchdog's
thread copies it to ``<output>/watchdog/rank<r>.json`` (its heartbeat) whenever it changed, at most every second.
When no step has finished for ``timeout_s``, the thread of each rank reads every rank's heartbeat, writes its own
threads' stacks to ``rank<r>.stack.txt``, names the ranks that are behind (the fewest progress points: every rank
passes the same points in the same order, so the one with fewer did not arrive where the others wait), writes a
``hang-rank<r>.json`` report (and, the first rank to fire, a ``hang`` event in events.jsonl) and ends its process
with ``HANG_EXIT``. ``tokenmill train --nproc`` then has every rank still running dump its stacks (SIGUSR1, which
``faulthandler`` answers from C even while Python waits in a collective), stops them, and prints one message.

torch's flight recorder would give the collectives themselves, but it records NCCL only; gloo's timeout is 30
minutes and says nothing of who did not come.
"""

from __future__ import annotations

import faulthandler
import json
import logging
import os
import signal
import socket
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any, Optional

from pydantic import Field

from tokenmill.config_base import StrictModel
from tokenmill.train.atomic import write_atomic
from tokenmill.train.errors import full_errno

log = logging.getLogger(__name__)

WATCHDOG_DIR = "watchdog"
#: The exit status of a rank its watchdog ended (sysexits' EX_TEMPFAIL: a hang is not the data's or the code's fault
#: until shown otherwise); the launcher knows a hang by it.
HANG_EXIT = 75
#: Where a rank also writes its hang report: the launcher's private folder (set by ``tokenmill train --nproc``).
HANG_DIR_ENV = "TOKENMILL_HANG_DIR"
#: The signal on which a rank dumps its threads' stacks into its stack file (registered while the watchdog runs).
DUMP_SIGNAL = signal.SIGUSR1
#: The line that opens each run's part of a stack file (appended to: a resumed run keeps the last hang's stacks).
RUN_MARK = "=== watchdog started"


class WatchdogConfig(StrictModel):
    """The hang watchdog: how long a step may take before the run is stopped with every rank's stack."""

    enabled: bool = True
    """Off: no thread, no heartbeat files; a hung rank waits in gloo or NCCL until their own timeout."""
    timeout_s: float = Field(default=600.0, gt=0)
    """Seconds without a finished step (measured from the previous one, so a checkpoint or an evaluation after a
    step counts towards the next) before the watchdog dumps the stacks and stops the run."""
    first_step_timeout_s: Optional[float] = Field(default=None, gt=0)
    """The same for the first step after a start or a resume, which compiles (`compile: true`), warms the GPU's
    kernels and runs the first all-gathers: a step several times a steady one, longer still on a loaded machine.
    Default: ``timeout_s``, but at least 1,800 s with `compile: true` and 300 s without (a slow first step is not a
    hang of every rank)."""

    def first_step_limit(self, compiled: bool) -> float:
        """Seconds the first step may take."""
        if self.first_step_timeout_s is not None:
            return self.first_step_timeout_s
        return max(self.timeout_s, 1800.0 if compiled else 300.0)


class Progress:
    """Where this rank is. The main thread writes it (plain attribute stores), the watchdog's thread reads it."""

    def __init__(self) -> None:
        self.step = 0  # the step in progress (the last one finished, after ``done``)
        self.phase = "start"
        self.ticks = 0  # progress points passed: the same sequence on every rank
        self.collective: dict[str, Any] | None = None  # the last completed collective: name, step, time
        self.finished_at = time.monotonic()  # the last finished step (or the watchdog's start)
        self.since = time.time()  # the last progress point
        self.finished = 0  # steps finished since this process started (0: the first step is in progress)

    def begin(self, step: int) -> None:
        self.step, self.phase = step, "start"
        self.ticks += 1
        self.since = time.time()

    def enter(self, phase: str) -> None:
        self.phase = phase
        self.ticks += 1
        self.since = time.time()

    def collective_done(self, name: str) -> None:
        self.since = time.time()
        self.collective = {"name": name, "step": self.step, "time": self.since}
        self.ticks += 1

    def done(self, step: int) -> None:
        self.step, self.phase = step, "done"
        self.ticks += 1
        self.since = time.time()
        self.finished_at = time.monotonic()
        self.finished += 1

    def snapshot(self) -> dict[str, Any]:
        return {"step": self.step, "phase": self.phase, "since": self.since, "ticks": self.ticks,
                "last_collective": self.collective}


def heartbeat_path(folder: Path, rank: int) -> Path:
    return folder / f"rank{rank}.json"


def stack_path(folder: Path, rank: int) -> Path:
    return folder / f"rank{rank}.stack.txt"


def report_path(folder: Path, rank: int) -> Path:
    return folder / f"hang-rank{rank}.json"


class Watchdog:
    """One rank's watchdog. ``start`` it once the run is built; the trainer calls ``begin``/``done`` around each step
    and ``stop`` at the end. Disabled, it only keeps the ``Progress`` (no thread, no files)."""

    def __init__(self, config: WatchdogConfig, progress: Progress, rank: int, world_size: int, device: str,
                 output: Path, compiled: bool = False):
        self.cfg, self.progress = config, progress
        self.first_limit = config.first_step_limit(compiled)
        self.rank, self.world_size, self.device = rank, world_size, device
        self.host = socket.gethostname()
        self.output = Path(output)
        self.folder = self.output / WATCHDOG_DIR
        self.started = time.time()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._stacks = None
        self._written = -1
        self._unwritable: OSError | None = None  # the last heartbeat write's error, until one succeeds
        self._hook = None

    @classmethod
    def start(cls, config: WatchdogConfig, d: Any, output: Path, model: Any = None, compiled: bool = False
              ) -> "Watchdog":
        """Start the watchdog of rank ``d.rank`` (a ``Distributed``), writing under ``output``; ``model``'s forward
        becomes a progress point; ``compiled``: the first step compiles (it is allowed longer)."""
        dog = cls(config, d.progress, d.rank, d.world_size, str(d.device), output, compiled)
        if config.enabled:
            dog._start(model)
        return dog

    def _start(self, model: Any) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        self.progress.finished_at = time.monotonic()
        if model is not None:
            # Prepended: it runs before FSDP2's pre-forward all-gather, so a rank blocked there has passed it.
            self._hook = model.register_forward_pre_hook(self._forward, prepend=True)
        # Unbuffered: a write that a full disk refuses fails there, and nothing is left to fail again at close.
        self._stacks = open(stack_path(self.folder, self.rank), "ab", buffering=0)  # noqa: SIM115 - held open
        try:
            self._stacks.write(f"{RUN_MARK} {_utc(self.started)} UTC, pid {os.getpid()}\n".encode())
        except OSError as err:  # as a heartbeat: the stacks matter only on a hang, the run's own writes say it
            self._unwritable_said(stack_path(self.folder, self.rank), err, "its stack file")
        if threading.current_thread() is threading.main_thread():
            faulthandler.register(DUMP_SIGNAL, file=self._stacks, all_threads=True, chain=False)
        self._beat()
        self._thread = threading.Thread(target=self._watch, name="tokenmill-watchdog", daemon=True)
        self._thread.start()

    def _forward(self, module: Any, _args: Any) -> None:
        self.progress.enter("forward" if module.training else "evaluation")

    # -- the trainer's calls -----------------------------------------------------------------------------------

    def begin(self, step: int) -> None:
        self.progress.begin(step)

    def done(self, step: int) -> None:
        self.progress.done(step)

    def stop(self) -> None:
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join()
        self._thread = None
        self._beat()  # the run's last point: its heartbeat says where it ended
        if self._hook is not None:
            self._hook.remove()
        if threading.current_thread() is threading.main_thread():
            faulthandler.unregister(DUMP_SIGNAL)
        if self._stacks is not None:
            self._stacks.close()

    # -- the thread ----------------------------------------------------------------------------------------------

    def limit(self) -> float:
        """The seconds the step in progress may take: the first one's (it compiles and warms up), then ``timeout_s``."""
        return self.first_limit if self.progress.finished == 0 else self.cfg.timeout_s

    def _watch(self) -> None:
        poll = min(1.0, self.cfg.timeout_s / 5)
        while not self._stop.wait(poll):
            self._beat()
            stalled = time.monotonic() - self.progress.finished_at
            if stalled > self.limit():
                try:
                    self._fire(stalled)
                except Exception as err:  # noqa: BLE001 - whatever went wrong in the report, the process must end
                    if full_errno(err) is not None:  # one line, not a traceback: the disk is full
                        log.error("watchdog (rank %d): the hang report was not written in full: %s", self.rank, err)
                    else:
                        log.exception("watchdog (rank %d): the hang report failed", self.rank)
                finally:
                    logging.shutdown()
                    os._exit(HANG_EXIT)

    def _heartbeat(self) -> dict[str, Any]:
        return {"rank": self.rank, "host": self.host, "device": self.device, "pid": os.getpid(),
                "started": self.started, "time": time.time(), **self.progress.snapshot()}

    def _beat(self) -> None:
        """``_flush``, never raising: a heartbeat that cannot be written must not end the run or the watch.

        A full disk is said once at INFO, and the heartbeat retried at every poll (it resumes when space is freed):
        the heartbeat is only read when a hang fires, and the run's own writes report a full disk where it matters
        (a checkpoint stops the run with one line naming its folder, exit 74), so a second message from this thread
        would only race that one. Any other error (the folder gone, no permission) is warned about once. Stopping
        the run from here instead would cut a checkpoint's clean-up short."""
        try:
            self._flush()
        except OSError as err:
            if self._unwritable is None:
                self._unwritable_said(heartbeat_path(self.folder, self.rank), err, "its heartbeat",
                                      "; retrying each poll")
            self._unwritable = err
        else:
            self._unwritable = None

    def _unwritable_said(self, path: Path, err: OSError, what: str, full_then: str = "") -> None:
        """Once per failure: a full disk at INFO (the run's own writes stop it with one line), else a warning."""
        full = full_errno(err) is not None
        (log.info if full else log.warning)("watchdog (rank %d): cannot write %s %s (%s)%s", self.rank, what, path,
                                            err, f": the disk is full{full_then}" if full else "; it keeps watching")

    def _flush(self) -> None:
        """Write this rank's heartbeat when it changed (atomically: a reader never sees half a file)."""
        beat = self._heartbeat()
        if beat["ticks"] == self._written:
            return
        write_atomic(heartbeat_path(self.folder, self.rank), json.dumps(beat))
        self._written = beat["ticks"]

    def read_heartbeats(self) -> dict[int, dict[str, Any] | None]:
        """Every rank's heartbeat; None for one missing, unreadable, or left by an earlier run (started more than
        a timeout, or 30 s, before this rank's: the ranks start their watchdogs together, after the model's
        broadcast)."""
        beats: dict[int, dict[str, Any] | None] = {}
        for rank in range(self.world_size):
            try:
                beat = json.loads(heartbeat_path(self.folder, rank).read_text(encoding="utf-8"))
            except (OSError, ValueError):
                beat = None
            if beat is not None and beat.get("started", 0) < self.started - max(self.cfg.timeout_s, 30.0):
                beat = None
            beats[rank] = beat
        beats[self.rank] = self._heartbeat()
        return beats

    def _fire(self, stalled: float) -> None:
        beats = self.read_heartbeats()
        stacks = stack_path(self.folder, self.rank)
        if self._stacks is not None:
            try:
                self._stacks.write(format_stacks(f"rank {self.rank} (host {self.host}): no step finished for "
                                                 f"{stalled:.1f} s").encode())
            except OSError as err:  # the report below still names the rank behind
                self._unwritable_said(stacks, err, "its stacks")
        report = {"rank": self.rank, "host": self.host, "device": self.device, "time": time.time(),
                  "timeout_s": self.limit(), "stalled_s": round(stalled, 3), "output": str(self.output),
                  "watchdog_dir": str(self.folder), "stack_file": str(stacks),
                  "behind": behind(beats), "heartbeats": {str(r): b for r, b in beats.items()}}
        report["message"] = describe(report)
        text = json.dumps(report, indent=1)
        targets = [report_path(self.folder, self.rank)]
        if os.environ.get(HANG_DIR_ENV):  # first: the launcher's message comes from it, whatever the run's disk holds
            targets.insert(0, report_path(Path(os.environ[HANG_DIR_ENV]), self.rank))
        for path in targets:
            write_atomic(path, text)
        if self._claim():
            self._event(report)
        log.error("watchdog (rank %d): %s; this rank's stacks in %s", self.rank, report["message"], stacks)

    def _claim(self) -> bool:
        """Whether this rank is the first of this run to fire (it writes the event): a file created exclusively, in
        the launcher's folder, else under a name from torchrun's variables (the same on every rank of one job)."""
        if self.world_size == 1:
            return True
        if os.environ.get(HANG_DIR_ENV):
            path = Path(os.environ[HANG_DIR_ENV]) / "hang.claim"
        else:
            key = "-".join(os.environ.get(k, "") for k in ("TORCHELASTIC_RUN_ID", "MASTER_ADDR", "MASTER_PORT",
                                                           "TORCHELASTIC_RESTART_COUNT"))
            path = self.folder / f"hang-{key}.claim"
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        except FileExistsError:
            return False
        os.close(fd)
        return True

    def _event(self, report: dict[str, Any]) -> None:
        from tokenmill.train.metrics import EVENTS_JSONL, JsonLines

        JsonLines(self.output / EVENTS_JSONL, True).write(hang_event(report))


def behind(beats: dict[int, dict[str, Any] | None]) -> list[int]:
    """The ranks that did not arrive: those with no heartbeat of this run, else those with the fewest progress
    points when the ranks differ; none when every rank is at the same point (all wait in one collective)."""
    missing = [r for r, b in beats.items() if b is None]
    if missing:
        return missing
    ticks = {r: b["ticks"] for r, b in beats.items() if b is not None}
    low = min(ticks.values())
    return [] if low == max(ticks.values()) else [r for r, t in ticks.items() if t == low]


def _where(beat: dict[str, Any]) -> str:
    return f"step {beat['step']}'s {beat['phase']}" if beat["phase"] != "done" else f"the end of step {beat['step']}"


def describe(report: dict[str, Any]) -> str:
    """One sentence naming the ranks that did not arrive, where the others wait, and the last collective."""
    beats = {int(r): b for r, b in report["heartbeats"].items()}
    late = report["behind"]
    timeout = f"{report['timeout_s']:g} s"
    present = [b for b in beats.values() if b is not None]
    ahead = max(present, key=lambda b: b["ticks"]) if present else None
    parts = []
    for rank in late:
        beat = beats.get(rank)
        if beat is None:
            parts.append(f"rank {rank} wrote no heartbeat in this run (it never reached the training loop, or its "
                         f"process or host is gone)")
            continue
        target = _where(ahead) if ahead is not None else "the next step"
        since = f" for {report['time'] - beat['since']:.1f} s" if beat.get("since") else ""
        parts.append(f"rank {rank} (host {beat['host']}, device {beat['device']}) did not reach {target} within "
                     f"{timeout}: it is at {_where(beat)}{since}")
    if not late and ahead is not None:
        parts.append(f"no step finished within {timeout} and no rank is behind: every rank is at {_where(ahead)} "
                     "(a collective that never completes, or work between steps: a checkpoint, an evaluation)")
    last = ahead.get("last_collective") if ahead is not None else None
    if last:
        parts.append(f"last completed collective: {last['name']} of step {last['step']}, "
                     f"{report['time'] - last['time']:.1f} s before")
    return "; ".join(parts)


def hang_event(report: dict[str, Any]) -> dict[str, Any]:
    """The events.jsonl record of a hang, in the shape ``tokenmill train doctor`` reads as a self-classified fault
    (``classification``, ``reason``, ``decision``, and ``rank``/``host``/``device`` of the first rank behind)."""
    beats = {int(r): b for r, b in report["heartbeats"].items()}
    present = [b for b in beats.values() if b is not None]
    step = max((b["step"] + (b["phase"] == "done") for b in present), default=0)
    event: dict[str, Any] = {"time": report["time"], "step": step, "action": "hang", "classification": "hang",
                             "reason": report["message"], "timeout_s": report["timeout_s"],
                             "stalled_s": report["stalled_s"], "ranks_behind": report["behind"],
                             "decision": f"stopped by the watchdog (exit {HANG_EXIT}); stacks in "
                                         f"{report['watchdog_dir']}",
                             "heartbeats": report["heartbeats"], "detected_by": report["rank"]}
    if report["behind"]:
        first = report["behind"][0]
        beat = beats.get(first) or {}
        event.update(rank=first, host=beat.get("host"), device=beat.get("device"))
    return event


def format_stacks(title: str) -> str:
    """Every thread's Python stack, named, oldest call first; the main thread first."""
    frames = sys._current_frames()
    threads = sorted(threading.enumerate(), key=lambda t: t is not threading.main_thread())
    out = [f"=== {title} ({_utc(time.time())} UTC)\n"]
    for t in threads:
        frame = frames.get(t.ident) if t.ident is not None else None
        if frame is None:
            continue
        out.append(f"Thread {t.name} (id {t.ident}{', main' if t is threading.main_thread() else ''}):\n")
        out.extend(traceback.format_stack(frame))
        out.append("\n")
    return "".join(out)


def main_stack(text: str, lines: int = 16) -> str:
    """The main thread's stack from a stack file, its innermost ``lines`` lines: the watchdog's own dump (oldest call
    first), else faulthandler's (a SIGUSR1 dump, most recent call first, the main thread the last one listed: the
    interpreter lists its threads newest first)."""
    current = this_run(text)
    blocks = [b.strip("\n") for b in current.split("\n\n") if b.strip()]
    ours = [b for b in blocks if ", main):" in b]
    if ours:
        head, *body = [x for x in ours[-1].splitlines() if not x.startswith("===")]
        return "\n".join([head, *body[-lines:]])
    theirs = [b for b in blocks if b.lstrip().startswith(("Thread 0x", "Current thread 0x"))]
    return "\n".join(theirs[-1].splitlines()[:lines + 1]) if theirs else current.strip()[-2000:]


def hang_message(reports: list[Path], world_size: int) -> str:
    """The launcher's one message from the ranks' hang reports: who did not arrive, where the others wait, the
    first late rank's stack (main thread), and the file of every rank's stacks."""
    found = []
    for path in reports:
        try:
            found.append(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError):
            continue
    if not found:
        return (f"tokenmill train: a rank's watchdog stopped the run (exit {HANG_EXIT}: no step finished in time) "
                "but no report was readable")
    report = min(found, key=lambda r: (not r["behind"], r["rank"]))  # the ranks agree; one that names someone
    folder = Path(report["watchdog_dir"])
    lines = [f"tokenmill train: hang: {report['message']} (seen by rank {report['rank']} after "
             f"{report['stalled_s']:.1f} s without a finished step)"]
    texts = {r: read_stack(stack_path(folder, r)) for r in {*range(world_size), *report["behind"][:1]}}  # read once
    for rank in report["behind"][:1]:
        text = texts[rank]
        lines.append(f"rank {rank}'s stack (main thread):\n" + (main_stack(text) if this_run(text).strip()
                                                                else "(none written: the rank did not answer)"))
    written = [r for r in range(world_size) if this_run(texts[r]).strip()]
    lines.append("every rank's stack in: " + ", ".join(str(stack_path(folder, r)) for r in written)
                 + "".join(f"; rank {r}: no stack written" for r in range(world_size) if r not in written))
    return "\n".join(lines)


def read_stack(path: Path) -> str:
    """A stack file's text, empty when there is none."""
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def this_run(text: str) -> str:
    """A stack file's part written since the last watchdog start (its run mark line left out)."""
    at = text.rfind(RUN_MARK)
    return text if at < 0 else text[at:].partition("\n")[2]


def _utc(seconds: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(seconds))
