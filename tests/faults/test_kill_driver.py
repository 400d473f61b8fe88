"""SIGKILL of the driver (`tokenmill run CONFIG --stage S`) at a random point of a stage's run, then a rerun.

Builds on `tests/test_cli.py::test_kill_driver_then_rerun_matches_uninterrupted` and spreads it over every stage
and many kill points: the kill lands after a random number k of the stage's task commits (all phases counted;
k = 0 is as soon as the stage has written its key), plus a random part of a task's time.

Most trials' drivers join the session's Ray cluster (`--ray-address`, as on a shared cluster; starting a local
cluster per trial costs ~10 s): the rerun waits until Ray has killed the dead job's workers (they record their
pids through `pipeline/faults.py`), so no orphan writes beside it. Trials 2 and 12 of each stage let the driver
start its own local cluster, as `tokenmill run` does by default; that cluster (the driver's process group) lives
on for a random moment after the kill, then is killed whole.

Each trial starts from the reference's committed upstream stages, so only the stage under test runs. The rerun
must skip what was committed, and leave every file of the stage byte-identical to the uninterrupted run's; the
manifest must pass conservation.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.faults import counts
from tests.faults.harness import (
    assert_conserved,
    assert_same_as_reference,
    committed_tasks,
    kill_group,
    stage_params,
    trial_params,
    trial_rng,
    wait_workers_gone,
)
from tokenmill.pipeline import faults
from tokenmill.pipeline.runner import run_pipeline

FAST_TRIALS = 1
FAST_STAGES = {"tokenize"}
"""The stage whose trial 0 `make test` runs (each trial is a driver started and killed, then a rerun: 10-25 s on two
busy cores); every other stage's trials are in `make test-slow`."""
OWN_CLUSTER_EVERY = 10
"""Trials 2 and 12 of each stage start their own local Ray cluster; the others join the session's."""
TASK_DELAY_S = 0.05
"""Each task sleeps this long first, so that the stage's commits spread out and the k-th commit is a kill point."""


@pytest.mark.ray
@pytest.mark.parametrize("trial", trial_params(FAST_TRIALS))
@pytest.mark.parametrize("stage", stage_params(FAST_STAGES))
def test_kill_driver_mid_stage_then_rerun(reference, tmp_path, stage, trial):
    rng = trial_rng("driver", stage, trial)
    n_tasks = len(reference.tasks[stage])
    k = rng.randrange(0, n_tasks - 1)  # never after the last commit: the kill must land while the stage runs
    extra = rng.uniform(0, TASK_DELAY_S)
    linger = rng.uniform(0, 0.5)
    own_cluster = trial % OWN_CLUSTER_EVERY == 2
    what = (f"driver kill trial {trial} of {stage}: after {k} of {n_tasks} commits + {extra:.3f} s "
            f"({'own cluster' if own_cluster else 'joined cluster'})")
    out = reference.prepare(tmp_path / "out", stage)
    config = reference.write_config(out, f"driver-{stage}-{trial}-{os.getpid()}")
    pids = tmp_path / "worker-pids"
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"pids": str(pids)}))  # no fault injected by the workers: only their pids
    env = {**os.environ, faults.ENV: str(plan), faults.DELAY_ENV: str(TASK_DELAY_S), "PYTHONUNBUFFERED": "1"}
    command = [sys.executable, "-m", "tokenmill", "run", str(config), "--stage", stage]
    if not own_cluster:
        import ray

        command += ["--ray-address", ray.get_runtime_context().gcs_address]
    counts.record_trial("driver_kill")

    driver = subprocess.Popen(command, env=env, start_new_session=True, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE)
    stage_dir = out / stage
    try:
        deadline = time.time() + 240
        while not (stage_dir / "_work" / "key.json").exists() or len(committed_tasks(stage_dir)) < k:
            if driver.poll() is not None:
                pytest.fail(f"{what}: the driver ended (exit {driver.returncode}) before the kill: "
                            f"{driver.stderr.read().decode()[-2000:]}")
            assert time.time() < deadline, f"{what}: the stage made no progress in 240 s"
            time.sleep(0.005)
        time.sleep(extra)
        os.kill(driver.pid, signal.SIGKILL)  # the driver only; its Ray cluster lives on a moment
        driver.wait()
        counts.record_fault("driver_kill")
        time.sleep(linger)
    finally:
        kill_group(driver.pid)
        driver.stderr.close()
        config.unlink()
    wait_workers_gone(pids)  # none may have started yet when k = 0
    assert not (stage_dir / "manifest.json").exists(), f"{what}: the kill landed after the stage completed"
    committed = committed_tasks(stage_dir)
    # An own cluster's workers may finish every task after the driver died: committed, but no manifest.
    assert k <= len(committed) <= n_tasks, what

    run_pipeline(reference.config(out), only=stage)
    info = json.loads((stage_dir / "manifest.json").read_text())["run_info"]
    assert info["tasks_skipped"] == len(committed), f"{what}: the rerun redid committed tasks"
    assert_same_as_reference(reference, out, stage, what)
    assert_conserved(reference, out, stage)
