"""The doctor names the replay's suspect and says only what the events record: a NaN on one rank reaches every
shard (every rank was flagged once), but the replay names the one; a data verdict with no rollback after it did not
roll back."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.train.runs import config, env, write_config, write_tokens
from tests.train.test_doctor import _anomaly, _metrics, _verdict
from tokenmill.train.doctor import classify, diagnose
from tokenmill.train.faults import ENV
from tokenmill.train.replay import DATA, TRANSIENT
from tokenmill.train.replay_step import _what_is_done


def test_a_transient_names_the_replays_rank_not_every_rank_flagged():
    events = [_anomaly(7, 0, "node-0", float("nan")), _anomaly(7, 1, "node-7", float("nan")),
              _verdict(7, TRANSIENT, 1, "replayed step applied; run went on")]
    faults, _ = classify(events, [], _metrics(9))
    from tokenmill.train.doctor import Diagnosis

    summary = Diagnosis("run", 9, faults, [], [], {}).summary()
    assert summary == "1 fault in 9 steps: transient fault on rank 1 (host node-7) at step 7 (replayed step applied)"
    assert sorted(r["rank"] for r in faults[0].ranks) == [0, 1]  # both flags kept as evidence


def test_a_data_verdict_with_no_rollback_after_it_does_not_say_it_rolled_back():
    done = _what_is_done(DATA, "stop")
    events = [_anomaly(9, 1, "node-7", 1.3e6), _verdict(9, DATA, 1, done)]
    faults, _ = classify(events, [], _metrics(9))
    assert faults[0].kind == DATA and "rolled back to" not in faults[0].action
    assert faults[0].action.startswith("classified as data; no rollback recorded after it")
    assert "if a rollback follows" in done and not done.startswith("rolled back")


@pytest.mark.slow
def test_a_real_nan_on_rank_one_is_a_transient_on_rank_one(tmp_path):
    """Two ranks, replay on, rank 1's gradient NaN once at step 6: one fault, rank 1 alone, transient."""
    tokens = write_tokens(tmp_path / "tokens")
    out = tmp_path / "run"
    cfg = write_config(tmp_path / "train.yaml", config(tokens, out, steps=8, checkpoint_every=4, eval_every=0,
                                                       faults={"replay": True}))
    plan = tmp_path / "faults.json"
    plan.write_text(json.dumps({"grad": {"rank": 1, "step": 6, "kind": "nan"}}))
    done = subprocess.run([sys.executable, "-m", "tokenmill.cli", "train", str(cfg), "--nproc", "2"],
                          capture_output=True, text=True, timeout=240, env=env(**{ENV: str(plan)}))
    assert done.returncode == 0, done.stderr[-3000:]
    found = diagnose(out)
    assert [(f.step, f.kind) for f in found.faults] == [(6, TRANSIENT)], found.summary()
    assert "transient fault on rank 1 (host " in found.summary() and "rank 0" not in found.summary()
    anomalies = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()
                 if '"rank_anomaly"' in line]
    assert [(e["step"], e["rank"]) for e in anomalies] == [(6, 1)]  # the shards' NaN is the reduction's, not a flag
