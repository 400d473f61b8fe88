"""Samples, drop counts, before/after and escape leaks on a small real run."""

from __future__ import annotations

import collections

import pyarrow.parquet as pq
import pytest

from tokenmill.errors import TokenmillError
from tokenmill.inspect import (before_after, cleaned_ids, drop_counts, escape_leaks, leak_summary, manifest,
                               samples, samples_per_reason, samples_per_source, stages)

pytestmark = pytest.mark.ray


def _dropped(run, stage):
    return [r for p in sorted((run / stage / "dropped").glob("*.parquet"))
            for r in pq.read_table(p, columns=["id", "source", "drop_reason"]).to_pylist()]


def test_stages_in_pipeline_order(small_run):
    assert stages(small_run) == ["ingest", "sample", "clean", "dedup", "decontaminate", "tokenize"]


def test_samples_are_deterministic_by_seed_and_filter_by_source(small_run):
    a = samples(small_run, "clean", source="reddit", n=4, seed=1)
    assert len(a) == 4 and all(r["source"] == "reddit" for r in a)
    assert [r["id"] for r in a] == [r["id"] for r in samples(small_run, "clean", source="reddit", n=4, seed=1)]
    others = [[r["id"] for r in samples(small_run, "clean", source="reddit", n=4, seed=s)] for s in range(2, 6)]
    assert any(ids != [r["id"] for r in a] for ids in others)
    assert {"text", "subset", "meta", "lang", "escape_score"} <= set(a[0])
    assert samples(small_run, "clean", n=3, columns=["id", "text"])[0].keys() == {"id", "text"}
    everything = samples(small_run, "sample", source="reddit", n=10_000)
    assert len(everything) == manifest(small_run, "sample")["by_source"]["reddit"]["docs_out"]


def test_dropped_samples_by_any_and_by_one_reason(small_run):
    truth = collections.Counter(r["drop_reason"] for r in _dropped(small_run, "clean"))
    rows = samples(small_run, "clean", n=10_000, dropped=True)
    assert collections.Counter(r["drop_reason"] for r in rows) == truth
    reason = truth.most_common(1)[0][0]
    rows = samples(small_run, "clean", n=2, dropped=reason)
    assert len(rows) == 2 and {r["drop_reason"] for r in rows} == {reason}
    per_reason = samples_per_reason(small_run, "clean", n=1)
    assert set(per_reason) == set(truth) and all(len(v) == 1 for v in per_reason.values())
    per_source = samples_per_source(small_run, "clean", n=1)
    assert set(per_source) == set(manifest(small_run, "clean")["by_source"])


@pytest.mark.parametrize("kwargs, match", [
    ({"stage": "nope"}, "no stage 'nope'"),
    ({"source": "nope"}, "no documents of source 'nope'"),
    ({"dropped": "nope"}, "dropped no documents for 'nope'; reasons: "),
])
def test_user_errors_name_what_exists(small_run, kwargs, match):
    with pytest.raises(TokenmillError, match=match):
        samples(small_run, **{"stage": "clean", **kwargs})


def test_a_missing_run_folder_is_a_user_error(tmp_path):
    with pytest.raises(TokenmillError, match="does not exist"):
        samples(tmp_path / "absent")


def test_drop_counts_equal_the_dropped_files(small_run):
    for stage in ("ingest", "clean", "dedup"):
        truth = collections.Counter((r["drop_reason"], r["source"]) for r in _dropped(small_run, stage))
        rows = drop_counts(small_run, stage)
        assert {(r["reason"], r["source"]): r["docs"] for r in rows} == dict(truth)
        assert [r["docs"] for r in rows] == sorted((r["docs"] for r in rows), reverse=True)


def test_before_after_shows_what_an_escape_repair_changed(small_run):
    doc = before_after(small_run, seed=0, step="escape_repair")
    assert doc["changed"] and "escape_repair" in doc["clean_steps"] and doc["escape_counts"]
    assert doc["before_text"] != doc["after_text"] and doc["diff"][0].startswith("--- sample")
    untouched = next(r for r in samples(small_run, "clean", n=50) if not r["clean_steps"])
    same = before_after(small_run, untouched["id"])
    assert not same["changed"] and same["diff"] == [] and same["before_text"] == untouched["text"]
    assert set(cleaned_ids(small_run, n=100, step="escape_repair")) >= {doc["id"]}


def test_before_after_of_a_document_clean_dropped(small_run):
    dropped = _dropped(small_run, "clean")[0]
    doc = before_after(small_run, dropped["id"])
    assert doc["drop_reason"] == dropped["drop_reason"] and doc["before_text"] is not None
    with pytest.raises(TokenmillError, match="no document"):
        before_after(small_run, "no-such-id")


def test_escape_leaks_give_dropped_and_repaired_examples(small_run):
    rows = escape_leaks(small_run, n=2)
    by_status = collections.defaultdict(list)
    for r in rows:
        by_status[r["status"]].append(r)
    assert by_status["dropped"] and by_status["repaired"]
    assert all(r["drop_reason"].startswith("escape_") for r in by_status["dropped"])
    assert all(isinstance(r["escape_counts"], dict) and r["escape_counts"] for r in rows)
    assert all("\\n" in r["excerpt"] for r in by_status["dropped"] if r["drop_reason"] == "escape_literal_newline")
    assert all(len(v) <= 2 for v in by_status.values())
    summary = {r["source"]: r for r in leak_summary(small_run)}
    assert sum(r["docs"] for r in summary.values()) == manifest(small_run, "clean")["totals"]["docs_in"]
    assert all(summary[r["source"]]["docs_with_leaks"] > 0 for r in by_status["dropped"])
