"""Fault injection for the trainer (TOKENMILL_TRAIN_FAULTS): off unless named, a checked plan, a poison keyed by the
data, gradient corruption once or always, and a rank that sleeps for good."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from pydantic import ValidationError

from tokenmill.errors import ConfigError
from tokenmill.train.config import parse_train_config
from tokenmill.train.errors import EveryRankError
from tokenmill.train.faults import ENV, FaultPlan, TrainFaults, poison_tokens
from tokenmill.train.trainer import Trainer
from tests.train.runs import config, env, metrics, write_config, write_tokens


def _faults(plan: dict, rank: int = 0, vocab: int | None = 256) -> TrainFaults:
    return TrainFaults(FaultPlan.model_validate(plan), rank, vocab)


def _micro(n: int, seq: int = 8) -> dict[str, torch.Tensor]:
    tokens = torch.arange(n * (seq + 1)).reshape(n, seq + 1) % 200
    return {"input_ids": tokens[:, :-1].contiguous(), "labels": tokens[:, 1:].contiguous()}


def test_off_unless_the_variable_names_a_valid_plan(tmp_path, monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    assert TrainFaults.from_env(0) is None
    monkeypatch.setenv(ENV, str(tmp_path / "missing.json"))
    with pytest.raises(ConfigError, match=f"{ENV}=.*missing.json: cannot read"):
        TrainFaults.from_env(0)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"grad": {"rank": 1, "step": 2, "mode": "sometimes"}, "slep": {}}))
    monkeypatch.setenv(ENV, str(bad))
    with pytest.raises(ConfigError, match=r"grad\.mode(.|\n)*slep"):
        TrainFaults.from_env(0)


def test_a_poison_plan_is_checked_and_random_tokens_need_the_vocabulary():
    """A poison range given backwards or a negative token id is refused naming the field; random tokens without the
    vocabulary size stop the run naming the variable (a fault test that injected nothing would pass for nothing)."""
    with pytest.raises(ValidationError, match=r"samples \[5, 2\]: give \[first, last\]"):
        FaultPlan.model_validate({"poison": {"batch": 1, "samples": [5, 2]}})
    with pytest.raises(ValidationError, match="tokens -1: a token id is >= 0"):
        FaultPlan.model_validate({"poison": {"batch": 1, "tokens": -1}})
    spec = FaultPlan.model_validate({"poison": {"batch": 1}}).poison
    with pytest.raises(ConfigError, match=f"{ENV}: poison tokens 'random' needs the vocabulary size"):
        poison_tokens(spec, 1, 0, 9, None)
    assert torch.equal(poison_tokens(spec, 1, 0, 9, 256), poison_tokens(spec, 1, 0, 9, 256))  # seeded by position
    assert not torch.equal(poison_tokens(spec, 1, 0, 9, 256), poison_tokens(spec, 1, 1, 9, 256))


def test_a_poison_follows_the_data_not_the_rank():
    """Samples 6-11 of batch 4: on two ranks rank 1 serves them, on one rank its micro-batch holds them at rows 6-11,
    and both get the same tokens (a data fault reproduces wherever its batch goes)."""
    plan = {"poison": {"batch": 4, "samples": [6, 11], "tokens": "random"}}
    on_rank_1 = _faults(plan, rank=1).poison(5, 4, 6, _micro(6))
    alone = _faults(plan, rank=0).poison(5, 4, 0, _micro(12))
    assert torch.equal(on_rank_1["input_ids"], alone["input_ids"][6:])
    assert torch.equal(on_rank_1["labels"], alone["labels"][6:])
    assert torch.equal(alone["input_ids"][:6], _micro(12)["input_ids"][:6])  # rows outside the range untouched
    assert torch.equal(on_rank_1["input_ids"][:, 1:], on_rank_1["labels"][:, :-1])  # still one shifted sequence
    assert int(alone["input_ids"].max()) < 256
    # Rank 0's half of that batch, and any other batch, pass untouched (the very same tensors).
    micro = _micro(6)
    assert _faults(plan, rank=0).poison(5, 4, 0, micro) is micro
    assert _faults(plan, rank=1).poison(5, 3, 6, micro) is micro
    # One id repeated (a filled block), over the whole batch when no samples are named.
    filled = _faults({"poison": {"batch": 4, "tokens": 255}}).poison(5, 4, 0, _micro(3))
    assert filled["input_ids"].eq(255).all() and filled["labels"].eq(255).all()


def test_a_gradient_is_corrupted_once_or_always_from_its_step(tmp_path):
    log = tmp_path / "log.jsonl"
    once = _faults({"grad": {"rank": 1, "step": 3, "factor": 100.0}, "log": str(log)}, rank=1)
    assert [s for s in range(1, 7) if once.grad_due(s)] == [3]
    g = [torch.ones(4), torch.full((2,), 2.0)]
    once.corrupt(3, g)
    once.corrupt(3, [torch.ones(1)])  # the step's other reduce-scatter buckets: one log line
    assert g[0].eq(100).all() and g[1].eq(200).all()
    assert not once.grad_due(3)  # a replay of step 3 runs clean: the fault was transient
    always = _faults({"grad": {"rank": 1, "step": 3, "mode": "always", "kind": "nan"}}, rank=1)
    assert [s for s in range(1, 7) if always.grad_due(s)] == [3, 4, 5, 6]
    g = [torch.ones(3)]
    always.corrupt(4, g)
    assert g[0].isnan().all()
    assert not _faults({"grad": {"rank": 1, "step": 3}}, rank=0).grad_due(3)  # another rank
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    assert [(e["fault"], e["rank"], e["step"]) for e in lines] == [("grad", 1, 3)]


def test_one_rank_run_with_a_nan_gradient_is_flagged_and_rolled_back(tmp_path, monkeypatch):
    """One process: the gradient is corrupted after the backward (no reduction to tap); the non-finite local norm
    is flagged at its step and the guard rolls the step back."""
    tokens = write_tokens(tmp_path / "tokens")
    plan = tmp_path / "faults.json"
    plan.write_text(json.dumps({"grad": {"rank": 0, "step": 3, "kind": "nan"}, "log": str(tmp_path / "log")}))
    monkeypatch.setenv(ENV, str(plan))
    out = tmp_path / "run"
    summary = Trainer(parse_train_config(config(tokens, out, steps=5, checkpoint_every=2, eval_every=0))).run()
    assert summary["steps"] == 5 and summary["rollbacks"] == 1
    events = [json.loads(x) for x in (out / "events.jsonl").read_text().splitlines()]
    assert [(e["action"], e["step"]) for e in events] == [("rank_anomaly", 3), ("rollback", 3)]
    assert events[0]["rank"] == 0 and events[0]["metrics"]["grad_norm_local"]["rule"] == "non_finite"
    assert events[1]["rule"] == "non_finite_grad_norm"


def test_a_spike_before_the_first_checkpoint_stops_the_run_saying_there_is_none(tmp_path, monkeypatch):
    """A spike with no healthy checkpoint yet: nothing to roll back to; the run stops (every rank) naming the step,
    the reason and where the first checkpoint comes."""
    tokens = write_tokens(tmp_path / "tokens")
    plan = tmp_path / "faults.json"
    plan.write_text(json.dumps({"grad": {"rank": 0, "step": 2, "kind": "nan"}, "log": str(tmp_path / "log")}))
    monkeypatch.setenv(ENV, str(plan))
    out = tmp_path / "run"
    with pytest.raises(EveryRankError, match=r"^step 2: .*; no healthy checkpoint to roll back to \(the first is "
                                             r"written at step 3\)$"):
        Trainer(parse_train_config(config(tokens, out, steps=4, checkpoint_every=3, eval_every=0))).run()
    assert not (out / "checkpoints").exists() or not list((out / "checkpoints").iterdir())


@pytest.mark.slow  # two ranks left asleep: about 25 s busy; test_watchdog.py's 2-rank test injects the same sleep
def test_a_sleeping_rank_stops_at_its_step(tmp_path):
    """Rank 1 sleeps at the start of step 3 for good: it said so, rank 0 waits in the step's collectives, no step 3
    is ever written and the job stays up until it is stopped (the watchdog that names it is next)."""
    tokens = write_tokens(tmp_path / "tokens")
    out, log = tmp_path / "run", tmp_path / "injected.jsonl"
    plan = tmp_path / "faults.json"
    plan.write_text(json.dumps({"sleep": {"rank": 1, "step": 3}, "log": str(log)}))
    cfg = write_config(tmp_path / "train.yaml", config(tokens, out, steps=6, checkpoint_every=100, eval_every=0))
    proc = subprocess.Popen([sys.executable, "-m", "tokenmill.cli", "train", str(cfg), "--nproc", "2"],
                            env=env(**{ENV: str(plan)}), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        while not (log.exists() and log.read_text().strip()) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert proc.poll() is None, proc.stderr.read().decode()[-3000:]
        fired = [json.loads(x) for x in log.read_text().splitlines()]
        assert [(e["fault"], e["rank"], e["step"], e["seconds"]) for e in fired] == [("sleep", 1, 3, None)]
        time.sleep(2)  # rank 0 has long finished step 2 and waits for rank 1 in step 3
        assert proc.poll() is None
        assert [r["step"] for r in metrics(out)] == [1, 2]
        assert _alive(fired[0]["pid"])
    finally:
        proc.send_signal(signal.SIGTERM)  # the launcher forwards it to both ranks
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _alive(pid: int) -> bool:
    state = Path(f"/proc/{pid}/stat")
    return state.exists() and state.read_text().rsplit(")", 1)[1].split()[0] in ("S", "R", "D")


def test_a_short_sleep_returns(tmp_path):
    f = _faults({"sleep": {"rank": 0, "step": 2, "seconds": 0.01}, "log": str(tmp_path / "log")})
    f.before_step(1)
    assert not (tmp_path / "log").exists()
    f.before_step(2)
    f.before_step(2)  # once per process
    assert len((tmp_path / "log").read_text().splitlines()) == 1
