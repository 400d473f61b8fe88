"""The dedup stage's components in rounds of tasks, on Ray: a chain of near copies (each a near duplicate of the
next only) needs several rounds and comes out one cluster, with the clusters and removals that one pass over every
edge decides; a worker killed in the middle of a round, then a rerun (or Ray's retry), leaves every file of the
stage byte-identical to the uninterrupted run's."""

from __future__ import annotations

import json
import random
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pyarrow.fs
import pyarrow.parquet as pq
import pytest
import yaml

from tests.conftest import write_jsonl
from tests.faults.harness import tree
from tests.pipeline.test_runner import run_into
from tokenmill.dedup.clusters import components, ranked
from tokenmill.dedup.components import component_index, unique_edge_rows
from tokenmill.dedup.decisions import Decisions, decide, rank
from tokenmill.errors import StageFailed
from tokenmill.pipeline import faults
from tokenmill.pipeline.map_phase import shard_name
from tokenmill.stages.dedup.stage import Clusters

pytestmark = pytest.mark.ray

CHAIN = 16
STEP = 8
"""Each link of the chain is a window of 400 words moved on by 8: Jaccard 0.960 to the next (above 0.95), 0.922
to the one after (below): a path of 16 documents, which no one partition holds."""


def write_chain(root: Path, seed: int, chain: int, step: int, dedup: dict) -> Path:
    """A chain of `chain` 400-word windows each moved on by `step` words, twelve unrelated documents and an exact
    copy of one of them, shuffled into three JSON-lines files; the run's config (dedup block `dedup`)."""
    rng = random.Random(seed)
    words = [f"w{rng.randrange(10**9)}" for _ in range(400 + step * chain)]
    docs = [{"id": f"c{i:02d}", "text": " ".join(words[i * step:i * step + 400])} for i in range(chain)]
    docs += [{"id": f"u{i:02d}", "text": " ".join(f"v{rng.randrange(10**9)}" for _ in range(300))} for i in range(12)]
    docs.append({"id": "u00-copy", "text": docs[chain]["text"]})
    rng.shuffle(docs)
    for i in range(3):
        write_jsonl(root / "web" / f"{i}.jsonl", docs[i::3])
    config = {"output": "out", "seed": 1, "ingest": {"docs_per_shard": 4},
              "sources": [{"name": "web", "format": "jsonl", "paths": ["web/*.jsonl"], "id_field": "id"}],
              "stages": {"dedup": dedup}}
    (root / "run.yaml").write_text(yaml.safe_dump(config))
    return root / "run.yaml"


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    return write_chain(tmp_path_factory.mktemp("chain"), 5, CHAIN, STEP, {"partitions": 4})


def single_pass(out: Path) -> tuple[dict[str, str], dict[str, str | None]]:
    """(cluster, reason) of each document in a cluster, as one task over every verified edge decides them (the
    engine the clusters phase ran before it was split): components over all edges, then the keep/drop choice."""
    stage_dir = out / "dedup"
    files = sorted((stage_dir / "_work" / "edges").glob("*.parquet"))
    edges = pa.concat_tables([pq.read_table(f, columns=["a", "b", "jaccard", "exact"]) for f in files])
    nodes, comp, _ = component_index([edges])
    shards = json.loads((out / "ingest" / "manifest.json").read_text())["content"]["shards"]
    ctx = SimpleNamespace(fs=pyarrow.fs.LocalFileSystem(), stage_dir=str(stage_dir), input_dir=str(out / "ingest"))
    members = Clusters._members(ctx, [shard_name(s["path"]) for s in shards], [s["path"] for s in shards], nodes)
    visit = ranked(nodes, rank(["longest", "lowest_id"], members, nodes))
    decided = Decisions.of(nodes, comp, [decide(unique_edge_rows([edges]), visit)])
    table = decided.clusters_table(members.column("id").combine_chunks(), members.column("source").combine_chunks())
    rows = table.to_pylist()
    return {r["id"]: r["cluster"] for r in rows}, {r["id"]: r["reason"] for r in rows}


def test_a_chain_takes_rounds_and_comes_out_as_one_pass_decides(ray_cluster, chain, tmp_path):
    out = tmp_path / "o"
    run_into(chain, out)
    manifest = json.loads((out / "dedup" / "manifest.json").read_text())
    assert manifest["run_info"]["phases"]["components"]["rounds"] >= 3
    rows = pq.read_table(out / "dedup" / "clusters.parquet").to_pylist()
    clusters = {r["id"]: r["cluster"] for r in rows}
    assert {i for i, c in clusters.items() if c == clusters["c00"]} == {f"c{i:02d}" for i in range(CHAIN)}
    assert clusters["u00-copy"] == clusters["u00"] != clusters["c00"]
    want_clusters, want_reasons = single_pass(out)
    assert clusters == want_clusters and {r["id"]: r["reason"] for r in rows} == want_reasons
    # Every verified edge's two ends are in one cluster, as `components` over every edge puts them.
    edges = pa.concat_tables([pq.read_table(f) for f in sorted((out / "dedup" / "_work" / "edges").glob("*.parquet"))])
    nodes, comp = components(np.stack([edges.column("a").to_numpy(), edges.column("b").to_numpy()], 1))
    assert np.unique(comp).size == len(set(clusters.values())) == 2


@pytest.mark.slow
@pytest.mark.parametrize("task,point,retries", [("r001-p0000", "before_commit", 0), ("r002-p0000", "mid_commit", 0),
                                                ("r000-p0003", "written", 2), ("r000-p0001", "after_record", 0)])
def test_a_worker_killed_mid_round_then_rerun_gives_the_same_files(ray_cluster, chain, tmp_path, monkeypatch,
                                                                     task, point, retries):
    killed_then_rerun(chain, tmp_path, monkeypatch, "components", task, point, retries)


def killed_then_rerun(run_yaml: Path, tmp_path: Path, monkeypatch, phase: str, task: str, point: str,
                      retries: int) -> None:
    """The dedup stage of `run_yaml` with a worker killed in `phase`'s `task` at `point`: finished by Ray's retry
    (`retries` 2), or failed naming the task and rerun (0); every file of the stage as an uninterrupted run's."""
    reference = tmp_path / "reference"
    run_into(run_yaml, reference)
    assert (reference / "dedup" / "_work" / "commits" / phase / f"{task}.json").exists()
    plan, marker, log = tmp_path / "faults.json", tmp_path / "killed", tmp_path / "injected.jsonl"
    plan.write_text(json.dumps({"kill_worker": {"stage": "dedup", "phase": phase, "task": task, "point": point,
                                                "once": str(marker)}, "log": str(log)}))
    monkeypatch.setenv(faults.ENV, str(plan))
    out = tmp_path / "out"
    from tokenmill.pipeline.config import load_config
    from tokenmill.pipeline.runner import run_pipeline

    config = load_config(run_yaml).model_copy(update={"output": str(out)})
    config = config.model_copy(update={"execution": config.execution.model_copy(update={"max_retries": retries})})
    if retries:
        run_pipeline(config)
    else:
        with pytest.raises(StageFailed) as failed:
            run_pipeline(config)
        assert [k for k, _ in failed.value.failures] == [task]
        plan.write_text("{}")
        run_pipeline(config)
    assert marker.exists() and [json.loads(line)["task"] for line in log.read_text().splitlines()] == [task]
    assert tree(out / "dedup") == tree(reference / "dedup")
