"""A shard a stage keeps whole is linked to its input shard, not rewritten; the shard writer's Parquet settings."""

from __future__ import annotations

import errno
import gc
import hashlib
import json
import os

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from tests.conftest import make_corpus
from tokenmill.pipeline import commit
from tokenmill.pipeline.commit import TaskWriter, committed_record
from tokenmill.pipeline.config import load_config
from tokenmill.config_base import StageConfig
from tokenmill.pipeline.contract import RunContext, Stage, TaskContext
from tokenmill.documents import (SCHEMA_VERSION, ZSTD_LEVEL, last_read, read_shard, shard_bytes,
                                          with_text_hash)
from tokenmill.pipeline.map_phase import split_and_write
from tokenmill.pipeline.runner import run_pipeline

KEY = {"config_hash": "c", "input_hash": "i", "schema_version": 1}


def _record(stage_dir, name: str) -> dict:
    return json.loads((stage_dir / "_work" / "commits" / "map" / f"{name}.json").read_text())


@pytest.mark.ray
def test_sample_links_the_shards_it_keeps_whole(ray_cluster, tmp_path):
    """zh has fraction 1 (every row kept: linked); en has 0.6 (rows dropped: written anew)."""
    config = load_config(make_corpus(tmp_path / "corpus")).model_copy(update={"output": str(tmp_path / "out")})
    run_pipeline(config)
    ingest, sample = tmp_path / "out" / "ingest", tmp_path / "out" / "sample"
    shards = sorted((sample / "shards").glob("*.parquet"))
    linked = {p.name for p in shards if os.stat(p).st_ino == os.stat(ingest / "shards" / p.name).st_ino}
    assert linked == {p.name for p in shards if p.name.startswith("zh.")} and linked
    for path in shards:
        [file] = [f for f in _record(sample, path.stem)["files"] if f["path"] == f"shards/{path.name}"]
        assert file["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest() and file["bytes"] == path.stat().st_size
        assert read_shard(str(path)).num_rows == pq.read_metadata(path).num_rows
    # The linked shard's table is the one a rewrite would have produced (golden manifests check the content too).
    zh = sorted(linked)[0]
    assert read_shard(str(sample / "shards" / zh)).equals(read_shard(str(ingest / "shards" / zh)))

    # The input shard lost and recomputed: a new file under that name; sample keeps its own, intact and up to date.
    before = (sample / "shards" / zh).read_bytes()
    (ingest / "shards" / zh).unlink()
    reports = run_pipeline(config)
    assert [(r.stage, r.status) for r in reports] == [("ingest", "resumed"), ("sample", "up to date")]
    assert (sample / "shards" / zh).read_bytes() == before


def test_link_on_a_filesystem_without_hard_links_copies(tmp_path):
    """Not a LocalFileSystem (an object store, here a SubTreeFileSystem over local disk): a copy, committed the same."""
    fs = pafs.SubTreeFileSystem(str(tmp_path), pafs.LocalFileSystem())
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.parquet").write_bytes(b"shard bytes")
    writer = TaskWriter(fs, "stage", "map", "a")
    assert writer.link("shards/a.parquet", "in/a.parquet")
    record = writer.commit(KEY, None)
    out = tmp_path / "stage" / "shards" / "a.parquet"
    assert out.read_bytes() == b"shard bytes" and os.stat(out).st_ino != os.stat(tmp_path / "in" / "a.parquet").st_ino
    assert record["files"] == [{"path": "shards/a.parquet", "bytes": 11,
                                "sha256": hashlib.sha256(b"shard bytes").hexdigest()}]
    assert committed_record(fs, "stage", "map", "a", KEY) == record


def test_link_is_published_only_by_the_commit_and_falls_back_when_refused(tmp_path, monkeypatch):
    fs, stage = pafs.LocalFileSystem(), str(tmp_path / "stage")
    source = tmp_path / "in.parquet"
    source.write_bytes(b"abc")
    writer = TaskWriter(fs, stage, "map", "t")
    assert writer.link("shards/t.parquet", str(source))
    assert not (tmp_path / "stage" / "shards" / "t.parquet").exists()  # under the attempt's name until the commit
    writer.commit(KEY, None)
    assert os.stat(tmp_path / "stage" / "shards" / "t.parquet").st_ino == os.stat(source).st_ino

    def cross_device(src, dst):
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(commit.os, "link", cross_device)
    other = TaskWriter(fs, stage, "map", "u")
    assert other.link("shards/u.parquet", str(source)) is False and other.written == {}


def test_last_read_is_weak_and_per_path(tmp_path):
    path = tmp_path / "s.parquet"
    path.write_bytes(shard_bytes(pa.table({"id": ["a"], "text": ["x"]})))
    table = read_shard(str(path))
    assert last_read(str(path)) is table and last_read(str(tmp_path / "other.parquet")) is None
    del table
    gc.collect()
    assert last_read(str(path)) is None  # nothing held once the task lets go of its table


def test_shard_writer_settings(tmp_path):
    """zstd at ZSTD_LEVEL; no dictionary for text, id, meta and text_hash; a dictionary for a repeated column."""
    n = 4096
    texts = [f"document {i}: " + " ".join(f"w{(i * 7 + k) % 997}" for k in range(60)) for i in range(n)]
    table = pa.table({"id": [f"d{i}" for i in range(n)], "text": texts, "source": ["web"] * n,
                      "meta": [json.dumps({"url": f"https://x/{i}"}) for i in range(n)],
                      "text_hash": pa.array(range(n), pa.uint64())})
    data = shard_bytes(table)
    meta = pq.read_metadata(pa.BufferReader(data))
    columns = {meta.row_group(0).column(i).path_in_schema: meta.row_group(0).column(i) for i in range(meta.num_columns)}
    assert {c.compression for c in columns.values()} == {"ZSTD"}
    for name in ("id", "text", "meta", "text_hash"):
        assert not columns[name].has_dictionary_page, name
    assert columns["source"].has_dictionary_page
    assert pq.read_table(pa.BufferReader(data)).replace_schema_metadata(None).equals(table)
    # The level is not in the file's metadata: the bytes show it (Arrow's default level, 1, gives other bytes).
    stamped = table.replace_schema_metadata({"tokenmill.schema_version": str(SCHEMA_VERSION)})

    def written(level: int) -> bytes:
        sink = pa.BufferOutputStream()
        pq.write_table(stamped, sink, compression="zstd", compression_level=level, use_dictionary=["source"],
                       row_group_size=2048)
        return sink.getvalue().to_pybytes()

    assert ZSTD_LEVEL != 1 and data == written(ZSTD_LEVEL) != written(1)


class Keeps(Stage):
    name = "keeps"
    drop_reasons = ("odd",)


@pytest.mark.parametrize("change, linked", [
    (None, True),  # NaN scores included: NaN is not equal to itself, its bits are
    ("drop", False),
    ("score", False),
    ("text", False),
    ("nullable", False),
])
def test_split_and_write_links_only_an_identical_table(tmp_path, change, linked):
    n = 5
    schema = pa.schema([pa.field("id", pa.string()), pa.field("text", pa.string(), nullable=False),
                        pa.field("source", pa.string()), pa.field("subset", pa.string()), pa.field("score", pa.float64())])
    table = with_text_hash(pa.table([[f"d{i}" for i in range(n)], [f"text {i}" for i in range(n)], ["s"] * n,
                                     pa.nulls(n, pa.string()), [0.5, float("nan"), 1.0, None, 2.0]], schema=schema))
    source = tmp_path / "in" / "shards" / "s.0.parquet"
    source.parent.mkdir(parents=True)
    source.write_bytes(shard_bytes(table))
    read = read_shard(str(source))
    out = read
    reasons = pa.nulls(n, pa.string())
    if change == "drop":
        reasons = pa.array([None, "odd", None, None, None], pa.string())
    elif change == "score":
        out = read.set_column(4, "score", pa.array([0.5, float("nan"), 1.0, None, 2.5]))
    elif change == "text":
        out = read.set_column(1, "text", pa.array([f"text {i}" for i in range(n - 1)] + ["changed"]))
    elif change == "nullable":
        out = read.cast(read.schema.set(1, read.schema.field("text").with_nullable(True)))  # as clean writes it
    writer = TaskWriter(pafs.LocalFileSystem(), str(tmp_path / "out"), "map", "s.0")
    ctx = TaskContext(str(tmp_path / "out"), str(tmp_path / "in"), {}, writer)
    split_and_write(Keeps(StageConfig(), RunContext(seed=0, sources={})), ctx, "s.0", "s", out, reasons)
    writer.commit(KEY, None)
    written = tmp_path / "out" / "shards" / "s.0.parquet"
    assert (os.stat(written).st_ino == os.stat(source).st_ino) is linked
    expected = with_text_hash(out).filter(pc.is_null(reasons))
    back = read_shard(str(written))
    assert back.schema.equals(expected.schema) and back.num_rows == expected.num_rows
    for name in ("id", "text", "text_hash"):
        assert back.column(name).equals(expected.column(name)), name
