"""The dedup stage on a real Ray cluster: exact and near duplicates across shards and sources, verification,
determinism whatever the worker count, resume after a kill in any phase, clusters.parquet and the report."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from tests.conftest import write_jsonl
from tests.pipeline.test_runner import run_into, tree
from tokenmill.demo.planted import jaccard

pytestmark = pytest.mark.ray

VOCAB = ("river mountain forest village harbor market bridge castle garden meadow valley island lantern "
         "orchard library museum theater station bakery school tower canal square temple workshop").split()


def article(rng: random.Random, words: int = 400) -> str:
    sentences, count = [], 0
    while count < words:
        n = rng.randint(8, 16)
        sentences.append(" ".join(rng.choice(VOCAB) for _ in range(n)).capitalize() + ".")
        count += n
    return " ".join(sentences)


def edited(text: str, rng: random.Random, target: float) -> str:
    n = len(text.split()) - 4
    k = max(1, round(n * (1 - target) / target))
    return text + " Updated " + " ".join(f"w{rng.randint(0, 10**9)}" for _ in range(k)) + "."


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("dedup")
    rng = random.Random(7)
    base = [article(rng) for _ in range(60)]
    near97, near93 = edited(base[1], rng, 0.97), edited(base[2], rng, 0.93)
    web = [{"id": f"w{i}", "text": t} for i, t in enumerate(base)]
    forum = [{"id": "f-exact", "text": base[0]},          # exact copy of w0, other source
             {"id": "f-near97", "text": near97},          # near copy of w1 (0.97), other source
             {"id": "f-near93", "text": near93}]          # 0.93: must survive verification
    forum += [{"id": f"f{i}", "text": article(rng)} for i in range(20)]
    write_jsonl(root / "web" / "a.jsonl", web[:30])
    write_jsonl(root / "web" / "b.jsonl", web[30:])
    write_jsonl(root / "forum" / "c.jsonl", forum)
    config = {"output": "out", "seed": 1, "ingest": {"docs_per_shard": 10},
              "sources": [{"name": "web", "format": "jsonl", "paths": ["web/*.jsonl"], "id_field": "id"},
                          {"name": "forum", "format": "jsonl", "paths": ["forum/*.jsonl"], "id_field": "id"}],
              "stages": {"dedup": {"partitions": 4}}}
    (root / "run.yaml").write_text(yaml.safe_dump(config))
    return root / "run.yaml", {"near97": jaccard(base[1], near97), "near93": jaccard(base[2], near93)}


def dropped(out: Path) -> dict[str, tuple[str, str]]:
    rows = [r for p in sorted((out / "dedup" / "dropped").glob("*.parquet")) for r in pq.read_table(p).to_pylist()]
    return {r["id"]: r["drop_reason"] for r in rows}


def test_exact_and_near_duplicates_across_shards_and_sources(ray_cluster, corpus, tmp_path):
    config, measured = corpus
    assert 0.96 < measured["near97"] < 0.98 and 0.92 < measured["near93"] < 0.94
    reports = run_into(config, tmp_path / "o")
    out = tmp_path / "o"
    gone = dropped(out)
    # Longest is kept: the web original and its exact forum copy tie, so the lower id ("f-exact") stays.
    assert gone == {"w0": "exact_duplicate", "w1": "near_duplicate"}
    clusters = pq.read_table(out / "dedup" / "clusters.parquet").to_pylist()
    by_id = {r["id"]: r for r in clusters}
    assert by_id["w1"]["removed_by"] == "f-near97" and by_id["w1"]["jaccard"] > 0.95
    assert by_id["w0"]["removed_by"] == "f-exact" and by_id["f-exact"]["kept"]
    assert "f-near93" not in by_id  # the 0.93 candidate failed verification: no edge, no cluster
    report = json.loads((out / "dedup" / "manifest.json").read_text())["content"]["report"]
    assert report["clusters"]["clusters"] == 2 and report["clusters"]["near_duplicates"] == 1
    assert report["clusters"]["by_source"]["forum"]["size_histogram"] == {"2": 2}
    assert reports[-1].totals["drops"] == {"exact_duplicate": 1, "near_duplicate": 1}


def test_workers_do_not_change_bytes_and_resume_is_exact(ray_cluster, corpus, tmp_path):
    config, _ = corpus
    run_into(config, tmp_path / "w1", workers=1)
    run_into(config, tmp_path / "w2", workers=2)
    assert tree(tmp_path / "w1") == tree(tmp_path / "w2")
    # A kill in the middle of every phase: some commits of each phase lost, the manifest not written.
    out = tmp_path / "w2"
    (out / "dedup" / "manifest.json").unlink()
    for phase in ("signatures", "buckets", "verify", "clusters", "map"):
        records = sorted((out / "dedup" / "_work" / "commits" / phase).glob("*.json"))
        for r in records[::2]:
            r.unlink()
    resumed = run_into(config, out)
    assert resumed[-1].status == "resumed"
    assert tree(out) == tree(tmp_path / "w1")
