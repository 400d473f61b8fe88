"""`tokenmill manifest show` on real runs: lineage per stage, and a stage whose input was rerun is flagged stale."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from tokenmill.demo import write_demo_corpus
from tokenmill.cli import main as cli
from tokenmill.errors import TokenmillError
from tokenmill.pipeline.manifest import content_hash
from tokenmill.manifests.show import show_run
from tokenmill.pipeline.config import load_config
from tokenmill.pipeline.runner import run_pipeline

pytestmark = pytest.mark.ray


def write_config(root: Path, name: str, edit=None) -> Path:
    cfg = yaml.safe_load((root / "demo.yaml").read_text())
    cfg["stages"] = {k: v for k, v in cfg["stages"].items() if k in ("sample", "clean", "dedup")}
    if edit:
        edit(cfg)
    path = root / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def run_into(config_path: Path, output: Path, **kwargs) -> Path:
    run_pipeline(load_config(config_path).model_copy(update={"output": str(output)}), **kwargs)
    return output


def manifest(run: Path, stage: str) -> dict:
    return json.loads((run / stage / "manifest.json").read_text())


def restore(run: Path, stage: str) -> None:
    """Move a stage the runner set aside back into the run, as someone restoring it by hand would."""
    [moved] = sorted((run / "_superseded").glob(f"*/{stage}"))
    shutil.move(str(moved), str(run / stage))


@pytest.fixture(scope="module")
def base(ray_cluster, tmp_path_factory):
    root = tmp_path_factory.mktemp("show")
    corpus = root / "corpus"
    write_demo_corpus(corpus, docs_per_source=40)
    config = write_config(corpus, "base")
    return {"root": root, "config": config, "corpus": corpus, "run": run_into(config, root / "run")}


def test_fresh_run_is_consistent(base, capsys):
    run = base["run"]
    result = show_run(str(run), config_path=str(base["config"]))
    assert result["consistent"] and result["superseded"] == []
    rows = {r["stage"]: r for r in result["stages"]}
    assert list(rows) == ["ingest", "sample", "clean", "dedup"]
    assert all(r["status"] == "ok" and r["problems"] == [] for r in rows.values())
    assert rows["ingest"]["input"]["matches"] is True
    for stage, upstream in (("sample", "ingest"), ("clean", "sample"), ("dedup", "clean")):
        m = manifest(run, stage)
        assert rows[stage]["input"] == {"stage": upstream, "recorded_hash": m["content"]["input"]["manifest_hash"],
                                        "current_hash": content_hash(manifest(run, upstream)["content"]), "matches": True}
        totals = m["content"]["totals"]
        assert (rows[stage]["docs_in"], rows[stage]["docs_out"], rows[stage]["drops"]) == (
            totals["docs_in"], totals["docs_out"], totals["drops"])
        assert rows[stage]["config_hash"] == m["content"]["config_hash"]
        assert rows[stage]["seconds"] == m["run_info"]["seconds"]
    ingest = manifest(run, "ingest")["content"]["by_source"]
    dedup = manifest(run, "dedup")["content"]["by_source"]
    for source, cell in result["by_source"].items():
        assert (cell["read"], cell["ingest"], cell["dedup"]) == (
            ingest[source]["docs_in"], ingest[source]["docs_out"], dedup[source]["docs_out"])

    assert cli(["manifest", "show", str(run)]) == 0
    out = capsys.readouterr().out
    assert "dedup" in out and "sampled_out" in out
    assert cli(["manifest", "show", str(run), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["consistent"] is True


def test_rerun_of_clean_leaves_dedup_missing_then_stale(base, capsys):
    run = base["root"] / "rerun_clean"
    shutil.copytree(base["run"], run)
    stricter = write_config(base["corpus"], "strict", lambda cfg: cfg["stages"]["clean"].setdefault(
        "quality", {}).__setitem__("gopher_quality", {"min_doc_words": 200}))
    run_into(stricter, run, only="clean")

    # The runner moved dedup aside with the old clean: show says it is missing, not silently absent.
    result = show_run(str(run))
    rows = {r["stage"]: r for r in result["stages"]}
    assert not result["consistent"]
    assert [r["status"] for r in result["stages"]] == ["ok", "ok", "ok", "missing"]
    assert result["superseded"][0]["stages"] == ["clean", "dedup"]
    assert "_superseded" in rows["dedup"]["problems"][0]
    assert cli(["manifest", "show", str(run)]) == 1
    capsys.readouterr()

    # Put the old dedup back: it read the old clean manifest, so it is stale.
    restore(run, "dedup")
    result = show_run(str(run))
    rows = {r["stage"]: r for r in result["stages"]}
    assert [r["status"] for r in result["stages"]] == ["ok", "ok", "ok", "stale"]
    assert rows["dedup"]["input"]["matches"] is False
    assert rows["dedup"]["input"]["recorded_hash"] == manifest(base["run"], "dedup")["content"]["input"]["manifest_hash"]
    assert rows["dedup"]["input"]["current_hash"] == content_hash(manifest(run, "clean")["content"])
    assert "'clean' was rerun after it" in rows["dedup"]["problems"][0]
    assert cli(["manifest", "show", str(run), "--json"]) == 1
    assert json.loads(capsys.readouterr().out) == result
    assert cli(["manifest", "show", str(run)]) == 1
    assert "stale" in capsys.readouterr().out


def test_stale_stage_taints_the_stages_after_it(base):
    run = base["root"] / "rerun_sample"
    shutil.copytree(base["run"], run)

    def fewer_web(cfg):
        for source in cfg["sources"]:
            if source["name"] == "web_en":
                source["fraction"] = 0.25

    run_into(write_config(base["corpus"], "fraction", fewer_web), run, only="sample")
    restore(run, "clean")
    restore(run, "dedup")
    result = show_run(str(run))
    assert [(r["stage"], r["status"]) for r in result["stages"]] == [
        ("ingest", "ok"), ("sample", "ok"), ("clean", "stale"), ("dedup", "stale upstream")]
    assert show_run(str(base["run"]))["consistent"]  # the original run is untouched


def test_not_a_run(base, tmp_path):
    with pytest.raises(TokenmillError, match="no stage folders"):
        show_run(str(tmp_path))
    with pytest.raises(TokenmillError, match="not a folder"):
        show_run(str(tmp_path / "nope"))
    assert cli(["manifest", "show", str(tmp_path), "--json"]) == 2
