"""`SplitWriter` takes one destination's rows at a time: the same file bytes as reordering the whole table first
(the form it replaced, frozen here), for the shapes the dedup phases write."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tokenmill.dedup.distributed_components import PART, SplitWriter, read_part, split_bytes


def _whole_table_form(tables: list[tuple[pa.Table, np.ndarray]], budget: int | None = None, **options) -> bytes:
    """The replaced `SplitWriter`: each flush took the whole table in destination order, then wrote slices."""
    sink, writer, pending, held = pa.BufferOutputStream(), None, [], 0
    schema = None

    def flush():
        nonlocal writer, pending, held
        if not pending:
            return
        table = pa.concat_tables([t for t, _ in pending])
        dest = np.concatenate([d for _, d in pending])
        pending, held = [], 0
        order = np.argsort(dest, kind="stable")
        dest = dest[order]
        table = table.take(pa.array(order, pa.int64())).append_column(PART, pa.array(dest.astype(np.int32)))
        if writer is None:
            writer = pq.ParquetWriter(sink, table.schema, compression="zstd", **options)
        cuts = np.flatnonzero(np.r_[True, dest[1:] != dest[:-1]]) if dest.size else np.zeros(0, np.int64)
        for start, stop in zip(cuts.tolist(), [*cuts[1:].tolist(), dest.size]):
            writer.write_table(table.slice(start, stop - start), row_group_size=stop - start)

    for table, dest in tables:
        schema = schema or table.schema
        pending.append((table, np.asarray(dest, np.int64)))
        held += table.num_rows
        if budget is not None and held >= budget:
            flush()
    flush()
    if writer is None:
        writer = pq.ParquetWriter(sink, (schema or pa.schema([])).append(pa.field(PART, pa.int32())),
                                  compression="zstd", **options)
    writer.close()
    return sink.getvalue().to_pybytes()


def _edges(rng: np.random.Generator, n: int) -> pa.Table:
    return pa.table({"a": pa.array(rng.integers(0, 2**63, n, dtype=np.uint64)),
                     "b": pa.array(rng.integers(0, 2**63, n, dtype=np.uint64)),
                     "jaccard": pa.array(rng.random(n)), "exact": pa.array(rng.random(n) < 0.1)})


@pytest.mark.parametrize("n, parts", [(0, 4), (1, 1), (1000, 1), (5000, 7), (20000, 128), (3, 64)])
def test_one_table_gives_the_bytes_of_the_whole_table_form(n, parts):
    rng = np.random.default_rng(n + parts)
    table, dest = _edges(rng, n), rng.integers(0, parts, n)
    assert split_bytes(table, dest) == _whole_table_form([(table, dest)])


def test_tables_added_over_a_budget_and_chunked_give_the_same_bytes():
    rng = np.random.default_rng(3)
    batches = [(_edges(rng, n), rng.integers(0, 16, n)) for n in (700, 0, 1500, 40, 2200)]
    writer = SplitWriter(1000)
    for table, dest in batches:
        writer.add(table, dest)
    assert writer.finish() == _whole_table_form(batches, budget=1000)
    chunked = pa.concat_tables([t for t, _ in batches])  # several chunks a column
    dest = np.concatenate([d for _, d in batches])
    data = split_bytes(chunked, dest)
    assert data == _whole_table_form([(chunked, dest)])


def test_band_file_options_give_the_same_bytes(tmp_path):
    rng = np.random.default_rng(9)
    n = 4000
    table = pa.table({"band": pa.array(rng.integers(0, 13, n).astype(np.int32)),
                      "key": pa.array(rng.integers(0, 2**63, n, dtype=np.uint64)),
                      "doc": pa.array(np.sort(rng.integers(0, 2**40, n)).astype(np.uint64)),
                      "exact": pa.array(rng.random(n) < 0.05)})
    dest = rng.integers(0, 32, n)
    options = dict(use_dictionary=["band", "part"],
                   column_encoding={"key": "PLAIN", "doc": "DELTA_BINARY_PACKED", "exact": "PLAIN"})
    data = split_bytes(table, dest, **options)
    assert data == _whole_table_form([(table, dest)], **options)
    path = tmp_path / "bands.parquet"
    path.write_bytes(data)
    for d in (0, 7, 31):
        rows = read_part(str(path), d)
        assert rows.num_rows == int((dest == d).sum())
        assert rows.column("key").to_pylist() == table.filter(pa.array(dest == d)).column("key").to_pylist()
