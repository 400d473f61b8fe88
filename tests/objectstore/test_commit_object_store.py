"""The commit protocol on an object store, against a real S3 server (moto) and pyarrow's own client, counted from the
server's request log: each file one PUT under its final name, the record one PUT (the commit); no temporary names,
copies, deletes or folder markers; an object without a record is no committed task, and the next attempt writes it
again; a phase is planned from one listing, not a request per task."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pyarrow.fs as pafs

from tokenmill.pipeline import storage
from tokenmill.pipeline.commit import TaskWriter, committed_record, committed_records, tmp_root
from tokenmill.pipeline.runner import _remove_leftovers

KEY = {"stage": "st", "config_hash": "c", "input_hash": "i", "schema_version": 1}
_REQUEST = re.compile(r'"(GET|PUT|POST|DELETE|HEAD) (\S+) HTTP')


def _requests(log: Path, since: int = 0) -> list[tuple[str, str]]:
    """(method, path and query) of every request the server logged, from the `since`-th on."""
    return _REQUEST.findall(log.read_text())[since:]


def _stage(s3_server) -> tuple[pafs.FileSystem, str]:
    s3_server.create_bucket("runs")
    fs, root = storage.filesystem_for("s3://runs/run")
    return fs, storage.join(root, "st")


def test_is_object_store_only_for_s3_and_gcs():
    local = pafs.LocalFileSystem()
    assert not storage.is_object_store(local)
    assert not storage.is_object_store(pafs.SubTreeFileSystem("/tmp", local))  # local disk: folders and renames
    assert storage.is_object_store(pafs.S3FileSystem(anonymous=True, region="us-east-1"))
    assert storage.is_object_store(pafs.GcsFileSystem(anonymous=True))


def test_a_task_on_s3_is_one_put_per_file_and_one_for_the_record(s3_server, tmp_path):
    fs, stage = _stage(s3_server)
    log = tmp_path / "moto.log"
    before = len(_requests(log))
    writer = TaskWriter(fs, stage, "map", "t1")
    writer.write("shards/t1.parquet", b"kept rows")
    writer.write("_work/bands/p0/t1.parquet", b"band rows")
    record = writer.commit(KEY, {"n": 1})
    # Exactly three requests: each a whole-object PUT to its final key (no multipart upload, no `.tmp` key, no copy,
    # no DELETE, no `folder/` marker, no HEAD or LIST of the attempt folder).
    assert sorted(_requests(log, before)) == [("PUT", "/runs/run/st/_work/bands/p0/t1.parquet"),
                                              ("PUT", "/runs/run/st/_work/commits/map/t1.json"),
                                              ("PUT", "/runs/run/st/shards/t1.parquet")]
    assert storage.read_bytes(fs, storage.join(stage, "shards/t1.parquet")) == b"kept rows"
    assert record["files"][1] == {"path": "shards/t1.parquet", "bytes": 9,
                                  "sha256": hashlib.sha256(b"kept rows").hexdigest()}
    assert committed_record(fs, stage, "map", "t1", KEY) == record
    assert not storage.exists(fs, tmp_root(stage, "map", "t1"))


def test_an_object_without_its_record_is_not_committed_and_the_next_attempt_writes_it_again(s3_server):
    """A worker killed after its PUTs and before the record: the object is under its final name, but no reader goes
    by it; the retry writes it again (the same bytes, as tasks are deterministic; here other bytes, to see which
    attempt's they are), and the runner deletes the shard of an attempt that no record names."""
    fs, stage = _stage(s3_server)
    killed = TaskWriter(fs, stage, "map", "t1")
    killed.write("shards/t1.parquet", b"first attempt")
    killed.write("shards/orphan.parquet", b"of an attempt never committed")
    assert committed_record(fs, stage, "map", "t1", KEY) is None
    assert committed_records(fs, stage, "map", ["t1"], KEY) == {}

    retry = TaskWriter(fs, stage, "map", "t1")
    retry.write("shards/t1.parquet", b"second attempt")
    record = retry.commit(KEY, None)
    assert committed_records(fs, stage, "map", ["t1"], KEY) == {"t1": record}
    assert storage.read_bytes(fs, storage.join(stage, "shards/t1.parquet")) == b"second attempt"
    assert record["files"] == [{"path": "shards/t1.parquet", "bytes": 14,
                                "sha256": hashlib.sha256(b"second attempt").hexdigest()}]
    _remove_leftovers(fs, stage, {"t1": record})
    assert storage.list_files(fs, storage.join(stage, "shards")) == [storage.join(stage, "shards/t1.parquet")]


def test_a_phase_is_planned_from_listings_not_a_request_per_task(s3_server, tmp_path):
    fs, stage = _stage(s3_server)
    log = tmp_path / "moto.log"
    keys = [f"t{i:03d}" for i in range(200)]
    before = len(_requests(log))
    assert committed_records(fs, stage, "map", keys, KEY) == {}
    fresh = _requests(log, before)
    assert len(fresh) == 1 and fresh[0][0] == "GET" and "list-type=2" in fresh[0][1]  # one LIST, no GET per task

    records = {}
    for key in ("t005", "t150"):
        writer = TaskWriter(fs, stage, "map", key)
        writer.write(f"shards/{key}.parquet", key.encode())
        records[key] = writer.commit(KEY, None)
    other = TaskWriter(fs, stage, "map", "t007")  # committed under another key: not this run's
    other.write("shards/t007.parquet", b"x")
    other.commit({**KEY, "config_hash": "other"}, None)
    fs.delete_file(storage.join(stage, "shards/t150.parquet"))  # its file gone: the task runs again
    before = len(_requests(log))
    assert committed_records(fs, stage, "map", keys, KEY) == {"t005": records["t005"]}
    requests = _requests(log, before)
    # The records folder listed, the three records there read (pyarrow opens an object with a HEAD, then GETs it),
    # the stage folder's sizes listed: no request per task without a record, no HEAD per committed file.
    assert [m for m, _ in requests].count("GET") == 1 + 3 + 1
    assert sorted(p for m, p in requests if m == "HEAD") == [f"/runs/run/st/_work/commits/map/{k}.json"
                                                            for k in ("t005", "t007", "t150")]
