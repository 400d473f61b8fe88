"""The parquet reader: rows become documents; a damaged file ends with one named read_error."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from tokenmill.sources.config import SourceConfig
from tokenmill.readers.parquet import read_parquet

SRC = SourceConfig(name="b", format="parquet", paths=["x"], text_field="body", id_field="doc_id", subset_field="genre")


def write(path, n):
    pq.write_table(pa.table({"doc_id": [f"b{i}" for i in range(n)], "body": [f"t{i}" if i % 5 else "" for i in range(n)],
                             "genre": ["g"] * n, "year": list(range(n))}), path)


def test_rows_become_records(tmp_path):
    write(tmp_path / "b.parquet", 3000)
    records = list(read_parquet(str(tmp_path / "b.parquet"), SRC, "b:b.parquet"))
    assert len(records) == 3000
    assert records[1].id == "b1" and records[1].subset == "g" and records[1].meta == {"genre": "g", "year": 1}
    assert records[0].drop == "empty_text" and records[1].drop is None


def test_damaged_file_is_a_named_read_error(tmp_path):
    write(tmp_path / "b.parquet", 100)
    data = (tmp_path / "b.parquet").read_bytes()
    (tmp_path / "cut.parquet").write_bytes(data[: len(data) // 2])
    records = list(read_parquet(str(tmp_path / "cut.parquet"), SRC, "b:cut.parquet"))
    assert records[-1].drop == "read_error" and "b:cut.parquet" in records[-1].message
