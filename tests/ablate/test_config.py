"""The ablation config: overlays merged onto the base, every variant checked by the pipeline's and trainer's models."""

from __future__ import annotations

import pytest
import yaml

from tests.ablate.corpus import JUNK_SOURCE, write_ablation, write_corpus
from tokenmill.ablate.config import deep_merge, load_ablate_config, variants
from tokenmill.ablate.validate import problems
from tokenmill.ablate.share import plan, signatures
from tokenmill.errors import ConfigError


def test_deep_merge_merges_mappings_deletes_on_null_and_appends_with_plus():
    base = {"a": {"x": 1, "y": [1, 2]}, "b": 2, "s": [{"n": 1}]}
    out = deep_merge(base, {"a": {"x": 5, "y": [3]}, "b": None, "s+": [{"n": 2}], "c": {"d": 1}})
    assert out == {"a": {"x": 5, "y": [3]}, "s": [{"n": 1}, {"n": 2}], "c": {"d": 1}}
    assert base == {"a": {"x": 1, "y": [1, 2]}, "b": 2, "s": [{"n": 1}]}  # untouched


def test_variants_write_to_their_own_folders_with_the_overlay_applied(tmp_path):
    write_corpus(tmp_path, clean_docs=20)
    config = load_ablate_config(write_ablation(tmp_path, {"junk": {"sources+": [JUNK_SOURCE]}, "same": {}}))
    assert problems(config) == []
    vs = {v.name: v for v in variants(config)}
    assert list(vs) == ["base", "junk", "same"]
    assert [s["name"] for s in vs["junk"].data["sources"]] == ["clean", "junk"]
    assert vs["same"].data["output"] == str(tmp_path / "ablation" / "runs" / "same")


def test_validate_names_each_problem_by_variant_and_key(tmp_path):
    write_corpus(tmp_path, clean_docs=20)
    path = write_ablation(tmp_path, {
        "typo": {"stages": {"tokenize": {"valid_fraktion": 0.1}}},
        "split": {"stages": {"tokenize": {"valid_fraction": 0.2}}},
        "missing": {"sources+": [{"name": "x", "format": "jsonl", "paths": ["nowhere/*.jsonl"]}]},
    }, proxy={"model": "opt-huge"})
    found = problems(load_ablate_config(path))
    assert any(p.startswith("variants.typo: stages.tokenize.valid_fraktion: unknown key") for p in found), found
    assert any(p.startswith("variants.missing: sources[1].paths[0]") for p in found), found
    assert any("held-out split" in p and "split: seed 3, valid_fraction 0.2" in p for p in found), found
    assert any(p.startswith("proxy: model") and "opt-huge" in p for p in found), found


def test_config_refuses_fewer_than_three_seeds_and_the_base_name(tmp_path):
    write_corpus(tmp_path, clean_docs=20)
    with pytest.raises(ConfigError, match="seeds"):
        load_ablate_config(write_ablation(tmp_path, {"a": {}}, seeds=[0, 1]))
    with pytest.raises(ConfigError, match="base_name"):
        load_ablate_config(write_ablation(tmp_path, {"base": {}}))
    with pytest.raises(ConfigError, match="less than one step"):
        load_ablate_config(write_ablation(tmp_path, {"a": {}}, proxy={"tokens": 10}))


def test_cli_validate_prints_one_line_per_problem_and_exits_2(tmp_path, capsys):
    from tokenmill.cli import main

    write_corpus(tmp_path, clean_docs=20)
    good = write_ablation(tmp_path, {"same": {}})
    assert main(["ablate", "validate", str(good)]) == 0
    bad = write_ablation(tmp_path, {"typo": {"stagez": {}}})
    assert main(["ablate", "validate", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["variants.typo: stagez: unknown key"]


def test_share_plan_follows_equal_stage_prefixes(tmp_path):
    """A variant that only turns dedup off shares ingest with the base; an identical one shares every stage; a
    source added changes ingest, so nothing is shared."""
    from tokenmill.pipeline.config import parse_config

    write_corpus(tmp_path, clean_docs=20)
    base = yaml.safe_load((tmp_path / "base.yaml").read_text())
    base["stages"] = {"dedup": {}, **base["stages"]}
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(base, sort_keys=False))
    config = load_ablate_config(write_ablation(tmp_path, {"nodedup": {"stages": {"dedup": None}}, "same": {},
                                                          "junk": {"sources+": [JUNK_SOURCE]}}))
    chains = {v.name: signatures(parse_config(v.data, v.base_dir)) for v in variants(config)}
    plans = plan(chains)
    assert plans["base"].shared == [] and plans["base"].recomputed == ["ingest", "dedup", "tokenize"]
    assert (plans["nodedup"].partner, plans["nodedup"].shared, plans["nodedup"].recomputed) == (
        "base", ["ingest"], ["tokenize"])
    assert (plans["same"].partner, plans["same"].shared) == ("base", ["ingest", "dedup", "tokenize"])
    assert plans["junk"].shared == [] and plans["junk"].partner is None


def test_a_report_folder_is_read_where_it_lies_not_where_its_recorded_output_points(tmp_path):
    """`tokenmill ablate report DIR` on a folder from someone else: a recorded `output` elsewhere (here the parent,
    where a crafted config would have the report read proxies) is not followed; a base name with a separator is
    refused."""
    import json

    from tokenmill.ablate.layout import CONFIG_FILE, proxy_dir
    from tokenmill.ablate.report import load_config

    write_corpus(tmp_path, clean_docs=20)
    config = load_ablate_config(write_ablation(tmp_path, {"same": {}}))
    folder = tmp_path / "handed-over"
    folder.mkdir()
    recorded = {**json.loads(config.model_dump_json()), "output": str(tmp_path), "base_dir": config.base_dir}
    (folder / CONFIG_FILE).write_text(json.dumps(recorded))
    loaded = load_config(folder)
    assert loaded.output_dir == folder.resolve()
    assert proxy_dir(loaded, "same", 0).is_relative_to(folder.resolve())
    (folder / CONFIG_FILE).write_text(json.dumps({**recorded, "base_name": "../x"}))
    with pytest.raises(ValueError, match="not a usable folder name"):
        load_config(folder)
