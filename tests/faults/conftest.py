"""Fixtures of the fault suites: one corpus and its uninterrupted reference run for the session; the counts summary."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.faults.harness import STAGES, Reference, committed_tasks, write_small_demo
from tokenmill.pipeline import faults
from tokenmill.pipeline.runner import run_pipeline


@pytest.fixture(scope="session")
def reference(ray_cluster, tmp_path_factory) -> Reference:
    """The small demo corpus and one uninterrupted run of all six stages (~10 s)."""
    root = tmp_path_factory.mktemp("faults-corpus")
    config_path = write_small_demo(root / "corpus")
    ref = Reference(config_path, root / "reference", {})
    run_pipeline(ref.config(ref.output))
    ref.tasks.update({stage: committed_tasks(ref.output / stage) for stage in STAGES})
    assert all(len(ref.tasks[s]) >= 2 for s in STAGES), ref.tasks
    return ref


@pytest.fixture
def fault_plan(tmp_path_factory, monkeypatch):
    """Write the fault plan that workers read (`pipeline/faults.py`); returns a function (plan) -> log path.

    The plan file's path is the same for the whole session, so Ray keeps reusing the workers it started for it
    (the variable is part of the tasks' runtime_env); each test disarms the plan when it ends.
    """
    folder = tmp_path_factory.getbasetemp() / "fault-plan"
    folder.mkdir(exist_ok=True)
    path = folder / "faults.json"
    monkeypatch.setenv(faults.ENV, str(path))
    count = iter(range(10**9))

    def arm(plan: dict) -> Path:
        log = folder / f"injected-{next(count)}-{id(plan)}.jsonl"
        log.unlink(missing_ok=True)
        path.write_text(json.dumps({**plan, "log": str(log)}))
        return log

    yield arm
    path.write_text("{}")
