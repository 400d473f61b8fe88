"""Incremental dedup end to end: a second dump deduplicated `against` a finished run removes exactly what one run over
both dumps removes from it, when that run visits the first dump's documents first; a run made with other settings is
refused before any work; the earlier run's documents never reach the new output."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from tests.conftest import write_jsonl
from tests.pipeline.test_runner import run_into, tree
from tests.stages.test_dedup_stage import article, edited
from tokenmill.errors import ConfigError
from tokenmill.pipeline.config import check_paths, load_config

pytestmark = [pytest.mark.ray, pytest.mark.long]  # three runs of ingest + dedup: about 40 s on 2 loaded cores

# The keep rule decides which document of a cluster stays. Incremental dedup keeps the earlier run's document; one
# run over both dumps does the same only when it visits the first dump's documents first. With `lowest_id` and ids
# that sort dump 1 ("a...") before dump 2 ("b..."), it does: that is what makes the expected removals exact.
KEEP = ["lowest_id"]


def _dumps(root: Path) -> None:
    rng = random.Random(11)
    base = [article(rng, 120) for _ in range(30)]
    one = [{"id": f"a{i:02d}", "text": base[i]} for i in range(20)]
    one += [{"id": "a20", "text": edited(base[0], rng, 0.97)},     # near copy of a00 inside dump 1: run 1 removes it
            {"id": "a21", "text": base[1]}]                        # exact copy of a01 inside dump 1
    two = [{"id": "b00", "text": base[2]},                         # exact copy of a kept earlier document
           {"id": "b01", "text": edited(base[3], rng, 0.97)},      # near copy of a kept earlier document
           {"id": "b02", "text": edited(base[4], rng, 0.90)},      # below the threshold: stays
           {"id": "b03", "text": one[20]["text"]},                 # exact copy of a document run 1 removed
           {"id": "b04", "text": base[1].upper()}]                 # normalised-exact copy of a01 (and of removed a21)
    two += [{"id": f"b{i:02d}", "text": base[i + 15]} for i in range(5, 15)]  # b05..b14: base[20..29], new
    two += [{"id": "b15", "text": base[20]},                       # exact copy inside dump 2 (of b05)
            {"id": "b16", "text": edited(base[21], rng, 0.97)}]    # near copy inside dump 2 (of b06)
    write_jsonl(root / "dump1" / "x.jsonl", one[:11])
    write_jsonl(root / "dump1" / "y.jsonl", one[11:])
    write_jsonl(root / "dump2" / "x.jsonl", two[:9])
    write_jsonl(root / "dump2" / "y.jsonl", two[9:])


def _config(root: Path, name: str, patterns: list[str], output: str | None = None, docs_per_shard: int = 5,
            **dedup) -> Path:
    """A run of one jsonl source with dedup only (`keep: KEEP`, 4 partitions, unless `dedup` says otherwise)."""
    config = {"output": output or f"out-{name}", "seed": 1, "ingest": {"docs_per_shard": docs_per_shard},
              "sources": [{"name": "web", "format": "jsonl", "paths": patterns, "id_field": "id"}],
              "stages": {"dedup": {"partitions": 4, "keep": KEEP, **dedup}}}
    path = root / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _dropped(out: Path) -> dict[str, str]:
    rows = [r for p in sorted((out / "dedup" / "dropped").glob("*.parquet")) for r in pq.read_table(p).to_pylist()]
    return {r["id"]: r["drop_reason"] for r in rows}


def _kept(out: Path) -> set[str]:
    return {i for p in (out / "dedup" / "shards").glob("*.parquet") for i in pq.read_table(p).column("id").to_pylist()}


@pytest.fixture(scope="module")
def runs(ray_cluster, tmp_path_factory):
    root = tmp_path_factory.mktemp("incremental")
    _dumps(root)
    run_into(_config(root, "one", ["dump1/*.jsonl"]), root / "one")
    # Another partition count than run 1's: its index is read across partitions (keys agree modulo their gcd).
    run_into(_config(root, "two", ["dump2/*.jsonl"], partitions=2, against=[str(root / "one")]), root / "two")
    run_into(_config(root, "both", ["dump1/*.jsonl", "dump2/*.jsonl"]), root / "both")
    return root


def test_second_dump_against_the_first_removes_what_one_run_over_both_removes(runs):
    one, two, both = (_dropped(runs / n) for n in ("one", "two", "both"))
    assert set(one) == {"a20", "a21"}
    assert {k for k in both if k.startswith("a")} == set(one)  # dump 1 first: its decisions are run 1's
    assert set(two) == {k for k in both if k.startswith("b")}
    assert set(two) == {"b00", "b01", "b03", "b04", "b15", "b16"}
    assert two["b00"] == "exact_duplicate_of_earlier_run" and two["b04"] == "exact_duplicate_of_earlier_run"
    # b03 is a copy of a20, which run 1 removed: it goes as a near copy of a00, the document that removed a20.
    assert two["b01"] == "near_duplicate_of_earlier_run" and two["b03"] == "near_duplicate_of_earlier_run"
    assert two["b15"] == "exact_duplicate" and two["b16"] == "near_duplicate"
    # The earlier documents are never in the new output; together the two outputs are the one run's.
    kept_two = _kept(runs / "two")
    assert not any(i.startswith("a") for i in kept_two)
    assert _kept(runs / "one") | kept_two == _kept(runs / "both")


def test_manifest_counts_removals_per_earlier_run(runs):
    content = json.loads((runs / "two" / "dedup" / "manifest.json").read_text())["content"]
    assert content["totals"]["drops"] == {"exact_duplicate": 1, "exact_duplicate_of_earlier_run": 2,
                                          "near_duplicate": 1, "near_duplicate_of_earlier_run": 2}
    earlier = content["report"]["earlier_runs"]
    assert earlier["by_run"] == {str(runs / "one"): {"exact_duplicates": 2, "near_duplicates": 2}}
    assert earlier["earlier_pairs_not_verified"] == 0
    assert content["config"]["against_runs"] == [
        _content_hash(runs / "one")]  # a rerun earlier run changes the resume key


def _content_hash(out: Path) -> str:
    from tokenmill.pipeline.manifest import content_hash

    return content_hash(json.loads((out / "dedup" / "manifest.json").read_text())["content"])


def test_index_holds_the_kept_documents_by_output_row(runs):
    index = [r for p in sorted((runs / "one" / "dedup" / "index").glob("p*.parquet"))
             for r in pq.read_table(p).to_pylist()]
    shards = {p.stem: pq.read_table(p).column("id").to_pylist()
              for p in (runs / "one" / "dedup" / "shards").glob("*.parquet")}
    named = {shards[r["shard"]][r["row"]] for r in index}
    assert named == _kept(runs / "one")  # every kept document, each row naming it in the output, none removed


def test_a_run_made_with_other_settings_is_refused_before_any_work(runs):
    config = _config(runs, "bad", ["dump2/*.jsonl"], num_perm=128, against=[str(runs / "one")])
    with pytest.raises(ConfigError, match=r"num_perm: earlier 320, this run 128"):
        check_paths(load_config(config))
    missing = _config(runs, "missing", ["dump2/*.jsonl"], against=[str(runs / "nowhere")])
    with pytest.raises(ConfigError, match="no such run folder"):
        check_paths(load_config(missing))
    with pytest.raises(ConfigError, match="num_perm"):
        run_into(config, runs / "bad")
    assert not (runs / "bad" / "dedup" / "_work" / "bands").exists()


def test_workers_do_not_change_bytes_and_a_killed_run_resumes_exactly(runs, tmp_path):
    config = runs / "two.yaml"
    out = tmp_path / "w1"
    run_into(config, out, workers=1)
    assert tree(out) == tree(runs / "two")  # index/ included: what a later run reads is the same bytes
    # A kill in the middle of every phase the incremental run adds (and of buckets, which reads their decisions):
    # some commits of each lost, the manifest not written.
    (out / "dedup" / "manifest.json").unlink()
    for phase in ("earlier_pairs", "earlier_verify", "buckets", "index"):
        records = sorted((out / "dedup" / "_work" / "commits" / phase).glob("*.json"))
        assert records, phase
        for r in records[::2]:
            r.unlink()
    resumed = run_into(config, out)
    assert resumed[-1].status == "resumed"
    assert tree(out) == tree(runs / "two")
