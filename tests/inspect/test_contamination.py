"""Contamination hits per evaluation set and source, and matched text, on a small real run."""

from __future__ import annotations

import collections

import pytest

from tokenmill.inspect import contamination_hits, evalset_summary, hit_examples, hits

pytestmark = pytest.mark.ray


def test_contamination_hits_per_evalset_and_source(small_run):
    table = hits(small_run)
    rows = contamination_hits(small_run)
    assert sum(r["hits"] for r in rows) == table.num_rows > 0
    truth = collections.Counter(zip(table["evalset"].to_pylist(), table["source"].to_pylist()))
    assert {(r["evalset"], r["source"]): r["hits"] for r in rows} == dict(truth)
    summary = {r["evalset"]: r for r in evalset_summary(small_run)}
    for e in {r["evalset"] for r in rows}:
        assert summary[e]["found"] >= max(r["items"] for r in rows if r["evalset"] == e)
    examples = hit_examples(small_run, n=2, seed=0)
    assert len(examples) == 2 and examples == hit_examples(small_run, n=2, seed=0)
    spans = table.to_pylist()
    for ex in examples:
        pieces = [h["text"] for h in spans if h["id"] == ex["id"] and h["item"] == ex["item"]]
        assert len(pieces) == ex["hits"] and all(p in ex["text"] for p in pieces)
