"""`scan_docs` hands a notebook a stage's shards as one polars LazyFrame: the same rows, in the same order, as
`read_docs` reads with pyarrow, kept and dropped, and filters read back exactly the matching rows."""

from __future__ import annotations

import polars as pl

from tokenmill.inspect import read_docs, scan_docs


def test_scan_docs_holds_the_rows_read_docs_reads(small_run):
    for stage, dropped in (("clean", False), ("clean", True), ("dedup", True)):
        columns = ["id", "source", "text"] + (["drop_reason"] if dropped else [])
        want = read_docs(small_run, stage, dropped=dropped, columns=columns)
        got = scan_docs(small_run, stage, dropped=dropped).select(columns).collect()
        assert want.num_rows > 0
        assert got.to_dict(as_series=False) == want.to_pydict()


def test_a_filtered_scan_reads_the_matching_rows(small_run):
    docs = read_docs(small_run, "clean", columns=["id", "source", "text"]).to_pylist()
    source = docs[0]["source"]
    got = scan_docs(small_run, "clean").filter(pl.col("source") == source).select("id", "text").collect()
    assert got.rows() == [(d["id"], d["text"]) for d in docs if d["source"] == source]


def test_a_stage_without_shards_is_an_empty_frame(tmp_path):
    (tmp_path / "clean").mkdir()
    frame = scan_docs(tmp_path, "clean").collect()
    assert (frame.height, frame.columns) == (0, ["id", "text", "source"])
