"""What a phase sees: the plan context on the driver, the task context in a worker, and the task entry point."""

from __future__ import annotations

import resource
import time
from dataclasses import dataclass, field
from typing import Any, Mapping

import pyarrow.fs as pafs

from tokenmill.pipeline import faults
from tokenmill.pipeline.commit import TaskWriter
from tokenmill.pipeline.stage import Stage, Task


@dataclass(frozen=True)
class PlanContext:
    """Driver-side view of a stage run: where its input and output are, and what earlier phases produced."""

    stage_dir: str
    input_dir: str | None
    input_shards: list[dict[str, Any]]
    shared: Mapping[str, Any] = field(default_factory=dict)
    fs: Any = None
    """The run folder's filesystem (`pyarrow.fs`)."""


@dataclass
class TaskContext:
    """Worker-side view of one task attempt."""

    stage_dir: str
    input_dir: str | None
    shared: Mapping[str, Any]
    writer: TaskWriter

    @property
    def fs(self) -> pafs.FileSystem:
        return self.writer.fs

    def write(self, relpath: str, data: bytes) -> None:
        """Write an output file (relative to the stage folder); it is published only when the task commits."""
        self.writer.write(relpath, data)


@dataclass(frozen=True)
class TaskEnv:
    """Everything a worker needs to run a task, small enough to send with every task."""

    output: str
    """The run folder (local path or URI)."""
    stage: str
    input_stage: str | None
    stage_key: dict[str, Any]
    phase_index: int

    def dirs(self) -> tuple[pafs.FileSystem, str, str | None]:
        """The filesystem, the stage folder and the input stage's folder, as paths in that filesystem."""
        from tokenmill.pipeline.storage import filesystem_for, join

        fs, root = filesystem_for(self.output)
        return fs, join(root, self.stage), (join(root, self.input_stage) if self.input_stage else None)


_SET_UP: dict[str, Stage] = {}


def execute_task(stage: Stage, env: TaskEnv, task: Task, shared: Mapping[str, Any]) -> dict[str, Any]:
    """Run one task of a phase and commit it; returns its completion record."""
    from tokenmill.pipeline.documents import digest

    # One set-up per worker and stage run: models and indexes load once, not once per task.
    cache_key = digest([type(stage).__qualname__, env.stage_key, env.phase_index])
    if cache_key not in _SET_UP:
        stage.setup(shared)
        _SET_UP.clear()
        _SET_UP[cache_key] = stage
    stage = _SET_UP[cache_key]
    fs, stage_dir, input_dir = env.dirs()
    phase = stage.phases()[env.phase_index]
    writer = TaskWriter(fs, stage_dir, phase.name, task.key)
    ctx = TaskContext(stage_dir, input_dir, shared, writer)
    # Fault-injection hooks (pipeline/faults.py) for the kill-and-resume tests; inert unless switched on.
    faults.delay()
    faults.point("start", stage_dir, phase.name, task.key)
    started = time.perf_counter()
    result = phase.run(stage, task, ctx)
    faults.point("before_commit", stage_dir, phase.name, task.key)
    record = writer.commit(env.stage_key, result)
    faults.point("end", stage_dir, phase.name, task.key)
    # Not part of the committed record (that stays deterministic): how long, and the worker's peak memory so far.
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {**record, "task_stats": {"seconds": time.perf_counter() - started, "peak_rss_mb": usage.ru_maxrss / 1024}}
