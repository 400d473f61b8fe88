"""Replay on anomaly (issue 22, item 2): a replay is exact, and an injected fault is classified by where it goes when
the step is run again: a one-step gradient corruption is transient (the replayed step is applied), a persistent one
is hardware (the run stops naming the rank, with faulty_ranks.json), a poisoned batch is data (rolled back, its
documents named). Real runs on two and four gloo ranks, and the verdict's rules on their own."""

from __future__ import annotations

import json
import math
import socket
import subprocess
from pathlib import Path

import pytest
import torch

from tokenmill.errors import ConfigError
from tokenmill.train.config import parse_train_config
from tokenmill.train.doctor import diagnose
from tokenmill.train.faults import ENV
from tokenmill.train.guard import DivergenceGuard, GuardConfig
from tokenmill.train.replay import DATA, FAULTY_RANKS_JSON, HARDWARE, TRANSIENT, Pass, classify, close, partner, \
    reproduces, suspect, swapped_order, write_faulty_ranks
from tests.train.runs import config, losses, train_nproc, write_tokens
from tests.train.runs import rows as log_rows

REPLAY = {"replay": True}


@pytest.fixture(scope="module")
def tokens(tmp_path_factory):
    return write_tokens(tmp_path_factory.mktemp("replay-tokens"))


def _train(tmp_path: Path, name: str, cfg: dict, nproc: int, faults: dict | None = None) -> subprocess.CompletedProcess:
    return train_nproc(tmp_path, name, cfg, nproc, faults)


def _replays(out: Path) -> list[dict]:
    return [e for e in log_rows(out / "events.jsonl") if e["action"] in ("replay", "replay_probe")]


# -- real runs ---------------------------------------------------------------------------------------------------


@pytest.mark.long  # an injected and an uninjected two-rank run, compared: about 24 s, `make test-all`
def test_replay_is_exact_and_a_one_step_corruption_is_transient_with_the_uninjected_losses(tokens, tmp_path):
    """Two ranks, dropout on. Step 3, healthy, is replayed on demand (the probe): swapped, then on the same ranks,
    each value bit for bit the original's. Rank 1's gradient x1e6 once at step 7: the replay runs clean, the step is
    classified transient and the replayed step applied, so every loss equals an uninjected run's, float for float."""
    base = config(tokens, tmp_path / "clean", steps=8, checkpoint_every=5, eval_every=0, faults=REPLAY)
    clean = _train(tmp_path, "clean", base, 2)
    assert clean.returncode == 0, clean.stderr[-3000:]
    out = tmp_path / "faulty"
    done = _train(tmp_path, "faulty", {**base, "output": str(out)}, 2,
                  {"replay": {"step": 3, "rank": 1}, "grad": {"rank": 1, "step": 7, "mode": "once"},
                   "log": str(tmp_path / "injected.jsonl")})
    assert done.returncode == 0, done.stderr[-3000:]
    assert losses(out) == losses(tmp_path / "clean") and sorted(losses(out)) == list(range(1, 9))
    assert not _replays(tmp_path / "clean")  # a healthy run replays nothing
    probe, transient = _replays(out)
    # The probe: the same pass is the original, bit for bit; the swapped pass gives each batch's values on the
    # other rank (its dropout seeds travel with it), bit for bit too.
    assert probe["step"] == 3 and probe["action"] == "replay_probe" and probe["reproduces"] is True
    original, swapped, same = probe["evidence"]
    assert [p["pass"] for p in probe["evidence"]] == ["original", "swapped", "same"]
    assert same["loss"] == original["loss"] and same["grad_norm"] == original["grad_norm"]
    assert same["ranks"] == original["ranks"]
    assert [r["batch_of_rank"] for r in swapped["ranks"]] == [1, 0]
    for r in swapped["ranks"]:
        mine = original["ranks"][r["batch_of_rank"]]
        assert (r["loss"], r["grad_norm_local"]) == (mine["loss"], mine["grad_norm_local"])
    assert swapped["loss"] == original["loss"]
    # The transient: rank 1 named, the original's corrupted norm and the replay's clean one as evidence.
    assert (transient["step"], transient["classification"], transient["rank"]) == (7, TRANSIENT, 1)
    assert transient["host"] == socket.gethostname() and transient["device"] == "cpu"
    first, again = transient["evidence"]
    assert first["ranks"][1]["grad_norm_local"] > 1e4 * again["ranks"][1]["grad_norm_local"]
    healthy = [{k: p["ranks"][0][k] for k in ("loss", "grad_norm_local")} for p in (first, again)]
    assert healthy[0] == healthy[1]  # the healthy rank gave the same values (its shard holds rank 1's, mixed in)
    assert again["loss"] == losses(tmp_path / "clean")[7]
    injected = log_rows(tmp_path / "injected.jsonl")
    assert [(e["fault"], e["step"]) for e in injected if e["rank"] == 1] == [("replay", 3), ("grad", 7)]
    rows = {r["step"]: r for r in log_rows(out / "metrics.jsonl") if "loss" in r}
    assert rows[7]["classification"] == TRANSIENT and rows[3]["replay"] == "probe"
    assert "transient fault (rank 1 on" in done.stderr
    found = diagnose(out)
    assert [(f.step, f.kind) for f in found.faults] == [(7, TRANSIENT)]
    assert found.summary().startswith(f"1 fault in 8 steps: transient fault on rank 1 (host {socket.gethostname()})")


@pytest.mark.slow  # two ranks, 10 steps with two faults: about 17 s; the verdicts' rules in `make test` below
def test_a_poisoned_batch_is_data_rolled_back_naming_its_documents_and_a_tolerated_device_goes_on(tokens, tmp_path):
    """Two ranks. Global batch 6 (rank 0's samples, step 7) poisoned: the replay reproduces it, the swap moves it to
    rank 1 with the same values, so it is data: rolled back to step 5, batches skipped, documents named. Then rank
    1's gradient x1e6 at every step from 9, with ``on_hardware: continue``: hardware, rank 1 named in
    faulty_ranks.json, the step's update dropped and the run finishes."""
    out = tmp_path / "run"
    cfg = config(tokens, out, steps=10, checkpoint_every=5, eval_every=0,
                 faults={**REPLAY, "on_hardware": "continue"})
    done = _train(tmp_path, "data", cfg, 2, {"poison": {"batch": 6, "samples": [0, 5], "tokens": 255},
                                             "grad": {"rank": 1, "step": 9, "mode": "always"}})
    assert done.returncode == 0, done.stderr[-3000:]
    events = log_rows(out / "events.jsonl")
    replays = [e for e in events if e["action"] == "replay"]
    assert [(e["step"], e["classification"]) for e in replays] == [(7, DATA), (9, HARDWARE), (10, HARDWARE)]
    data = replays[0]
    assert data["batch"] == 6 and (data["suspect"], data["partner"]) == (0, 1) and "rank" not in data
    original, same, swapped = data["evidence"]
    assert same == {**original, "pass": "same"}
    assert swapped["ranks"][1]["loss"] == original["ranks"][0]["loss"]  # the poison followed its batch to rank 1
    rollback = next(e for e in events if e["action"] == "rollback")
    assert (rollback["step"], rollback["resumed_from_step"], rollback["classification"]) == (7, 5, DATA)
    assert 6 in rollback["skipped_batches"] and rollback["documents"]
    batches = [r["batch"] for r in log_rows(out / "metrics.jsonl") if "loss" in r and not r.get("rolled_back")]
    assert 6 not in batches and len(batches) == 10
    hardware = replays[1]
    assert (hardware["rank"], hardware["host"], hardware["partner"]) == (1, socket.gethostname(), 0)
    assert "stayed on rank 1" in hardware["reason"] and "went on" in hardware["decision"]
    record = json.loads((out / FAULTY_RANKS_JSON).read_text())
    assert record["ranks"] == [1] and [f["step"] for f in record["faults"]] == [9, 10]
    assert record["devices"][0]["device"] == "cpu" and record["devices"][0]["first_step"] == 9
    rows = {r["step"]: r for r in log_rows(out / "metrics.jsonl") if "loss" in r and not r.get("rolled_back")}
    assert rows[9]["update_skipped"] and rows[10]["classification"] == HARDWARE
    found = diagnose(out)
    assert [(f.step, f.kind) for f in found.faults] == [(7, DATA), (9, HARDWARE), (10, HARDWARE)]
    first = rollback["documents"][0]
    assert found.faults[0].documents[0]["id"] == first["id"] and found.faults[0].resumed_from_step == 5
    assert [r["rank"] for r in found.faults[1].ranks] == [1]


@pytest.mark.slow  # four ranks on two cores: about 20 s busy; a hardware verdict on two ranks is in the test above
def test_a_persistent_corruption_on_four_ranks_is_hardware_and_stops_the_run(tokens, tmp_path):
    """Four ranks, rank 1's gradient x1e6 at every step from 4: it reproduces, and with rank 1's micro-batches on
    rank 2 the anomaly stays on rank 1. The run stops with an error naming rank 1, its host and device, and
    faulty_ranks.json holds the evidence of each pass."""
    out = tmp_path / "run"
    cfg = config(tokens, out, steps=6, checkpoint_every=3, eval_every=0, global_batch_size=8, faults=REPLAY)
    done = _train(tmp_path, "hw", cfg, 4, {"grad": {"rank": 1, "step": 4, "mode": "always"}})
    assert done.returncode != 0
    err = " ".join(done.stderr.split())  # the console wraps long lines
    assert f"step 4: hardware fault on rank 1 on host {socket.gethostname()} (cpu)" in err
    assert FAULTY_RANKS_JSON in err
    record = json.loads((out / FAULTY_RANKS_JSON).read_text())
    assert record["ranks"] == [1] and record["hosts"] == [socket.gethostname()]
    fault, = record["faults"]
    assert fault["step"] == 4 and fault["decision"].startswith("stopped")
    original, same, swapped = fault["evidence"]
    assert [r["batch_of_rank"] for r in swapped["ranks"]] == [0, 2, 1, 3]
    assert swapped["ranks"][1]["grad_norm_local"] > 1e4 * swapped["ranks"][2]["grad_norm_local"]
    assert same["ranks"] == original["ranks"]
    assert max(r["step"] for r in log_rows(out / "metrics.jsonl")) == 3  # step 4 was never applied
    replay, = _replays(out)
    assert (replay["classification"], replay["rank"], replay["partner"]) == (HARDWARE, 1, 2)
    found = diagnose(out)
    assert [(f.step, f.kind) for f in found.faults] == [(4, HARDWARE)] and found.faults[0].action.startswith("stopped")


def test_one_rank_replays_exactly_in_process(tokens, tmp_path, monkeypatch):
    """One process (no reduction, no swap): the probe's replay is the original, and the run's losses are unchanged."""
    from tokenmill.train.trainer import Trainer

    plan = tmp_path / "faults.json"
    plan.write_text(json.dumps({"replay": {"step": 2}}))
    cfg = config(tokens, tmp_path / "plain", steps=3, checkpoint_every=3, eval_every=0, global_batch_size=4)
    Trainer(parse_train_config(cfg)).run()
    monkeypatch.setenv(ENV, str(plan))
    Trainer(parse_train_config({**cfg, "output": str(tmp_path / "probed")})).run()
    assert losses(tmp_path / "probed") == losses(tmp_path / "plain")
    probe, = _replays(tmp_path / "probed")
    original, same = probe["evidence"]
    assert same == {**original, "pass": "same"} and probe["reproduces"] is True


# -- the verdict, on its own -------------------------------------------------------------------------------------


def _pass(name: str, ranks: list[tuple[float, float]], order: tuple[int, ...] | None = None) -> Pass:
    values = tuple((loss, norm, 0.5) for loss, norm in ranks)
    mean = sum(v[0] for v in values) / len(values)
    return Pass(name, mean, math.sqrt(sum(v[1] ** 2 for v in values)), values, order or tuple(range(len(ranks))))


HEALTHY = [(5.3, 1.6), (5.4, 1.3)]
BAD1 = [(5.3, 1.6), (5.4, 1.3e6)]


def test_a_fault_that_does_not_come_back_is_transient_and_names_the_rank_that_changed():
    decision = classify(_pass("original", BAD1), _pass("same", HEALTHY), None, 1, 1e-3, same_anomalous=False)
    assert decision.classification == TRANSIENT and decision.ranks == [1]
    assert "does not reproduce" in decision.reason
    # Values that changed but are anomalous again are not a transient: without a swap (one rank) it is data.
    again = classify(_pass("original", BAD1), _pass("same", [(5.3, 1.6), (5.4, 9e5)]), None, 1, 1e-3, True)
    assert again.classification == DATA and "anomalous again" in again.reason


def test_a_fault_that_follows_its_batch_is_data_and_one_that_stays_is_hardware():
    original, same = _pass("original", BAD1), _pass("same", BAD1)
    moved = _pass("swapped", [(5.4, 1.3e6), (5.3, 1.6)], (1, 0))
    data = classify(original, same, moved, 1, 1e-3, same_anomalous=True)
    assert (data.classification, data.suspect, data.partner) == (DATA, 1, 0)
    stayed = _pass("swapped", [(5.4, 1.3), (5.3, 1.6e6)], (1, 0))
    hardware = classify(original, same, stayed, 1, 1e-3, same_anomalous=True)
    assert (hardware.classification, hardware.ranks) == (HARDWARE, [1]) and "stayed on rank 1" in hardware.reason
    event = hardware.event(9, 8, "rank 1: grad", "stopped", ["a", "b"], ["cuda:0", "cuda:1"])
    assert (event["rank"], event["host"], event["device"], event["classification"]) == (1, "b", "cuda:1", HARDWARE)
    assert [p["pass"] for p in event["evidence"]] == ["original", "same", "swapped"]
    assert event["evidence"][2]["ranks"][0]["batch_of_rank"] == 1
    # Non-finite values are written as strings (strict JSON) and compare equal to themselves.
    nan = _pass("original", [(5.3, 1.6), (float("nan"), float("nan"))])
    assert reproduces(nan, _pass("same", [(5.3, 1.6), (float("nan"), float("nan"))]), 0.0)
    assert json.loads(json.dumps(classify(nan, nan, None, 1, 1e-3, True).event(1, 0, "", "", ["h"] * 2, ["d"] * 2)))
    assert not close(float("inf"), float("nan"), 0.1) and close(1.0, 1.0005, 1e-3) and not close(1.0, 1.01, 1e-3)


def test_the_suspect_is_the_flagged_or_highest_rank_and_its_partner_the_next():
    values = tuple((5.0, g, 0.5) for g in (1.0, 1.2, 900.0, 1.1))
    assert suspect(values) == 2 and suspect(values, [0, 2]) == 2 and suspect(values, [3]) == 3
    assert suspect(((5.0, 1.0, 0.5), (float("nan"), 1.0, 0.5))) == 1
    assert suspect(((5.0, math.nan, 0.5), (5.5, math.nan, 0.5))) == 1  # local norm not measured: the loss decides
    assert partner(3, 4) == 0 and partner(0, 1) is None and swapped_order(4, 3, 0) == (3, 1, 2, 0)


def test_faulty_ranks_json_keeps_every_named_rank(tmp_path):
    decision = classify(_pass("original", BAD1), _pass("same", BAD1),
                        _pass("swapped", [(5.4, 1.3), (5.3, 1.6e6)], (1, 0)), 1, 1e-3, True)
    event = decision.event(9, 8, "", "continued", ["n0", "n1"], ["cuda:0", "cuda:1"])
    write_faulty_ranks(tmp_path, {**event, "time": 1.0}, "continued")
    other = {**event, "step": 12, "ranks": [{"rank": 0, "host": "n0", "device": "cuda:0"}]}
    record = json.loads(write_faulty_ranks(tmp_path, other, "stopped").read_text())
    assert record["ranks"] == [0, 1] and record["hosts"] == ["n0", "n1"]
    assert [(d["rank"], d["first_step"]) for d in record["devices"]] == [(0, 12), (1, 9)]
    assert [f["decision"] for f in record["faults"]] == ["continued", "stopped"]
    assert [p.name for p in tmp_path.iterdir()] == [FAULTY_RANKS_JSON]  # no temporary file left


def test_the_guard_judges_without_counting_or_learning():
    guard = DivergenceGuard(GuardConfig(warmup_steps=2))
    for s in range(1, 4):
        assert guard.check(s, 5.0 + 0.01 * s, 1.0).ok
    state = guard.state_dict()
    assert guard.judge(4, 50.0, 1.0).rule == "loss_z" and guard.judge(4, 5.02, 1.0).ok
    assert guard.judge(4, float("nan"), 1.0).rule == "non_finite_loss"
    assert guard.state_dict() == state  # nothing learnt, no spike counted
    assert guard.flag(4, "rank_anomaly", "rank 1: x").spike and guard.spikes == 1
    with pytest.raises(ValueError, match="unknown spike rule"):
        guard.flag(4, "because", "")


def test_the_faults_block_is_checked_at_load(tokens, tmp_path):
    cfg = config(tokens, tmp_path / "run")
    assert parse_train_config(cfg).faults.replay is False  # off unless asked
    loaded = parse_train_config({**cfg, "faults": {"replay": True, "on_hardware": "continue"}}).faults
    assert loaded.replay and loaded.on_hardware == "continue" and loaded.rtol == 1e-3
    with pytest.raises(ConfigError, match=r"faults\.on_hardware"):
        parse_train_config({**cfg, "faults": {"on_hardware": "shrink"}})
    with pytest.raises(ConfigError, match=r"faults\.rtol"):
        parse_train_config({**cfg, "faults": {"rtol": 0}})


def test_the_probe_fires_once_and_a_once_fault_counts_the_original_pass_only(tmp_path):
    from tokenmill.train.faults import FaultPlan, TrainFaults

    plan = FaultPlan.model_validate({"replay": {"step": 3}, "grad": {"rank": 0, "step": 5, "factor": 10.0},
                                     "log": str(tmp_path / "log")})
    faults = TrainFaults(plan, rank=0)
    assert not faults.replay_due(2) and faults.replay_due(3) and not faults.replay_due(3)
    assert faults.grad_due(5)
    grad = torch.ones(3)
    faults.corrupt(5, [grad])  # the original pass
    assert grad.tolist() == [10.0] * 3 and not faults.grad_due(5)  # its replays run clean
    always = TrainFaults(FaultPlan.model_validate({"grad": {"rank": 0, "step": 5, "mode": "always"}}), rank=0)
    always.corrupt(5, [torch.ones(1)])
    assert always.grad_due(5) and always.grad_due(6)  # every pass, every step
