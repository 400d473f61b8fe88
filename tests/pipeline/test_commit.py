"""Task commits: files appear only with their record, and a record is reused only under the same key."""

from __future__ import annotations

import pyarrow.fs as pafs

from tokenmill.pipeline import storage
from tokenmill.pipeline.commit import TaskWriter, committed_record, record_path, tmp_root

KEY = {"config_hash": "c", "input_hash": "i", "schema_version": 1}


def test_commit_publishes_files_then_record(tmp_path):
    fs, stage = pafs.LocalFileSystem(), str(tmp_path / "stage")
    writer = TaskWriter(fs, stage, "map", "t1")
    writer.write("shards/t1.parquet", b"data")
    assert not (tmp_path / "stage" / "shards" / "t1.parquet").exists()
    assert committed_record(fs, stage, "map", "t1", KEY) is None
    record = writer.commit(KEY, {"n": 1})
    assert (tmp_path / "stage" / "shards" / "t1.parquet").read_bytes() == b"data"
    assert committed_record(fs, stage, "map", "t1", KEY) == record
    assert record["files"][0]["bytes"] == 4
    assert not storage.exists(fs, tmp_root(stage, "map", "t1"))


def test_leftovers_of_killed_attempts_go_with_the_commit(tmp_path):
    fs, stage = pafs.LocalFileSystem(), str(tmp_path / "stage")
    dead = TaskWriter(fs, stage, "map", "t1")
    dead.write("shards/t1.parquet", b"half")  # an attempt killed before commit
    live = TaskWriter(fs, stage, "map", "t1")
    assert live.attempt != dead.attempt
    live.write("shards/t1.parquet", b"whole")
    live.commit(KEY, None)
    assert not storage.exists(fs, tmp_root(stage, "map", "t1"))
    assert (tmp_path / "stage" / "shards" / "t1.parquet").read_bytes() == b"whole"


def test_record_with_other_key_or_missing_file_is_not_committed(tmp_path):
    fs, stage = pafs.LocalFileSystem(), str(tmp_path / "stage")
    writer = TaskWriter(fs, stage, "map", "t1")
    writer.write("shards/t1.parquet", b"data")
    writer.commit(KEY, None)
    assert committed_record(fs, stage, "map", "t1", {**KEY, "config_hash": "other"}) is None
    (tmp_path / "stage" / "shards" / "t1.parquet").write_bytes(b"dat")  # truncated behind our back
    assert committed_record(fs, stage, "map", "t1", KEY) is None


def test_torn_record_is_not_a_commit(tmp_path):
    fs, stage = pafs.LocalFileSystem(), str(tmp_path / "stage")
    storage.write_bytes(fs, record_path(stage, "map", "t1"), b'{"task": "t1", "ke')
    assert committed_record(fs, stage, "map", "t1", KEY) is None
