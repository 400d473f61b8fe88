"""Run a phase's tasks as Ray tasks with bounded parallelism; collect records and per-task failures."""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

from tokenmill.pipeline import faults
from tokenmill.pipeline.contract import Resources, Stage, Task
from tokenmill.pipeline.tasks import TaskEnv, execute_task


def _describe(err: Exception) -> str:
    cause = getattr(err, "cause", None)
    if isinstance(cause, BaseException):
        return f"{type(cause).__name__}: {cause}"
    text = str(err).strip().splitlines()
    return text[-1] if text else type(err).__name__


def run_tasks(
    stage: Stage,
    env: TaskEnv,
    tasks: Sequence[Task],
    shared: Mapping[str, Any],
    *,
    resources: Resources = Resources(),
    max_in_flight: int,
    max_retries: int,
    on_done: Callable[[Task], None] = lambda task: None,
) -> tuple[dict[str, dict], list[tuple[str, str]]]:
    """Submit tasks, at most `max_in_flight` at once, each asking Ray for the phase's `resources`; returns
    (records by task key, [(task key, error)])."""
    import ray

    if not tasks:
        return {}, []
    # faults.task_options(): the fault-injection switches, passed to workers of a joined cluster (empty when off).
    remote = ray.remote(execute_task).options(**resources.ray_options(), max_retries=max_retries,
                                              retry_exceptions=True, **faults.task_options())
    stage_ref, shared_ref = ray.put(stage), ray.put(dict(shared))
    queue = list(tasks)
    queue.reverse()
    pending: dict[Any, Task] = {}
    records: dict[str, dict] = {}
    failures: list[tuple[str, str]] = []
    while queue or pending:
        while queue and len(pending) < max_in_flight:
            task = queue.pop()
            pending[remote.remote(stage_ref, env, task, shared_ref)] = task
        done, _ = ray.wait(list(pending), num_returns=1)
        for ref in done:
            task = pending.pop(ref)
            try:
                records[task.key] = ray.get(ref)
            except ray.exceptions.RayError as err:
                failures.append((task.key, _describe(err)))
            on_done(task)
    return records, sorted(failures)
