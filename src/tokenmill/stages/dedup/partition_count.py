"""Dedup's first phase, on the driver: the band-key partition count of this run, fixed before any task."""

from __future__ import annotations

from typing import Any, Mapping

from tokenmill.dedup.sizing import auto_partitions
from tokenmill.pipeline.contract import DriverPhase, PlanContext

NAME = "partitions"


class PartitionCount(DriverPhase):
    """The config's `partitions`, or with `auto` the count `auto_partitions` gives for the input: its documents and
    text bytes as the upstream manifest lists them per shard (so a rerun or a resumed run over the same input
    plans the same tasks). Every later phase reads it with `partition_count`."""

    name = NAME

    def build(self, stage, ctx: PlanContext) -> Any:
        docs = sum(int(s.get("docs_out", 0)) for s in ctx.input_shards)
        text_bytes = sum(int(s.get("bytes_out", 0)) for s in ctx.input_shards)
        setting = stage.config.partitions
        count = auto_partitions(docs, text_bytes) if setting == "auto" else int(setting)
        return {"count": count, "setting": setting, "docs": docs, "text_bytes": text_bytes}


def partition_count(ctx: PlanContext | Any) -> int:
    """This run's partition count (a `PlanContext` or a `TaskContext`: both carry the earlier phases' results)."""
    shared: Mapping[str, Any] = ctx.shared
    return int(shared[NAME]["count"])
