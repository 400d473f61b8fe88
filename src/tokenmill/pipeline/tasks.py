"""The worker side of a task: what travels with it (`TaskEnv`), and the entry point that runs and commits it."""

from __future__ import annotations

import contextlib
import os
import resource
import time
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping

import pyarrow.fs as pafs

from tokenmill.pipeline import faults
from tokenmill.pipeline.commit import TaskWriter
from tokenmill.pipeline.contract import Phase, ShardsResult, Stage, Task, TaskContext
from tokenmill.documents import digest
from tokenmill.pipeline.storage import filesystem_for, join
from tokenmill.sources import uris


@dataclass(frozen=True)
class TaskEnv:
    """Everything a worker needs to run a task, small enough to send with every task."""

    output: str
    """The run folder (local path or URI)."""
    stage: str
    input_stage: str | None
    stage_key: dict[str, Any]
    phase_index: int
    storage_env: tuple[tuple[str, str], ...] = field(
        default_factory=lambda: tuple(sorted(uris.storage_env().items())), repr=False, compare=False)
    """The driver's `AWS_*` variables, read where the TaskEnv is made (the driver), set in the worker for the task:
    a Ray worker started before the driver's endpoint or credentials existed reaches the same store. Never shown
    (`repr=False`): it may hold a secret key."""

    def dirs(self) -> tuple[pafs.FileSystem, str, str | None]:
        """The filesystem, the stage folder and the input stage's folder, as paths in that filesystem."""
        fs, root = filesystem_for(self.output)
        return fs, join(root, self.stage), (join(root, self.input_stage) if self.input_stage else None)


_SET_UP: dict[str, Stage] = {}


@contextlib.contextmanager
def _variables(values: tuple[tuple[str, str], ...]) -> Iterator[None]:
    """The environment with `values` set over it for the block, then as it was (the worker runs other tasks)."""
    before = {name: os.environ.get(name) for name, _ in values}
    os.environ.update(dict(values))
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def execute_task(stage: Stage, env: TaskEnv, task: Task, shared: Mapping[str, Any]) -> dict[str, Any]:
    """Run one task of a phase and commit it; returns its completion record."""
    # pyarrow's S3 client reads the endpoint and credentials from the environment when a filesystem is made.
    with _variables(env.storage_env):
        return _execute(stage, env, task, shared)


def _execute(stage: Stage, env: TaskEnv, task: Task, shared: Mapping[str, Any]) -> dict[str, Any]:
    # One set-up per worker and stage run: models and indexes load once, not once per task.
    cache_key = digest([type(stage).__qualname__, env.stage_key, env.phase_index])
    if cache_key not in _SET_UP:
        stage.setup(shared)
        _SET_UP.clear()
        _SET_UP[cache_key] = stage
    stage = _SET_UP[cache_key]
    fs, stage_dir, input_dir = env.dirs()
    phase = stage.phases()[env.phase_index]
    if not isinstance(phase, Phase):
        raise TypeError(f"stage {stage.name!r} phase {phase.name!r} runs on the driver, not as tasks")
    writer = TaskWriter(fs, stage_dir, phase.name, task.key)
    ctx = TaskContext(stage_dir, input_dir, shared, writer)
    # Fault-injection hooks (pipeline/faults.py) for the kill-and-resume tests; inert unless switched on.
    faults.delay()
    faults.point("start", stage_dir, phase.name, task.key)
    started = time.perf_counter()
    result = phase.run(stage, task, ctx)
    if phase.writes_shards and not isinstance(result, ShardsResult):
        raise TypeError(f"stage {stage.name!r} phase {phase.name!r} writes shards: its tasks return a ShardsResult, "
                        f"not {type(result).__name__}")
    faults.point("before_commit", stage_dir, phase.name, task.key)
    # The record keeps the JSON shape it always had: `{"shards": [...]}` for a shard-writing task.
    record = writer.commit(env.stage_key, result.to_json() if isinstance(result, ShardsResult) else result)
    faults.point("end", stage_dir, phase.name, task.key)
    # Not part of the committed record (that stays deterministic): how long, and the worker's peak memory so far.
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {**record, "task_stats": {"seconds": time.perf_counter() - started, "peak_rss_mb": usage.ru_maxrss / 1024}}
