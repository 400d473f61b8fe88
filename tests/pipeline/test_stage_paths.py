"""Files a stage's config names are opened through one `resolve`: `~` and `$VAR` work where validation said so."""

from __future__ import annotations

import json

import pytest
import yaml

from tests.conftest import make_corpus
from tokenmill.errors import ConfigError
from tokenmill.pipeline.config import load_config
from tokenmill.pipeline.config import build_stages
from tokenmill.stages.clean.config import CleanConfig
from tokenmill.stages.clean.stage import CleanStage
from tokenmill.stages.decontaminate.config import DecontaminateConfig
from tokenmill.stages.decontaminate.stage import DecontaminateStage

EVAL = {"question": "how many red apples did the farmer sell at the market on the first sunny day of spring"}


@pytest.fixture
def home(tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("TOKENMILL_EVALS", str(home / "evals"))
    (home / "block.txt").write_text("blocked.example\n")
    (home / "evals").mkdir()
    (home / "evals" / "qa.jsonl").write_text(json.dumps(EVAL) + "\n")
    return home


def test_resolve_expands_home_and_variables_then_takes_the_config_folder(home, tmp_path):
    from tokenmill.config_base import resolve

    assert resolve("~/block.txt", tmp_path / "cfg") == home / "block.txt"
    assert resolve("$TOKENMILL_EVALS/qa.jsonl", tmp_path / "cfg") == home / "evals" / "qa.jsonl"
    assert resolve("rel/x", tmp_path / "cfg") == tmp_path / "cfg" / "rel" / "x"
    with pytest.raises(ValueError, match=r"\$TOKENMILL_UNSET, which is not set"):
        resolve("$TOKENMILL_UNSET/x")


def test_a_home_relative_blocklist_and_evalset_pass_validation_and_open(home, tmp_path):
    """Bug (a) of issue 18: on 7d7001a validation expanded `~` but the stages did not, so the run crashed with a
    raw FileNotFoundError (clean's and decontaminate's identity hash the files' content) after `validate` said OK."""
    config_path = make_corpus(tmp_path / "corpus")
    data = yaml.safe_load(config_path.read_text())
    data["stages"] = {"sample": {}, "clean": {"blocklist": "~/block.txt"},
                      "decontaminate": {"evalsets": [{"name": "qa", "path": "~/evals/qa.jsonl", "format": "jsonl",
                                                      "fields": ["question"]}]}}
    config_path.write_text(yaml.safe_dump(data, sort_keys=False))
    stages = {s.name: s for s in build_stages(load_config(config_path))}
    blocklist = stages["clean"].identity()["config"]["blocklist"]
    assert blocklist.startswith("sha256:")
    assert stages["decontaminate"].identity()["config"]["evalsets"][0]["path"].startswith("sha256:")
    stages["clean"].setup({})  # reads the list


def test_stages_built_in_code_resolve_home_too(home, tmp_path):
    """A config built in code skips the loader's expansion: the stage's own resolve still finds the file."""
    from tokenmill.pipeline.contract import RunContext

    run = RunContext(seed=0, sources={}, base_dir=str(tmp_path))
    clean = CleanStage(CleanConfig(blocklist="~/block.txt"), run)
    assert clean.blocklist_path == str(home / "block.txt")
    decon = DecontaminateStage(DecontaminateConfig(evalsets=[{"name": "qa", "path": "$TOKENMILL_EVALS/qa.jsonl",
                                                             "fields": ["question"]}]), run)
    assert decon.evalset_paths == [str(home / "evals" / "qa.jsonl")]


def test_a_missing_declared_path_is_refused_naming_the_key(home, tmp_path):
    config_path = make_corpus(tmp_path / "corpus")
    data = yaml.safe_load(config_path.read_text())
    data["stages"] = {"decontaminate": {"evalsets": [{"name": "qa", "path": "~/nope.jsonl", "fields": ["q"]}]}}
    config_path.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(ConfigError, match=r"stages.decontaminate.evalsets\[0\].path: '.*/home/nope.jsonl' is not a file"):
        load_config(config_path)


def test_path_fields_come_from_the_stages_declarations():
    from tokenmill.pipeline.config import path_fields

    fields = path_fields()
    assert fields[:3] == ("output", "sources[].paths[]", "sources[].root")
    assert {"stages.clean.blocklist", "stages.decontaminate.evalsets[].path", "stages.tokenize.tokenizer",
            "stages.tokenize.tokenizer.encoder", "stages.tokenize.tokenizer.merges"} <= set(fields)
