"""The dedup stage's removal rules on a real Ray cluster: a chain A~B~C without A~C keeps A and C under greedy and
one document under the component rule; the kept documents' `cluster_size` sums to the input; both rules' counts
reach the manifest whatever the rule; the same output whatever the partitions."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from tests.conftest import write_jsonl
from tests.pipeline.test_runner import run_into, tree
from tests.stages.test_dedup_stage import article, dropped, edited
from tokenmill.demo.planted import jaccard

pytestmark = pytest.mark.ray


def chain_docs() -> list[dict]:
    """c0 ~ c1 ~ c2 (each appended to the last, about 0.97) with c0 !~ c2 (about 0.94); e0 = e1 exactly; and
    twelve documents in no cluster."""
    rng = random.Random(5)
    a = article(rng)
    b = edited(a, rng, 0.97)
    c = edited(b, rng, 0.97)
    e = article(rng)
    docs = [{"id": "c0", "text": a}, {"id": "c1", "text": b}, {"id": "c2", "text": c},
            {"id": "e0", "text": e}, {"id": "e1", "text": e}]
    return docs + [{"id": f"s{i:02d}", "text": article(rng)} for i in range(12)]


def write_config(root: Path, rule: str, partitions: int = 2) -> Path:
    if not (root / "web").exists():
        docs = chain_docs()
        write_jsonl(root / "web" / "a.jsonl", docs[:9])
        write_jsonl(root / "web" / "b.jsonl", docs[9:])
    config = {"output": "out", "seed": 1, "ingest": {"docs_per_shard": 6},
              "sources": [{"name": "web", "format": "jsonl", "paths": ["web/*.jsonl"], "id_field": "id"}],
              "stages": {"dedup": {"partitions": partitions, "keep_rule": rule}}}
    path = root / f"{rule}-{partitions}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def sizes(out: Path) -> dict[str, int]:
    return {r["id"]: r["cluster_size"] for p in sorted((out / "dedup" / "shards").glob("*.parquet"))
            for r in pq.read_table(p, columns=["id", "cluster_size"]).to_pylist()}


def test_chain_greedy_keeps_both_ends_component_keeps_one_and_both_counts_reach_the_manifest(ray_cluster, tmp_path):
    docs = chain_docs()
    text = {d["id"]: d["text"] for d in docs}
    assert jaccard(text["c0"], text["c1"]) > 0.95 and jaccard(text["c1"], text["c2"]) > 0.95
    assert jaccard(text["c0"], text["c2"]) < 0.95
    reports = {}
    for rule in ("greedy", "component"):
        reports[rule] = run_into(write_config(tmp_path, rule), tmp_path / rule)[-1]
    # Longest first: c2 is kept and removes c1; greedy keeps c0 too (no edge to c2), the component rule does not.
    assert dropped(tmp_path / "greedy") == {"c1": "near_duplicate", "e1": "exact_duplicate"}
    assert dropped(tmp_path / "component") == {"c0": "component_duplicate", "c1": "near_duplicate",
                                               "e1": "exact_duplicate"}
    greedy, component = sizes(tmp_path / "greedy"), sizes(tmp_path / "component")
    assert {k: v for k, v in greedy.items() if v != 1} == {"c2": 2, "e0": 2}
    assert {k: v for k, v in component.items() if v != 1} == {"c2": 3, "e0": 2}
    # Nothing lost: the kept documents stand for every input document, under either rule.
    assert sum(greedy.values()) == sum(component.values()) == len(docs)
    gone = [r for p in sorted((tmp_path / "component" / "dedup" / "dropped").glob("*.parquet"))
            for r in pq.read_table(p, columns=["id", "cluster_size"]).to_pylist()]
    assert len(gone) == 3 and all(r["cluster_size"] is None for r in gone)  # counted in the kept one's size
    for rule, report in reports.items():
        content = json.loads((tmp_path / rule / "dedup" / "manifest.json").read_text())["content"]
        assert content["report"]["clusters"]["removed_by_rule"] == {"greedy": 2, "component": 3}, rule
        assert f"keep_rule {rule}: the greedy rule removes 2 documents, one kept per component 3" in \
            content["report"]["summary"]
    assert reports["component"].totals["drops"] == {"component_duplicate": 1, "exact_duplicate": 1,
                                                    "near_duplicate": 1}
    rows = {r["id"]: r for r in pq.read_table(tmp_path / "component" / "dedup" / "clusters.parquet").to_pylist()}
    assert rows["c0"]["removed_by"] == "c2" and rows["c0"]["jaccard"] is None and rows["c0"]["cluster_size"] is None
    assert rows["c2"]["kept"] and rows["c2"]["cluster_size"] == 3 and rows["e0"]["cluster_size"] == 2


@pytest.mark.long
def test_component_rule_output_is_the_same_whatever_the_partitions(ray_cluster, tmp_path):
    """The component rule is local to a clusters task (each holds whole components): 1, 3 and 5 partitions give
    the same shards, dropped rows and clusters.parquet, byte for byte, and the same cluster counts."""
    trees, clusters = [], []
    for parts in (1, 3, 5):
        out = tmp_path / f"p{parts}"
        run_into(write_config(tmp_path, "component", parts), out)
        trees.append({k: v for k, v in tree(out, "dedup").items()
                      if k.startswith(("dedup/shards/", "dedup/dropped/", "dedup/clusters.parquet"))})
        clusters.append(json.loads((out / "dedup" / "manifest.json").read_text())["content"]["report"]["clusters"])
    assert any(k.endswith("clusters.parquet") for k in trees[0])
    assert trees[0] == trees[1] == trees[2]
    assert clusters[0] == clusters[1] == clusters[2]


def _component_duplicate(tmp: Path) -> list[str | None]:
    from tests.stages.test_drop_reasons import _pipeline

    return _pipeline("dedup", {"dedup": {"partitions": 2, "keep_rule": "component"}}, chain_docs()[:3])(tmp)


DROP_REASON_CASES = {"dedup": {"component_duplicate": (_component_duplicate, pytest.mark.ray)}}
"""For tests/stages/test_drop_reasons.py: the component rule's own reason."""
