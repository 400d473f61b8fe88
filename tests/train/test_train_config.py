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


def test_a_key_moved_into_the_loader_block_names_where_it_went(tmp_path):
    path = _write(tmp_path, output=tmp_path / "out", data=tmp_path / "tokens.json")
    for line, told in (("num_workers: 2", "num_workers is now loader.num_workers: write `loader: {num_workers: 2}`"),
                       ("reset_position_ids: true", "reset_position_ids is now loader.position_ids: write "
                                                    "`loader: {position_ids: true}`")):
        path.write_text(path.read_text(encoding="utf-8").split("\nnum_workers")[0].split("\nreset")[0] + f"\n{line}\n")
        with pytest.raises(ConfigError) as err:
            load_train_config(path)
        assert told in str(err.value)


def test_every_loader_option_reaches_the_loader_from_the_yaml(tmp_path, monkeypatch):
    """Each option set to a value other than its default in `loader:` reaches the train split's `TokenLoader`; the
    validation split's takes the same but unshuffled, in the training process."""
    from tests.train.runs import config, write_config, write_tokens
    from tokenmill.cli import main
    from tokenmill.train import run as run_module
    from tokenmill.loader.options import LoaderOptions

    given = {"num_workers": 1, "shuffle": True, "shuffle_block": "file", "shuffle_window": 3, "position_ids": True,
             "prefetch_factor": 3, "verify": False, "allow_unhashed": True, "cache_dir": "cache",
             "cache_bytes": 1 << 30, "fetch_timeout": 30.0, "prefetch_threads": 2, "prefetch_bytes": 1 << 20}
    # All but `shuffle` off their defaults (unshuffled, a block shuffle would have nothing to do)
    assert {k for k, v in given.items() if v == LoaderOptions.model_fields[k].default} == {"shuffle"}
    built: list[dict] = []

    class Recording(run_module.TokenLoader):
        def __init__(self, paths, **kwargs):
            built.append(kwargs)
            super().__init__(paths, **kwargs)

    monkeypatch.setattr(run_module, "TokenLoader", Recording)
    tokens = write_tokens(tmp_path / "tokens")
    cfg = config(tokens, tmp_path / "out", steps=2, warmup_steps=1, checkpoint_every=2, eval_every=2, loader=given)
    assert main(["train", str(write_config(tmp_path / "train.yaml", cfg))]) == 0
    train, valid = built[0], built[1]
    assert {k: train[k] for k in given} == {**given, "cache_dir": str(tmp_path / "cache")}
    # An option added later, not set here, reaches the loader too, at its default
    defaults = {k: f.default for k, f in LoaderOptions.model_fields.items() if k not in given}
    assert {k: train[k] for k in defaults} == defaults and set(given) <= set(LoaderOptions.model_fields)
    assert valid["split"] == "valid" and valid["shuffle"] is False and valid["shuffle_block"] is None
    assert valid["position_ids"] is True and valid["verify"] is False and valid["num_workers"] == 0


def test_a_resume_may_change_how_samples_arrive_not_which(tmp_path, capsys):
    """Workers, prefetch and the cache may change on resume; an option that changes what is computed (position
    ids) stops it, naming `loader.position_ids`. A checkpoint's config from before the block (top-level
    `num_workers`, `reset_position_ids`) compares as the same block."""
    from tests.train.runs import config, write_config, write_tokens
    from tokenmill.cli import main
    from tokenmill.train.restore import _loader_keys

    tokens = write_tokens(tmp_path / "tokens")
    cfg = config(tokens, tmp_path / "out", steps=2, warmup_steps=1, checkpoint_every=2, eval_every=0)
    assert main(["train", str(write_config(tmp_path / "a.yaml", cfg))]) == 0
    more = {**cfg, "steps": 3, "loader": {"num_workers": 1, "prefetch_factor": 4, "prefetch_threads": 1}}
    assert main(["train", str(write_config(tmp_path / "b.yaml", more))]) == 0, capsys.readouterr().err
    capsys.readouterr()
    changed = {**cfg, "steps": 4, "loader": {"num_workers": 0, "position_ids": True}}
    assert main(["train", str(write_config(tmp_path / "c.yaml", changed))]) != 0
    assert "of a run with another loader.position_ids: loader.position_ids: False -> True" in capsys.readouterr().err
    legacy = {"steps": 2, "num_workers": 1, "reset_position_ids": False}
    assert _loader_keys(legacy) == _loader_keys({"steps": 2}) == _loader_keys({"steps": 2, "loader": {"num_workers": 3}})
    assert _loader_keys({"reset_position_ids": True}) != _loader_keys({})
