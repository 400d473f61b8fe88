"""The tokenize stage's merge on real Ray: files per source and split, about equal and cut at documents, the same
bytes at any worker count, and a worker killed inside a merge task resumed to the same bytes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import yaml

from tests.conftest import write_jsonl
from tests.faults.harness import tree
from tokenmill.errors import StageFailed
from tokenmill.pipeline import faults
from tokenmill.pipeline.config import load_config
from tokenmill.pipeline.runner import run_pipeline
from tokenmill.tokenize import tokens_json
from tokenmill.tokenize.indexed import IndexedReader

pytestmark = pytest.mark.ray

MAX_TOKENS = 20_000


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """Real text of two sources in shards of 40 documents (Pile pages, Chinese news), GPT-2's tokenizer, 10% valid,
    files of up to `MAX_TOKENS` tokens: several per source for train, one for valid."""
    from tests.conftest import SHARED_DATA

    if not SHARED_DATA.is_dir():
        pytest.skip(f"real-data samples not found at {SHARED_DATA}")
    root = tmp_path_factory.mktemp("merge")
    pile = json.loads((SHARED_DATA / "pile" / "pearl_pile_texts.json").read_text(encoding="utf-8"))[:150]
    zh = [line.split("\t", 1)[1].strip() for line in
          (SHARED_DATA / "chinese" / "thucnews_cnews.val.txt").read_text(encoding="utf-8").splitlines()[:60]]
    write_jsonl(root / "en.jsonl", [{"id": f"p{i}", "text": t} for i, t in enumerate(pile)])
    write_jsonl(root / "zh.jsonl", [{"id": f"z{i}", "text": t} for i, t in enumerate(zh)])
    tokdir = SHARED_DATA / "tokenizer"
    config = {"output": "out", "seed": 5, "ingest": {"docs_per_shard": 40},
              "sources": [{"name": "en", "format": "jsonl", "paths": ["en.jsonl"], "id_field": "id"},
                          {"name": "zh", "format": "jsonl", "paths": ["zh.jsonl"], "id_field": "id", "language": "zh"}],
              "stages": {"tokenize": {"tokenizer": {"encoder": str(tokdir / "encoder.json"),
                                                    "merges": str(tokdir / "vocab.bpe")},
                                      "valid_fraction": 0.1, "max_tokens_per_file": MAX_TOKENS}}}
    (root / "run.yaml").write_text(yaml.safe_dump(config))
    return root / "run.yaml"


def _config(path: Path, output: Path, **execution):
    config = load_config(path)
    return config.model_copy(update={"output": str(output),
                                     "execution": config.execution.model_copy(update=execution)})


@pytest.fixture(scope="module")
def clean_run(corpus, ray_cluster, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("merge-clean") / "out"
    run_pipeline(_config(corpus, out), workers=2)
    return out


def test_each_source_and_split_in_files_of_about_equal_size_cut_at_documents(clean_run):
    folder = clean_run / "tokenize"
    index = tokens_json.read(clean_run)
    parts = folder / "_work" / "parts"
    for split in ("train", "valid"):
        files = index.files(split)
        assert sorted(p.name for p in (folder / split).iterdir()) == sorted(
            f"{f['prefix'].split('/')[1]}{ext}" for f in files for ext in (".bin", ".idx", ".docs.parquet", ".engine"))
        for source in ("en", "zh"):
            mine = [f for f in files if list(f["by_source"]) == [source]]
            total = sum(f["tokens"] for f in mine)
            n = -(-total // MAX_TOKENS)
            assert [f["prefix"] for f in mine] == [f"{split}/{source}.{i:05d}" for i in range(n)]
            longest = 0
            ids = []
            for f in mine:
                reader = IndexedReader(str(folder / f["prefix"]))
                longest = max(longest, int(reader.sequence_lengths.max()))
                ids += pq.read_table(folder / f"{f['prefix']}.docs.parquet").column("id").to_pylist()
            assert all(abs(f["tokens"] - total / n) <= 2 * longest for f in mine)
            # The merged files are the shard's parts joined in order: the same tokens and documents, each once.
            shard_parts = sorted(parts.glob(f"{split}/{source}.*.idx"))
            joined = np.concatenate([IndexedReader(str(folder / f["prefix"])).tokens for f in mine])
            assert np.array_equal(joined, np.concatenate([IndexedReader(str(p)).tokens for p in shard_parts]))
            assert ids == [i for p in shard_parts
                           for i in pq.read_table(str(p)[:-4] + ".docs.parquet").column("id").to_pylist()]
            assert len(set(ids)) == len(ids)
    assert len(index.files("train")) > 4 and len(index.files("valid")) == 2  # the valid splits are small: a file each
    assert len(list(parts.glob("train/*.idx"))) > len(index.files("train"))


def test_the_same_bytes_at_any_worker_count(corpus, clean_run, tmp_path):
    out = tmp_path / "out"
    run_pipeline(_config(corpus, out), workers=1)
    assert tree(out / "tokenize") == tree(clean_run / "tokenize")


@pytest.mark.slow  # 14 s; `make test` kills tokenize's workers in tests/faults
def test_a_worker_killed_mid_merge_resumes_to_the_same_bytes(corpus, clean_run, tmp_path, monkeypatch):
    """SIGKILL inside a merge task with its first file moved into place and the others not (no retries): the stage
    fails naming the task; the rerun redoes that task alone, and every file of the stage is the clean run's."""
    task = "train.en.00001"
    assert (clean_run / "tokenize" / "_work" / "commits" / "merge" / f"{task}.json").is_file()
    plan, marker = tmp_path / "faults.json", tmp_path / "killed"
    plan.write_text(json.dumps({"kill_worker": {"stage": "tokenize", "phase": "merge", "task": task,
                                                "point": "mid_commit", "once": str(marker)}}))
    monkeypatch.setenv(faults.ENV, str(plan))
    out = tmp_path / "out"
    with pytest.raises(StageFailed) as failed:
        run_pipeline(_config(corpus, out, max_retries=0), workers=2)
    assert marker.exists() and [k for k, _ in failed.value.failures] == [task]
    assert not (out / "tokenize" / "tokens.json").exists()
    plan.write_text("{}")
    merged = len(list((clean_run / "tokenize" / "_work" / "commits" / "merge").glob("*.json")))
    committed = len(list((out / "tokenize" / "_work" / "commits" / "merge").glob("*.json")))
    assert committed < merged
    run_pipeline(_config(corpus, out), workers=2)
    info = json.loads((out / "tokenize" / "manifest.json").read_text())["run_info"]
    assert info["phases"]["merge"]["tasks_run"] == merged - committed  # the committed ones are not redone
    assert tree(out / "tokenize") == tree(clean_run / "tokenize")
