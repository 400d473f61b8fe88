"""`gs://` through the same storage layer as `s3://`, against a local GCS emulator (gcp-storage-emulator, 127.0.0.1)
and pyarrow's own GCS client: a demo run with its sources and output on the emulator makes the bytes of the same
run on local disk, and a rerun over it does no work and writes nothing. Skipped, saying why, where the emulator
cannot start."""

from __future__ import annotations

import json

import pyarrow.fs as pafs
import pytest
import yaml

from tests.gcsserver import GcsServer, GcsUnavailable
from tests.objectstore.test_sources_s3 import _demo, _files
from tokenmill.pipeline import storage
from tokenmill.pipeline.config import load_config
from tokenmill.pipeline.runner import run_pipeline
from tokenmill.sources import uris

pytestmark = pytest.mark.ray

KEEP = ("web_en", "books_en")
"""jsonl in zstd and Parquet, 7 files: the readers behind the other demo sources read through the same `open_binary`
(tests/objectstore/test_sources_s3.py runs them from S3); two keep the run short on the emulator."""
PREFIX = "gs://corpus/demo/"


@pytest.fixture
def gcs_server(tmp_path, monkeypatch):
    server = GcsServer(log=tmp_path / "gcs.log")
    try:
        server.start()
    except GcsUnavailable as err:
        print(f"skipped: {err}")
        pytest.skip(str(err))
    for key, value in server.env().items():
        monkeypatch.setenv(key, value)
    yield server
    server.stop()


def _download(uri: str) -> dict[str, tuple[bytes, int]]:
    fs, base = uris.from_uri(uri)
    out = {}
    for info in storage.list_tree(fs, base, recursive=True):
        if info.type == pafs.FileType.File:
            out[info.path[len(base) + 1:]] = (storage.read_bytes(fs, info.path), info.mtime_ns)
    return out


@pytest.mark.long  # the demo twice (2 sources), locally and through the emulator: about 30 s
def test_a_gs_run_makes_the_bytes_of_the_local_run_and_a_rerun_does_no_work(ray_cluster, gcs_server, tmp_path):
    data = _demo(tmp_path / "corpus", KEEP)
    (tmp_path / "corpus" / "local.yaml").write_text(yaml.safe_dump({**data, "output": str(tmp_path / "local")}))
    run_pipeline(load_config(tmp_path / "corpus" / "local.yaml"))
    gcs_server.create_bucket("corpus")
    gcs_server.create_bucket("runs")
    gcs_server.upload_tree(tmp_path / "corpus", "corpus", "demo")
    remote = {**data, "output": "gs://runs/demo",
              "sources": [{**s, "paths": [PREFIX + p for p in s["paths"]]} for s in data["sources"]]}
    (tmp_path / "corpus" / "gs.yaml").write_text(yaml.safe_dump(remote))
    reports = run_pipeline(load_config(tmp_path / "corpus" / "gs.yaml"))
    assert [r.status for r in reports] == ["ran"] * len(reports) and len(reports) >= 5

    local, stored = _files(tmp_path / "local"), _download("gs://runs/demo")
    per_run = ("_lock/", "_logs/")
    assert sorted(k for k in local if not k.startswith(per_run)) == sorted(k for k in stored if not k.startswith(per_run))
    assert any(k.startswith("tokenize/") and k.endswith(".bin") for k in stored)
    for name, want in local.items():
        if name.startswith(per_run):
            continue
        if name.endswith("manifest.json"):  # run_info holds times; the content holds the source patterns' hashes
            a, b = json.loads(want)["content"], json.loads(stored[name][0])["content"]
            assert a["totals"] == b["totals"] and len(a["shards"]) == len(b["shards"]), name
            assert [s["content_hash"] for s in a["shards"]] == [s["content_hash"] for s in b["shards"]], name
        elif not name.endswith(".json"):  # commit and key records hash the patterns as written
            assert stored[name][0] == want, f"{name} differs between the local and the gs run"

    again = run_pipeline(load_config(tmp_path / "corpus" / "gs.yaml"))
    assert [(r.status, r.tasks_run) for r in again] == [("up to date", 0)] * len(reports)
    after = _download("gs://runs/demo")
    assert {k: v for k, v in after.items() if not k.startswith(per_run)} == \
        {k: v for k, v in stored.items() if not k.startswith(per_run)}  # nothing written again, added or removed
