"""SIGKILL of a Ray worker mid-task, at a random task and a random point inside it, then a rerun.

The worker kills itself (`pipeline/faults.py`) at one of `faults.POINTS`: before the phase runs, after its first
file is written, between moving its files into place, before and after its completion record, or after the
commit but before the driver hears back. With `max_retries: 2` Ray retries the task and the run completes; with
`max_retries: 0` the stage fails naming the task and a rerun completes it. Either way every file of the stage
must be byte-identical to the uninterrupted run's and the manifest must pass conservation.
"""

from __future__ import annotations

import json

import pytest

from tests.faults import counts
from tests.faults.harness import (assert_conserved, assert_same_as_reference, committed_tasks, stage_params, trial_params,
                                  trial_rng)
from tokenmill.errors import StageFailed
from tokenmill.pipeline import faults
from tokenmill.pipeline.runner import run_pipeline

FAST_TRIALS = 1
FAST_STAGES = {"tokenize"}
"""The stage whose trial 0 `make test` runs; every other stage's trials are in `make test-slow`."""


@pytest.mark.ray
@pytest.mark.parametrize("trial", trial_params(FAST_TRIALS))
@pytest.mark.parametrize("stage", stage_params(FAST_STAGES))
def test_kill_worker_mid_task_then_rerun(reference, fault_plan, tmp_path, stage, trial):
    rng = trial_rng("worker", stage, trial)
    phase, task = rng.choice(reference.tasks[stage])
    # 'written' fires at a task's first file: a task that writes none (decontaminate's count phase) never gets there.
    writes = bool(reference.record(stage, phase, task)["files"])
    point = rng.choice([p for p in faults.POINTS if writes or p != "written"])
    retries = rng.choice([0, 2])
    what = f"worker kill trial {trial} of {stage}: task {phase}/{task} at {point!r}, max_retries {retries}"
    out = reference.prepare(tmp_path / "out", stage)
    marker = tmp_path / "killed"
    log = fault_plan({"kill_worker": {"stage": stage, "phase": phase, "task": task, "point": point,
                                      "once": str(marker)}})
    counts.record_trial("worker_kill")

    failed = None
    try:
        run_pipeline(reference.config(out, max_retries=retries), only=stage)
    except StageFailed as err:
        failed = err
    assert marker.exists(), f"{what}: the fault never fired"
    injected = [json.loads(line) for line in log.read_text().splitlines()]
    counts.record_fault("worker_kill", len(injected))
    assert [(e["task"], e["point"]) for e in injected] == [(task, point)], what
    if retries:
        assert failed is None, f"{what}: Ray's retry should have finished the task: {failed}"
    else:
        assert failed is not None and [k for k, _ in failed.failures] == [task], f"{what}: {failed}"
        assert not (out / stage / "manifest.json").exists(), what
        before = len(committed_tasks(out / stage))
        fault_plan({})  # disarmed: the rerun runs clean
        run_pipeline(reference.config(out), only=stage)
        info = json.loads((out / stage / "manifest.json").read_text())["run_info"]
        assert info["tasks_skipped"] == before, f"{what}: the rerun redid committed tasks"
    assert_same_as_reference(reference, out, stage, what)
    assert_conserved(reference, out, stage)
