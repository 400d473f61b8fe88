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


def _with_guard(tmp_path: Path, guard: str) -> Path:
    (tmp_path / "tokens.json").write_text("{}")
    path = _write(tmp_path, output="out", data=str(tmp_path / "tokens.json"))
    path.write_text(path.read_text() + f"guard: {guard}\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("guard, key, why", [
    ("{warmup_steps: 0}", "warmup_steps", "greater than or equal to 1"),
    ("{ratio_threshold: 0.9}", "ratio_threshold", "greater than 1"),
    ("{max_grad_norm_ratio: 1.0}", "max_grad_norm_ratio", "greater than 1"),
    ("{z_threshold: 0}", "z_threshold", "greater than 0"),
    ("{skip_window: -1}", "skip_window", "greater than or equal to 0"),
])
def test_a_guard_bound_is_refused_at_load_naming_the_key(tmp_path, guard, key, why):
    """Issue 18 bug (b): these passed loading, then the guard raised ValueError after the process group was up."""
    with pytest.raises(ConfigError, match=rf"guard\.{key}: .*{why}"):
        load_train_config(_with_guard(tmp_path, guard))


def test_the_guard_block_is_the_guard_config(tmp_path):
    """One tree: what the YAML says is what the guard runs with, no second config copied from the first."""
    from tokenmill.train.guard import DivergenceGuard, GuardConfig

    cfg = load_train_config(_with_guard(tmp_path, "{warmup_steps: 1, ratio_threshold: 1.5, min_rel_std: 0.02}"))
    assert isinstance(cfg.guard, GuardConfig)
    guard = DivergenceGuard(cfg.guard)
    assert guard.cfg.ratio_threshold == 1.5 and guard.cfg.min_rel_std == 0.02
    guard.check(1, 2.0)
    assert guard.armed  # warmup_steps 1: armed after one healthy step
