"""End to end on the generated demo corpus: every planted fault ends under its named drop reason, nothing is lost."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from tokenmill.demo import write_demo_corpus
from tokenmill.pipeline.config import load_config
from tokenmill.pipeline.runner import run_pipeline

pytestmark = pytest.mark.ray


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory, ray_cluster):
    root = tmp_path_factory.mktemp("demo")
    write_demo_corpus(root, docs_per_source=120)
    config = load_config(root / "demo.yaml")
    reports = run_pipeline(config)
    return root, config, reports


def test_every_record_is_accounted_for(demo_run):
    root, config, reports = demo_run
    truth = json.loads((root / "ground_truth.json").read_text())
    ingest = json.loads((config.output_dir / "ingest" / "manifest.json").read_text())["content"]
    for name, source in truth["sources"].items():
        got = ingest["by_source"][name]
        assert got["docs_in"] == source["records"], name
        assert got["docs_out"] == source["valid_documents"], name
    sample = json.loads((config.output_dir / "sample" / "manifest.json").read_text())["content"]
    assert sample["totals"]["docs_in"] == ingest["totals"]["docs_out"]
    books = sample["by_source"]["books_en"]
    assert 0.35 < books["docs_out"] / books["docs_in"] < 0.65  # fraction 0.5
    assert sample["by_source"]["web_en"]["drops"] == {}


def test_planted_faults_are_dropped_with_their_reason(demo_run):
    root, config, _ = demo_run
    truth = json.loads((root / "ground_truth.json").read_text())
    planted = [p for p in truth["planted"] if p["stage"] == "ingest"]
    assert planted, "the demo corpus plants reader faults"
    dropped = [pq.read_table(p).to_pylist() for p in sorted((config.output_dir / "ingest" / "dropped").glob("*.parquet"))]
    rows = [r for table in dropped for r in table]
    for fault in planted:
        name = fault["file"].rsplit("/", 1)[-1]
        hits = [r for r in rows if r["source"] == fault["source"] and json.loads(r["meta"])["record_index"] == fault["record_index"]
                and name in json.loads(r["meta"])["error"]]
        assert len(hits) == 1, fault
        assert hits[0]["drop_reason"] == fault["expect_drop_reason"], fault
    assert len(rows) == len(planted)  # nothing else was dropped by the readers
