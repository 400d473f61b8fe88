"""SIGKILL of a Ray worker mid-task with the run folder on S3 (moto), then a rerun: byte-identical to the
uninterrupted local run.

On an object store a task writes its files straight under their final names and commits with one PUT of its
record (`pipeline/commit.py`), so a worker killed after its first PUT and before its record leaves objects that no
record names: dedup's later phases list their folders (`_work/bands/p*/`), so they must hold, once the stage is
done, exactly the committed attempt's objects, and `shards/` none of a killed attempt's. The stage fails naming the
task (`max_retries: 0`), the rerun skips every committed task and redoes the killed one, and every object of the
stage is the local reference run's, byte for byte, with nothing more.
"""

from __future__ import annotations

import json

import pytest

from tests.faults import counts
from tests.faults.harness import assert_same_as_reference, trial_rng
from tokenmill.errors import StageFailed
from tokenmill.pipeline import storage
from tokenmill.pipeline.runner import run_pipeline

POINTS = ("written", "mid_commit", "before_record")
"""Where a kill leaves objects under their final names without a record (the points between the first PUT and the
record's)."""


def _download(uri: str, dest) -> None:
    """Every object under `uri` to the local folder `dest`, by relative key."""
    fs, base = storage.filesystem_for(uri)
    for path, _ in storage.file_sizes(fs, base).items():
        target = dest / path[len(base) + 1:]
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(storage.read_bytes(fs, path))


@pytest.mark.ray
@pytest.mark.parametrize("stage", [pytest.param("dedup", marks=pytest.mark.long),
                                   pytest.param("tokenize", marks=pytest.mark.slow)])
def test_kill_worker_with_the_run_on_s3_then_rerun(reference, fault_plan, s3_server, tmp_path, stage):
    rng = trial_rng("worker-s3", stage)
    phase, task = rng.choice([(p, t) for p, t in reference.tasks[stage] if reference.record(stage, p, t)["files"]])
    point = rng.choice(POINTS)
    what = f"worker kill on S3 in {stage}: task {phase}/{task} at {point!r}"
    s3_server.create_bucket("runs")
    s3_server.upload_tree(reference.prepare(tmp_path / "prepared", stage), "runs", "out")
    config = reference.config("s3://runs/out", max_retries=0)
    marker = tmp_path / "killed"
    log = fault_plan({"kill_worker": {"stage": stage, "phase": phase, "task": task, "point": point,
                                      "once": str(marker)}})
    counts.record_trial("worker_kill")

    with pytest.raises(StageFailed) as failed:
        run_pipeline(config, only=stage)
    assert marker.exists(), f"{what}: the fault never fired"
    counts.record_fault("worker_kill", len(log.read_text().splitlines()))
    assert [k for k, _ in failed.value.failures] == [task], what
    fault_plan({})  # disarmed: the rerun runs clean
    (report,) = run_pipeline(config, only=stage)
    assert report.tasks_run >= 1 and report.tasks_skipped >= 1, f"{what}: {report}"

    _download(f"s3://runs/out/{stage}", tmp_path / "got" / stage)
    assert_same_as_reference(reference, tmp_path / "got", stage, what)
    info = json.loads((tmp_path / "got" / stage / "manifest.json").read_text())["run_info"]
    assert info["tasks_skipped"] == report.tasks_skipped, what
