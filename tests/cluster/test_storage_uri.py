"""A run folder named by a URI goes through `pyarrow.fs` (`pipeline/storage.py`): what a cluster needs when its
nodes share an object store instead of a filesystem. A `file://` URI exercises the same code path locally."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pyarrow.fs as pafs
import pytest
import yaml

from tests.conftest import make_corpus
from tests.pipeline.test_runner import run_into, tree
from tokenmill.pipeline import storage
from tokenmill.sources import uris


def test_file_uri_resolves_to_the_local_filesystem(tmp_path):
    fs, path = storage.filesystem_for(f"file://{tmp_path}/run")
    assert isinstance(fs, pafs.LocalFileSystem) and path == f"{tmp_path}/run"
    storage.write_json_atomic(fs, storage.join(path, "a", "b.json"), {"x": 1}, "t")
    assert storage.read_json(fs, storage.join(path, "a", "b.json")) == {"x": 1}
    assert storage.list_files(fs, storage.join(path, "a"), ".json") == [f"{tmp_path}/run/a/b.json"]
    assert (tmp_path / "run" / "a" / "b.json").is_file()


@pytest.mark.ray
def test_run_into_a_file_uri_matches_a_plain_path(ray_cluster, tmp_path):
    config = make_corpus(tmp_path / "corpus")
    run_into(config, tmp_path / "plain")
    run_into(config, f"file://{tmp_path}/uri")
    assert not (tmp_path / "corpus" / "file:").exists(), "the URI was taken for a relative folder name"
    assert tree(tmp_path / "uri") == tree(tmp_path / "plain")


# ------------------------------------------------------------------ credentials and buckets in URIs (issue 31 item 11)

SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"  # AWS documentation's example: a secret key may hold a `/`


def _cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tokenmill", *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **env})


@pytest.mark.long  # CLI subprocesses against the S3 server: 14 s
def test_credentials_in_a_uri_are_refused_and_never_shown(s3_server, tmp_path):
    """`s3://KEY:SECRET@bucket/...` used to be handed to pyarrow, whose error quoted it whole: the secret was on the
    terminal. Refused in every place a URI is taken (source patterns, a source root, the output, a run folder on the
    command line), with the credentials shown as `***`, on a real S3 server that would have accepted them."""
    s3_server.create_bucket("bkt")
    s3_server.client().put_object(Bucket="bkt", Key="x/a.jsonl", Body=b'{"text": "hello"}\n')
    env = s3_server.env()
    with_key = f"s3://AKIAEXAMPLE:{SECRET}@bkt"
    local = tmp_path / "a.jsonl"
    local.write_text('{"text": "hello"}\n')
    configs = {
        "paths": {"output": str(tmp_path / "out"), "sources": [{"name": "s", "format": "jsonl",
                                                                  "paths": [f"{with_key}/x/*.jsonl"]}]},
        "root": {"output": str(tmp_path / "out"), "sources": [{"name": "s", "format": "jsonl", "root": with_key,
                                                                 "paths": ["s3://bkt/x/*.jsonl"]}]},
        "output": {"output": f"{with_key}/run", "sources": [{"name": "s", "format": "jsonl", "paths": [str(local)]}]},
    }
    for key, data in configs.items():
        config = tmp_path / f"{key}.yaml"
        config.write_text(yaml.safe_dump(data))
        for command in [["-v", "run", str(config)]] + ([["validate", str(config)]] if key == "paths" else []):
            result = _cli(*command, env=env)
            assert result.returncode == 2, (key, result.stderr[-2000:])
            assert SECRET not in result.stderr + result.stdout and "AKIAEXAMPLE" not in result.stderr, key
            assert "Traceback" not in result.stderr
            assert "s3://***@bkt" in result.stderr and "credentials in a URI are refused" in result.stderr, key
    result = _cli("runs", "du", f"{with_key}/run", env=env)
    assert result.returncode == 2 and SECRET not in result.stderr and "s3://***@bkt/run" in result.stderr
    assert not (tmp_path / "out").exists()
    assert [o["Key"] for o in s3_server.client().list_objects_v2(Bucket="bkt")["Contents"]] == ["x/a.jsonl"]


def test_display_uri_redacts_every_uri_in_a_text():
    text = f"s3://AK:{SECRET}@bkt/x and gs://user@b/y failed; s3://bkt/key@2x.png is a key"
    assert uris.display_uri(text) == "s3://***@bkt/x and gs://***@b/y failed; s3://bkt/key@2x.png is a key"
    assert uris.uri_problem("s3://bkt/key@2x.png") is None and uris.uri_problem("/local/a@b.jsonl") is None


@pytest.mark.long  # CLI subprocesses against the S3 server: 10 s
def test_a_uri_without_a_bucket_says_so(s3_server, tmp_path):
    """`s3:///xyz` used to say "matches no file" (pyarrow takes `xyz` for the bucket); it names no bucket."""
    s3_server.create_bucket("xyz")
    env = s3_server.env()
    local = tmp_path / "a.jsonl"
    local.write_text('{"text": "hello"}\n')
    cases = {
        "sources[0].paths[0]": {"output": str(tmp_path / "out"),
                                "sources": [{"name": "s", "format": "jsonl", "paths": ["s3:///xyz/*.jsonl"]}]},
        "sources[0].root": {"output": str(tmp_path / "out"),
                            "sources": [{"name": "s", "format": "jsonl", "root": "gs:///xyz", "paths": ["s3://xyz/*"]}]},
        "output": {"output": "s3:///xyz/run", "sources": [{"name": "s", "format": "jsonl", "paths": [str(local)]}]},
    }
    for key, data in cases.items():
        config = tmp_path / "bucketless.yaml"
        config.write_text(yaml.safe_dump(data))
        result = _cli("validate", str(config), env=env)
        assert result.returncode == 2, result.stderr[-2000:]
        assert re.search(rf"{re.escape(key)}: (s3|gs):///xyz\S*: names no bucket; write it as (s3|gs)://BUCKET/KEY",
                         " ".join(result.stderr.split())), (key, result.stderr)
    result = _cli("runs", "du", "s3:///xyz/run", env=env)
    assert result.returncode == 2 and "s3:///xyz/run: names no bucket" in result.stderr
