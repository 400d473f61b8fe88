"""The runner on a real Ray cluster: determinism, resume, recomputation, conservation, multi-phase stages."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Mapping

import pyarrow as pa
import pyarrow.compute as pc
import pytest
import yaml

from tests.conftest import make_corpus
from tokenmill.errors import StageFailed, TokenmillError
from tokenmill.pipeline.config import load_config
from tokenmill.config_base import StageConfig
from tokenmill.pipeline.contract import Phase, Processed, Task
from tokenmill.pipeline.map_phase import MapShards, MapStage
from tokenmill.pipeline.config import build_stages, run_context
from tokenmill.pipeline.runner import run_pipeline
from tokenmill.documents import read_shard

pytestmark = pytest.mark.ray


def tree(root: Path, sub: str = "") -> dict[str, str]:
    """sha256 of every output file (shards, dropped, manifests' content), by relative path."""
    out = {}
    base = root / sub
    for path in sorted(base.rglob("*")):
        rel = str(path.relative_to(root))
        if not path.is_file() or rel.startswith(("_logs", "_superseded", "_lock")) or "/_work/" in f"/{rel}":
            continue
        if path.name == "manifest.json":
            out[rel] = hashlib.sha256(json.dumps(json.loads(path.read_text())["content"], sort_keys=True).encode()).hexdigest()
        else:
            out[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


@pytest.fixture
def corpus(tmp_path):
    return make_corpus(tmp_path / "corpus")


def run_into(config_path: Path, output: Path, **kwargs):
    config = load_config(config_path).model_copy(update={"output": str(output)})
    return run_pipeline(config, **kwargs)


def test_two_fresh_runs_are_byte_identical(ray_cluster, corpus, tmp_path):
    reports = run_into(corpus, tmp_path / "a")
    run_into(corpus, tmp_path / "b")
    a, b = tree(tmp_path / "a"), tree(tmp_path / "b")
    assert a == b
    assert any(p.startswith("sample/shards/") for p in a) and any(p.startswith("ingest/dropped/") for p in a)
    assert [r.stage for r in reports] == ["ingest", "sample"]
    ingest = json.loads((tmp_path / "a" / "ingest" / "manifest.json").read_text())["content"]
    assert ingest["totals"]["drops"] == {"bad_json": 4, "empty_text": 4}
    assert ingest["totals"]["docs_in"] == 4 * 62 + 2 * 60


def test_worker_count_does_not_change_bytes(ray_cluster, corpus, tmp_path):
    run_into(corpus, tmp_path / "w1", workers=1)
    run_into(corpus, tmp_path / "w2", workers=2)
    assert tree(tmp_path / "w1") == tree(tmp_path / "w2")


def test_rerun_skips_committed_and_finishes_a_partial_stage(ray_cluster, corpus, tmp_path):
    out = tmp_path / "r"
    run_into(corpus, out)
    reference = tree(out)
    again = run_into(corpus, out)
    assert [r.status for r in again] == ["up to date", "up to date"]
    # Simulate a kill: the manifest and some commits of sample vanish, a stray shard of a dead attempt stays.
    (out / "sample" / "manifest.json").unlink()
    records = sorted((out / "sample" / "_work" / "commits" / "map").glob("*.json"))
    for r in records[::2]:
        r.unlink()
    (out / "sample" / "shards" / "stray.parquet").write_bytes(b"half a shard")
    (out / "sample" / "_work" / "tmp" / "map" / "x" / "dead").mkdir(parents=True)
    # Killed between writing a record or the manifest under its temporary name and moving it into place.
    torn = [out / "sample" / "_work" / "commits" / "map" / f"{records[0].name}.dead1.tmp",
            out / "sample" / "manifest.json.dead2.tmp"]
    for path in torn:
        path.write_text("{")
    resumed = run_into(corpus, out)
    assert resumed[1].status == "resumed"
    assert resumed[1].tasks_run == len(records[::2]) and resumed[1].tasks_skipped == len(records) - len(records[::2])
    assert tree(out) == reference
    assert not (out / "sample" / "_work" / "tmp").exists()
    assert not any(path.exists() for path in torn)


def test_changed_fraction_recomputes_sample_never_mixes(ray_cluster, corpus, tmp_path):
    out = tmp_path / "f"
    run_into(corpus, out)
    ingest_before = tree(out, "ingest")
    data = yaml.safe_load(corpus.read_text())
    data["sources"][0]["fraction"] = 0.3
    changed = corpus.with_name("changed.yaml")
    changed.write_text(yaml.safe_dump(data))
    reports = run_into(changed, out)
    assert reports[0].status == "up to date"
    assert reports[1].status == "ran" and "fractions.en: 0.6 -> 0.3" in reports[1].notes[0]
    run_into(changed, tmp_path / "fresh")
    assert tree(out) == tree(tmp_path / "fresh")  # exactly a fresh run's output: nothing old mixed in
    assert tree(out, "ingest") == ingest_before
    assert list((out / "_superseded").glob("*/sample/manifest.json"))


def test_sample_choice_is_stable_under_resharding(ray_cluster, corpus, tmp_path):
    run_into(corpus, tmp_path / "s25")
    data = yaml.safe_load(corpus.read_text())
    data["ingest"]["docs_per_shard"] = 7
    resharded = corpus.with_name("resharded.yaml")
    resharded.write_text(yaml.safe_dump(data))
    run_into(resharded, tmp_path / "s7")

    def kept(out):
        return sorted(i for p in (out / "sample" / "shards").glob("*.parquet") for i in read_shard(str(p)).column("id").to_pylist())

    assert kept(tmp_path / "s25") == kept(tmp_path / "s7")
    assert len(list((tmp_path / "s7" / "sample" / "shards").glob("*"))) > len(list((tmp_path / "s25" / "sample" / "shards").glob("*")))


def test_single_stage_needs_its_input(ray_cluster, corpus, tmp_path):
    config = load_config(corpus).model_copy(update={"output": str(tmp_path / "o")})
    with pytest.raises(TokenmillError, match="reads the output of 'ingest'"):
        run_pipeline(config, only="sample")
    assert [r.stage for r in run_pipeline(config, only="ingest")] == ["ingest"]
    assert not (tmp_path / "o" / "sample").exists()
    assert [r.status for r in run_pipeline(config, only="sample")] == ["ran"]


# A two-phase stage, as dedup or decontamination will be: a global count, then a shard-wise filter using it.
class CountPhase(Phase):
    name = "count"

    def plan(self, stage, ctx):
        return [Task(key=f"count-{i}", inputs=(s["path"],)) for i, s in enumerate(ctx.input_shards)]

    def run(self, stage, task, ctx):
        table = read_shard(f"{ctx.input_dir}/{task.inputs[0]}", ctx.fs)
        return {"longest": max(pc.binary_length(table.column("text")).to_pylist(), default=0)}

    def reduce(self, stage, results, ctx):
        return max(r["longest"] for r in results.values())


class DropLongest(MapStage):
    name = "drop_longest"
    adds = (pa.field("is_longest", pa.bool_()),)
    drop_reasons = ("longest",)
    uses = frozenset({"lang"})

    def phases(self):
        return [CountPhase(), MapShards()]

    def process(self, table: pa.Table, shared: Mapping[str, Any]) -> Processed:
        assert "lang" in table.column_names  # filled from the source's language: no clean stage ran
        longest = pc.equal(pc.binary_length(table.column("text")), shared["count"])
        reasons = pc.if_else(longest, pa.scalar("longest"), pa.scalar(None, pa.string()))
        return Processed(table.append_column("is_longest", longest), reasons)


class FailOnZh(MapStage):
    name = "fail_on_zh"

    def process(self, table, shared):
        if table.column("source")[0].as_py() == "zh":
            raise ValueError("planted failure")
        return Processed(table, pa.nulls(table.num_rows, pa.string()))


def _by_value():
    import ray.cloudpickle

    import tests.pipeline.test_runner as me

    ray.cloudpickle.register_pickle_by_value(me)


def test_multi_phase_stage_plugs_in(ray_cluster, corpus, tmp_path):
    _by_value()
    config = load_config(corpus).model_copy(update={"output": str(tmp_path / "m")})
    stages = build_stages(config) + [DropLongest(StageConfig(), run_context(config))]
    reports = run_pipeline(config, stages=stages)
    assert reports[-1].totals["drops"] == {"longest": reports[-1].totals["docs_in"] - reports[-1].totals["docs_out"]}
    assert reports[-1].totals["drops"]["longest"] >= 1
    shard = next((tmp_path / "m" / "drop_longest" / "shards").glob("*.parquet"))
    assert "is_longest" in read_shard(str(shard)).column_names
    assert "lang" not in read_shard(str(shard)).column_names
    assert (tmp_path / "m" / "drop_longest" / "_work" / "commits" / "count").is_dir()


def test_failing_shard_is_named_and_the_others_commit(ray_cluster, corpus, tmp_path):
    _by_value()
    config = load_config(corpus).model_copy(update={"output": str(tmp_path / "x")})
    config = config.model_copy(update={"execution": config.execution.model_copy(update={"max_retries": 1})})
    stages = build_stages(config) + [FailOnZh(StageConfig(), run_context(config))]
    with pytest.raises(StageFailed) as err:
        run_pipeline(config, stages=stages)
    assert {k for k, _ in err.value.failures} == {p.stem for p in (tmp_path / "x" / "ingest" / "shards").glob("zh.*")}
    assert "planted failure" in str(err.value)
    committed = list((tmp_path / "x" / "fail_on_zh" / "_work" / "commits" / "map").glob("en.*.json"))
    assert len(committed) == len(list((tmp_path / "x" / "ingest" / "shards").glob("en.*")))
    assert not (tmp_path / "x" / "fail_on_zh" / "manifest.json").exists()


def test_new_input_file_recomputes_ingest_and_later(ray_cluster, corpus, tmp_path):
    out = tmp_path / "n"
    run_into(corpus, out)
    extra = corpus.parent / "data" / "en" / "part-9.jsonl"
    extra.write_text(json.dumps({"id": "new-1", "text": "a brand new document"}) + "\n")
    reports = run_into(corpus, out)
    assert [r.status for r in reports] == ["ran", "ran"]
    assert "its input changed" in reports[0].notes[0]
    superseded = list((out / "_superseded").glob("*"))
    assert len(superseded) == 1 and {p.name for p in superseded[0].iterdir()} == {"ingest", "sample"}
    run_into(corpus, tmp_path / "fresh")
    assert tree(out) == tree(tmp_path / "fresh")


def test_keep_dropped_false_writes_no_dropped_files(ray_cluster, corpus, tmp_path):
    data = yaml.safe_load(corpus.read_text())
    data["ingest"]["keep_dropped"] = False
    data["stages"]["sample"] = {"keep_dropped": False}
    quiet = corpus.with_name("quiet.yaml")
    quiet.write_text(yaml.safe_dump(data))
    reports = run_into(quiet, tmp_path / "q")
    assert reports[1].totals["drops"]["sampled_out"] > 0
    assert not (tmp_path / "q" / "ingest" / "dropped").exists() and not (tmp_path / "q" / "sample" / "dropped").exists()
    manifest = json.loads((tmp_path / "q" / "sample" / "manifest.json").read_text())
    assert all(s["dropped_path"] is None for s in manifest["content"]["shards"])


class Shout(MapStage):
    """Changes the text of every row and drops one in three, keeping the input's (now stale) `text_hash` column."""

    name = "shout"
    needs = frozenset({"id", "text", "source", "text_hash"})
    drop_reasons = ("every_third",)

    def process(self, table, shared):
        assert "text_hash" in table.column_names  # written upstream, handed to the stage with the text
        louder = pc.utf8_upper(table.column("text"))
        reasons = pa.array(["every_third" if i % 3 == 0 else None for i in range(table.num_rows)], pa.string())
        return Processed(table.set_column(table.schema.get_field_index("text"), "text", louder), reasons)


def test_text_hash_is_the_hash_of_the_text_in_every_shard(ray_cluster, corpus, tmp_path):
    import xxhash

    _by_value()
    config = load_config(corpus).model_copy(update={"output": str(tmp_path / "h")})
    stages = build_stages(config) + [Shout(StageConfig(), run_context(config))]
    run_pipeline(config, stages=stages)
    checked: dict[str, int] = {}
    for path in sorted((tmp_path / "h").glob("*/*/*.parquet")):
        stage, folder = path.parent.parent.name, path.parent.name
        if folder not in ("shards", "dropped"):
            continue
        table = read_shard(str(path))
        assert table.schema.field("text_hash").type == pa.uint64(), path
        texts, hashes = table.column("text").to_pylist(), table.column("text_hash").to_pylist()
        assert hashes == [xxhash.xxh3_64_intdigest(t.encode("utf-8")) for t in texts], path
        checked[f"{stage}/{folder}"] = checked.get(f"{stage}/{folder}", 0) + len(texts)
    assert set(checked) == {"ingest/shards", "ingest/dropped", "sample/shards", "sample/dropped", "shout/shards",
                            "shout/dropped"}
    assert all(checked.values())
    # The stage changed every text and wrote no hash; the writer's hashes are of the new texts, not the input's.
    before = {r["id"]: r["text_hash"] for p in (tmp_path / "h" / "sample" / "shards").glob("*.parquet")
              for r in read_shard(str(p)).select(["id", "text_hash"]).to_pylist()}
    after = [r for p in (tmp_path / "h" / "shout" / "shards").glob("*.parquet")
             for r in read_shard(str(p)).select(["id", "text", "text_hash"]).to_pylist()]
    changed = [r for r in after if r["text"] != r["text"].lower()]
    assert changed and all(before[r["id"]] != r["text_hash"] for r in changed)
