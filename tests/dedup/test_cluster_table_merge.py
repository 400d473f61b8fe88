"""The cluster_table task's merge: bounded batches per file, and the same clusters.parquet whatever their size."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from tokenmill.dedup.decisions import CLUSTERS_SCHEMA
from tokenmill.documents import parquet_bytes
from tokenmill.stages.dedup import stage as dedup_stage
from tokenmill.stages.dedup.stage import MERGE_ROWS, merge_batch_rows, merged_clusters_bytes


def _run_file(path, rng, comps):
    """One clusters task's file: its components' members, sorted by `comp`."""
    comps = np.sort(comps)
    sizes = rng.integers(2, 6, len(comps))
    comp = np.repeat(comps, sizes).astype(np.uint64)
    n = len(comp)
    table = pa.table({
        "comp": pa.array(comp, pa.uint64()),
        "cluster": pa.array([f"c{c:08d}" for c in comp.tolist()]),
        "id": pa.array([f"doc-{path.stem}-{i}" for i in range(n)]),
        "source": pa.array(["web"] * n),
        "kept": pa.array(np.arange(n) % 3 == 0),
        "reason": pa.array([None if i % 3 == 0 else "near_duplicate" for i in range(n)], pa.string()),
        "removed_by": pa.array([None] * n, pa.string()),
        "jaccard": pa.array(rng.random(n)),
        "cluster_size": pa.array([3 if i % 3 == 0 else None for i in range(n)], pa.int64()),
    })
    pq.write_table(table, path)
    return table


def test_batch_rows_share_one_budget_with_a_floor():
    assert merge_batch_rows(1) == MERGE_ROWS
    assert merge_batch_rows(64) == MERGE_ROWS // 64  # 8,192: the 10 GB web-like run's 64 clusters files
    assert merge_batch_rows(0) == MERGE_ROWS
    assert merge_batch_rows(1 << 20) == 1 << 10
    for k in (1, 3, 64, 500, 4096):
        assert merge_batch_rows(k) * k <= max(MERGE_ROWS, k << 10)


def test_the_same_clusters_parquet_whatever_the_batches(tmp_path, monkeypatch):
    # Small row groups, so that the file has several and batches cross them.
    monkeypatch.setattr(dedup_stage, "CLUSTERS_ROW_GROUP", 1000)
    rng = np.random.default_rng(7)
    comps = rng.permutation(3000)
    files, tables = [], []
    for i, part in enumerate(np.array_split(comps, 5)):
        path = tmp_path / f"p{i:04d}.parquet"
        tables.append(_run_file(path, rng, part))
        files.append(str(path))
    outputs = {batch: merged_clusters_bytes(files, batch) for batch in (1, 7, 1024, merge_batch_rows(len(files)), 1 << 16)}
    assert len(set(outputs.values())) == 1
    got = pq.read_table(pa.BufferReader(outputs[1024]))
    assert got.schema == CLUSTERS_SCHEMA
    assert pq.ParquetFile(pa.BufferReader(outputs[1024])).metadata.num_row_groups > 1
    # The rows are every file's, ordered by component (ties in file order): what one sort of them all gives.
    whole = pa.concat_tables(tables)
    order = np.lexsort((np.arange(whole.num_rows), whole.column("comp").to_numpy()))
    expected = whole.take(order).drop_columns(["comp"]).cast(CLUSTERS_SCHEMA)
    assert got.equals(expected)
    monkeypatch.setattr(dedup_stage, "CLUSTERS_ROW_GROUP", 1 << 20)
    assert merged_clusters_bytes(files, 64) == parquet_bytes(expected)  # a table written whole: the same file
