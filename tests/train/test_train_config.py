"""A train config is read as a pipeline config is: duplicate keys refused, `~` and `$VAR` expanded in its paths."""

from __future__ import annotations

from pathlib import Path

import pytest

from tokenmill.errors import ConfigError
from tokenmill.train.config import load_train_config

TEXT = """\
model: opt-tiny
steps: 4
seq_len: 16
global_batch_size: 2
micro_batch_size: 2
output: "{output}"
data:
  - {{path: "{data}"}}
"""


def _write(tmp_path: Path, **fields) -> Path:
    path = tmp_path / "cfg" / "train.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(TEXT.format(**fields), encoding="utf-8")
    return path


def test_environment_variables_in_paths_are_expanded(tmp_path, monkeypatch):
    (tmp_path / "tokens").mkdir()
    (tmp_path / "tokens" / "tokens.json").write_text("{}")
    monkeypatch.setenv("TM_DATA", str(tmp_path / "tokens"))
    cfg = load_train_config(_write(tmp_path, output="$TM_DATA/../out", data="${TM_DATA}/tokens.json"))
    assert cfg.data[0].path == str(tmp_path / "tokens" / "tokens.json")
    assert cfg.output == f"{tmp_path / 'tokens'}/../out" and "$" not in cfg.output


def test_an_unset_variable_is_refused_naming_the_key(tmp_path, monkeypatch):
    monkeypatch.delenv("TM_UNSET", raising=False)
    with pytest.raises(ConfigError, match=r"data\[0\]\.path: .*\$TM_UNSET, which is not set"):
        load_train_config(_write(tmp_path, output="out", data="$TM_UNSET/tokens.json"))


def test_a_key_written_twice_is_refused(tmp_path):
    (tmp_path / "tokens.json").write_text("{}")
    path = _write(tmp_path, output="out", data=str(tmp_path / "tokens.json"))
    path.write_text(path.read_text() + "steps: 8\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="steps"):
        load_train_config(path)
