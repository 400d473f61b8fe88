"""The default CPU example: `tokenmill demo-data` writes ablate.yaml beside demo.yaml (the base, the quality
classifier off, dedup off; 3 seeds), and `tokenmill ablate validate` passes on it. Its measured run is in
docs/ablate.md ("The default CPU example")."""

from __future__ import annotations

import yaml

from tokenmill.ablate.config import load_ablate_config, variants
from tokenmill.demo import write_demo_corpus
from tokenmill.demo.corpus import MIN_DOCS_PER_SOURCE


def test_demo_data_writes_an_ablation_that_validates(tmp_path, capsys):
    from tokenmill.cli import main

    summary = write_demo_corpus(tmp_path, seed=1234, docs_per_source=MIN_DOCS_PER_SOURCE)
    assert "ablate.yaml" in summary["files"]
    path = tmp_path / "ablate.yaml"
    assert main(["ablate", "validate", str(path)]) == 0
    assert capsys.readouterr().out.strip() == f"{path}: 3 variants, 3 seeds, 60 steps each: valid"
    config = load_ablate_config(path)
    assert config.names == ["base", "no_classifier", "no_dedup"] and len(config.seeds) == 3
    runs = {v.name: v.data for v in variants(config)}
    assert runs["base"]["stages"]["clean"]["classifiers"][0]["name"] == "hq"
    assert "classifiers" not in runs["no_classifier"]["stages"]["clean"]
    assert "dedup" in runs["base"]["stages"] and "dedup" not in runs["no_dedup"]["stages"]
    assert runs["no_dedup"]["stages"]["clean"] == runs["base"]["stages"]["clean"]


def test_without_the_classifier_the_variant_that_turns_it_off_is_left_out(tmp_path):
    write_demo_corpus(tmp_path, seed=3, docs_per_source=MIN_DOCS_PER_SOURCE, classifier=False)
    config = yaml.safe_load((tmp_path / "ablate.yaml").read_text())
    assert list(config["variants"]) == ["no_dedup"]
    assert load_ablate_config(tmp_path / "ablate.yaml").names == ["base", "no_dedup"]
