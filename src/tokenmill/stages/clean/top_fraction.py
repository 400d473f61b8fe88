"""The clean stage's `score` phase, before its map when a classifier keeps a `top_fraction`: every shard's scores
counted per rule, the global cuts computed on the driver, then applied by the map as thresholds.

A rule is one classifier entry of the config (`classifiers[0]`, `overrides[1].classifiers[0]`): the documents whose
source and subset resolve to it form its pool, the documents the filters before the classifiers kept (whatever the
other classifiers drop, so that several rules need one phase, not one each). Each `score` task runs the chain over
its shard as the map will, keeps the pool's scores in `_work/scores/<shard>.parquet` and returns their coarse counts
(`text/score_cut.py`); `reduce` adds the counts, finds each rule's cut bin, reads the scores of that bin back from the
files of the shards that have any, and gives every rule its exact cut. Tasks commit one by one and `reduce` reads
only committed records and files, so a run killed inside or between the phases and rerun gives the same cuts.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tokenmill.pipeline import storage
from tokenmill.pipeline.columns import with_fallbacks
from tokenmill.pipeline.contract import Phase, PlanContext, Task, TaskContext
from tokenmill.documents import parquet_bytes, read_shard
from tokenmill.pipeline.map_phase import shard_tasks
from tokenmill.stages.clean.filters.classifiers import ranked_rules
from tokenmill.text.score_cut import (coarse_counts, cut_bin, cut_value, fine_counts, keep_count, merged,
                                              FINE_BINS)

PHASE = "score"


def scores_file(task_key: str) -> str:
    return f"_work/scores/{task_key}.parquet"


class ScoreShards(Phase):
    """Per input shard: the pool's scores of every `top_fraction` rule, kept in a side file and counted."""

    name = PHASE

    def plan(self, stage: Any, ctx: PlanContext) -> list[Task]:
        return shard_tasks(ctx)

    def run(self, stage: Any, task: Task, ctx: TaskContext) -> dict[str, Any]:
        (relpath,) = task.inputs
        table = read_shard(storage.join(ctx.input_dir, relpath), ctx.fs)
        pools = stage.rank(with_fallbacks(table, stage))
        rules = sorted(pools)
        if any(len(pools[r]) for r in rules):
            ctx.write(scores_file(task.key), parquet_bytes(pa.table({
                "rule": pa.array(np.repeat(np.array(rules, dtype=object), [len(pools[r]) for r in rules]), pa.string()),
                "score": pa.array(np.concatenate([pools[r] for r in rules]), pa.float32()),
            })))
        return {"rules": {r: coarse_counts(pools[r]) for r in rules}}

    def reduce(self, stage: Any, results: Mapping[str, Any], ctx: PlanContext) -> dict[str, Any]:
        """Each rule's cut: {rule: {classifier, top_fraction, documents, keep, cut, kept}} under `cuts`."""
        cuts = {}
        tasks = sorted(results)  # a fixed order: the files are read the same way whatever finished first
        for rule, c in ranked_rules(stage.config):
            per_task = {t: results[t]["rules"][rule] for t in tasks if results[t]["rules"].get(rule)}
            coarse = merged(list(per_task.values()))
            documents = int(coarse.sum())
            entry = {"classifier": c.name, "top_fraction": c.keep.top_fraction, "documents": documents, "keep": 0,
                     "cut": None, "kept": 0}
            if documents:
                keep = keep_count(c.keep.top_fraction, documents)
                b, rank = cut_bin(coarse, keep)
                fine = np.zeros(FINE_BINS, dtype=np.int64)
                for t, counts in per_task.items():
                    if any(int(x) == b for x, _ in counts):  # only the shards with scores in the cut's bin
                        fine += fine_counts(_pool_scores(ctx, t, rule), b)
                cut = cut_value(b, fine, rank)
                low = int(cut.view(np.uint32)) & (FINE_BINS - 1)
                kept = int(coarse[b + 1:].sum() + fine[low:].sum())
                entry.update(keep=keep, cut=float(cut), kept=kept)
            cuts[rule] = entry
        return {"cuts": cuts}


def _pool_scores(ctx: PlanContext, task_key: str, rule: str) -> np.ndarray:
    table = pq.read_table(storage.join(ctx.stage_dir, scores_file(task_key)), filesystem=ctx.fs,
                          filters=pc.field("rule") == rule, columns=["score"])
    return table.column("score").to_numpy()


def thresholds(shared: Mapping[str, Any]) -> dict[str, float] | None:
    """Each rule's cut as the map applies it (a rule with an empty pool drops nothing); None before the phase ran."""
    reduced = shared.get(PHASE)
    if reduced is None:
        return None
    return {rule: 0.0 if e["cut"] is None else e["cut"] for rule, e in reduced["cuts"].items()}


def report_cuts(report: dict[str, Any], reduced: Mapping[str, Any] | None) -> dict[str, Any]:
    """The cuts beside each classifier's threshold figures (`classifiers.<name>.top_fraction.<rule>`), and a
    summary line per rule."""
    if not reduced or PHASE not in reduced:
        return report
    for rule, e in sorted(reduced[PHASE]["cuts"].items()):
        section = report.setdefault("classifiers", {}).setdefault(e["classifier"], {})
        section.setdefault("top_fraction", {})[rule] = dict(e)
        report.setdefault("summary", []).append(
            f"classifier {e['classifier']} ({rule}): top {e['top_fraction']} of {e['documents']:,} documents, cut "
            f"{'none' if e['cut'] is None else repr(e['cut'])}, {e['kept']:,} at or above it (ties kept)")
    return report
