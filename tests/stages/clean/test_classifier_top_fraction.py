"""The `top_fraction` keep rule: an exact cut from counts that add across shards, the kept fraction of each pool is F
up to the ties at the cut, per source through an override, the same bytes with 1 and 2 Ray workers and after a
worker killed inside or between the phases, and a fraction outside (0, 1] refused naming the key."""

from __future__ import annotations

import hashlib
import json
import math
import shutil

import numpy as np
import pyarrow.parquet as pq
import pytest
import yaml

from tests.stages.clean.classifier_model import train_tiny
from tests.stages.clean.test_classifiers import ONLY_CLASSIFIERS, _run_config, _stage, _table
from tokenmill.errors import ConfigError, StageFailed
from tokenmill.pipeline import faults
from tokenmill.pipeline.config import load_config, parse_config
from tokenmill.text.score_cut import coarse_counts, cut_bin, cut_value, fine_counts, keep_count, merged
from tokenmill.stages.clean.top_fraction import ScoreShards


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny")
    return root, train_tiny(root)


def _top(fraction: float, **more) -> dict:
    return {"name": "hq", "model": "model/model.bin", "keep": {"top_fraction": fraction}, **more}


def _exact_cut(shards: list[np.ndarray], fraction: float) -> tuple[np.float32, int]:
    """What the score phase computes, from per-shard counts and a second look at the cut's bin only."""
    coarse = merged([coarse_counts(s) for s in shards])
    keep = keep_count(fraction, int(coarse.sum()))
    b, rank = cut_bin(coarse, keep)
    fine = sum(fine_counts(s, b) for s in shards)
    return cut_value(b, fine, rank), keep


def test_the_cut_is_the_kth_best_score_from_counts_that_add_across_shards():
    rng = np.random.default_rng(0)
    # Crowded near 0 and 1 as classifier scores are, with exact ties (repeated values) and the ends themselves.
    scores = np.concatenate([rng.beta(0.3, 2.0, 5_000), rng.beta(4.0, 0.2, 3_000), np.repeat(rng.random(20), 50),
                             [0.0, 1.0, 1.0]]).astype(np.float32)
    rng.shuffle(scores)
    for fraction in (0.001, 0.1, 0.3333, 0.5, 0.9, 1.0):
        best = np.sort(scores)[::-1]
        keep = math.ceil(round(fraction * len(scores), 9))
        for parts in (1, 7):
            cut, k = _exact_cut(np.array_split(scores, parts), fraction)
            assert k == keep and cut == best[keep - 1], (fraction, parts)
            kept = int((scores >= cut).sum())
            assert int((scores > cut).sum()) < keep <= kept  # K kept, plus the ties at the cut
            assert kept - keep < int((scores == cut).sum())
    assert keep_count(0.1, 30) == 3 and keep_count(1.0, 7) == 7 and keep_count(0.01, 1) == 1
    two = merged([coarse_counts(np.array([0.2, 0.7], dtype=np.float32)), []])
    for keep in (0, 3):
        with pytest.raises(ValueError, match=f"cannot keep {keep} of 2 scores"):
            cut_bin(two, keep)
    for outside in (-0.5, 2.0):
        with pytest.raises(ValueError, match="outside"):
            coarse_counts(np.array([0.5, outside], dtype=np.float32))


def test_the_score_phase_comes_only_with_a_top_fraction_rule(trained):
    root, _ = trained
    assert [p.name for p in _stage(root, {"classifiers": [_top(0.5)]}).phases()] == ["score", "map"]
    threshold = {"name": "hq", "model": "model/model.bin", "keep": {"threshold": 0.5}}
    assert [p.name for p in _stage(root, {"classifiers": [threshold]}).phases()] == ["map"]
    assert [p.name for p in _stage(root, {}).phases()] == ["map"]
    with_override = _stage(root, {"classifiers": [threshold],
                                  "overrides": [{"source": "web", "classifiers": [_top(1)]}]})
    assert with_override.ranked == ["overrides[0].classifiers[0]"]
    with pytest.raises(RuntimeError, match="score phase"):  # the map never runs a top_fraction rule without its cut
        with_override.process(_table([("w", "home login", "web")]), {})


def test_a_pool_without_documents_has_no_cut_and_drops_nothing(trained):
    root, _ = trained
    stage = _stage(root, {**ONLY_CLASSIFIERS, "classifiers": [_top(0.5)]})
    # Every shard's documents already dropped before the classifiers: the rule saw its rows, ranked none.
    reduced = ScoreShards().reduce(stage, {"a": {"rules": {"classifiers[0]": []}}, "b": {"rules": {}}}, None)
    assert reduced["cuts"]["classifiers[0]"] == {"classifier": "hq", "top_fraction": 0.5, "documents": 0, "keep": 0,
                                                 "cut": None, "kept": 0}
    out = stage.process(_table([("e", "\u200b", "web")]), {"score": reduced})
    assert out.drop_reason.to_pylist() == ["empty_after_cleaning"]
    ranked = stage.rank(_table([("e", "\u200b", "web"), ("k", "home login", "web")]))
    assert list(ranked) == ["classifiers[0]"] and len(ranked["classifiers[0]"]) == 1  # only the kept one ranks
    with pytest.raises(ValueError, match="NaN"):
        coarse_counts(np.array([0.5, np.nan], dtype=np.float32))


@pytest.mark.parametrize("keep, key, message", [
    (0, "stages.clean.classifiers[0].keep.top_fraction", "greater than 0"),
    (-0.5, "stages.clean.classifiers[0].keep.top_fraction", "greater than 0"),
    (1.01, "stages.clean.classifiers[0].keep.top_fraction", "less than or equal to 1"),
])
def test_a_top_fraction_outside_0_1_stops_before_any_work_naming_the_key(trained, tmp_path, keep, key, message):
    root, _ = trained
    shutil.copytree(root / "model", tmp_path / "model")
    for clean, where in [({"classifiers": [_top(keep)]}, key),
                         ({"overrides": [{"source": "a", "classifiers": [_top(keep)]}]},
                          key.replace("stages.clean.", "stages.clean.overrides[0].", 1))]:
        with pytest.raises(ConfigError) as err:
            parse_config(_run_config(tmp_path, clean), tmp_path)
        assert f"  {where}: " in str(err.value) and message in str(err.value), str(err.value)
    parse_config(_run_config(tmp_path, {"classifiers": [_top(1.0)]}), tmp_path)  # 1 is in: keep every document


FRACTIONS = {"prose": 0.3, "web": 0.5}
"""The stage's rule (the prose pool) and an override's for the web source (its own pool)."""


@pytest.fixture(scope="module")
def corpus(trained, tmp_path_factory):
    root, _ = trained
    folder = tmp_path_factory.mktemp("top-fraction")
    for name in ("pos", "neg", "model"):
        shutil.copytree(root / name, folder / name)
    config = {"output": "out", "seed": 1, "sources": [
        {"name": "prose", "format": "jsonl", "paths": ["pos/*.jsonl"], "id_field": "id", "language": "en"},
        {"name": "web", "format": "jsonl", "paths": ["neg/web.jsonl"], "language": "any"}],
        "ingest": {"docs_per_shard": 40},
        "stages": {"clean": {**ONLY_CLASSIFIERS, "classifiers": [_top(FRACTIONS["prose"])],
                             "overrides": [{"source": "web", "classifiers": [_top(FRACTIONS["web"])]}]}}}
    (folder / "run.yaml").write_text(yaml.safe_dump(config))
    return folder


def _clean_tree(out) -> dict[str, str]:
    """Every file of the clean stage (its side files under `_work/scores` too), the manifest by its content."""
    from tests.pipeline.test_runner import tree

    scores = {str(p.relative_to(out)): hashlib.sha256(p.read_bytes()).hexdigest()
              for p in sorted((out / "clean" / "_work" / "scores").glob("*"))}
    assert scores, "the score phase wrote no scores"
    return {**tree(out, "clean"), **scores}


@pytest.fixture(scope="module")
def reference(ray_cluster, corpus):
    from tests.pipeline.test_runner import run_into

    run_into(corpus / "run.yaml", corpus / "w1", workers=1)
    return corpus / "w1"


@pytest.mark.ray
def test_each_pool_keeps_its_fraction_and_two_workers_give_the_same_bytes(reference, corpus):
    from tests.pipeline.test_runner import run_into

    run_into(corpus / "run.yaml", corpus / "w2", workers=2)
    assert _clean_tree(reference) == _clean_tree(corpus / "w2")

    clean = reference / "clean"
    tables = [pq.read_table(p) for folder in ("shards", "dropped") for p in sorted((clean / folder).glob("*.parquet"))]
    assert len(list((clean / "shards").glob("*.parquet"))) >= 6  # several shards, so the cut is a global one
    manifest = json.loads((clean / "manifest.json").read_text())["content"]
    cuts = manifest["report"]["classifiers"]["hq"]["top_fraction"]
    assert set(cuts) == {"classifiers[0]", "overrides[0].classifiers[0]"}
    for source, rule in (("prose", "classifiers[0]"), ("web", "overrides[0].classifiers[0]")):
        scores = np.concatenate([t.filter(t.column("source").to_numpy(zero_copy_only=False) == source)
                                 .column("hq_score").to_numpy() for t in tables])
        reasons = [r for t in tables if "drop_reason" in t.column_names
                   for r, s in zip(t.column("drop_reason").to_pylist(), t.column("source").to_pylist()) if s == source]
        n, fraction = len(scores), FRACTIONS[source]
        keep = math.ceil(round(fraction * n, 9))
        kept = n - len(reasons)
        cut = np.sort(scores)[::-1][keep - 1]
        assert kept == int((scores >= cut).sum()) and int((scores > cut).sum()) < keep <= kept, source
        assert kept - keep < int((scores == cut).sum())  # more than K only by the documents tied at the cut
        assert set(reasons) == {"low_hq_score"} and len(reasons) == n - kept
        assert cuts[rule] == {"classifier": "hq", "top_fraction": fraction, "documents": n, "keep": keep,
                              "cut": float(cut), "kept": kept}
        audit = manifest["report"]["classifiers"]["hq"]["by_source"][source]
        assert audit["thresholds"] == {repr(float(cut)): n} and audit["dropped"] == n - kept
    assert any(line.startswith("classifier hq (overrides[0].classifiers[0]): top 0.5 of")
               for line in manifest["report"]["summary"])


@pytest.mark.ray
# Killed inside the new phase in `make test`; between the phases (13 s each) in `make test-slow`
@pytest.mark.parametrize("phase, point", [("score", "before_record"),
                                          pytest.param("score", "end", marks=pytest.mark.slow),
                                          pytest.param("map", "start", marks=pytest.mark.slow)])
def test_a_worker_killed_inside_or_between_the_phases_then_a_rerun_gives_the_same_bytes(
        reference, corpus, tmp_path, monkeypatch, phase, point):
    """max_retries 0: the kill fails the stage, and the rerun skips what was committed. A kill at the first map
    task's start lands between the phases: every score task committed, no map task yet (with one worker)."""
    from tokenmill.pipeline.runner import run_pipeline

    task = sorted(p.stem for p in (reference / "clean" / "_work" / "commits" / phase).glob("*.json"))[
        0 if phase == "map" else 2]
    plan = tmp_path / "faults.json"
    plan.write_text(json.dumps({"kill_worker": {"stage": "clean", "phase": phase, "task": task, "point": point,
                                                "once": str(tmp_path / "killed")}}))
    monkeypatch.setenv(faults.ENV, str(plan))
    config = load_config(corpus / "run.yaml")
    out = tmp_path / "out"
    killing = config.model_copy(update={"output": str(out),
                                        "execution": config.execution.model_copy(update={"max_retries": 0})})
    with pytest.raises(StageFailed):
        run_pipeline(killing, workers=1)
    assert (tmp_path / "killed").exists() and not (out / "clean" / "manifest.json").exists()
    committed_scores = len(list((out / "clean" / "_work" / "commits" / "score").glob("*.json")))
    plan.write_text("{}")
    reports = run_pipeline(config.model_copy(update={"output": str(out)}), workers=1)
    assert reports[-1].tasks_skipped >= committed_scores > 0
    assert _clean_tree(out) == _clean_tree(reference)
