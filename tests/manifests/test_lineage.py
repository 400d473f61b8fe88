"""Stage order from the manifests' `input.stage`: the pipeline's order without importing a stage."""

from __future__ import annotations

from tokenmill.manifests.lineage import lineage_order

RUN = [("tokenize", "decontaminate"), ("sample", "ingest"), ("ingest", None), ("dedup", "clean"),
       ("decontaminate", "dedup"), ("clean", "sample")]


def test_one_run_in_pipeline_order():
    assert lineage_order(RUN) == ["ingest", "sample", "clean", "dedup", "decontaminate", "tokenize"]


def test_two_runs_one_without_a_stage_and_a_custom_stage():
    # run B skipped sample (clean read ingest) and added a stage of its own between clean and tokenize
    other = [("ingest", None), ("clean", "ingest"), ("metadata", "clean"), ("tokenize", "metadata")]
    assert lineage_order(RUN[:1] + RUN[1:] + other) == ["ingest", "sample", "clean", "dedup", "decontaminate",
                                                        "metadata", "tokenize"]


def test_missing_inputs_and_cycles_fall_back_to_names():
    assert lineage_order([("tokenize", "gone"), ("clean", "sample_gone")]) == ["clean", "tokenize"]
    assert lineage_order([("a", "b"), ("b", "a"), ("c", None)]) == ["c", "a", "b"]
