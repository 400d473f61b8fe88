"""The stage's own drop reasons: `contaminated` under policy drop, `contamination_fragmented` past max_pieces."""

from __future__ import annotations

from collections import Counter

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from tokenmill.pipeline.commit import TaskWriter
from tokenmill.sources.config import SourceConfig
from tokenmill.pipeline.contract import RunContext, Task, TaskContext
from tokenmill.stages.decontaminate.config import DecontaminateConfig
from tokenmill.stages.decontaminate.ngrams import build_index
from tokenmill.stages.decontaminate.stage import Decontaminate, DecontaminateStage

QUESTION = "how many red apples did the farmer sell at the market on the first sunny day of spring"
FILLER = " ".join(f"word{i}" for i in range(300))


@pytest.mark.parametrize("policy, expected", [
    ("drop", {"contaminated": 2}),
    ("excise", {"contamination_fragmented": 1}),
])
def test_policies(tmp_path, policy, expected):
    (tmp_path / "q.jsonl").write_text('{"q": "%s"}\n' % QUESTION)
    texts = [f"{FILLER} {QUESTION} {FILLER}", " ".join(f"{QUESTION} {FILLER}" for _ in range(12)), FILLER]
    (tmp_path / "in").mkdir()
    pq.write_table(pa.table({"id": ["d", "f", "clean"], "text": texts, "source": ["s"] * 3,
                             "subset": pa.nulls(3, pa.string()), "meta": ["{}"] * 3}), tmp_path / "in" / "x.parquet")
    run = RunContext(seed=0, sources={"s": SourceConfig(name="s", format="jsonl", paths=["x"])}, base_dir=str(tmp_path))
    config = DecontaminateConfig(evalsets=[{"name": "qa", "path": "q.jsonl", "fields": ["q"]}], policy=policy)
    shared = {"index": {"index": build_index([("qa", "0", "q", QUESTION, "en")])}, "count": {"ignore": frozenset()}}
    out = str(tmp_path / "out")
    ctx = TaskContext(out, str(tmp_path / "in"), shared, TaskWriter(pafs.LocalFileSystem(), out, "map", "x"))
    result = Decontaminate().run(DecontaminateStage(config, run),
                                 Task(key="x", inputs=("x.parquet",), params={"source": "s"}), ctx)
    assert Counter(result.shards[0]["drops"]) == Counter(expected)
    assert result.shards[0]["docs_out"] == 3 - sum(expected.values())
