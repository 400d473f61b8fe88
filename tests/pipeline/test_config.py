"""Config validation: every bad key is named, and nothing is created before the config is valid."""

from __future__ import annotations

import pytest
import yaml

from tests.conftest import write_jsonl
from tokenmill.errors import ConfigError
from tokenmill.pipeline.config import load_config, parse_config


@pytest.fixture
def base(tmp_path):
    write_jsonl(tmp_path / "data" / "a.jsonl", [{"text": "hello"}])
    return {"output": "out", "seed": 1, "sources": [{"name": "a", "format": "jsonl", "paths": ["data/*.jsonl"]}]}


def test_valid_config_resolves_relative_paths(tmp_path, base):
    config = parse_config(base, tmp_path)
    assert config.output_dir == tmp_path.resolve() / "out"
    assert config.sources[0].fraction == 1.0
    assert config.stages.configured() == []


@pytest.mark.parametrize(
    "mutate, key, words",
    [
        (lambda c: c.update(bogus=1), "bogus", "unknown key"),
        (lambda c: c["sources"][0].update(fraction=1.5), "sources[0].fraction", "less than or equal to 1"),
        (lambda c: c["sources"][0].update(fraction=0), "sources[0].fraction", "greater than 0"),
        (lambda c: c["sources"][0].update(format="xml"), "sources[0].format", "unknown format 'xml'"),
        (lambda c: c["sources"][0].update(colour="red"), "sources[0].colour", "unknown key"),
        (lambda c: c["sources"][0].update(paths=["nope/*.jsonl"]), "sources[0].paths[0]", "matches no file"),
        (lambda c: c["sources"][0].update(name="a/b"), "sources[0].name", "names files"),
        (lambda c: c.update(stages={"sample": {"rate": 2}}), "stages.sample.rate", "unknown key"),
        (lambda c: c.update(stages={"cleanse": {}}), "stages.cleanse", "unknown key"),
        (lambda c: c.update(ingest={"docs_per_shard": 0}), "ingest.docs_per_shard", "greater than or equal to 1"),
        (lambda c: c.pop("output"), "output", "Field required"),
        (lambda c: c["sources"].append(dict(c["sources"][0])), "source name 'a' is used twice", ""),
    ],
)
def test_bad_config_names_the_key(tmp_path, base, mutate, key, words):
    mutate(base)
    with pytest.raises(ConfigError) as err:
        parse_config(base, tmp_path)
    assert key in str(err.value)
    assert words in str(err.value)


def test_yaml_is_loaded_safely(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("output: !!python/object/apply:os.system ['echo pwned']\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(path)


def test_top_level_must_be_mapping(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump([1, 2]))
    with pytest.raises(ConfigError, match="mapping"):
        load_config(path)
