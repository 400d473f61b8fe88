"""The fault suite for incremental dedup's phases: a worker SIGKILLed in `earlier_pairs`, `earlier_verify` and
`index`, and the driver killed in `earlier_pairs`; each rerun leaves every file of the dedup stage (its `_work`
included) byte-identical to the uninterrupted run's.

The mechanism is `tokenmill.pipeline.faults` (a plan named by `TOKENMILL_FAULTS`), as in
`tests/faults/test_kill_worker.py`; one earlier run and one uninterrupted incremental run per module.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.conftest import write_jsonl
from tests.faults.harness import committed_tasks, kill_group, tree, wait_workers_gone
from tests.stages.test_dedup_stage import article, edited
from tokenmill.pipeline import faults
from tokenmill.pipeline.config import load_config
from tokenmill.errors import StageFailed
from tokenmill.pipeline.runner import run_pipeline

pytestmark = [pytest.mark.ray]


def _config(root: Path, name: str, patterns: list[str], output: Path, **dedup) -> Path:
    config = {"output": str(output), "seed": 1, "ingest": {"docs_per_shard": 4},
              "sources": [{"name": "web", "format": "jsonl", "paths": patterns, "id_field": "id"}],
              "stages": {"dedup": {"partitions": 4, "keep": ["lowest_id"], **dedup}}}
    path = root / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


class Runs:
    """The earlier run, the new dump's config against it, and its uninterrupted run (the reference)."""

    def __init__(self, root: Path):
        rng = random.Random(9)
        base = [article(rng, 80) for _ in range(12)]
        write_jsonl(root / "one" / "x.jsonl", [{"id": f"a{i:02d}", "text": t} for i, t in enumerate(base)])
        two = [{"id": "b00", "text": base[2]}, {"id": "b01", "text": edited(base[3], rng, 0.97)},
               {"id": "b02", "text": edited(base[4], rng, 0.97)}, {"id": "b03", "text": base[5].upper()},
               {"id": "b04", "text": edited(base[6], rng, 0.90)}]
        two += [{"id": f"b{i:02d}", "text": article(rng, 80)} for i in range(5, 12)]
        two += [{"id": "b12", "text": two[5]["text"]}]
        write_jsonl(root / "two" / "x.jsonl", two)
        self.root = root
        run_pipeline(load_config(_config(root, "one", ["one/*.jsonl"], root / "earlier")))
        self.config = _config(root, "two", ["two/*.jsonl"], root / "reference", against=[str(root / "earlier")])
        run_pipeline(load_config(self.config))
        self.reference = root / "reference"

    def prepare(self, dest: Path) -> Path:
        """A run folder holding the reference's ingest, and a config of the new dump writing there."""
        shutil.copytree(self.reference / "ingest", dest / "ingest")
        data = yaml.safe_load(self.config.read_text())
        data["output"] = str(dest)
        config = self.root / f"{dest.parent.name}-{dest.name}.yaml"
        config.write_text(yaml.safe_dump(data))
        return config


@pytest.fixture(scope="module")
def runs(ray_cluster, tmp_path_factory) -> Runs:
    return Runs(tmp_path_factory.mktemp("incremental-faults"))


def _kill_worker_then_rerun(runs: Runs, tmp_path: Path, monkeypatch, phase: str, task: str, point: str) -> None:
    assert (runs.reference / "dedup" / "_work" / "commits" / phase / f"{task}.json").exists(), (phase, task)
    out = tmp_path / "out"
    config = load_config(runs.prepare(out))
    config = config.model_copy(update={"execution": config.execution.model_copy(update={"max_retries": 0})})
    plan, marker, log = tmp_path / "faults.json", tmp_path / "killed", tmp_path / "injected.jsonl"
    plan.write_text(json.dumps({"kill_worker": {"stage": "dedup", "phase": phase, "task": task, "point": point,
                                                "once": str(marker)}, "log": str(log)}))
    monkeypatch.setenv(faults.ENV, str(plan))
    with pytest.raises(StageFailed) as failed:
        run_pipeline(config, only="dedup")
    assert [k for k, _ in failed.value.failures] == [task]
    assert [json.loads(line)["phase"] for line in log.read_text().splitlines()] == [phase]
    assert not (out / "dedup" / "manifest.json").exists()
    plan.write_text("{}")
    reports = run_pipeline(config, only="dedup")
    assert reports[-1].status == "resumed"
    assert tree(out / "dedup") == tree(runs.reference / "dedup")  # _work, records and index/ included


@pytest.mark.long
def test_a_worker_killed_in_earlier_verify_then_rerun_gives_the_same_files(runs, tmp_path, monkeypatch):
    # Its decision file moved into place, no record: the rerun redoes the task over it.
    _kill_worker_then_rerun(runs, tmp_path, monkeypatch, "earlier_verify", "p0000", "before_record")


@pytest.mark.slow
@pytest.mark.parametrize("phase,task,point", [("earlier_pairs", "p0001", "before_commit"),
                                              ("earlier_pairs", "p0002", "before_record"),
                                              ("earlier_verify", "p0000", "written"),
                                              ("index", "p0000-p0003", "mid_commit"),
                                              ("index", "p0000-p0003", "after_record")])
def test_a_worker_killed_in_a_new_phase_then_rerun_gives_the_same_files(runs, tmp_path, monkeypatch, phase, task,
                                                                         point):
    _kill_worker_then_rerun(runs, tmp_path, monkeypatch, phase, task, point)


@pytest.mark.slow
def test_the_driver_killed_in_earlier_pairs_then_rerun_gives_the_same_files(runs, tmp_path):
    import ray

    phase = "earlier_pairs"  # 4 tasks of 0.5 s on 2 workers: the kill lands after the first commits, others running

    out = tmp_path / "out"
    config = runs.prepare(out)
    pids, plan = tmp_path / "worker-pids", tmp_path / "plan.json"
    plan.write_text(json.dumps({"pids": str(pids)}))
    # Each task sleeps first: the driver is killed once the phase has committed its first task, while it runs.
    env = {**os.environ, faults.ENV: str(plan), faults.DELAY_ENV: "0.5", "PYTHONUNBUFFERED": "1"}
    command = [sys.executable, "-m", "tokenmill", "run", str(config), "--stage", "dedup",
               "--ray-address", ray.get_runtime_context().gcs_address]
    driver = subprocess.Popen(command, env=env, start_new_session=True, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE)
    stage_dir = out / "dedup"
    try:
        deadline = time.time() + 240
        while not any(p == phase for p, _ in committed_tasks(stage_dir)):
            if driver.poll() is not None:
                pytest.fail(f"the driver ended (exit {driver.returncode}) before the kill: "
                            f"{driver.stderr.read().decode()[-2000:]}")
            assert time.time() < deadline, "the stage made no progress in 240 s"
            time.sleep(0.01)
        os.kill(driver.pid, signal.SIGKILL)
        driver.wait()
    finally:
        kill_group(driver.pid)
        driver.stderr.close()
    wait_workers_gone(pids)
    assert not (stage_dir / "manifest.json").exists(), "the kill landed after the stage completed"
    committed = committed_tasks(stage_dir)
    reports = run_pipeline(load_config(config), only="dedup")
    assert reports[-1].status == "resumed"
    info = json.loads((stage_dir / "manifest.json").read_text())["run_info"]
    assert info["tasks_skipped"] == len(committed)  # what was committed before the kill is not redone
    assert tree(stage_dir) == tree(runs.reference / "dedup")
