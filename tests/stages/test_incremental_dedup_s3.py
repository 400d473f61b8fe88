"""An `against` run whose earlier run is on S3 (the local moto server): checked, read and used as a local one is, the
same removals and the same output bytes as against the same run on local disk."""

from __future__ import annotations

import random

import pytest

from tests.conftest import write_jsonl
from tests.pipeline.test_runner import tree
from tests.stages.test_dedup_stage import article, edited
from tests.stages.test_incremental_dedup import _config, _dropped
from tokenmill.pipeline.config import check_paths, load_config
from tokenmill.pipeline.runner import run_pipeline

pytestmark = [pytest.mark.ray, pytest.mark.long]  # four runs of ingest + dedup, two of them on S3


def test_an_earlier_run_on_s3_removes_what_the_same_run_on_local_disk_removes(ray_cluster, s3_server, tmp_path):
    rng = random.Random(3)
    base = [article(rng, 80) for _ in range(10)]
    write_jsonl(tmp_path / "one" / "x.jsonl", [{"id": f"a{i}", "text": t} for i, t in enumerate(base)])
    two = [{"id": "b0", "text": base[2]}, {"id": "b1", "text": edited(base[3], rng, 0.97)},
           {"id": "b2", "text": base[4].upper()}, {"id": "b3", "text": article(rng, 80)},
           {"id": "b4", "text": edited(base[5], rng, 0.90)}]
    write_jsonl(tmp_path / "two" / "x.jsonl", two)
    s3_server.create_bucket("runs")
    for output in ("s3://runs/one", str(tmp_path / "one-local")):
        run_pipeline(load_config(_config(tmp_path, "one", ["one/*.jsonl"], output, 4, partitions=2)))
    on_s3 = _config(tmp_path, "two-s3", ["two/*.jsonl"], str(tmp_path / "two-s3"), 4, partitions=2,
                    against=["s3://runs/one"])
    check_paths(load_config(on_s3))  # `validate` checks the run on S3 as it does a local one
    run_pipeline(load_config(on_s3))
    run_pipeline(load_config(_config(tmp_path, "two-local", ["two/*.jsonl"], str(tmp_path / "two-local"), 4,
                                     partitions=2, against=[str(tmp_path / "one-local")])))
    got, want = _dropped(tmp_path / "two-s3"), _dropped(tmp_path / "two-local")
    assert got == want == {"b0": "exact_duplicate_of_earlier_run", "b1": "near_duplicate_of_earlier_run",
                           "b2": "exact_duplicate_of_earlier_run"}
    # The kept and dropped rows and the index are the same bytes (the manifests differ only in the run's name).
    same = [p for p in tree(tmp_path / "two-local", "dedup") if not p.endswith("manifest.json")]
    assert {p: tree(tmp_path / "two-s3", "dedup")[p] for p in same} == {p: tree(tmp_path / "two-local", "dedup")[p]
                                                                      for p in same}
