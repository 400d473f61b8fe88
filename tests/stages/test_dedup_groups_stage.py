"""The dedup stage's groups of over-cap buckets in rounds of tasks, on Ray: a chain of near copies whose LSH
buckets (a cap of one pair) overlap one document to the next, across partitions, takes several rounds of
`group_components`; each verify task gets the groups `over_cap_groups` makes over every over-cap row in one
process, and the stage the clusters and removals HEAD's one `groups` task gave; a worker killed in the middle of a
round of `group_components` or in `groups`, then a rerun (or Ray's retry), leaves every file of the stage
byte-identical to the uninterrupted run's."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import yaml

from tests.dedup.test_group_components import DirectWriter, head_groups
from tests.pipeline.test_runner import run_into
from tests.stages.test_dedup_components_stage import killed_then_rerun, write_chain
from tokenmill.pipeline.contract import TaskContext
from tokenmill.stages.dedup.stage import _routed_groups

pytestmark = pytest.mark.ray

CHAIN = 40
STEP = 8
PARTITIONS = 4

EXPECTED = [
    ('c00', 'c20', 'near_duplicate'), ('c01', 'c20', None), ('c02', 'c20', 'near_duplicate'), ('c03', 'c20', None),
    ('c04', 'c20', 'near_duplicate'), ('c05', 'c20', None), ('c06', 'c20', 'near_duplicate'),
    ('c07', 'c20', 'near_duplicate'), ('c08', 'c20', None), ('c09', 'c20', 'near_duplicate'), ('c10', 'c20', None),
    ('c11', 'c20', 'near_duplicate'), ('c12', 'c20', None), ('c13', 'c20', 'near_duplicate'), ('c14', 'c20', None),
    ('c15', 'c20', 'near_duplicate'), ('c16', 'c20', 'near_duplicate'), ('c17', 'c20', None),
    ('c18', 'c20', 'near_duplicate'), ('c19', 'c20', None), ('c20', 'c20', 'near_duplicate'), ('c21', 'c20', None),
    ('c22', 'c20', 'near_duplicate'), ('c23', 'c20', None), ('c24', 'c20', 'near_duplicate'),
    ('c25', 'c20', 'near_duplicate'), ('c26', 'c20', None), ('c27', 'c20', 'near_duplicate'), ('c28', 'c20', None),
    ('c29', 'c20', 'near_duplicate'), ('c30', 'c20', 'near_duplicate'), ('c31', 'c20', None),
    ('c32', 'c20', 'near_duplicate'), ('c33', 'c20', None), ('c34', 'c20', 'near_duplicate'),
    ('c35', 'c20', 'near_duplicate'), ('c36', 'c20', None), ('c37', 'c20', 'near_duplicate'), ('c38', 'c20', None),
    ('c39', 'c20', 'near_duplicate'), ('u00', 'u00', None), ('u00-copy', 'u00', 'exact_duplicate'),
]
"""(id, cluster id, reason) of every row of `clusters.parquet` as HEAD (2b3bb29, one `groups` task) wrote it for
this fixture."""


@pytest.fixture(scope="module")
def over_cap_chain(tmp_path_factory):
    """A chain of 400-word windows moved on by 8 words (Jaccard 0.96 to the next), 8 bands of 8 rows: a band's
    bucket holds a short run of consecutive links, and a cap of one pair sends every bucket of three or more to
    the groups; buckets of every partition share links, so the chain's group is found over rounds. Twelve
    unrelated documents and an exact copy of one beside it."""
    return write_chain(tmp_path_factory.mktemp("over_cap_chain"), 7, CHAIN, STEP,
                       {"partitions": PARTITIONS, "num_perm": 64, "bands": 8, "rows": 8, "max_pairs_per_bucket": 1})


def verify_groups(stage_dir: Path) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per verify task, the (dense group, document) arrays it reads from the groups tasks' files."""
    shared = {"groups": {"parts": len(list((stage_dir / "_work" / "groups").glob("p*.parquet")))}}
    ctx = TaskContext(str(stage_dir), None, shared, DirectWriter(stage_dir))
    return [_routed_groups(ctx, p, shared["groups"]["parts"]) for p in range(PARTITIONS)]


def test_over_cap_groups_take_rounds_and_verify_gets_what_one_task_made(ray_cluster, over_cap_chain, tmp_path):
    out = tmp_path / "o"
    run_into(over_cap_chain, out)
    stage_dir = out / "dedup"
    manifest = json.loads((stage_dir / "manifest.json").read_text())
    assert manifest["run_info"]["phases"]["group_components"]["rounds"] >= 3
    files = [pq.read_table(stage_dir / "_work" / "over_cap" / f"p{p:04d}.parquet") for p in range(PARTITIONS)]
    assert sum(f.num_rows for f in files) > 2 * CHAIN
    want, counts = head_groups([f.column("bucket").to_numpy() for f in files],
                               [f.column("doc").to_numpy() for f in files], PARTITIONS)
    for (got_group, got_doc), (want_group, want_doc) in zip(verify_groups(stage_dir), want):
        np.testing.assert_array_equal(got_group, want_group)
        np.testing.assert_array_equal(got_doc, want_doc)
    records = stage_dir / "_work" / "commits" / "groups"
    summed = {k: sum(json.loads(f.read_text())["result"][k] for f in records.glob("*.json")) for k in counts}
    assert summed == counts and counts["docs"] >= CHAIN // 2
    rows = pq.read_table(stage_dir / "clusters.parquet").to_pylist()
    got = sorted((r["id"], r["cluster"], r["reason"]) for r in rows)
    assert got == EXPECTED


@pytest.mark.parametrize("phase,task,point,retries", [
    ("group_components", "r001-p0000", "before_commit", 0),  # the one `make test` runs; the others are slow
    pytest.param("group_components", "r002-p0000", "mid_commit", 0, marks=pytest.mark.slow),
    pytest.param("group_components", "r000-p0002", "written", 2, marks=pytest.mark.slow),
    pytest.param("groups", "p0000", "mid_commit", 0, marks=pytest.mark.slow),
    pytest.param("groups", "p0000", "written", 2, marks=pytest.mark.slow)])
def test_a_worker_killed_in_the_groups_rounds_then_rerun_gives_the_same_files(ray_cluster, over_cap_chain, tmp_path,
                                                                               monkeypatch, phase, task, point, retries):
    killed_then_rerun(over_cap_chain, tmp_path, monkeypatch, phase, task, point, retries)


@pytest.mark.slow
@pytest.mark.parametrize("phase", ["group_components", "groups"])
def test_the_driver_killed_in_a_groups_phase_then_rerun_gives_the_same_files(ray_cluster, over_cap_chain, tmp_path,
                                                                             phase):
    """`tokenmill run` (its own local cluster) SIGKILLed, process group and all, once `phase` has committed a task
    (each task first waits `faults.DELAY_ENV`, so the kill lands inside the phase), then run again: every file of
    the stage as an uninterrupted run's, and the committed tasks not redone."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from tests.faults.harness import committed_tasks, kill_group, tree
    from tokenmill.pipeline import faults
    from tokenmill.pipeline.config import load_config
    from tokenmill.pipeline.runner import run_pipeline

    reference = tmp_path / "reference"
    run_into(over_cap_chain, reference)
    config = yaml.safe_load(over_cap_chain.read_text())
    config["output"] = str(tmp_path / "out")
    path = over_cap_chain.parent / f"driver-{phase}.yaml"  # beside the sources, which it names as the run did
    path.write_text(yaml.safe_dump(config))
    commits = tmp_path / "out" / "dedup" / "_work" / "commits" / phase
    env = {**os.environ, faults.DELAY_ENV: "0.3", "PYTHONUNBUFFERED": "1"}
    driver = subprocess.Popen([sys.executable, "-m", "tokenmill", "run", str(path)], env=env, start_new_session=True,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 240
        while not (commits.exists() and any(commits.glob("*.json"))):
            assert driver.poll() is None, f"the run ended (exit {driver.returncode}) before {phase} committed a task"
            assert time.time() < deadline, f"{phase} committed nothing in 240 s"
            time.sleep(0.01)
        os.kill(driver.pid, signal.SIGKILL)
        driver.wait()
    finally:
        kill_group(driver.pid)  # its own Ray cluster with it
    stage_dir = tmp_path / "out" / "dedup"
    assert not (stage_dir / "manifest.json").exists()
    committed = committed_tasks(stage_dir)
    run_pipeline(load_config(path))
    info = json.loads((stage_dir / "manifest.json").read_text())["run_info"]
    assert info["tasks_skipped"] == len(committed) > 0
    assert tree(stage_dir) == tree(reference / "dedup")
