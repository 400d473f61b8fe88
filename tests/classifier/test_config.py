"""A bad `quality train` config stops before any file is read, with an error naming the key."""

from __future__ import annotations

import pytest
import yaml

from tests.classifier.corpus import write_corpus
from tokenmill import cli
from tokenmill.classifier import train
from tokenmill.classifier.config import load_train_config
from tokenmill.errors import ConfigError


def _edit(config, change):
    data = yaml.safe_load(config.read_text())
    change(data)
    config.write_text(yaml.safe_dump(data))
    return config


BAD = {
    "missing file": (lambda d: d["positives"][0].update(paths=["pos/none.jsonl"]), "positives[0].paths[0]"),
    "glob matching nothing": (lambda d: d["negatives"][1].update(paths=["neg/*.parquet"]), "negatives[1].paths[0]"),
    "label without prefix": (lambda d: d.update(labels={"positive": "hq"}), "labels.positive"),
    "same label twice": (lambda d: d.update(labels={"positive": "__label__x", "negative": "__label__x"}), "labels"),
    "valid_fraction 0": (lambda d: d.update(valid_fraction=0), "valid_fraction"),
    "valid_fraction 1": (lambda d: d.update(valid_fraction=1.0), "valid_fraction"),
    "no positives": (lambda d: d.update(positives=[]), "positives"),
    "no negatives": (lambda d: d.pop("negatives"), "negatives"),
    "a file in both classes": (lambda d: d["negatives"][0].update(paths=["neg/web.jsonl", "pos/part-0.jsonl"]),
                               "negatives[0].paths"),
    "a file in two sources": (lambda d: d["negatives"][1].update(paths=["neg/web.jsonl"], format="jsonl"),
                              "negatives[1].paths"),
    "a source name twice": (lambda d: d["negatives"][1].update(name="prose"), "used twice"),
    "unknown fastText option": (lambda d: d["fasttext"].update(thread=4), "fasttext.thread: unknown key"),
    "unknown reader": (lambda d: d["negatives"][0].update(format="html"), "negatives[0].format"),
    "bool for a number": (lambda d: d["fasttext"].update(dim=True), "fasttext.dim"),
    # fastText allocates (words + bucket) x dim floats at once: `dim: 100000` ended in std::bad_alloc
    "dim beyond 1024": (lambda d: d["fasttext"].update(dim=100_000), "fasttext.dim: Input should be less than or equal to 1024"),
    "bucket beyond 10 million": (lambda d: d["fasttext"].update(bucket=10**9), "fasttext.bucket: Input should be less than or equal to 10000000"),
    "bucket x dim beyond 4 GB": (lambda d: d["fasttext"].update(dim=1000, bucket=2_000_000), "bucket x dim is 2,000,000 x 1000"),
    # fastText spends about length x maxn^2 steps per word: the clean stage refuses models beyond 12 (model_file.py)
    "maxn beyond 12": (lambda d: d["fasttext"].update(maxn=13), "fasttext.maxn: Input should be less than or equal to 12"),
    "epoch neither a number nor auto": (lambda d: d["fasttext"].update(epoch="many"), "fasttext.epoch: 'many' is neither"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_config_names_the_key_before_reading(case, tmp_path, monkeypatch, capsys):
    change, key = BAD[case]
    config = _edit(write_corpus(tmp_path, docs=8), change)
    with pytest.raises(ConfigError) as err:
        load_train_config(config)
    assert key in str(err.value)

    def no_work(*args, **kwargs):
        raise AssertionError("training started despite a bad config")

    monkeypatch.setattr(train, "read_source", no_work)
    monkeypatch.setattr(train, "train_classifier", no_work)
    assert cli.main(["quality", "train", str(config)]) == 2
    stderr = capsys.readouterr().err
    assert key in " ".join(stderr.split()) and "Traceback" not in stderr  # rich may wrap the line
    assert not (tmp_path / "model").exists()


def test_missing_config_file(tmp_path, capsys):
    assert cli.main(["quality", "train", str(tmp_path / "absent.yaml")]) == 2
    assert "cannot read config" in capsys.readouterr().err


def test_defaults_and_relative_paths(tmp_path):
    config = load_train_config(write_corpus(tmp_path, docs=8))
    assert config.labels.positive == "__label__hq" and config.labels.negative == "__label__lq"
    assert config.output_dir == tmp_path.resolve() / "model"
    assert config.prepare.lowercase and config.normalize.whitespace


def test_a_fasttext_that_cannot_train_is_named(tmp_path, monkeypatch, capsys):
    """A `fasttext` module without `train_supervised` (fasttext-predict's, whose files may replace fasttext-numpy2's):
    the command says which package to install."""
    import sys
    import types

    monkeypatch.setitem(sys.modules, "fasttext", types.ModuleType("fasttext"))
    assert cli.main(["quality", "train", str(write_corpus(tmp_path, docs=8))]) == 2
    assert "fasttext-numpy2" in " ".join(capsys.readouterr().err.split())
    assert not (tmp_path / "model").exists()
