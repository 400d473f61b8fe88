"""Manifests: tallies add up, conservation is checked, and content is free of where the run lives."""

from __future__ import annotations

import json
from collections import Counter

import pyarrow as pa
import pytest

from tokenmill.errors import ManifestError
from tokenmill.pipeline.manifest import build_content, check_conservation
from tokenmill.pipeline.stats import SourceTally, Tally, tally_table


def entry(path, source, docs_in, docs_out, drops):
    t = SourceTally(Tally(docs_in, docs_out, docs_in * 10, docs_out * 10, Counter(drops)))
    t.subsets["(none)"] = t.total
    return {"path": path, "source": source, **t.to_json()}


def test_tallies_add():
    a = Tally(3, 2, 30, 20, Counter(x=1))
    b = Tally(5, 1, 50, 10, Counter(x=2, y=2))
    s = a + b
    assert (s.docs_in, s.docs_out, s.drops) == (8, 3, Counter(x=3, y=2))
    assert s.conserved()


def test_tally_table_counts_per_subset():
    table = pa.table({"text": ["ab", "cde", "f"], "subset": ["s1", None, "s1"]})
    t = tally_table(table, pa.array([None, "r", None], pa.string()))
    assert t.total.to_json() == {"docs_in": 3, "docs_out": 2, "bytes_in": 6, "bytes_out": 3, "drops": {"r": 1}}
    assert t.subsets["s1"].docs_out == 2 and t.subsets["(none)"].drops == {"r": 1}



def test_tally_table_counts_the_bytes_received_not_the_rewritten_text():
    """A stage that shortens a kept text and drops another: bytes_in is what came in, bytes_out what was kept."""
    table = pa.table({"text": ["ab", "cde", "f"], "subset": ["s1", None, "s1"]})  # after the stage: 2 + 3 + 1 bytes
    received = pa.array([10, 30, 1], pa.int64())
    t = tally_table(table, pa.array([None, "r", None], pa.string()), received)
    assert t.total.to_json() == {"docs_in": 3, "docs_out": 2, "bytes_in": 41, "bytes_out": 3, "drops": {"r": 1}}
    assert (t.subsets["s1"].bytes_in, t.subsets["s1"].bytes_out) == (11, 3)
    assert t.subsets["(none)"].bytes_in == 30

def test_conservation_passes_and_totals_sum():
    content = build_content("s", {"a": 1}, {"stage": "ingest"}, [entry("b", "x", 5, 3, {"r": 2}), entry("a", "y", 4, 4, {})])
    check_conservation(content, ["r"])
    assert [s["path"] for s in content["shards"]] == ["a", "b"]
    assert content["totals"]["docs_in"] == 9 and content["by_source"]["x"]["drops"] == {"r": 2}


def test_broken_conservation_fails_loudly():
    bad = entry("a", "x", 5, 3, {"r": 1})
    content = build_content("s", {}, {}, [bad])
    with pytest.raises(ManifestError, match="5 in != 3 kept \\+ 1 dropped"):
        check_conservation(content, ["r"])


def test_undeclared_reason_and_lost_input_are_caught():
    content = build_content("s", {}, {}, [entry("a", "x", 5, 3, {"zzz": 2})])
    with pytest.raises(ManifestError, match="undeclared drop reasons"):
        check_conservation(content, ["r"])
    content = build_content("s", {}, {}, [entry("a", "x", 5, 5, {})])
    upstream = build_content("ingest", {}, {}, [entry("a", "x", 9, 6, {"r": 3})])
    with pytest.raises(ManifestError, match="read 5 documents, input stage kept 6"):
        check_conservation(content, ["r"], upstream)


def test_the_run_summary_reads_the_manifests_of_an_object_store_output(capsys):
    """`tokenmill run`'s summary reads each stage's manifest on the run folder's filesystem: with an `s3://` output
    its path is a key in the bucket, which the summary once opened on local disk and so showed no drop table."""
    from types import SimpleNamespace

    import pyarrow.fs as pafs

    from tokenmill.pipeline import storage
    from tokenmill.pipeline.commands import print_summary

    fs = pafs._MockFileSystem()  # not a LocalFileSystem: a bucket's keys
    content = {"drop_table": {"too_short": {"books_en": {"docs": 3, "percent": 30.0}}}, "by_source": {},
               "shards": [{"errors": ["books_en.jsonl:3: not JSON"]}], "report": {"summary": ["a report line"]}}
    storage.write_bytes(fs, "runs/demo/clean/manifest.json", json.dumps({"content": content}).encode())
    report = SimpleNamespace(stage="clean", status="ran", tasks_run=1, tasks_skipped=0, seconds=1.0,
                             totals={"docs_in": 10, "docs_out": 7, "bytes_out": 100},
                             manifest="runs/demo/clean/manifest.json")
    print_summary([report], fs)
    out = capsys.readouterr().out
    for literal in ("clean: dropped documents", "too_short", "books_en.jsonl:3: not JSON", "a report line"):
        assert literal in out, literal
