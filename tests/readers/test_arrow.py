"""The arrow reader: a Hugging Face `datasets` folder and the IPC file format of pyarrow, Feather and polars, row by row;
damage, hostile lengths and pickled extension types; the same object read from S3."""

from __future__ import annotations

import json
import os
import pickle
import re
import struct

import polars as pl
import pyarrow as pa
import pyarrow.feather as feather
import pyarrow.ipc as ipc
import pytest

from tokenmill.pipeline.config import parse_config
from tokenmill.sources import uris
from tokenmill.sources.config import SourceConfig
from tokenmill.sources.formats import READERS

SRC = SourceConfig(name="hf", format="arrow", paths=["x"], id_field="id", subset_field="meta.lang")
FEATURES = {"id": {"dtype": "string", "_type": "Value"}, "text": {"dtype": "string", "_type": "Value"},
            "label": {"names": ["neg", "pos"], "_type": "ClassLabel"},
            "meta": {"lang": {"dtype": "string", "_type": "Value"}, "score": {"dtype": "float64", "_type": "Value"}},
            "tags": {"feature": {"dtype": "string", "_type": "Value"}, "_type": "Sequence"}}


def rows(n: int, start: int = 0) -> list[dict]:
    return [{"id": f"d{i}", "text": f"Ünïcode document {i}\nits second line" if i % 7 else "", "label": i % 2,
             "meta": {"lang": ["en", "fr"][i % 2], "score": i / 3}, "tags": ["a", "b"][: i % 3]}
            for i in range(start, start + n)]


def save_to_disk(folder, shards: int = 2, n: int = 2500) -> list[dict]:
    """A `Dataset.save_to_disk` folder as `datasets` writes it: per shard `data-0000i-of-0000n.arrow`, an IPC stream
    (datasets' ArrowWriter is a `pa.RecordBatchStreamWriter` of 1000-row batches, the features in the schema's
    `huggingface` metadata), beside `dataset_info.json` and `state.json`. The rows written, in order."""
    folder.mkdir(parents=True)
    schema = pa.schema([("id", pa.string()), ("text", pa.string()), ("label", pa.int64()),
                        ("meta", pa.struct([("lang", pa.string()), ("score", pa.float64())])),
                        ("tags", pa.list_(pa.string()))],
                       metadata={"huggingface": json.dumps({"info": {"features": FEATURES}})})
    written, per = [], n // shards
    for s in range(shards):
        part = rows(per, s * per)
        with ipc.new_stream(folder / f"data-{s:05d}-of-{shards:05d}.arrow", schema) as writer:
            for batch in pa.Table.from_pylist(part, schema=schema).to_batches(max_chunksize=1000):
                writer.write_batch(batch)
        written += part
    (folder / "dataset_info.json").write_text(json.dumps({"features": FEATURES}))
    (folder / "state.json").write_text(json.dumps({"_data_files": [{"filename": f"data-{s:05d}-of-{shards:05d}.arrow"}
                                                                   for s in range(shards)]}))
    return written


def read(path, source=SRC):
    return list(READERS["arrow"].read(str(path), source, f"hf:{os.path.basename(path)}"))


def test_a_datasets_folder_is_read_row_by_row_with_nested_fields(tmp_path):
    written = save_to_disk(tmp_path / "hf")
    config = parse_config({"output": "out", "sources": [{"name": "hf", "format": "arrow", "paths": ["hf/data-*.arrow"],
                                                         "id_field": "id", "subset_field": "meta.lang"}]}, tmp_path)
    from tokenmill.sources.patterns import source_files

    root, files = source_files(config, config.sources[0])
    assert root == (tmp_path / "hf").resolve() and [f.name for f in files] == ["data-00000-of-00002.arrow",
                                                                                "data-00001-of-00002.arrow"]
    records = [r for f in files for r in read(f, config.sources[0])]
    assert [r.index for r in records] == [*range(1250), *range(1250)]
    assert len(records) == len(written) == 2500
    for record, row in zip(records, written):
        if not row["text"]:
            assert record.drop == "empty_text" and record.id == row["id"]
            continue
        assert (record.drop, record.text, record.id, record.subset) == (None, row["text"], row["id"], row["meta"]["lang"])
        assert record.meta == {"label": row["label"], "meta": row["meta"], "tags": row["tags"]}


def test_the_ipc_file_format_of_pyarrow_feather_and_polars(tmp_path):
    table = pa.Table.from_pylist(rows(40))
    with ipc.new_file(tmp_path / "a.arrow", table.schema) as writer:
        for batch in table.to_batches(max_chunksize=16):
            writer.write_batch(batch)
    feather.write_feather(table, tmp_path / "b.feather")  # Feather v2: the file format, LZ4-compressed buffers
    pl.from_arrow(table).write_ipc(tmp_path / "c.arrow", compression="zstd")
    pl.from_arrow(table).write_ipc_stream(tmp_path / "d.arrow")
    want = [(r.text, r.id, r.subset, r.meta, r.drop) for r in read(tmp_path / "a.arrow")]
    assert len(want) == 40 and sum(drop is None for *_, drop in want) == 34
    for name in ("b.feather", "c.arrow", "d.arrow"):
        assert [(r.text, r.id, r.subset, r.meta, r.drop) for r in read(tmp_path / name)] == want, name


def test_text_fields_and_the_record_cap(tmp_path):
    table = pa.table({"title": ["A", "B", None], "body": ["x" * 5000, "short", "only a body"]})
    with ipc.new_stream(tmp_path / "a.arrow", table.schema) as writer:
        writer.write_table(table)
    joined = read(tmp_path / "a.arrow", SourceConfig(name="t", format="arrow", paths=["x"], text_field=["title", "body"],
                                                     max_record_bytes=4096))
    assert [r.drop for r in joined] == ["record_too_large", None, None]
    assert "hf:a.arrow: row 0: text of more than 4096 bytes" in joined[0].message
    assert [r.text for r in joined[1:]] == ["B\n\nshort", "only a body"]


def test_a_file_of_one_record_batch_is_made_python_rows_a_slice_at_a_time(tmp_path):
    """A writer may put a whole file in one record batch (polars writes one per chunk): its rows were all made Python
    objects at once, before the first record; now `rows.ROWS` at a time. The same records, a bounded peak."""
    import tracemalloc

    from tokenmill.readers import rows as rows_module

    n = 20_000
    table = pa.table({"id": [f"d{i}" for i in range(n)], "text": [f"document {i} " + "x" * 500 for i in range(n)]})
    with ipc.new_file(tmp_path / "one.arrow", table.schema) as writer:
        writer.write_batch(table.combine_chunks().to_batches()[0])
    assert ipc.open_file(tmp_path / "one.arrow").num_record_batches == 1
    source = SourceConfig(name="hf", format="arrow", paths=["x"], id_field="id")
    tracemalloc.start()
    try:
        count = 0
        for record in READERS["arrow"].read(str(tmp_path / "one.arrow"), source, "hf:one.arrow"):
            assert (record.index, record.id, record.drop) == (count, f"d{count}", None)
            count += 1
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert count == n
    whole = n * 500  # the batch's texts alone, as Python strings
    assert peak < whole / 4 and rows_module.ROWS * 500 < peak, f"peak {peak:,} bytes"


def _stream_bytes(n: int) -> bytes:
    sink = pa.BufferOutputStream()
    table = pa.Table.from_pylist(rows(n))
    with ipc.new_stream(sink, table.schema) as writer:
        for batch in table.to_batches(max_chunksize=100):
            writer.write_batch(batch)
    return sink.getvalue().to_pybytes()


def test_damage_ends_the_file_with_one_named_read_error(tmp_path):
    data = _stream_bytes(1000)
    (tmp_path / "cut.arrow").write_bytes(data[: len(data) * 2 // 3])
    records = read(tmp_path / "cut.arrow")
    assert len(records) % 100 == 1 and 0 < len(records) < 1000  # every whole batch before the cut, then the error
    assert [r.index for r in records[:-1]] == list(range(len(records) - 1))
    assert all(r.drop != "read_error" for r in records[:-1])
    assert records[-1].drop == "read_error" and records[-1].message.startswith(f"hf:cut.arrow: damaged after row "
                                                                               f"{len(records) - 1}: ")
    with ipc.new_file(tmp_path / "whole.arrow", pa.schema([("text", pa.string())])) as writer:
        writer.write_table(pa.table({"text": ["a"] * 10}))
    (tmp_path / "file_cut.arrow").write_bytes((tmp_path / "whole.arrow").read_bytes()[:-20])
    (tmp_path / "not.arrow").write_bytes(b'{"text": "a JSON line"}\n')
    (tmp_path / "empty.arrow").write_bytes(b"")
    for name, message in [("file_cut.arrow", "an Arrow IPC file (it starts with ARROW1) whose footer is missing or "
                                              "damaged: cut short?"),
                          ("not.arrow", "not an Arrow IPC stream or file: it starts with b'{\"text\":'"),
                          ("empty.arrow", "the file is empty, not an Arrow IPC stream or file")]:
        records = read(tmp_path / name)
        assert [r.drop for r in records] == ["read_error"], name
        assert records[0].message.startswith(f"hf:{name}: damaged after row 0: {message}"), records[0].message


def test_a_length_claiming_more_than_the_file_holds_is_refused_without_allocating_it(tmp_path):
    """A record batch message whose body length claims 1 PiB (or 6 GiB): a bounds check on the memory-mapped file
    refuses it, where reading into memory would first ask for what it claims."""
    data = bytearray(_stream_bytes(10))
    start = data.index(b"\xff\xff\xff\xff", 8)  # the record batch message, after the schema's
    while True:  # the schema message may be followed by others (none here): find the one whose body follows
        meta_len = struct.unpack_from("<i", data, start + 4)[0]
        body_at = start + 8 + meta_len
        body_len = len(data) - body_at - 8  # the end-of-stream marker closes the file
        field = data.find(struct.pack("<q", body_len), start + 8, body_at)
        if field >= 0:
            break
        start = data.index(b"\xff\xff\xff\xff", start + 8)
    for claim in (1 << 50, 6 << 30):
        hostile = bytearray(data)
        struct.pack_into("<q", hostile, field, claim)
        (tmp_path / "h.arrow").write_bytes(hostile)
        records = read(tmp_path / "h.arrow")
        assert [r.drop for r in records] == ["read_error"]
        assert f"Expected to be able to read {claim} bytes for message body" in records[0].message


class _Marker:
    def __init__(self, path: str):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_a_pickled_extension_type_is_never_unpickled(tmp_path):
    """pyarrow before 14.0.1 unpickled the metadata of an `arrow.py_extension_type` field when it read a schema
    (CVE-2023-47248): such a column is read as its plain storage, and the pickle never runs."""
    marker = tmp_path / "ran"
    field = pa.field("ext", pa.binary(), metadata={b"ARROW:extension:name": b"arrow.py_extension_type",
                                                   b"ARROW:extension:metadata": pickle.dumps(_Marker(str(marker)))})
    schema = pa.schema([pa.field("text", pa.string()), field])
    with ipc.new_stream(tmp_path / "e.arrow", schema) as writer:
        writer.write_table(pa.table({"text": ["hello"], "ext": [b"x"]}, schema=schema))
    records = read(tmp_path / "e.arrow", SourceConfig(name="e", format="arrow", paths=["x"]))
    assert [(r.text, r.meta, r.drop) for r in records] == [("hello", {"ext": "b'x'"}, None)]
    assert not marker.exists()


def test_an_object_on_s3_reads_as_the_file_and_a_store_failure_is_not_damage(s3_server, monkeypatch, tmp_path):
    """Both IPC formats through `uris.open_object` (the file format reads its footer first, by range); an outage
    mid-object fails the task (ObjectUnreadable), as for Parquet, and drops nothing."""
    s3_server.create_bucket("bkt")
    client = s3_server.client()
    save_to_disk(tmp_path / "hf", shards=1, n=300)
    local = tmp_path / "hf" / "data-00000-of-00001.arrow"
    client.put_object(Bucket="bkt", Key=f"hf/{local.name}", Body=local.read_bytes())
    table = pa.Table.from_pylist(rows(300))
    with ipc.new_file(tmp_path / "f.arrow", table.schema) as writer:
        writer.write_table(table, max_chunksize=64)
    client.put_object(Bucket="bkt", Key="hf/f.arrow", Body=(tmp_path / "f.arrow").read_bytes())
    assert read(f"s3://bkt/hf/{local.name}") == read(local)
    assert read("s3://bkt/hf/f.arrow") == read(tmp_path / "f.arrow")

    monkeypatch.setattr(uris, "READ_BUFFER", 4096)
    client.put_object(Bucket="bkt", Key="big.arrow", Body=_stream_bytes(20_000))
    records = READERS["arrow"].read("s3://bkt/big.arrow", SRC, "hf:big.arrow")
    assert next(records).id == "d0"
    s3_server.stop()
    with pytest.raises(uris.ObjectUnreadable, match=re.escape("s3://bkt/big.arrow: reading from the store failed")):
        for record in records:
            assert record.drop in (None, "empty_text"), record.message
