"""Hostile `against` runs: an earlier run handed over is refused before any work, with a message naming the folder
or file and what is wrong, when it is a symlink or holds one, when an index file states other settings, is cut
short, or names a shard the manifest does not list, and when its manifest was edited after the run finished.

One tiny earlier run is built per module; each case edits a copy of it and is refused by `validate`'s check
(`check_paths`, no Ray); one case also goes through the runner, which stops in the `against` phase before the
dedup stage writes anything.
"""

from __future__ import annotations

import hashlib
import json
import random
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from tests.conftest import write_jsonl
from tests.pipeline.test_runner import run_into
from tests.stages.test_dedup_stage import article, edited
from tokenmill.dedup.incremental import INDEX_META
from tokenmill.errors import ConfigError, TokenmillError
from tokenmill.pipeline.config import check_paths, load_config

# One run of ingest + dedup for the module and one more refused: over the fast tier's ~10 s on 2 loaded cores (a
# run of this size is about 13 s there, `test_incremental_dedup.py`), so the one test of these checks is `long`.
pytestmark = [pytest.mark.ray, pytest.mark.long]


def _config(root: Path, name: str, patterns: list[str], **dedup) -> Path:
    config = {"output": f"out-{name}", "seed": 1, "ingest": {"docs_per_shard": 4},
              "sources": [{"name": "web", "format": "jsonl", "paths": patterns, "id_field": "id"}],
              "stages": {"dedup": {"partitions": 2, "keep": ["lowest_id"], **dedup}}}
    path = root / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture(scope="module")
def earlier(ray_cluster, tmp_path_factory) -> Path:
    """A finished run of 10 documents (one near copy, one exact copy) in 3 shards, 2 index partitions."""
    root = tmp_path_factory.mktemp("hostile-against")
    rng = random.Random(5)
    base = [article(rng, 80) for _ in range(8)]
    write_jsonl(root / "one" / "x.jsonl", [{"id": f"a{i}", "text": t} for i, t in enumerate(base)]
                + [{"id": "a8", "text": edited(base[0], rng, 0.97)}, {"id": "a9", "text": base[1]}])
    write_jsonl(root / "two" / "x.jsonl", [{"id": "b0", "text": base[2]}, {"id": "b1", "text": article(rng, 80)}])
    run_into(_config(root, "one", ["one/*.jsonl"]), root / "run")
    assert len(list((root / "run" / "dedup" / "shards").glob("*.parquet"))) >= 2
    return root


@pytest.fixture
def case(earlier, tmp_path) -> tuple[Path, Path]:
    """(a copy of the earlier run to damage, the config of a second dump `against` it)."""
    run = tmp_path / "earlier"
    shutil.copytree(earlier / "run", run, symlinks=True)
    shutil.copytree(earlier / "two", tmp_path / "two")
    return run, _config(tmp_path, "new", ["two/*.jsonl"], against=[str(run)])


def _refused(config: Path, *patterns: str) -> str:
    """`validate`'s check refuses the config; the message matches each pattern. Returns it."""
    with pytest.raises(ConfigError) as err:
        check_paths(load_config(config))
    for pattern in patterns:
        assert pattern in str(err.value), str(err.value)
    return str(err.value)


def _rewrite_committed(run: Path, rel: str, data: bytes) -> None:
    """Replace a committed file of the earlier dedup stage and forge its commit record to match (size and sha256):
    what the size checks cannot see, only the content checks."""
    stage = run / "dedup"
    (stage / rel).write_bytes(data)
    for record_file in (stage / "_work" / "commits").rglob("*.json"):
        record = json.loads(record_file.read_text())
        for f in record.get("files") or []:
            if f["path"] == rel:
                f["bytes"], f["sha256"] = len(data), hashlib.sha256(data).hexdigest()
                record_file.write_text(json.dumps(record))
                return
    raise AssertionError(f"no record names {rel}")


def _index_with(path: Path, *, meta=None, shard_names=None) -> bytes:
    """An index file's bytes with its metadata (and, with `shard_names`, the shard dictionary) replaced."""
    table = pq.read_table(path)
    if shard_names is not None:
        shard = table.column("shard").combine_chunks()
        table = table.set_column(table.schema.get_field_index("shard"), "shard",
                                 pa.DictionaryArray.from_arrays(shard.indices, pa.array(shard_names, pa.string())))
    stated = json.loads(table.schema.metadata[INDEX_META])
    table = table.replace_schema_metadata({INDEX_META: json.dumps(meta(stated)).encode()} if meta else
                                          table.schema.metadata)
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    return sink.getvalue().to_pybytes()


def test_the_untouched_earlier_run_is_accepted(case):
    run, config = case
    check_paths(load_config(config))  # the cases below differ from this one by their damage alone


def test_a_symlinked_earlier_run_folder_is_refused(case, tmp_path):
    run, _ = case
    link = tmp_path / "link"
    link.symlink_to(run, target_is_directory=True)
    config = _config(tmp_path, "linked", ["two/*.jsonl"], against=[str(link)])
    _refused(config, str(link), "is a symlink to")


def test_a_symlink_inside_the_earlier_dedup_folder_is_refused(case, tmp_path):
    run, config = case
    index = run / "dedup" / "index" / "p0001.parquet"
    moved = tmp_path / "elsewhere.parquet"
    index.rename(moved)
    index.symlink_to(moved)  # same bytes, same size: only the link check can see it
    _refused(config, str(index), "is a symlink to")


def test_an_index_file_stating_other_settings_is_refused(case):
    run, config = case
    rel = "index/p0000.parquet"

    def other(meta):
        return {**meta, "settings": {**meta["settings"], "num_perm": 128}}

    _rewrite_committed(run, rel, _index_with(run / "dedup" / rel, meta=other))
    _refused(config, rel, "states other settings", "num_perm: earlier 128, this run 320")


def test_an_index_file_of_another_scheme_is_refused(case):
    run, config = case
    rel = "index/p0001.parquet"
    _rewrite_committed(run, rel, _index_with(run / "dedup" / rel, meta=lambda m: {**m, "minhash": "other"}))
    _refused(config, rel, "another text normalisation or hashing")


def test_an_index_file_cut_short_is_refused(case):
    run, config = case
    path = run / "dedup" / "index" / "p0001.parquet"
    size = path.stat().st_size
    path.write_bytes(path.read_bytes()[: size // 2])
    _refused(config, "index/p0001.parquet", f"{size // 2} bytes, committed {size}")


def test_an_index_file_missing_is_refused(case):
    run, config = case
    (run / "dedup" / "index" / "p0000.parquet").unlink()
    _refused(config, "index/p0000.parquet", "missing")


def test_an_index_file_without_its_commit_record_is_refused(case):
    run, config = case
    for record_file in (run / "dedup" / "_work" / "commits" / "index").glob("*.json"):
        record_file.unlink()
    _refused(config, "index/p0000.parquet", "no committed dedup index")


def test_index_records_that_skip_a_partition_are_refused(case):
    # The partition count of an earlier run made with `partitions: auto` is read from its committed index files:
    # a record set naming p0001 but not p0000 is not a count, whatever the files on disk.
    run, config = case
    for record_file in (run / "dedup" / "_work" / "commits" / "index").glob("*.json"):
        record = json.loads(record_file.read_text())
        record["files"] = [f for f in record["files"] if f["path"] != "index/p0000.parquet"]
        record_file.write_text(json.dumps(record))
    _refused(config, "index/p0001.parquet", "not one per partition of its 2")


def test_an_index_naming_a_shard_the_manifest_does_not_list_is_refused(case):
    run, config = case
    rel = "index/p0000.parquet"
    names = pq.read_table(run / "dedup" / rel).column("shard").combine_chunks().dictionary.to_pylist()
    forged = [f"../../../../etc/passwd-{i}" for i in range(len(names))]  # every row now names one of these
    _rewrite_committed(run, rel, _index_with(run / "dedup" / rel, shard_names=forged))
    _refused(config, rel, "names shard(s) its manifest does not list", "etc/passwd")


def _edit_manifest(run: Path, edit) -> None:
    path = run / "dedup" / "manifest.json"
    manifest = json.loads(path.read_text())
    edit(manifest["content"])
    path.write_text(json.dumps(manifest))


def test_a_manifest_whose_config_was_edited_is_refused(case):
    run, config = case
    # Another partition count: the run would read index files of partitions it never wrote as if they were its own.
    _edit_manifest(run, lambda c: c["config"]["config"].update(partitions=4))
    _refused(config, str(run), "manifest's config is not the one its key record was made from")


def test_a_manifest_whose_shard_list_was_edited_is_refused(case):
    run, config = case

    def swap(content):  # two shards' entries exchanged: each index row would read another shard's row
        first, second = content["shards"][0], content["shards"][1]
        first["path"], second["path"] = second["path"], first["path"]

    _edit_manifest(run, swap)
    _refused(config, str(run), "shard list is not what its committed tasks wrote")


def test_a_manifest_missing_a_shard_is_refused(case):
    run, config = case
    _edit_manifest(run, lambda c: c["shards"].pop())
    _refused(config, "shard list is not what its committed tasks wrote")


def test_the_runner_refuses_before_the_dedup_stage_writes_anything(case, tmp_path):
    run, config = case
    _edit_manifest(run, lambda c: c["shards"].pop())
    out = tmp_path / "out"
    with pytest.raises(TokenmillError, match="shard list is not what its committed tasks wrote"):
        run_into(config, out)
    work = out / "dedup" / "_work"
    assert not list(work.glob("commits/*/*.json")) and not (work / "bands").exists()
    assert not (out / "dedup" / "manifest.json").exists()
