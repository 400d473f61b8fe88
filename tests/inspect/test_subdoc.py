"""`tokenmill.inspect.subdoc` on hand-written stage files: each removed span joined to the document that kept it,
per-source summaries, and files that do not add up to the manifest refused (the stage run itself:
tests/stages/test_subdoc.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tokenmill.errors import TokenmillError
from tokenmill.inspect import removed_span_summary, removed_spans

NAV, FOOTER = "Home | News | Sport | Contact us", "© 2024 Example. All rights reserved."
H_NAV, H_FOOTER = 2**64 - 5, 17  # a hash above 2**63: uint64 all the way through the join


def span_file(path: Path, rows: list[tuple], kept: bool = False) -> None:
    names = ["id", "source", "hash", "docs", "chars", "span"] + (["dropped"] if kept else [])
    types = [pa.string(), pa.string(), pa.uint64(), pa.int64(), pa.int64(), pa.string(), pa.bool_()]
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({n: pa.array([r[i] for r in rows], t) for i, (n, t) in enumerate(zip(names, types))}),
                   path)


def make_run(root: Path, removals: int = 4, repeated: int = 2, removed: list[tuple] | None = None,
             kept: list[tuple] | None = None) -> Path:
    """A run folder whose subdoc stage completed: NAV kept by w0 (web), lost by w1, w2 and f1 (forum); FOOTER kept
    by f0, which was itself dropped, lost by f2."""
    stage = root / "subdoc"
    stage.mkdir(parents=True)
    report = {"count": {"removals": removals, "repeated_spans": repeated},
              "by_source": {"web": {"spans_removed": 2, "docs_changed": 2}, "forum": {"spans_removed": 2, "docs_changed": 2}},
              "summary": ["4 spans removed (test)"]}
    (stage / "manifest.json").write_text(json.dumps({"content": {"shards": [], "report": report}, "run_info": {}}))
    span_file(stage / "removed" / "a.parquet", removed if removed is not None else [
        ("w2", "web", H_NAV, 4, len(NAV), NAV, None), ("w1", "web", H_NAV, 4, len(NAV), NAV, None)])
    span_file(stage / "removed" / "b.parquet", [("f1", "forum", H_NAV, 4, len(NAV), NAV, None),
                                                ("f2", "forum", H_FOOTER, 2, len(FOOTER), FOOTER, None)])
    span_file(stage / "kept" / "a.parquet", kept if kept is not None else [("w0", "web", H_NAV, 4, len(NAV), NAV, False)],
              kept=True)
    span_file(stage / "kept" / "b.parquet", [("f0", "forum", H_FOOTER, 2, len(FOOTER), FOOTER, True)], kept=True)
    return root


def test_each_removed_span_names_the_document_that_kept_it(tmp_path):
    run = make_run(tmp_path / "run")
    rows = removed_spans(run).to_pylist()
    assert [(r["source"], r["id"], r["span"], r["kept_by"], r["kept_by_source"], r["kept_by_dropped"]) for r in rows] == [
        ("forum", "f1", NAV, "w0", "web", False), ("forum", "f2", FOOTER, "f0", "forum", True),
        ("web", "w1", NAV, "w0", "web", False), ("web", "w2", NAV, "w0", "web", False)]
    assert rows[0]["hash"] == H_NAV and rows[0]["docs"] == 4
    assert [r["id"] for r in removed_spans(run, source="web").to_pylist()] == ["w1", "w2"]
    summary = removed_span_summary(run)
    assert list(summary) == ["forum", "web"]
    assert [(s["span"], s["removed_from"], s["docs"], s["kept_by"], s["example"]) for s in summary["web"]] == [
        (NAV, 2, 4, "w0", "w1")]
    # Per source, the most removed first (forum: one document each; ties by hash), `n` at most.
    assert [s["span"] for s in summary["forum"]] == [FOOTER, NAV]
    assert [s["span"] for s in removed_span_summary(run, n=1)["forum"]] == [FOOTER]


def test_the_command_prints_each_source_and_refuses_other_views(tmp_path, capsys):
    from tokenmill.cli import main

    run = make_run(tmp_path / "run")
    assert main(["inspect", str(run), "--removed", "-n", "5"]) == 0
    printed = capsys.readouterr().out
    assert "4 spans removed (test)" in printed and NAV in printed and "w0 (web)" in printed
    assert "f0 (forum), dropped" in printed
    assert main(["inspect", str(run), "--removed", "--dropped"]) != 0
    assert "leave out --dropped" in capsys.readouterr().err


@pytest.mark.parametrize("case,message", [
    ("not_completed", "has not completed"),
    ("rows_missing", "manifest counts"),
    ("old_columns", "lacks the column"),
    ("two_firsts", "two first documents"),
    ("no_first", "no first document"),
    ("no_kept_folder", "earlier version"),
])
def test_files_that_do_not_add_up_are_refused(tmp_path, case, message):
    root = tmp_path / "run"
    if case == "not_completed":
        make_run(root)
        (root / "subdoc" / "manifest.json").unlink()
    elif case == "rows_missing":
        make_run(root, removals=5)
    elif case == "old_columns":
        make_run(root)
        pq.write_table(pq.read_table(root / "subdoc" / "removed" / "a.parquet").drop_columns(["docs", "chars"]),
                       root / "subdoc" / "removed" / "a.parquet")
    elif case == "two_firsts":
        make_run(root, repeated=3, kept=[("w0", "web", H_NAV, 4, len(NAV), NAV, False),
                                         ("w9", "web", H_NAV, 4, len(NAV), NAV, False)])
    elif case == "no_kept_folder":
        make_run(root)
        shutil.rmtree(root / "subdoc" / "kept")
    else:
        make_run(root, removed=[("w2", "web", 99, 4, len(NAV), NAV, None), ("w1", "web", H_NAV, 4, len(NAV), NAV, None)])
    with pytest.raises(TokenmillError, match=message):
        removed_spans(root)
