"""Ingest packing (issue 17 item 13): a source of many small files is read by a few tasks into a few shards, not one
task and shard (with its dropped, record and stats files) per file; ids, drops and resume are as before."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tokenmill.errors import ConfigError, StageFailed
from tokenmill.pipeline.config import load_config, parse_config
from tokenmill.pipeline.config import build_stages
from tokenmill.pipeline.runner import run_pipeline
from tokenmill.sources.formats import READERS

N_FILES = 2_000


def _corpus(root: Path, n: int) -> None:
    """`n` tiny jsonl files without ids; every 100th has a bad line and an empty text, so drops are per file too."""
    folder = root / "tiny"
    folder.mkdir()
    for i in range(n):
        lines = [json.dumps({"text": f"document {j} of file {i}"}) for j in range(2)]
        if i % 100 == 7:
            lines += ["{not json", json.dumps({"text": ""})]
        (folder / f"f{i:05d}.jsonl").write_text("\n".join(lines) + "\n")


def _config(root: Path, output: str = "run", **ingest) -> Path:
    path = root / f"{output}.yaml"
    path.write_text(json.dumps({"output": output, "execution": {"max_retries": 0}, "ingest": ingest,
                                "sources": [{"name": "a", "format": "jsonl", "paths": ["tiny/*.jsonl"]}]}))
    return path


def _column(folder: Path, column: str) -> list:
    return [v for p in sorted(folder.glob("*.parquet"))
            for v in pq.read_table(p, columns=[column]).column(column).to_pylist()]


def _read_one_file_at_a_time(root: Path, config) -> tuple[list[str], dict[str, list[str]]]:
    """Kept ids, and dropped ids per reason, as the reader gives them file by file (ingest before packing)."""
    source = config.sources[0]
    kept, dropped = [], {}
    for path in sorted((root / "tiny").glob("*.jsonl")):
        for r in READERS["jsonl"].read(str(path), source, f"a:{path.name}"):
            doc_id = f"a/{path.name}/{r.index}"
            if r.drop is None:
                kept.append(doc_id)
            else:
                dropped.setdefault(r.drop, []).append(doc_id)
    return kept, dropped


@pytest.mark.ray
def test_two_thousand_tiny_files_make_a_few_shards_with_the_same_ids(ray_cluster, tmp_path):
    _corpus(tmp_path, N_FILES)
    config = load_config(_config(tmp_path))
    [report] = [r for r in run_pipeline(config) if r.stage == "ingest"]
    ingest = tmp_path / "run" / "ingest"
    written = [p for p in ingest.rglob("*") if p.is_file()]
    # Before packing: a shard, a dropped shard, a record and stats per file, about 6,000 files here.
    assert len(written) < 100, f"{len(written)} files under ingest/"
    assert report.tasks_run <= 2

    kept, dropped = _read_one_file_at_a_time(tmp_path, config)
    assert _column(ingest / "shards", "id") == kept  # same ids, in listing order
    assert len(kept) == 2 * N_FILES
    got_dropped = _column(ingest / "dropped", "id")
    assert sorted(got_dropped) == sorted(i for ids in dropped.values() for i in ids)
    content = json.loads((ingest / "manifest.json").read_text())["content"]
    assert content["totals"]["drops"] == {reason: len(ids) for reason, ids in dropped.items()}
    assert {"bad_json", "empty_text"} <= set(dropped)
    assert len(content["input"]["files"]) == N_FILES  # every file still listed with its size
    # A shard's first errors name the file and line they come from, as before.
    errors = [e for s in content["shards"] for e in s["errors"]]
    assert any("a:f00007.jsonl:3" in e for e in errors), errors[:3]

    again = run_pipeline(load_config(_config(tmp_path)))
    assert again[0].stage == "ingest" and again[0].status == "up to date"


@pytest.mark.ray
def test_packed_output_is_the_same_bytes_whatever_the_worker_count(ray_cluster, tmp_path):
    _corpus(tmp_path, 200)
    outputs = []
    for workers in (1, 2):
        path = _config(tmp_path, output=f"run{workers}", pack_bytes=2_000)
        raw = json.loads(path.read_text())
        raw["execution"]["workers"] = workers
        path.write_text(json.dumps(raw))
        run_pipeline(load_config(path))
        shards = tmp_path / f"run{workers}" / "ingest" / "shards"
        outputs.append({p.name: p.read_bytes() for p in shards.glob("*.parquet")})
    assert outputs[0] == outputs[1]
    assert 2 < len(outputs[0]) < 50  # several packed tasks, far fewer than 200 files


@pytest.mark.ray
def test_a_file_appended_to_inside_a_packed_task_fails_it_naming_the_file(ray_cluster, tmp_path):
    _corpus(tmp_path, 100)
    config = load_config(_config(tmp_path))
    stages = build_stages(config)
    changed = tmp_path / "tiny" / "f00042.jsonl"
    listed = changed.stat().st_size
    with open(changed, "a") as f:
        f.write(json.dumps({"text": "appended while the run went on"}) + "\n")
    with pytest.raises(StageFailed) as failed:
        run_pipeline(config, stages=stages)
    message = str(failed.value)
    assert "InputChangedError" in message and "a:f00042.jsonl" in message
    assert f"bytes {listed} -> {os.stat(changed).st_size}" in message
    assert not (tmp_path / "run" / "ingest" / "manifest.json").exists()
    reports = run_pipeline(load_config(_config(tmp_path)))
    # 2 records per file, a bad line and an empty text in f00007, the appended record
    assert reports[0].totals["docs_in"] == 2 * 100 + 2 + 1


def _files(sizes: list[tuple[str, int]]):
    from tokenmill.stages.ingest import SourceFile

    return [SourceFile(source, f"/{source}/{i:05d}", f"{i:05d}", size, 0) for i, (source, size) in enumerate(sizes)]


def test_packing_groups_consecutive_small_files_of_one_source():
    from tokenmill.stages.ingest import PACK_MIN_FILES, group_key, pack_files

    n = PACK_MIN_FILES
    files = _files([("a", 10)] * n + [("a", 100)] + [("a", 10)] * 3 + [("b", 10)] * n + [("c", 10)] * (n - 1))
    groups = pack_files(files, budget=40)
    sizes = [[files[i].source for i in g] for g in groups]
    # a: groups of 4 small files (40 bytes reached), the large file alone; the 3 small files after it pack again.
    assert sizes[: n // 4] == [["a"] * 4] * (n // 4)
    assert sizes[n // 4] == ["a"] and files[groups[n // 4][0]].size == 100
    assert sizes[n // 4 + 1] == ["a"] * 3
    # b packs on its own (never with a); c has fewer than PACK_MIN_FILES small files: one task each, as before.
    assert all(len(set(s)) == 1 for s in sizes)
    assert sum(1 for s in sizes if s[0] == "c") == n - 1
    assert [i for g in groups for i in g] == list(range(len(files)))  # listing order, every file once
    # Keys: a file alone keeps its key; a group's is stable and names its first file and count.
    assert group_key([files[n]]) == files[n].task_key
    key = group_key([files[i] for i in groups[0]])
    assert key.startswith(files[0].task_key + ".4files.") and key == group_key([files[i] for i in groups[0]])
    assert pack_files(files, budget=40) == groups


def test_pack_bytes_is_validated_and_left_out_of_the_identity_when_unset(tmp_path):
    (tmp_path / "a.jsonl").write_text("{}\n")
    source = [{"name": "web", "format": "jsonl", "paths": ["*.jsonl"]}]
    assert parse_config({"output": "out", "sources": source}, tmp_path).ingest.pack_bytes is None
    with pytest.raises(ConfigError, match="ingest.pack_bytes"):
        parse_config({"output": "out", "ingest": {"pack_bytes": 0}, "sources": source}, tmp_path)
    [stage] = build_stages(parse_config({"output": "out", "sources": source}, tmp_path))
    assert "pack_bytes" not in stage.identity()["config"]
    [stage] = build_stages(parse_config({"output": "out", "ingest": {"pack_bytes": 10}, "sources": source}, tmp_path))
    assert stage.identity()["config"]["pack_bytes"] == 10


@pytest.mark.ray
def test_a_worker_killed_in_a_packed_task_reruns_that_task_alone_to_the_same_bytes(ray_cluster, tmp_path, monkeypatch):
    """Resume is per packed task: SIGKILL the worker of one (after its first shard is written), and the rerun reads
    only that task's files again; every file of the stage is byte-identical to an uninterrupted run's."""
    from tests.faults.harness import committed_tasks, tree
    from tokenmill.pipeline import faults

    _corpus(tmp_path, 200)
    run_pipeline(load_config(_config(tmp_path, output="reference", pack_bytes=2_000)))
    tasks = [task for _, task in committed_tasks(tmp_path / "reference" / "ingest")]
    assert len(tasks) > 2 and all("files." in t for t in tasks)
    victim = tasks[1]
    plan, marker = tmp_path / "faults.json", tmp_path / "killed"
    plan.write_text(json.dumps({"kill_worker": {"stage": "ingest", "task": victim, "point": "written",
                                                "once": str(marker)}, "log": str(tmp_path / "injected.jsonl")}))
    monkeypatch.setenv(faults.ENV, str(plan))
    with pytest.raises(StageFailed) as failed:
        run_pipeline(load_config(_config(tmp_path, pack_bytes=2_000)))
    assert marker.exists() and [k for k, _ in failed.value.failures] == [victim]
    plan.write_text("{}")
    [report] = run_pipeline(load_config(_config(tmp_path, pack_bytes=2_000)))
    assert report.tasks_run == 1 and report.tasks_skipped == len(tasks) - 1
    assert tree(tmp_path / "run" / "ingest") == tree(tmp_path / "reference" / "ingest")
