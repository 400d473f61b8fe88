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


def test_report_shows_coverage_per_evalset(small_run, capsys):
    """`tokenmill report contamination` and evalset_summary: per set, n and items by rule, every item counted once."""
    import json

    from tokenmill.cli import main

    report = json.loads((small_run / "decontaminate" / "manifest.json").read_text())["content"]["report"]
    coverage = report["index"]["coverage"]["demo_qa"]
    # Fifty ~30-word questions and fifty 6-word answers: the 5th-percentile field is 6 words, so n = 8 (the floor);
    # the answers ("It happened 27 times in all.") are matched whole.
    assert (coverage["n"], coverage["n_rule"], coverage["p5_length"]) == (8, "gpt3", 6)
    assert coverage["fields"] == {"ngram": 50, "whole": 50, "too_short": 0, "no_text": 0}
    (row,) = evalset_summary(small_run)
    assert row["n"] == 8 and row["checked_ngram"] == row["items"] == 50
    assert row["checked_whole"] == row["too_short"] == row["no_text"] == 0
    assert main(["report", "contamination", str(small_run)]) == 0
    out = capsys.readouterr().out
    for column in ("n", "by n-gram", "whole", "too short", "no text"):
        assert column in out
    line = next(line for line in out.splitlines() if line.strip("│ ").startswith("demo_qa"))
    assert [c.strip() for c in line.strip("│ ").split("│")][:7] == ["demo_qa", "50", "8", "50", "0", "0", "0"]
