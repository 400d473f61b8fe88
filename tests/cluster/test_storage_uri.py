"""A run folder named by a URI goes through `pyarrow.fs` (`pipeline/storage.py`): what a cluster needs when its
nodes share an object store instead of a filesystem. A `file://` URI exercises the same code path locally."""

from __future__ import annotations

import pyarrow.fs as pafs
import pytest

from tests.conftest import make_corpus
from tests.pipeline.test_runner import run_into, tree
from tokenmill.pipeline import storage


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
