"""The classifier filter: scores agree with training, kept for every row, the threshold drops exactly the rows below
it, overrides apply, bad configs stop before any work naming the key, the model's bytes are in the identity, the
manifest's audit, and 1 and 2 Ray workers give the same bytes."""

from __future__ import annotations

import json
import shutil
import struct

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from tests.stages.clean.classifier_model import PROSE_TEXT, WEB_TEXT, train_tiny
from tokenmill.errors import ConfigError
from tokenmill.pipeline.config import parse_config
from tokenmill.sources.config import SourceConfig
from tokenmill.pipeline.contract import RunContext
from tokenmill.sources.formats import READERS
from tokenmill.stages.clean.config import CleanConfig, CleanOverride
from tokenmill.text.score_histogram import BINS, bin_counts, quantile
from tokenmill.stages.clean.stage import CleanStage

QUALITY_OFF = {"gopher_quality": None, "gopher_repetition": None, "c4": None, "cjk": None}
ONLY_CLASSIFIERS = {"escapes": {"mode": "flag"}, "langid": None, "quality": QUALITY_OFF}
"""Every filter that could drop or edit besides normalization and PII off: what training applies, the model decides."""


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny")
    return root, train_tiny(root)


def _stage(root, config: dict, sources=("prose", "web", "page")) -> CleanStage:
    run = RunContext(seed=0, sources={s: SourceConfig(name=s, format="jsonl", paths=["x"], language="en")
                                      for s in sources}, base_dir=str(root))
    stage = CleanStage(CleanConfig.model_validate(config), run)
    stage.setup({})
    return stage


def _table(rows) -> pa.Table:
    return pa.table({"id": [r[0] for r in rows], "text": [r[1] for r in rows], "source": [r[2] for r in rows],
                     "subset": pa.array([r[3] if len(r) > 3 else None for r in rows], pa.string()),
                     "meta": ["{}"] * len(rows)})


def _hq(threshold: float = 0.5, **more) -> dict:
    return {"name": "hq", "model": "model/model.bin", "keep": {"threshold": threshold}, **more}


def _raw_texts(root, result) -> dict[tuple[str, str], str]:
    """Each document's text as the corpus files hold it, by (source, id) as the trainer names them."""
    config = json.loads(result.sidecar_path.read_text())["config"]
    raw = {}
    for group in ("positives", "negatives"):
        for s in config[group]:
            source = SourceConfig.model_validate(s)
            for path in sorted(root.glob(source.paths[0])):
                relpath = path.relative_to(path.parent).as_posix()
                for r in READERS[source.format].read(str(path), source, relpath):
                    raw[(source.name, r.id or f"{source.name}/{relpath}/{r.index}")] = r.text
    return raw


def test_a_text_scores_the_same_in_clean_as_in_the_trainers_validation(trained):
    """Issue 20's agreement test: raw valid documents through the clean stage (its normalization and PII, then the
    filter with the sidecar's preparation) score bit for bit what `quality train` recorded for them."""
    root, result = trained
    raw = _raw_texts(root, result)
    rows = [(f"{source}|{doc_id}", raw[(source, doc_id)], source) for source, doc_id in result.valid_ids]
    assert any("\r\n" in r[1] for r in rows) and any("@example.com" in r[1] for r in rows)  # edits do happen
    out = _stage(root, {**ONLY_CLASSIFIERS, "classifiers": [_hq(0.0)]}).process(_table(rows), {})
    scores = out.table.column("hq_score").to_numpy()
    assert out.table.schema.field("hq_score").type == pa.float32()
    assert np.array_equal(scores, result.valid_scores)
    assert len(set(scores.tolist())) > 10  # not a constant


def test_every_row_is_scored_and_the_threshold_drops_exactly_the_kept_rows_below_it(trained):
    root, result = trained
    texts = [PROSE_TEXT, WEB_TEXT, PROSE_TEXT + " home login", WEB_TEXT + " the river", "click here menu",
             "the long dry summer", "free shipping deals sale offer"]
    rows = [(f"d{i}", t, "web") for i, t in enumerate(texts)] + [("empty", "\u200b\u200b", "web")]
    probe = _stage(root, {**ONLY_CLASSIFIERS, "classifiers": [_hq(0.0)]}).process(_table(rows), {})
    scores = dict(zip(probe.table.column("id").to_pylist(), probe.table.column("hq_score").to_pylist()))
    assert scores["d0"] > 0.5 > scores["d1"]
    threshold = float(np.median([scores[f"d{i}"] for i in range(len(texts))]))

    stage = _stage(root, {**ONLY_CLASSIFIERS, "classifiers": [_hq(threshold)]})
    out = stage.process(_table(rows), {})
    got = dict(zip(out.table.column("id").to_pylist(), out.drop_reason.to_pylist()))
    assert got["empty"] == "empty_after_cleaning"  # dropped by an earlier filter ...
    assert not np.isnan(out.table.column("hq_score").to_numpy()).any()  # ... and still scored, as every row
    assert out.table.column("hq_score").to_pylist() == list(scores.values())  # the same score, kept or dropped
    for i in range(len(texts)):
        below = np.float64(np.float32(scores[f"d{i}"])) < threshold
        assert got[f"d{i}"] == ("low_hq_score" if below else None), (i, scores[f"d{i}"], threshold)
    assert 0 < list(got.values()).count("low_hq_score") < len(texts)
    assert "low_hq_score" in stage.drop_reasons and "hq_score" in {f.name for f in stage.adds}
    stage.check_reasons(out.drop_reason)  # the instance declares the reason the contract checks

    report = stage.report(out.stats)["classifiers"]["hq"]
    web = report["by_source"]["web"]
    dropped = list(got.values()).count("low_hq_score")
    assert web["scored"] == len(rows) and web["dropped"] == dropped
    assert web["below_threshold"] == dropped + (np.float64(scores["empty"]) < threshold)
    assert web["thresholds"] == {repr(threshold): len(rows)}
    assert sum(n for _, _, n in web["histogram"]) == len(rows)
    assert web["quantiles"]["p01"] <= web["quantiles"]["p50"] <= web["quantiles"]["p99"]
    assert report["bins"]["bins"] == BINS
    assert any(line.startswith("classifier hq on web:") for line in stage.report(out.stats)["summary"])


def test_an_override_per_source_replaces_or_turns_off_the_list(trained):
    root, _ = trained
    config = {**ONLY_CLASSIFIERS, "classifiers": [_hq(0.0)], "overrides": [
        {"source": "web", "classifiers": [_hq(1.0)]},
        {"source": "page", "classifiers": []},
    ]}
    stage = _stage(root, config)
    out = stage.process(_table([("p", PROSE_TEXT, "prose"), ("w", PROSE_TEXT, "web"), ("g", WEB_TEXT, "page")]), {})
    reasons = dict(zip(out.table.column("id").to_pylist(), out.drop_reason.to_pylist()))
    scores = dict(zip(out.table.column("id").to_pylist(), out.table.column("hq_score").to_pylist()))
    assert reasons == {"p": None, "w": "low_hq_score", "g": None}
    assert scores["p"] == scores["w"] and np.isnan(scores["g"])
    by_source = stage.report(out.stats)["classifiers"]["hq"]["by_source"]
    assert set(by_source) == {"prose", "web"} and by_source["web"]["thresholds"] == {"1.0": 1}


def _run_config(root, clean: dict) -> dict:
    (root / "a.jsonl").write_text('{"text": "x"}\n')
    return {"output": "o", "sources": [{"name": "a", "format": "jsonl", "paths": ["a.jsonl"]}],
            "stages": {"clean": clean}}


@pytest.mark.parametrize("classifiers, key, message", [
    ([_hq(model="model/missing.bin")], "stages.clean.classifiers[0].model", "is not a file"),
    ([_hq(model="junk.bin")], "stages.clean.classifiers[0].model", "starts with b'not ', not fastText's magic"),
    ([_hq(label="__label__nope")], "stages.clean.classifiers[0].label", "has no label '__label__nope'"),
    ([_hq(), _hq()], "stages.clean.classifiers", "used by [0] and [1]"),
    ([_hq(name="high-quality")], "stages.clean.classifiers[0].name", "not a name"),
    ([_hq(name="escape")], "stages.clean", "escape_score is already one of the clean stage's columns"),
    ([_hq(threshold=1.5)], "stages.clean.classifiers[0].keep.threshold", "less than or equal to 1"),
    ([_hq(keep={"top_fraction": 0})], "stages.clean.classifiers[0].keep.top_fraction", "greater than 0"),
    ([_hq(keep={"top_fraction": 1.5})], "stages.clean.classifiers[0].keep.top_fraction", "less than or equal to 1"),
    ([_hq(keep={})], "stages.clean.classifiers[0].keep", "exactly one of threshold and top_fraction"),
])
def test_a_bad_classifier_config_stops_before_any_work_naming_the_key(trained, tmp_path, classifiers, key, message):
    root, _ = trained
    shutil.copytree(root / "model", tmp_path / "model")
    (tmp_path / "junk.bin").write_text("not a fastText model")
    with pytest.raises(ConfigError) as err:
        parse_config(_run_config(tmp_path, {"classifiers": classifiers}), tmp_path)
    assert f"  {key}: " in str(err.value) and message in str(err.value), str(err.value)


def test_bad_classifiers_in_an_override_are_named_too(trained, tmp_path):
    root, _ = trained
    shutil.copytree(root / "model", tmp_path / "model")
    cases = [
        ([_hq(name="web", model="model/gone.bin")],
         "stages.clean.overrides[0].classifiers[0].model: 'model/gone.bin' is not a file"),
        ([_hq(name="lq", label="__label__lq"), _hq(name="other", label="__label__x")],
         "stages.clean.overrides[0].classifiers[1].label: the model 'model/model.bin' has no label '__label__x'"),
        ([_hq(label="__label__lq")], "overrides[0].classifiers[0]: classifier 'hq' scores __label__lq"),
    ]
    for listed, expected in cases:
        clean = {"classifiers": [_hq()], "overrides": [{"source": "a", "classifiers": listed}]}
        with pytest.raises(ConfigError) as err:
            parse_config(_run_config(tmp_path, clean), tmp_path)
        assert expected in str(err.value), str(err.value)


def test_a_sidecar_of_another_model_is_refused(trained, tmp_path):
    root, _ = trained
    shutil.copytree(root / "model", tmp_path / "model")
    sidecar = json.loads((tmp_path / "model" / "model.json").read_text())
    sidecar["model"]["sha256"] = "0" * 64
    (tmp_path / "model" / "model.json").write_text(json.dumps(sidecar))
    with pytest.raises(ConfigError, match=r"stages.clean.classifiers\[0\].model: .*describes another model"):
        parse_config(_run_config(tmp_path, {"classifiers": [_hq()]}), tmp_path)


def test_a_model_without_sidecar_is_prepared_with_the_defaults(trained, tmp_path):
    """A published model (DCLM's) comes alone: PrepareOptions' defaults, which are also the trainer's defaults."""
    root, result = trained
    (tmp_path / "model").mkdir()
    shutil.copy(result.model_path, tmp_path / "model" / "model.bin")
    parse_config(_run_config(tmp_path, {"classifiers": [_hq()]}), tmp_path)
    rows = [("a", PROSE_TEXT, "web"), ("b", WEB_TEXT, "web")]
    alone = _stage(tmp_path, {**ONLY_CLASSIFIERS, "classifiers": [_hq(0.0)]}).process(_table(rows), {})
    paired = _stage(root, {**ONLY_CLASSIFIERS, "classifiers": [_hq(0.0)]}).process(_table(rows), {})
    assert alone.table.column("hq_score").equals(paired.table.column("hq_score"))
    identity = _stage(tmp_path, {"classifiers": [_hq()]}).identity()["config"]["classifiers"][0]
    assert identity["prepare"] == {"lowercase": True, "max_chars": None}


def test_the_models_bytes_not_its_path_are_in_the_identity(trained, tmp_path):
    root, result = trained
    for folder in ("one", "two"):
        shutil.copytree(root / "model", tmp_path / folder / "model")
    config = {"classifiers": [_hq()], "overrides": [{"source": "web", "classifiers": [_hq(0.9)]}]}
    a = _stage(tmp_path / "one", config).identity()
    assert a == _stage(tmp_path / "two", config).identity()
    model = a["config"]["classifiers"][0]["model"]
    assert model.startswith("sha256:") and a["config"]["overrides"][0]["classifiers"][0]["model"] == model
    other = tmp_path / "two" / "model" / "model.bin"
    other.write_bytes(other.read_bytes()[:-4] + struct.pack("<f", 0.25))  # another last weight: still a whole model
    assert _stage(tmp_path / "two", config).identity() != a
    assert _stage(tmp_path / "one", {"classifiers": [_hq(0.7)]}).identity() != a  # the threshold too


def test_a_worker_takes_the_drivers_check_and_refuses_a_model_changed_since(trained, tmp_path, monkeypatch):
    """Every worker repeated the full model check (a pass over every weight) that validation had made on the driver.
    Now the driver's check leaves a marker, and a worker (the stage as Ray ships it: pickled after `identity`
    recorded the model's sha256) reads the header, dictionary and size only; it refuses a file changed since the
    identity was recorded, and checks the same bytes at another inode (another node's copy) in full, once."""
    import os
    import pickle

    from tokenmill.fasttext import binding

    root, _ = trained
    shutil.copytree(root / "model", tmp_path / "model")
    model = tmp_path / "model" / "model.bin"
    monkeypatch.setenv("TOKENMILL_VERIFIED_CACHE", str(tmp_path / "markers"))
    weights_read: list[bool] = []  # per file check: whether it read every weight
    check = binding.read_model_file

    def spy(path, *args, **kwargs):
        weights_read.append(kwargs.get("weights", args[0] if args else True))
        return check(path, *args, **kwargs)

    monkeypatch.setattr(binding, "read_model_file", spy)
    parse_config(_run_config(tmp_path, {"classifiers": [_hq()]}), tmp_path)  # validation, on the driver
    assert weights_read == [True]
    run = RunContext(seed=0, sources={"a": SourceConfig(name="a", format="jsonl", paths=["x"], language="en")},
                     base_dir=str(tmp_path))
    driver = CleanStage(CleanConfig.model_validate({**ONLY_CLASSIFIERS, "classifiers": [_hq()]}), run)
    driver.identity()
    shipped = pickle.dumps(driver)

    def worker() -> CleanStage:
        weights_read.clear()
        stage = pickle.loads(shipped)  # noqa: S301 - the stage this test pickled, as Ray ships it
        stage.setup({})
        return stage

    scores = worker().process(_table([("a", PROSE_TEXT, "a"), ("b", WEB_TEXT, "a")]), {}).table.column("hq_score")
    assert weights_read == [False] and scores.null_count == 0
    original = model.read_bytes()
    copy = tmp_path / "copy.bin"
    copy.write_bytes(original)
    os.replace(copy, model)  # the same bytes at another inode: checked in full by the first worker only
    worker()
    assert weights_read == [True]
    worker()
    assert weights_read == [False]
    model.write_bytes(original[:-4] + struct.pack("<f", 0.25))  # another whole model, retrained in place say
    with pytest.raises(ConfigError, match=rf"{model} changed since this run checked it: its sha256 is .*, the run "
                                          rf"started with"):
        worker()
    assert weights_read == []  # refused by its sha256, before any check or fastText read it


def test_validation_hashes_a_model_once_and_leaves_the_marker_a_worker_takes(trained, tmp_path, monkeypatch):
    """The first validation of a model hashed it twice: `classifiers.problems` for its sha256, then the full check
    again to compare it with that same sha256. Once now; the marker it leaves is the one a worker's check finds."""
    from tokenmill.digest import file_sha256
    from tokenmill.fasttext import binding
    from tokenmill.stages.clean.filters import classifiers

    root, _ = trained
    shutil.copytree(root / "model", tmp_path / "model")
    model = tmp_path / "model" / "model.bin"
    monkeypatch.setenv("TOKENMILL_VERIFIED_CACHE", str(tmp_path / "markers"))
    hashed: list[str] = []

    def spy(path):
        hashed.append(str(path))
        return file_sha256(path)

    monkeypatch.setattr(binding, "file_sha256", spy)
    monkeypatch.setattr(classifiers, "file_sha256", spy)
    parse_config(_run_config(tmp_path, {"classifiers": [_hq()]}), tmp_path)
    assert hashed == [str(model)]
    weights_read: list[bool] = []
    check = binding.read_model_file
    monkeypatch.setattr(binding, "read_model_file",
                        lambda path, weights=True: weights_read.append(weights) or check(path, weights=weights))
    binding.check_file(str(model), file_sha256(model))  # a worker given the sha256 the driver recorded
    assert weights_read == [False] and hashed == [str(model)]  # the marker vouched: no hash, no pass over weights


def test_a_config_without_classifiers_dumps_and_declares_as_before(tmp_path):
    """The identity of every earlier run (resume keys, golden manifests) does not move."""
    assert "classifiers" not in CleanConfig().model_dump(mode="json")
    assert "classifiers" not in CleanOverride(source="s").model_dump(mode="json")
    assert "classifiers" in CleanOverride(source="s", classifiers=[]).model_dump(mode="json")
    stage = _stage(tmp_path, {})
    assert stage.adds == CleanStage.adds and stage.drop_reasons == CleanStage.drop_reasons
    out = stage.process(_table([("a", PROSE_TEXT, "web")]), {})
    assert "classifiers" not in out.stats and "classifiers" not in stage.report(out.stats)


def test_the_histogram_adds_across_shards_and_reads_quantiles():
    rng = np.random.default_rng(0)
    scores = rng.beta(0.3, 2.0, 10_000).astype(np.float32)
    whole = bin_counts(scores)
    a, b = bin_counts(scores[:3_000]), bin_counts(scores[3_000:])
    merged = {k: a.get(k, 0) + b.get(k, 0) for k in sorted(set(a) | set(b))}
    assert merged == whole and sum(whole.values()) == len(scores)
    for q in (0.01, 0.1, 0.5, 0.9, 0.99):
        exact = float(np.quantile(scores, q))
        assert abs(quantile(whole, q) - exact) <= 0.06 * max(min(exact, 1 - exact), 1e-4) + 1e-6, q  # within a bin
    assert bin_counts(np.array([0.0, 1.0], dtype=np.float32)) == {"000": 1, f"{BINS - 1:03d}": 1}


@pytest.mark.ray
def test_one_and_two_workers_give_the_same_bytes(ray_cluster, trained, tmp_path):
    from tests.pipeline.test_runner import run_into, tree

    root, _ = trained
    for name in ("pos", "neg", "model"):
        shutil.copytree(root / name, tmp_path / name)
    config = {"output": "out", "seed": 1, "sources": [
        {"name": "prose", "format": "jsonl", "paths": ["pos/*.jsonl"], "id_field": "id", "language": "en"},
        {"name": "web", "format": "jsonl", "paths": ["neg/web.jsonl"], "language": "any"}],
        "stages": {"clean": {**ONLY_CLASSIFIERS, "classifiers": [_hq(0.5)],
                             "overrides": [{"source": "web", "classifiers": [_hq(0.9)]}]}}}
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(config))
    run_into(tmp_path / "run.yaml", tmp_path / "w1", workers=1)
    run_into(tmp_path / "run.yaml", tmp_path / "w2", workers=2)
    assert tree(tmp_path / "w1", "clean") == tree(tmp_path / "w2", "clean")
    kept = [pq.read_table(p) for p in sorted((tmp_path / "w1" / "clean" / "shards").glob("*.parquet"))]
    dropped = [pq.read_table(p) for p in sorted((tmp_path / "w1" / "clean" / "dropped").glob("*.parquet"))]
    reasons = [r for t in dropped for r in t.column("drop_reason").to_pylist()]
    assert "low_hq_score" in reasons
    assert all(not np.isnan(t.column("hq_score").to_numpy()).any() for t in kept + dropped)
    manifest = json.loads((tmp_path / "w1" / "clean" / "manifest.json").read_text())["content"]
    audit = manifest["report"]["classifiers"]["hq"]["by_source"]
    assert audit["web"]["thresholds"] == {"0.9": audit["web"]["scored"]} and audit["web"]["dropped"] > 0
    assert audit["prose"]["scored"] + audit["web"]["scored"] == manifest["totals"]["docs_in"]
    assert manifest["totals"]["drops"]["low_hq_score"] == audit["prose"]["dropped"] + audit["web"]["dropped"]


def test_a_stage_editing_text_otherwise_than_training_is_warned_about(trained, tmp_path, caplog):
    root, _ = trained
    shutil.copytree(root / "model", tmp_path / "model")
    with caplog.at_level("WARNING", logger="tokenmill.stages.clean.filters.classifiers"):
        parse_config(_run_config(tmp_path, {"classifiers": [_hq()]}), tmp_path)
        assert not caplog.records  # trained behind the stage's default normalize and pii, as configured here
        parse_config(_run_config(tmp_path, {"classifiers": [_hq()], "pii": None}), tmp_path)
    assert [r.getMessage().split(":")[0] for r in caplog.records] == ["stages.clean.classifiers[0].model"]


@pytest.mark.parametrize("keep", [{"threshold": 0.5}, {"top_fraction": 0.5}])
def test_a_model_cut_short_stops_validate_and_run_before_any_work(trained, tmp_path, capsys, keep):
    """Issue 31: a model copied without its last 100 bytes (and without its sidecar) loaded, passed `validate` and
    scored every text near 0: a threshold dropped nearly everything, a top_fraction tied everything at 0 and kept
    it all, exit 0. Now both commands stop at the config, naming the key, the file and the missing bytes."""
    from tokenmill import cli

    _, result = trained
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "model.bin").write_bytes(result.model_path.read_bytes()[:-100])
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump(_run_config(tmp_path, {**ONLY_CLASSIFIERS, "classifiers": [_hq(keep=keep)]})))
    for command in ("validate", "run"):
        assert cli.main([command, str(config)]) == 2
        err = " ".join(capsys.readouterr().err.split())  # rich wraps lines
        assert f"stages.clean.classifiers[0].model: {tmp_path / 'model' / 'model.bin'} is cut short" in err, err
        assert "(100 bytes missing)" in err and "Traceback" not in err
    assert not (tmp_path / "o").exists()  # the run folder: nothing was written, no stage ran


def test_a_fasttext_without_get_labels_stops_validate_with_the_repair(trained, tmp_path, capsys, monkeypatch):
    """Issue 31: with fasttext-predict's files over fasttext-numpy2's (installed later), `validate` and `run` ended
    in a raw `AttributeError: '_FastText' object has no attribute 'get_labels'`. Now: which package to reinstall,
    and how (a plain `pip install fasttext-numpy2` says "already satisfied")."""
    import sys

    from tests.classifier.bindings import fasttext_predict_module
    from tokenmill import cli

    root, _ = trained
    shutil.copytree(root / "model", tmp_path / "model")
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump(_run_config(tmp_path, {**ONLY_CLASSIFIERS, "classifiers": [_hq()]})))
    module = fasttext_predict_module(tmp_path)
    monkeypatch.setitem(sys.modules, "fasttext", module)
    monkeypatch.setitem(sys.modules, "fasttext_pybind", module.binding)
    assert cli.main(["validate", str(config)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "has no train_supervised, get_labels" in err and "AttributeError" not in err and "Traceback" not in err
    assert "pip uninstall -y fasttext-predict; pip install --force-reinstall --no-deps 'fasttext-numpy2==0.10.4'" in err
