"""The stage contract: registration, driver phases, per-phase resources, and reduce results reaching the report."""

from __future__ import annotations

import json
from typing import Any, Mapping

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from tests.conftest import make_corpus
from tokenmill.pipeline.config import load_config
from tokenmill.config_base import StageConfig
from tokenmill.pipeline.contract import DriverPhase, Phase, Processed, Resources, RunContext, Stage, Task, registered
from tokenmill.documents import read_shard
from tokenmill.pipeline.map_phase import MapShards, MapStage
from tokenmill.pipeline.registry import stage_classes
from tokenmill.pipeline.config import build_stages, run_context
from tokenmill.pipeline.runner import run_pipeline


def test_a_class_with_an_order_registers_and_a_taken_name_is_refused():
    try:
        class Probe(MapStage):
            name = "probe_stage"
            order = 99

        assert registered()["probe_stage"] is Probe

        class Unregistered(MapStage):  # no order: an ad-hoc stage, passed to the runner directly
            name = "ad_hoc"

        assert "ad_hoc" not in registered()
        with pytest.raises(TypeError, match="stage name 'probe_stage' is taken by .*Probe"):
            class Clash(MapStage):
                name = "probe_stage"
                order = 98
    finally:
        registered().pop("probe_stage", None)  # type: ignore[attr-defined]


def test_the_registry_finds_every_stage_module_in_order():
    names = list(stage_classes())
    assert names[0] == "ingest"
    assert names.index("sample") < names.index("clean") < names.index("dedup") < names.index("decontaminate") \
        < names.index("tokenize")
    # Each stage owns its config model: `stages.<name>` is validated by it.
    assert all(issubclass(cls.config_class, StageConfig) and cls.config_class is not StageConfig
               for cls in stage_classes().values())


class Facts(DriverPhase):
    name = "facts"

    def build(self, stage, ctx):
        return {"input_shards": len(ctx.input_shards)}


class Longest(Phase):
    name = "longest"
    resources = Resources(cpus=0.5)

    def plan(self, stage, ctx):
        return [Task(key=f"t{i}", inputs=(s["path"],)) for i, s in enumerate(ctx.input_shards)]

    def run(self, stage, task, ctx):
        import ray

        table = read_shard(f"{ctx.input_dir}/{task.inputs[0]}", ctx.fs)
        return {"longest": max(pc.utf8_length(table.column("text")).to_pylist(), default=0),
                "cpus": ray.get_runtime_context().get_assigned_resources().get("CPU"),
                "facts_seen": ctx.shared["facts"]["input_shards"]}

    def reduce(self, stage, results, ctx):
        return {"longest": max(r["longest"] for r in results.values()),
                "cpus": sorted({r["cpus"] for r in results.values()}),
                "facts_seen": sorted({r["facts_seen"] for r in results.values()})}


class Global(MapStage):
    name = "global_facts"
    drop_reasons = ("longest",)

    def phases(self):
        return [Facts(), Longest(), MapShards()]

    def process(self, table: pa.Table, shared: Mapping[str, Any]) -> Processed:
        longest = pc.equal(pc.utf8_length(table.column("text")), shared["longest"]["longest"])
        return Processed(table, pc.if_else(longest, pa.scalar("longest"), pa.scalar(None, pa.string())),
                         {"shards": 1})

    def report(self, stats, reduced=None):
        return {"shards": stats["shards"], **(reduced or {})}


@pytest.mark.long  # a stage on its own Ray cluster with custom resources: 15 s
@pytest.mark.ray
def test_driver_phase_resources_and_reduce_results_reach_the_report(ray_cluster, tmp_path):
    import ray.cloudpickle

    import tests.pipeline.test_contract as me

    ray.cloudpickle.register_pickle_by_value(me)
    config = load_config(make_corpus(tmp_path / "corpus")).model_copy(update={"output": str(tmp_path / "o")})
    stages = build_stages(config) + [Global(StageConfig(), run_context(config))]
    run_pipeline(config, stages=stages)
    content = json.loads((tmp_path / "o" / "global_facts" / "manifest.json").read_text())["content"]
    shards = len(content["shards"])
    report = content["report"]
    assert report["facts"] == {"input_shards": shards}  # the driver phase's result, no task ran for it
    assert report["longest"]["cpus"] == [0.5]  # each task asked Ray for the phase's resources
    assert report["longest"]["facts_seen"] == [shards]  # and saw the driver phase's result
    assert report["shards"] == shards
    # Global facts reach the report directly: no shard's stats carry them.
    assert all(set(s.get("stats", {})) == {"shards"} for s in content["shards"])
    assert not (tmp_path / "o" / "global_facts" / "_work" / "commits" / "facts").exists()
    assert content["totals"]["drops"]["longest"] >= 1


def test_a_stage_without_phases_says_so():
    class NoPhases(Stage):
        name = "no_phases"

    with pytest.raises(NotImplementedError, match="'no_phases' declares no phases"):
        NoPhases(StageConfig(), RunContext(seed=0, sources={})).phases()
