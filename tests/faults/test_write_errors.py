"""A full disk (ENOSPC) or a permission error (EACCES) while a task writes a shard.

Injected through `pipeline/faults.py` at the task's write: tests run as root in CI, where chmod does not stop a
write, and filling a disk is neither safe nor fast. The error is persistent, as a full disk is: every attempt
fails. Expected: the task fails after its retries with a message naming the file and the error; it commits no
shard and no completion record; every other task of the phase commits; no manifest is written; a rerun once the
disk has room completes the stage byte-identical to the uninterrupted run.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys

import pytest

from tests.faults import counts
from tests.faults.harness import STAGES, assert_conserved, assert_same_as_reference, committed_tasks, trial_rng
from tokenmill.errors import StageFailed
from tokenmill.pipeline import faults
from tokenmill.pipeline.runner import run_pipeline

CASES = [(stage, code) for stage in STAGES for code in (errno.ENOSPC, errno.EACCES)]
FAST = {("clean", errno.ENOSPC), ("tokenize", errno.EACCES)}
RETRIES = 1


def shard_task(reference, stage: str, rng) -> tuple[str, str, str]:
    """A random (phase, task, shard path) of the reference run whose record names a file under shards/."""
    choices = [(phase, task, f["path"]) for phase, task in reference.tasks[stage]
               for f in reference.record(stage, phase, task)["files"] if f["path"].startswith("shards/")]
    assert choices, f"stage {stage!r} committed no shard"
    phase, task, _ = rng.choice(choices)
    first = next(p for ph, t, p in choices if (ph, t) == (phase, task))
    return phase, task, first


@pytest.mark.ray
@pytest.mark.parametrize("stage,code", [pytest.param(s, c, marks=() if (s, c) in FAST else pytest.mark.slow,
                                                     id=f"{s}-{errno.errorcode[c]}") for s, c in CASES])
def test_shard_write_error_commits_nothing_of_the_task(reference, fault_plan, tmp_path, stage, code):
    phase, task, shard = shard_task(reference, stage, trial_rng("write", stage, code))
    out = reference.prepare(tmp_path / "out", stage)
    log = fault_plan({"write_error": {"stage": stage, "phase": phase, "task": task, "path": "shards/", "errno": code}})
    counts.record_trial("write_error")

    with pytest.raises(StageFailed) as raised:
        run_pipeline(reference.config(out, max_retries=RETRIES), only=stage)
    counts.record_fault("write_error", len(log.read_text().splitlines()))
    assert len(log.read_text().splitlines()) == RETRIES + 1, "every attempt should meet the full disk"
    [(failed_task, message)] = raised.value.failures
    assert failed_task == task
    expected = "PermissionError" if code == errno.EACCES else "OSError"
    assert message.startswith(expected) and os.strerror(code) in message, message
    assert f"cannot write {shard} of task {phase}/{task}" in message, message

    stage_dir = out / stage
    assert not (stage_dir / "manifest.json").exists()
    committed = committed_tasks(stage_dir)
    assert (phase, task) not in committed
    assert [t for t in reference.tasks[stage] if t[0] == phase and t != (phase, task)] == \
        [t for t in committed if t[0] == phase], "every other task of the phase commits"
    named = {f["path"] for ph, t in committed for f in json.loads(
        (stage_dir / "_work" / "commits" / ph / f"{t}.json").read_text())["files"]}
    on_disk = {str(p.relative_to(stage_dir)) for p in (stage_dir / "shards").rglob("*") if p.is_file()}
    assert on_disk <= named and not (stage_dir / shard).exists(), "a shard without a record"

    fault_plan({})  # the disk has room again
    run_pipeline(reference.config(out), only=stage)
    assert_same_as_reference(reference, out, stage, f"rerun after {errno.errorcode[code]} in {stage}")
    assert_conserved(reference, out, stage)


@pytest.mark.long  # the CLI in a subprocess over the reference run: 11 s
@pytest.mark.ray
def test_cli_names_the_task_the_file_and_the_error(reference, tmp_path):
    """What a person sees: `tokenmill run` (joining the session's cluster) exits 1 with the task, file and error."""
    import ray

    stage = "sample"
    phase, task, shard = shard_task(reference, stage, trial_rng("write-cli"))
    out = reference.prepare(tmp_path / "out", stage)
    config = reference.write_config(out, f"write-cli-{os.getpid()}")
    log = tmp_path / "injected.jsonl"
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"log": str(log), "write_error": {"stage": stage, "task": task, "errno": errno.ENOSPC}}))
    counts.record_trial("write_error")
    try:
        result = subprocess.run([sys.executable, "-m", "tokenmill", "run", str(config), "--stage", stage,
                                 "--ray-address", ray.get_runtime_context().gcs_address],
                                env={**os.environ, faults.ENV: str(plan), "COLUMNS": "400"},
                                capture_output=True, text=True, timeout=300)
    finally:
        config.unlink()
    counts.record_fault("write_error", len(log.read_text().splitlines()) if log.exists() else 0)
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    text = " ".join(result.stderr.split())
    assert "stage 'sample': 1 task(s) failed after retries" in text, result.stderr
    assert f"{task}: OSError: [Errno 28] cannot write {shard} of task {phase}/{task}" in text, result.stderr
    assert "No space left on device" in text
    assert not (out / stage / "manifest.json").exists()
