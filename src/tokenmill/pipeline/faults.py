"""Fault injection for the kill-and-resume and write-error tests (`tests/faults/`); inert unless switched on.

Switched on by the environment variable `TOKENMILL_FAULTS`, the path of a JSON file read at every hook call
(so a test may rewrite it between runs while the same Ray workers live on). Unset, or naming a missing file,
every hook returns at once and nothing changes. The file holds any of:

```
{"kill_worker": {"stage": "clean", "phase": "map", "task": "<task key>", "point": "mid_commit",
                 "once": "/tmp/x/killed"},          # SIGKILL the worker running that task at that point
 "write_error": {"stage": "clean", "phase": "map", "task": "<task key>", "path": "shards/",
                 "errno": 28},                       # OSError(ENOSPC) on writing a file whose path starts so
 "log": "/tmp/x/injected.jsonl",                     # one JSON line per fault injected (tests count them)
 "pids": "/tmp/x/pids"}                              # every task attempt appends its worker's pid at `start`
```

A plan of `{}` (or one with only `pids`) injects nothing.

Any of `stage`, `phase`, `task` left out matches every value. `once` names a marker file created atomically
by the first worker that fires the kill: later attempts (Ray's retries, a rerun) pass, so a killed task can
finish. Without `once` the kill fires on every matching attempt. A write error fires on every matching
write: a full disk or a permission error does not go away on a retry.

Points inside a task, in order (`POINTS`): `start` (before the phase runs), `written` (after the task's first
file is written under its attempt folder; on an object store, under its final name), `before_commit` (the phase
returned, nothing moved yet), `mid_commit` (the first file moved into place, the others not; the same as `before_record` for a task with
one file), `before_record` (every file moved, no completion record), `after_record` (the record written, the
attempt folder not yet removed) and `end` (committed; the result not yet returned to the driver).

Why injection rather than a real full disk or a read-only folder: tests run as root in CI, where chmod does not
stop a write, and filling a disk is neither safe nor fast. The error raised is the one the OS would give.

The executor forwards these variables to Ray workers through the tasks' `runtime_env` (`task_options`), so a
driver that joins an existing cluster (`--ray-address`, the test session's cluster) injects faults there too.
"""

from __future__ import annotations

import errno as errno_codes
import json
import os
import signal
import time
from typing import Any

ENV = "TOKENMILL_FAULTS"
DELAY_ENV = "TOKENMILL_TASK_DELAY_S"
"""Seconds each task sleeps before it runs, so an outside kill lands mid-stage (older switch, kept)."""

POINTS = ("start", "written", "before_commit", "mid_commit", "before_record", "after_record", "end")


def _plan() -> dict[str, Any] | None:
    path = os.environ.get(ENV)
    if not path:
        return None
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def task_options() -> dict[str, Any]:
    """Extra Ray task options that carry the fault switches to workers; empty when none is set."""
    env_vars = {name: os.environ[name] for name in (ENV, DELAY_ENV) if os.environ.get(name)}
    return {"runtime_env": {"env_vars": env_vars}} if env_vars else {}


def delay() -> None:
    """Sleep `TOKENMILL_TASK_DELAY_S` seconds, if set."""
    seconds = float(os.environ.get(DELAY_ENV, "0") or 0)
    if seconds > 0:
        time.sleep(seconds)


def _stage_of(stage_dir: str) -> str:
    return stage_dir.rstrip("/").rsplit("/", 1)[-1]


def _matches(spec: dict[str, Any], stage: str, phase: str, task: str) -> bool:
    return all(spec.get(k) in (None, v) for k, v in (("stage", stage), ("phase", phase), ("task", task)))


def _log(plan: dict[str, Any], event: dict[str, Any]) -> None:
    path = plan.get("log")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps({**event, "pid": os.getpid()}, sort_keys=True) + "\n")
            f.flush()
            os.fsync(f.fileno())


def point(name: str, stage_dir: str, phase: str, task: str) -> None:
    """A point inside a task where a worker may be killed (SIGKILL of its own process)."""
    plan = _plan()
    if plan is None:
        return
    if name == "start" and plan.get("pids"):
        with open(plan["pids"], "a", encoding="utf-8") as f:
            f.write(f"{os.getpid()}\n")
    if "kill_worker" not in plan:
        return
    spec = plan["kill_worker"]
    stage = _stage_of(stage_dir)
    if spec.get("point") != name or not _matches(spec, stage, phase, task):
        return
    once = spec.get("once")
    if once:
        try:
            os.close(os.open(once, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return
    _log(plan, {"fault": "kill_worker", "stage": stage, "phase": phase, "task": task, "point": name})
    os.kill(os.getpid(), signal.SIGKILL)


def before_write(stage_dir: str, phase: str, task: str, relpath: str, path: str) -> None:
    """Raise the configured OSError when a task is about to write `relpath` (at `path`)."""
    plan = _plan()
    if plan is None or "write_error" not in plan:
        return
    spec = plan["write_error"]
    stage = _stage_of(stage_dir)
    if not relpath.startswith(spec.get("path", "")) or not _matches(spec, stage, phase, task):
        return
    code = int(spec.get("errno", errno_codes.ENOSPC))
    _log(plan, {"fault": "write_error", "stage": stage, "phase": phase, "task": task, "path": relpath, "errno": code})
    raise OSError(code, os.strerror(code), path)  # OSError picks the subclass: EACCES gives PermissionError
