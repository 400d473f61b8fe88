"""Resuming a run: paths taken from the config file's folder, data known by content, and changed data refused or,
with ``--allow-data-change``, accepted with a warning and an event."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tokenmill.cli import main
from tests.train.runs import config, losses, write_config, write_tokens


def _events(output: Path) -> list[dict]:
    return [json.loads(line) for line in (output / "events.jsonl").read_text().splitlines()]


def test_a_run_resumes_from_another_working_directory_and_from_moved_data(tmp_path, monkeypatch, capsys):
    project = tmp_path / "project"
    write_tokens(project / "tokens")
    # Relative paths, as a person writes them: from the config file's folder.
    cfg = config(Path("tokens/tokens.json"), Path("out"), steps=3, checkpoint_every=3, eval_every=0)
    cfg = {**cfg, "data": "tokens/tokens.json", "output": "out"}
    write_config(project / "train.yaml", cfg)
    monkeypatch.chdir(project)
    assert main(["train", "train.yaml"]) == 0
    # The same config from its parent folder: the same data and output, so it resumes.
    monkeypatch.chdir(tmp_path)
    assert main(["train", "project/train.yaml", "--steps", "5"]) == 0, capsys.readouterr().err
    assert [e["action"] for e in _events(project / "out")] == ["resume"]
    assert sorted(losses(project / "out")) == [1, 2, 3, 4, 5]
    assert not (tmp_path / "out").exists() and not (tmp_path / "tokens").exists()
    meta = json.loads((project / "out" / "checkpoints" / "step-000000005" / "meta.json").read_text())
    assert Path(meta["extra"]["config"]["data"][0]["path"]).is_absolute()
    # The data copied elsewhere, unchanged: still the same data (known by content, not by path).
    shutil.copytree(project / "tokens", tmp_path / "copy")
    write_config(project / "moved.yaml", {**cfg, "data": "../copy/tokens.json", "steps": 7})
    assert main(["train", "project/moved.yaml"]) == 0, capsys.readouterr().err
    assert [e["action"] for e in _events(project / "out")] == ["resume", "resume"]
    assert sorted(losses(project / "out")) == list(range(1, 8))


def test_changed_data_are_refused_by_stream_before_any_tensor_is_read(tmp_path, monkeypatch):
    from tokenmill.errors import TokenmillError
    from tokenmill.train import checkpoint
    from tokenmill.train.config import parse_train_config
    from tokenmill.train.trainer import Trainer

    a, b = write_tokens(tmp_path / "a"), write_tokens(tmp_path / "b", seed=1)
    out = tmp_path / "run"
    Trainer(parse_train_config(config(a, out, steps=3, checkpoint_every=3, eval_every=0))).run()

    def no_tensors(*args, **kwargs):
        raise AssertionError("a tensor was read")

    monkeypatch.setattr(checkpoint.CheckpointManager, "load", no_tensors)
    with pytest.raises(TokenmillError, match=r"data changed since the checkpoint at step 3 .*: alpha: files changed; "
                                             r"beta: files changed\. .*--allow-data-change"):
        Trainer(parse_train_config(config(b, out, steps=5, eval_every=0))).run()


def test_changed_data_stop_with_the_flag_named_and_the_flag_or_the_key_goes_on_loudly(tmp_path, capsys):
    tokens = write_tokens(tmp_path / "tokens")
    out = tmp_path / "run"
    cfg = config(tokens, out, steps=3, checkpoint_every=3, eval_every=0)
    path = write_config(tmp_path / "train.yaml", cfg)
    assert main(["train", str(path)]) == 0
    write_tokens(tmp_path / "tokens", seed=1)  # rewritten in place: same path, other documents
    capsys.readouterr()
    # Refused: a message naming the streams and the flag, no traceback, nothing trained.
    assert main(["train", str(path), "--steps", "5"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "data changed since the checkpoint at step 3" in err and "alpha: files changed" in err
    assert "--allow-data-change" in err and "allow_data_change: true" in err
    assert sorted(losses(out)) == [1, 2, 3] and not (out / "events.jsonl").exists()
    # The flag: warned, recorded, and the run goes on at the same position (global batch 3 at step 4).
    assert main(["train", str(path), "--steps", "5", "--allow-data-change"]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert "warning: DATA CHANGED since the checkpoint at step 3" in err
    events = _events(out)
    assert [e["action"] for e in events] == ["data_change", "resume"]
    change = events[0]
    assert change["step"] == 3 and change["changes"] == ["alpha: files changed", "beta: files changed"]
    assert change["data"]["before"]["fingerprint"] != change["data"]["after"]["fingerprint"]
    assert change["consumed_samples"] == 3 * 12
    from tests.train.runs import metrics
    assert [r["batch"] for r in metrics(out) if "loss" in r] == [0, 1, 2, 3, 4]
    # Its checkpoints are of the new data: the next resume needs no flag.
    assert main(["train", str(path), "--steps", "6"]) == 0
    assert [e["action"] for e in _events(out)] == ["data_change", "resume", "resume"]
    # The config key does what the flag does.
    write_tokens(tmp_path / "tokens", seed=2)
    keyed = write_config(tmp_path / "keyed.yaml", {**cfg, "steps": 7, "allow_data_change": True})
    assert main(["train", str(keyed)]) == 0
    assert [e["action"] for e in _events(out)][-2:] == ["data_change", "resume"]
    assert sorted(losses(out)) == list(range(1, 8))


def test_a_rollback_to_a_checkpoint_from_before_an_accepted_data_change_goes_on(tmp_path):
    """The data change accepted at the step-10 resume brings a poisoned document; the spike rolls back to that
    same checkpoint, whose loader state is of the old data: the run goes on, on the new data, and finishes."""
    from tokenmill.train.config import parse_train_config
    from tokenmill.train.trainer import Trainer
    from tests.train.runs import CONSTANT_FINGERPRINTS, constant_docs
    from tests.train.test_trainer import _poisoned

    poisoned, weights = _poisoned(tmp_path)  # the poison document is served once, in global batches 11 to 16
    harmless = write_tokens(tmp_path / "harmless", extra={"poison": [[1] * 33]}, docs=constant_docs)
    guard = {"warmup_steps": 8, "ewm_alpha": 0.5, "z_threshold": 12.0, "lr_factor": 0.5}
    out = tmp_path / "run"
    cfg = config(harmless, out, weights=weights, global_batch_size=4, steps=10, lr=1e-2, warmup_steps=0,
                 eval_every=0, checkpoint_every=10, guard=guard, fingerprints=CONSTANT_FINGERPRINTS)
    Trainer(parse_train_config(cfg)).run()
    summary = Trainer(parse_train_config({**cfg, "data": str(poisoned), "steps": 24,
                                          "allow_data_change": True})).run()
    assert summary["steps"] == 24 and summary["rollbacks"] == 1
    events = _events(out)
    assert [e["action"] for e in events] == ["data_change", "resume", "rollback"]
    assert events[0]["changes"] == ["poison: files changed"] and events[2]["resumed_from_step"] == 10
