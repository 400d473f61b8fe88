"""Rehydration by cluster size in the tokenize stage: the copies table, copies spread apart, and a run where each
train document is written as many times as its cluster size asks (valid ones once), counted in the report."""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest
import yaml

from tests.conftest import write_jsonl
from tests.pipeline.test_runner import run_into
from tests.stages.test_keep_rule_stage import chain_docs
from tokenmill.errors import StageChainError
from tokenmill.stages.tokenize.config import TokenizeConfig
from tokenmill.stages.tokenize.rehydrate import copies, spread
from tokenmill.tokenize import bundle
from tokenmill.tokenize.indexed import IndexedReader
from tokenmill.tokenize.tokenizer import load_tokenizer


def test_copies_by_ranges_of_cluster_size():
    table = {2: 2, 5: 3, 100: 2, 1000: 1}
    sizes = np.array([1, 2, 4, 5, 99, 100, 999, 1000, 50_000])
    assert copies(sizes, table).tolist() == [1, 2, 2, 3, 3, 2, 2, 1, 1]
    assert copies(np.array([1, 3]), {3: 4}).tolist() == [1, 4]


def test_table_is_checked_when_the_config_loads():
    with pytest.raises(ValueError, match="copies are 1 to 1000"):
        TokenizeConfig(tokenizer="t.json", rehydrate={2: 0})
    with pytest.raises(ValueError, match="at least one"):
        TokenizeConfig(tokenizer="t.json", rehydrate={})


def test_copies_are_spread_by_a_keyed_order_independent_of_the_batch():
    """Each row appears as many times as asked; the order is that of a keyed hash of (id, copy), so a row's place
    among the others does not depend on which other rows share its batch, and copies are not side by side."""
    ids = [f"d{i:03d}" for i in range(200)]
    counts = np.ones(200, np.int64)
    counts[7] = 5
    order = spread(ids, counts, seed=3)
    assert np.bincount(order, minlength=200).tolist() == counts.tolist()
    at = np.flatnonzero(order == 7)
    assert np.diff(at).min() > 1  # with 204 entries, five copies never adjacent here (seed 3)
    half = spread(ids[:100], counts[:100], seed=3)  # the first 100 rows alone: their relative order is the same
    assert [ids[i] for i in order if i < 100] == [ids[i] for i in half]
    assert not np.array_equal(order, np.sort(order))


@pytest.mark.ray
@pytest.mark.long  # the one run of rehydration end to end (ingest, dedup, tokenize): about 8 s on loaded cores
def test_run_writes_train_documents_as_many_times_as_their_cluster_size_asks(ray_cluster, shared_data, tmp_path):
    """Ingest, dedup and tokenize with `rehydrate: {2: 3}`: c2 (standing for c1 too) and e0 (for e1) are written
    three times in train, every other train document once, valid documents once; the report counts the copies,
    and `tokens.json` counts them among the documents."""
    docs = chain_docs()
    write_jsonl(tmp_path / "web" / "a.jsonl", docs)
    tokdir = shared_data / "tokenizer"
    tokenize = {"tokenizer": {"encoder": str(tokdir / "encoder.json"), "merges": str(tokdir / "vocab.bpe")},
                "valid_fraction": 0.2, "rehydrate": {2: 3}}
    config = {"output": "out", "seed": 1,
              "sources": [{"name": "web", "format": "jsonl", "paths": ["web/*.jsonl"], "id_field": "id"}],
              "stages": {"dedup": {"partitions": 2}, "tokenize": tokenize}}
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(config))
    out = tmp_path / "out"
    run_into(tmp_path / "run.yaml", out)
    seen: dict[str, dict[str, int]] = {"train": {}, "valid": {}}
    tok = load_tokenizer(str(out / "tokenize" / "tokenizer.json"))
    text = {d["id"]: d["text"] for d in docs}
    for split in seen:
        for f in sorted((out / "tokenize" / split).glob(f"*{bundle.DOCS}")):
            ids = pq.read_table(f, columns=["id"]).column("id").to_pylist()
            reader = IndexedReader(str(f).removesuffix(bundle.DOCS))
            assert len(reader) == len(ids)
            for doc_id, seq in zip(ids, reader):  # every copy is its document's tokens, whole
                assert seq[-1] == tok.eos_id and tok.decode(seq[:-1]) == text[doc_id]
                seen[split][doc_id] = seen[split].get(doc_id, 0) + 1
    assert set(seen["train"]) | set(seen["valid"]) == {d["id"] for d in docs} - {"c1", "e1"}
    assert all(n == 1 for n in seen["valid"].values())
    want = {i: (3 if i in ("c2", "e0") else 1) for i in seen["train"]}
    assert seen["train"] == want and {"c2", "e0"} & set(seen["train"])
    report = json.loads((out / "tokenize" / "manifest.json").read_text())["content"]["report"]
    extra = sum(n - 1 for n in seen["train"].values())
    assert report["rehydrated"]["documents"] == extra > 0
    assert report["documents"]["train"] == sum(seen["train"].values())
    index = json.loads((out / "tokenize" / "tokens.json").read_text())
    assert index["splits"]["train"]["documents"] == sum(seen["train"].values())


@pytest.mark.ray
def test_rehydrate_without_dedup_is_refused_before_any_work(ray_cluster, shared_data, tmp_path):
    write_jsonl(tmp_path / "web" / "a.jsonl", chain_docs()[:3])
    tokdir = shared_data / "tokenizer"
    config = {"output": "out", "seed": 1,
              "sources": [{"name": "web", "format": "jsonl", "paths": ["web/*.jsonl"], "id_field": "id"}],
              "stages": {"tokenize": {"tokenizer": {"encoder": str(tokdir / "encoder.json"),
                                                    "merges": str(tokdir / "vocab.bpe")}, "rehydrate": {2: 2}}}}
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(config))
    with pytest.raises(StageChainError, match="cluster_size"):
        run_into(tmp_path / "run.yaml", tmp_path / "out")
    assert not (tmp_path / "out" / "ingest").exists()
