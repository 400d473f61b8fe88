"""Sources on object storage, through a real S3 server (moto) and pyarrow's own S3 client: a run whose sources and
output are both on the server makes the bytes a local run makes; globs expand as on disk; an unreachable store, a
missing object or an empty glob stops the run before any work; a rerun over a finished S3 run does nothing."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest
import yaml

from tests.s3server import free_port, running
from tokenmill.errors import ConfigError
from tokenmill.sources import uris
from tokenmill.documents import digest
from tokenmill.pipeline.config import load_config, parse_config
from tokenmill.sources.patterns import expand_pattern, matched_files
from tokenmill.pipeline.runner import run_pipeline

pytestmark = pytest.mark.ray

KEEP = ("web_en", "books_en", "news_zh", "cc_wet")
"""Demo sources in the end-to-end run: jsonl in zstd and gzip, Parquet (random access), gzip WARC (WET) records;
12 files. The other demo sources read through the same `open_binary`; left out to keep the run short (on moto every
committed file costs a few requests)."""
PREFIX = "s3://corpus/demo/"
HASHED = {"config_hash", "input_hash", "input_stamp", "manifest_hash"}
"""Fields of key records, commit records and manifests that hash what differs between the two runs: the source
patterns as written (in ingest's identity), and the input stamps (a local file's mtime, an object's Last-Modified)."""


def _demo(root: Path, keep: tuple[str, ...] | None) -> dict:
    """The demo corpus (no classifier), cut to the sources in `keep` (all: None), in shards of 20 documents, with a
    small tokenizer and 2 dedup partitions; its config as a mapping."""
    from tokenmill.demo import write_demo_corpus

    write_demo_corpus(root, docs_per_source=40, classifier=False)
    data = yaml.safe_load((root / "demo.yaml").read_text())
    stages = data["stages"]
    if keep is not None:
        for source in data["sources"]:
            if source["name"] not in keep:  # its files go too, so the S3 copy holds only what the run reads
                shutil.rmtree(root / source["paths"][0].split("/")[0])
        data["sources"] = [s for s in data["sources"] if s["name"] in keep]
        stages["clean"].pop("overrides", None)  # they name sources this run leaves out
    stages["dedup"] = {"partitions": 2}
    stages["tokenize"]["tokenizer"] = {"train": {"vocab_size": 512, "sample_docs": 200}}
    data["ingest"] = {"docs_per_shard": 20}
    return data


@contextmanager
def _local_and_s3(root: Path, keep: tuple[str, ...] | None) -> Iterator[tuple]:
    """Run the demo locally into `root/local`, then from `PREFIX` into `s3://runs/demo` on a fresh S3 server whose
    AWS_* variables are set for the block; yields (server, the S3 run's reports)."""
    data = _demo(root / "corpus", keep)
    (root / "corpus" / "local.yaml").write_text(yaml.safe_dump({**data, "output": str(root / "local")}))
    run_pipeline(load_config(root / "corpus" / "local.yaml"))
    mp = pytest.MonkeyPatch()
    try:
        with running(log=root / "moto.log") as server:
            for key, value in server.env().items():
                mp.setenv(key, value)
            server.create_bucket("corpus")
            server.create_bucket("runs")
            server.upload_tree(root / "corpus", "corpus", "demo")
            remote = {**data, "output": "s3://runs/demo",
                      "sources": [{**s, "paths": [PREFIX + p for p in s["paths"]]} for s in data["sources"]]}
            (root / "corpus" / "s3.yaml").write_text(yaml.safe_dump(remote))
            yield server, run_pipeline(load_config(root / "corpus" / "s3.yaml"))
    finally:
        mp.undo()


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _download(uri: str) -> dict[str, bytes]:
    fs, base = pafs.FileSystem.from_uri(uri)
    out = {}
    for info in fs.get_file_info(pafs.FileSelector(base, recursive=True)):
        if info.type == pafs.FileType.File:
            with fs.open_input_stream(info.path) as f:
                out[info.path[len(base) + 1:]] = f.read()
    return out


def _listing(uri: str) -> dict[str, tuple[int, int]]:
    """Every object under `uri` but the per-run lock and logs, with its size and modification time."""
    fs, base = pafs.FileSystem.from_uri(uri)
    return {i.path: (i.size, i.mtime_ns) for i in fs.get_file_info(pafs.FileSelector(base, recursive=True))
            if i.type == pafs.FileType.File and not i.path[len(base) + 1:].startswith(("_lock/", "_logs/"))}


def _differences(a, b, where=()) -> list[tuple[tuple, object, object]]:
    """Leaves where two JSON values differ, by key path."""
    if isinstance(a, dict) and isinstance(b, dict) and a.keys() == b.keys():
        return [d for k in sorted(a) for d in _differences(a[k], b[k], (*where, k))]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in _differences(x, y, (*where, i))]
    return [] if a == b else [(where, a, b)]


@pytest.fixture(scope="module")
def runs(ray_cluster, tmp_path_factory):
    """One local run and the same run from and to the S3 server. Ray started first (`ray_cluster`), without the
    server's AWS_* variables: the workers reach the store only through what the driver passes with each task."""
    root = tmp_path_factory.mktemp("s3run")
    with _local_and_s3(root, KEEP) as (server, reports):
        yield root, server, reports


@pytest.mark.slow  # `runs` is the demo twice, locally and through moto (about 70 s): a run on S3 in `make test` is
# test_a_rerun_reads_again_only_when_an_object_changed (sources and output on the store)
def test_s3_run_makes_the_bytes_of_the_local_run(runs):
    root, _, reports = runs
    assert [r.status for r in reports] == ["ran"] * 6
    _assert_same_bytes(root / "local", "s3://runs/demo", KEEP)


@pytest.mark.slow
def test_every_demo_source_from_s3_makes_the_bytes_of_the_local_run(ray_cluster, tmp_path):
    """Every reader of the demo (pile, reddit's 2 GiB zstd windows, WARC with HTML, gb18030 ...) from the store."""
    with _local_and_s3(tmp_path, None) as (_, reports):
        assert [r.status for r in reports] == ["ran"] * 6
        _assert_same_bytes(tmp_path / "local", "s3://runs/demo", None)


def _assert_same_bytes(local_root: Path, uri: str, keep: tuple[str, ...] | None) -> None:
    """Every file of every stage of the S3 run is the local run's, but for the JSON fields that hold or hash the
    source patterns as written (and the input stamps)."""
    local, remote = _files(local_root), _download(uri)
    per_run = ("_lock/", "_logs/")  # the run folder's lock and each run's timestamped log record
    assert sorted(k for k in local if not k.startswith(per_run)) == sorted(k for k in remote if not k.startswith(per_run))
    assert sum(k.startswith("tokenize/") and k.endswith(".bin") for k in local) > 0
    differing = {}
    for name, want in local.items():
        if name.startswith(per_run) or remote[name] == want:
            continue
        assert name.endswith(".json"), f"{name} differs between the local and the S3 run"
        a, b = json.loads(want), json.loads(remote[name])
        if name.endswith("manifest.json"):  # run_info is times and the key; content must match
            a, b = a["content"], b["content"]
        for where, x, y in _differences(a, b):
            if where[-2:-1] == ("paths",):  # ingest's identity holds each source's patterns as written
                assert y == PREFIX + x, (name, where)
            else:
                assert where[-1] in HASHED, f"{name}: {where} differs ({x!r} vs {y!r})"
            differing.setdefault(where[-1] if where[-1] in HASHED else "paths", set()).add(name.split("/")[0])
    # Exactly those: the patterns in ingest's manifest and key, and the hashes over them in every stage's records.
    assert differing["paths"] == {"ingest"}
    assert set(differing) <= HASHED | {"paths"}
    # ... and the hashes differ by the patterns alone: ingest's identity with the local patterns hashes as locally.
    identity = json.loads(remote["ingest/_work/key.json"])["identity"]
    for source in identity["sources"].values():
        source["paths"] = [p.removeprefix(PREFIX) for p in source["paths"]]
    assert digest(identity) == json.loads(local["ingest/_work/key.json"])["key"]["config_hash"]
    # A bad record names its file and record as for local files (the dropped shards above are the same bytes).
    errors = [json.loads(meta)["error"] for k in remote if k.startswith("ingest/dropped/")
              for meta in pq.read_table(pa.BufferReader(remote[k]), columns=["meta"])["meta"].to_pylist()]
    assert errors, "the demo plants reader faults"
    names = keep or list(json.loads(remote["ingest/_work/key.json"])["identity"]["sources"])
    where = rf"({'|'.join(names)}):\S+?(:\d+:|: (line|row|record) \d+)"  # `file:LINE:` or `file: row N`
    assert all(re.match(where, e) for e in errors), [e for e in errors if not re.match(where, e)][:3]


@pytest.mark.slow  # `runs` (above); `make test`: an S3 run up to date, in test_a_rerun_reads_again_only_when_...
def test_rerun_over_a_finished_s3_run_does_no_work(runs):
    root, server, _ = runs
    mp = pytest.MonkeyPatch()
    for key, value in server.env().items():
        mp.setenv(key, value)
    try:
        before = _listing("s3://runs/demo")
        reports = run_pipeline(load_config(root / "corpus" / "s3.yaml"))
        after = _listing("s3://runs/demo")
    finally:
        mp.undo()
    assert [(r.status, r.tasks_run) for r in reports] == [("up to date", 0)] * 6
    assert after == before  # no object written again (same size and Last-Modified), none added or removed


TREE = ["a.jsonl", "b.jsonl", "c.txt", ".hidden.jsonl", "x/a.jsonl", "x/y/b.jsonl", "x/.h/c.jsonl", "z1.jsonl",
        "z2.jsonl", "za.jsonl", "sub dir/d e.jsonl"]
PATTERNS = ["*.jsonl", "**/*.jsonl", "x/**/*.jsonl", "x/*", "z?.jsonl", "z[12].jsonl", "**", "*/*.jsonl",
            ".*.jsonl", "a.jsonl", "missing.jsonl", "nothing/*.jsonl", "sub dir/*.jsonl"]


def test_a_glob_under_s3_expands_as_the_local_one(s3_server, tmp_path):
    local = tmp_path / "tree"
    for name in TREE:
        (local / name).parent.mkdir(parents=True, exist_ok=True)
        (local / name).write_text("{}\n")
    s3_server.create_bucket("bkt")
    s3_server.upload_tree(local, "bkt", "tree")
    config = parse_config({"output": "out", "sources": [{"name": "s", "format": "jsonl", "paths": ["tree/a.jsonl"]}]},
                          tmp_path)
    for pattern in PATTERNS:
        on_disk = [p.relative_to(local).as_posix() for p in expand_pattern(config, f"tree/{pattern}")]
        in_store = [u.removeprefix("s3://bkt/tree/") for u in expand_pattern(config, f"s3://bkt/tree/{pattern}")]
        assert in_store == on_disk, pattern
        as_file_uri = [p.relative_to(local).as_posix() for p in expand_pattern(config, f"file://{local}/{pattern}")]
        assert as_file_uri == on_disk, pattern
    # Two patterns of one source matching one object list it once, sorted, as for local files.
    source = config.sources[0].model_copy(update={"paths": ["s3://bkt/tree/*.jsonl", "s3://bkt/tree/a.jsonl"]})
    assert matched_files(config, source) == ["s3://bkt/tree/a.jsonl", "s3://bkt/tree/b.jsonl",
                                             "s3://bkt/tree/z1.jsonl", "s3://bkt/tree/z2.jsonl",
                                             "s3://bkt/tree/za.jsonl"]


def _config(tmp_path: Path, *paths: str) -> dict:
    return {"output": str(tmp_path / "out"), "sources": [{"name": "s", "format": "jsonl", "paths": list(paths)}]}


def test_a_missing_object_or_an_empty_glob_stops_the_run_naming_the_uri(s3_server, tmp_path):
    s3_server.create_bucket("bkt")
    s3_server.client().put_object(Bucket="bkt", Key="data/a.jsonl", Body=b'{"text": "x"}\n')
    bad = ["s3://bkt/data/b.jsonl", "s3://bkt/data/*.jsonl.zst", "s3://nobucket/data/*.jsonl"]
    with pytest.raises(ConfigError) as err:
        parse_config(_config(tmp_path, "s3://bkt/data/a.jsonl", *bad), tmp_path)
    for j, uri in enumerate(bad, start=1):
        assert f"sources[0].paths[{j}]: '{uri}' matches no file" in str(err.value)
    assert "paths[0]" not in str(err.value)
    assert not (tmp_path / "out").exists()


def test_uris_tokenmill_cannot_read_are_refused_naming_the_key(s3_server, tmp_path):
    data = _config(tmp_path, "s3://bk*/x.jsonl", "hdfs://host/x.jsonl")
    data["sources"].append({"name": "t", "format": "jsonl", "paths": ["s3://bkt/x.jsonl", "local/*.jsonl"]})
    with pytest.raises(ConfigError) as err:
        parse_config(data, tmp_path)
    message = str(err.value)
    assert "sources[0].paths[0]: s3://bk*/x.jsonl: a wildcard in the bucket name 'bk*'" in message
    assert "sources[0].paths[1]: hdfs://host/x.jsonl: tokenmill reads sources from local paths" in message
    assert "sources[1].paths: local files and object-store URIs in one source have no common folder" in message


def test_an_unreachable_store_stops_the_run_before_any_work(s3_server, tmp_path, monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{free_port()}")  # nothing listens there
    with pytest.raises(ConfigError) as err:
        parse_config(_config(tmp_path, "s3://bkt/data/*.jsonl"), tmp_path)
    message = str(err.value)
    assert "sources[0].paths[0]: s3://bkt/data/*.jsonl: the object store did not answer" in message
    assert "testing" not in message  # the credentials are not in it
    assert not (tmp_path / "out").exists()


def _jsonl_body() -> bytes:
    return b"".join(json.dumps({"text": f"document {i} " + "w" * 50}).encode() + b"\n" for i in range(40_000))


def _parquet_body() -> bytes:
    table = pa.table({"text": [f"document {i} " + "w" * 50 for i in range(40_000)]})
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, row_group_size=1000, compression="none")
    return sink.getvalue().to_pybytes()


@pytest.mark.parametrize("fmt, key, body", [("jsonl", "a.jsonl", _jsonl_body), ("parquet", "a.parquet", _parquet_body)])
def test_a_store_failure_mid_read_fails_the_task_instead_of_dropping_records(s3_server, monkeypatch, fmt, key, body):
    """4 KiB GETs and an object (2.8 MB) larger than the reader's buffer: the outage lands mid-object. Parquet reads
    by range through the same stream (`uris.open_object`): a store failure after the footer, while row groups are
    fetched, is not taken for a damaged file either (pyarrow hands back the stream's own error)."""
    from tokenmill.sources.config import SourceConfig
    from tokenmill.sources.formats import READERS

    monkeypatch.setattr(uris, "READ_BUFFER", 4096)
    s3_server.create_bucket("bkt")
    s3_server.client().put_object(Bucket="bkt", Key=key, Body=body())
    source = SourceConfig(name="s", format=fmt, paths=[f"s3://bkt/{key}"])
    records = READERS[fmt].read(f"s3://bkt/{key}", source, f"s:{key}")
    assert next(records).text.startswith("document 0 ")
    s3_server.stop()
    with pytest.raises(uris.ObjectUnreadable, match=f"s3://bkt/{re.escape(key)}: reading from the store failed"):
        for record in records:
            assert record.drop is None, record.message


def test_an_object_changed_after_listing_is_named(s3_server, monkeypatch):
    from tokenmill.readers.base import InputChangedError, check_unchanged, file_stamp

    s3_server.create_bucket("bkt")
    s3_server.client().put_object(Bucket="bkt", Key="a.jsonl", Body=b'{"text": "x"}\n')
    stamp = file_stamp("s3://bkt/a.jsonl")
    assert stamp["bytes"] == 14 and stamp["mtime_ns"] > 0  # size and Last-Modified, as pyarrow's FileInfo gives them
    content = {"bytes": 14, "sha256": hashlib.sha256(b'{"text": "x"}\n').hexdigest()}
    assert file_stamp("s3://bkt/a.jsonl", "content") == content
    with monkeypatch.context() as m:  # the listing's size given: the bytes are streamed, no HEAD
        m.setattr(uris, "stat", lambda uri: pytest.fail(f"HEAD of {uri}"))
        assert file_stamp("s3://bkt/a.jsonl", "content", size=14) == content
    check_unchanged("s3://bkt/a.jsonl", "s:a.jsonl", stamp)
    s3_server.client().put_object(Bucket="bkt", Key="a.jsonl", Body=b'{"text": "xy"}\n')
    with pytest.raises(InputChangedError, match=r"s:a.jsonl \(s3://bkt/a.jsonl\) changed .*bytes 14 -> 15"):
        check_unchanged("s3://bkt/a.jsonl", "s:a.jsonl", stamp)


@pytest.mark.long  # three runs from the local S3 server: about 17 s, `make test-all`
def test_a_rerun_reads_again_only_when_an_object_changed(s3_server, tmp_path, ray_cluster):
    """Sources and output on the store: a changed object moves the stage aside (a folder moved object by object,
    `storage.move_tree`) and recomputes it; the object's old bytes put back restore the earlier generation from
    there (`stamp: content`: a put gives the object a new Last-Modified even with the same bytes)."""
    s3_server.create_bucket("bkt")
    client = s3_server.client()
    for name in ("a", "b"):
        client.put_object(Bucket="bkt", Key=f"in/{name}.jsonl", Body=b'{"text": "one document"}\n')
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(
        {"output": "s3://bkt/run", "sources": [{"name": "s", "format": "jsonl", "paths": ["s3://bkt/in/*.jsonl"],
                                                 "stamp": "content"}]}))

    def ingest():
        [report] = run_pipeline(load_config(tmp_path / "run.yaml"))
        return report.status, report.tasks_run

    assert ingest() == ("ran", 2)
    assert ingest() == ("up to date", 0)
    client.put_object(Bucket="bkt", Key="in/b.jsonl", Body=b'{"text": "one document"}\n{"text": "and another"}\n')
    assert ingest() == ("ran", 2)  # the key moved (b's stamp): the stage is recomputed, as for a local file
    assert any(k.startswith("run/_superseded/") for k in _keys(client, "bkt", "run/"))
    client.put_object(Bucket="bkt", Key="in/b.jsonl", Body=b'{"text": "one document"}\n')
    assert ingest() == ("restored", 0)  # stamp: content, so b's old bytes are the first generation's key again


def _keys(client, bucket: str, prefix: str) -> list[str]:
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    return [o["Key"] for page in pages for o in page.get("Contents", [])]


def test_move_tree_moves_a_folder_of_objects(s3_server):
    from tokenmill.pipeline import storage

    s3_server.create_bucket("bkt")
    for key in ("run/ingest/a.json", "run/ingest/_work/b.json", "run/other/c.json"):
        s3_server.client().put_object(Bucket="bkt", Key=key, Body=key.encode())
    fs, root = storage.filesystem_for("s3://bkt/run")
    storage.move_tree(fs, storage.join(root, "ingest"), storage.join(root, "_superseded", "t", "ingest"))
    assert _listing("s3://bkt/run").keys() == {"bkt/run/_superseded/t/ingest/a.json",
                                               "bkt/run/_superseded/t/ingest/_work/b.json", "bkt/run/other/c.json"}
    assert storage.read_bytes(fs, "bkt/run/_superseded/t/ingest/_work/b.json") == b"run/ingest/_work/b.json"


def test_a_source_pattern_reaching_an_object_store_output_is_refused(s3_server, tmp_path):
    """`s3://bkt/**` with the output at `s3://bkt/run`: the second run would ingest the first one's files."""
    s3_server.create_bucket("bkt")
    s3_server.client().put_object(Bucket="bkt", Key="in/a.jsonl", Body=b'{"text": "one document"}\n')
    config = {"output": "s3://bkt/run", "sources": [{"name": "s", "format": "jsonl", "paths": ["s3://bkt/in/*.jsonl"]},
                                                     {"name": "t", "format": "jsonl", "paths": ["s3://bkt/**"]}]}
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(config))
    with pytest.raises(ConfigError, match=r"sources\[1\]\.paths\[0\]: 's3://bkt/\*\*' would match files the run "
                                          r"writes under its output s3://bkt/run \(e\.g\. s3://bkt/run/") as err:
        run_pipeline(load_config(tmp_path / "run.yaml"))
    assert "sources[0].paths" not in str(err.value)  # its pattern stays out of the output


def test_each_pattern_is_listed_once_per_run(s3_server, tmp_path, monkeypatch):
    """A listing costs a request per thousand objects: validation lists each pattern once (its problems, its matches
    and the overlaps between sources from that one listing, the objects with their sizes and times) and planning
    uses that listing (no second listing, no HEAD per object); the stamps the listing gives are those a HEAD gives
    later (`check_unchanged`). A copy of the config moved to another folder lists anew."""
    from tokenmill.readers.base import file_stamp
    from tokenmill.stages.ingest import list_source_files

    s3_server.create_bucket("bkt")
    for key in ("in/a.jsonl", "in/x/b.jsonl", "other/c.jsonl"):
        s3_server.client().put_object(Bucket="bkt", Key=key, Body=b'{"text": "one document"}\n')
    patterns = ["s3://bkt/in/**/*.jsonl", "s3://bkt/in/a.jsonl", "s3://bkt/other/*.jsonl"]
    calls: list[str] = []
    listing = uris.list_objects
    monkeypatch.setattr(uris, "list_objects", lambda pattern: calls.append(pattern) or listing(pattern))
    stat = uris.stat

    def head(uri):
        raise AssertionError(f"HEAD of {uri}")

    monkeypatch.setattr(uris, "stat", head)
    data = _config(tmp_path, *patterns[:2])
    data["sources"].append({"name": "t", "format": "jsonl", "paths": patterns[2:]})
    config = parse_config(data, tmp_path)
    assert sorted(calls) == sorted(patterns)
    calls.clear()
    files = list_source_files(config)
    assert calls == []
    assert [f.path for f in list_source_files(config.model_copy(update={"base_dir": str(tmp_path / "x")}))] == \
        [f.path for f in files]
    assert sorted(calls) == sorted(patterns)
    assert [(f.source, f.path, f.relpath) for f in files] == [("s", "s3://bkt/in/a.jsonl", "a.jsonl"),
                                                              ("s", "s3://bkt/in/x/b.jsonl", "x/b.jsonl"),
                                                              ("t", "s3://bkt/other/c.jsonl", "c.jsonl")]
    monkeypatch.setattr(uris, "stat", stat)
    assert all(file_stamp(f.path) == {"bytes": f.size, "mtime_ns": f.mtime_ns} for f in files)


def test_a_file_uri_pattern_reaching_the_local_output_is_refused_as_a_path_is(tmp_path):
    """`file://` is a local path: a pattern written so is checked against the output folder as the bare path is."""
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "a.jsonl").write_text('{"text": "one document"}\n')
    for pattern in (f"{tmp_path}/**", f"file://{tmp_path}/**"):
        with pytest.raises(ConfigError, match=r"sources\[0\]\.paths\[0\]: .* would match files the run writes under "
                                              rf"its output folder {re.escape(str(tmp_path / 'out'))}"):
            parse_config(_config(tmp_path, pattern), tmp_path)


def test_a_root_of_the_other_kind_than_a_source_s_paths_is_refused(s3_server, tmp_path):
    """Ids are paths below the root: a local root for objects (or a folder URI for local files) is refused when
    the config is read, before any work."""
    s3_server.create_bucket("bkt")
    s3_server.client().put_object(Bucket="bkt", Key="in/a.jsonl", Body=b'{"text": "one document"}\n')
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "b.jsonl").write_text('{"text": "one document"}\n')
    data = _config(tmp_path, "s3://bkt/in/*.jsonl")
    data["sources"][0]["root"] = str(tmp_path / "data")
    data["sources"].append({"name": "t", "format": "jsonl", "paths": ["data/*.jsonl"], "root": "s3://bkt"})
    with pytest.raises(ConfigError) as err:
        parse_config(data, tmp_path)
    message = str(err.value)
    assert (f"sources[0].root: {str(tmp_path / 'data')!r} is a local folder, but sources[0].paths[0] "
            f"'s3://bkt/in/*.jsonl' is not below it") in message
    assert "sources[1].root: 's3://bkt' is a folder URI, but sources[1].paths[0] 'data/*.jsonl' is not below it" \
        in message
    data["sources"] = [{**data["sources"][0], "root": "s3://bkt"}]
    assert parse_config(data, tmp_path).sources[0].root == "s3://bkt"
