"""Input stamps (issue 17 item 12): a source file that changes while the run reads it fails its task, naming the
file; `stamp: content` notices a same-size rewrite whose modification time was kept (`cp -p`, `rsync -t`)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tokenmill.errors import ConfigError, StageFailed
from tokenmill.pipeline.config import load_config
from tokenmill.pipeline.config import build_stages
from tokenmill.pipeline.runner import run_pipeline


def _write(path: Path, texts: list[str]) -> None:
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))


def _config(tmp_path: Path, **source) -> Path:
    config = tmp_path / "run.yaml"
    config.write_text(json.dumps({"output": "run", "execution": {"max_retries": 0},
                                  "sources": [{"name": "a", "format": "jsonl", "paths": ["a.jsonl"], **source}]}))
    return config


def _texts(run: Path) -> list[str]:
    return [t for p in sorted((run / "ingest" / "shards").glob("*.parquet"))
            for t in pq.read_table(p, columns=["text"]).column("text").to_pylist()]


@pytest.mark.ray
def test_file_appended_after_listing_fails_its_task_naming_it(ray_cluster, tmp_path):
    """Listed with 2 records, appended to before its task read it: the task fails naming `a:a.jsonl`, and no
    manifest records the old size beside a shard holding the appended record (before: both, silently)."""
    _write(tmp_path / "a.jsonl", ["first document", "second document"])
    config = load_config(_config(tmp_path))
    stages = build_stages(config)  # the listing: 2 records' worth of bytes
    listed = os.stat(tmp_path / "a.jsonl").st_size
    with open(tmp_path / "a.jsonl", "a") as f:
        f.write(json.dumps({"text": "appended while the run went on"}) + "\n")
    with pytest.raises(StageFailed) as failed:
        run_pipeline(config, stages=stages)
    message = str(failed.value)
    assert "InputChangedError" in message and "a:a.jsonl" in message and "changed while this run read it" in message
    assert f"bytes {listed} -> {os.stat(tmp_path / 'a.jsonl').st_size}" in message
    assert not (tmp_path / "run" / "ingest" / "manifest.json").exists()
    # A rerun lists the file anew and reads all three records.
    reports = run_pipeline(load_config(_config(tmp_path)))
    assert reports[0].totals["docs_out"] == 3


@pytest.mark.ray
def test_content_stamp_rereads_a_same_size_rewrite_with_kept_mtime(ray_cluster, tmp_path):
    """`cp -p` of another file of the same size over a source: size and mtime unchanged. `stamp: content` reads it
    again; the default `mtime` stamp cannot tell (documented)."""
    source = tmp_path / "a.jsonl"
    _write(source, ["alpha text one", "beta text two"])
    times = os.stat(source)
    content = _config(tmp_path, stamp="content")
    first = run_pipeline(load_config(content))
    assert first[0].status == "ran" and _texts(tmp_path / "run") == ["alpha text one", "beta text two"]

    _write(source, ["omega text one", "zeta text two"])  # same length, other bytes
    os.utime(source, ns=(times.st_atime_ns, times.st_mtime_ns))
    assert os.stat(source).st_size == times.st_size and os.stat(source).st_mtime_ns == times.st_mtime_ns

    again = run_pipeline(load_config(content))
    assert again[0].status == "ran" and any("its input changed" in n for n in again[0].notes)
    assert _texts(tmp_path / "run") == ["omega text one", "zeta text two"]
    # Touched only (same bytes, new mtime): a content stamp does not re-read it.
    os.utime(source, ns=(times.st_atime_ns, times.st_mtime_ns + 10**9))
    assert run_pipeline(load_config(content))[0].status == "up to date"


def test_stamp_is_validated(tmp_path):
    _write(tmp_path / "a.jsonl", ["x"])
    with pytest.raises(ConfigError, match=r"stamp.*mtime.*content"):
        load_config(_config(tmp_path, stamp="sha1"))


def test_check_unchanged_names_what_changed(tmp_path):
    from tokenmill.readers.base import InputChangedError, check_unchanged, file_stamp

    path = tmp_path / "f.jsonl"
    path.write_bytes(b'{"text": "abc"}\n')
    st = os.stat(path)
    mtime, content = file_stamp(str(path)), file_stamp(str(path), "content")
    path.write_bytes(b'{"text": "xyz"}\n')
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    check_unchanged(str(path), "s:f.jsonl", mtime)  # the mtime stamp cannot see a same-size rewrite
    with pytest.raises(InputChangedError, match=r"s:f\.jsonl .*sha256 [0-9a-f]{64} -> [0-9a-f]{64}.*rerun"):
        check_unchanged(str(path), "s:f.jsonl", content)
    path.write_bytes(b'{"text": "xyz!"}\n')
    with pytest.raises(InputChangedError, match=r"bytes 16 -> 17"):
        check_unchanged(str(path), "s:f.jsonl", mtime)
    path.unlink()
    with pytest.raises(InputChangedError, match="was deleted"):
        check_unchanged(str(path), "s:f.jsonl", content)
