"""The clusters phase spills every edge row once to the local file of its batch of components and reads one file
per batch: the rows the engine's own filter gives that batch."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pyarrow.fs
import pyarrow.parquet as pq

from tests.dedup.test_components import edge_files, web_like_edges
from tokenmill.dedup.components import component_batches, component_index, in_batch
from tokenmill.stages.dedup import stage as dedup_stage


def test_edges_scattered_once_per_batch_are_the_rows_each_batch_reads(tmp_path):
    """The clusters task writes every edge row once to its batch's file and reads one file per batch: the same rows
    (as multisets, copies included) as filtering every edge file for that batch."""
    rng = np.random.default_rng(5)
    edges = web_like_edges(rng)
    stage_dir = tmp_path / "dedup"
    edge_files(stage_dir / "_work" / "edges", edges, rng.integers(0, 5, edges.num_rows), 5)
    ctx = SimpleNamespace(fs=pyarrow.fs.LocalFileSystem(), stage_dir=str(stage_dir))
    files = dedup_stage._edge_files(ctx)
    assert len(files) == 5
    nodes, comp, count = component_index(dedup_stage._read_edges(ctx, files, ["a", "b"]))
    batch_of = component_batches(nodes, comp, count, budget=edges.num_rows // 6)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    paths = dedup_stage._scatter_edges(dedup_stage._read_edges(ctx, files), nodes, batch_of, str(scratch))
    assert len(paths) == int(batch_of.max()) + 1 >= 4

    def rows(tables) -> list:
        table = pa.concat_tables(list(tables)) if tables else None
        return sorted(zip(*[table.column(c).to_pylist() for c in ("a", "b", "jaccard", "exact")])) if table else []

    total = 0
    for batch, path in enumerate(paths):
        got = rows(list(dedup_stage._read_scattered(path)))
        assert got == rows(list(in_batch((pq.read_table(f) for f in files), nodes, batch_of, batch)))
        total += len(got)
    assert total == edges.num_rows
