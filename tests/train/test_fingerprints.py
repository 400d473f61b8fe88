"""Per-rank fingerprints: ranks.jsonl on two gloo ranks, a corrupted gradient and a poisoned batch flag the right
rank at the right step, fingerprints never change the losses, and the detector's rules on their own."""

from __future__ import annotations

import math
import socket
from pathlib import Path

import numpy as np
import pytest
import torch

from tokenmill.errors import ConfigError
from tokenmill.train.config import parse_train_config
from tokenmill.train.fingerprints import METRICS, Detector, FingerprintConfig, param_checksum
from tests.train.runs import config, losses, train_nproc, write_tokens
from tests.train.runs import rows as log_rows

STEPS = 8


@pytest.fixture(scope="module")
def tokens(tmp_path_factory):
    return write_tokens(tmp_path_factory.mktemp("fp-tokens"))


def _two_ranks(tmp_path: Path, name: str, cfg: dict, faults: dict | None = None):
    """``tokenmill train --nproc 2`` of ``cfg`` (dropout 0.1, the default), with a fault plan if given."""
    done = train_nproc(tmp_path, name, cfg, 2, faults, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


@pytest.mark.slow  # two launches of two ranks: about 35 s; fingerprints on two real ranks in `make test`: test_doctor.py
def test_two_ranks_write_a_row_per_rank_per_step_and_do_not_change_the_losses(tokens, tmp_path):
    on, off = tmp_path / "on", tmp_path / "off"
    base = config(tokens, on, steps=STEPS, checkpoint_every=4, eval_every=0)
    assert parse_train_config(base).dropout > 0  # dropout on: masks drawn per rank, and still identical
    _two_ranks(tmp_path, "on", {**base, "fingerprints": {"every": 3}})
    _two_ranks(tmp_path, "off", {**base, "output": str(off), "fingerprints": {"enabled": False}})
    # Fingerprints only read: the losses are the same floats, step for step.
    assert losses(on) == losses(off) and sorted(losses(on)) == list(range(1, STEPS + 1))
    assert not (off / "ranks.jsonl").exists()
    rows = log_rows(on / "ranks.jsonl")
    assert [(r["step"], r["rank"]) for r in rows] == [(s, k) for s in range(1, STEPS + 1) for k in (0, 1)]
    for r in rows:
        assert r["host"] and r["device"] == "cpu"
        assert all(math.isfinite(r[m]) and r[m] > 0 for m in METRICS), r
        assert (r["param_checksum"] is not None) == (r["step"] % 3 == 0), r
        assert "flagged" not in r
    # The trainer's loss is the mean of the ranks' local losses; the shard norms make up the global norm.
    metrics = {r["step"]: r for r in log_rows(on / "metrics.jsonl")}
    for step in range(1, STEPS + 1):
        pair = [r for r in rows if r["step"] == step]
        assert metrics[step]["loss"] == pytest.approx((pair[0]["loss"] + pair[1]["loss"]) / 2, rel=1e-6)
        assert metrics[step]["grad_norm"] == pytest.approx(math.hypot(*(r["grad_norm_shard"] for r in pair)),
                                                           rel=1e-4)
        assert metrics[step]["fingerprint_s"] >= 0
    # Each rank holds another shard: their checksums differ; a healthy run flags nothing.
    checks = [r["param_checksum"] for r in rows if r["step"] == 3]
    assert checks[0] != checks[1]
    events = log_rows(on / "events.jsonl") if (on / "events.jsonl").exists() else []
    assert not [e for e in events if e["action"] == "rank_anomaly"]


@pytest.mark.slow  # two ranks: about 13 s busy; test_doctor.py's real run flags the same two faults at their ranks
def test_a_corrupted_gradient_and_a_poisoned_batch_flag_their_rank_at_their_step(tokens, tmp_path):
    out = tmp_path / "run"
    # Poison first (step 7: global batch 6, whose samples 0-5 are rank 0's micro-batch; token 255 repeated, an id
    # the data never holds, as a 0xFF-filled block would read), then rank 1's gradient multiplied by 1e6 once, at
    # step 9. The poisoned rank's local norm is ~7x its peer's (8.9 spreads: as far as real heterogeneous batches
    # go, so not flagged on its own); its samples are one id repeated (top_token_share 1.0: flagged at once).
    faults = {"grad": {"rank": 1, "step": 9, "mode": "once", "kind": "scale", "factor": 1e6},
              "poison": {"batch": 6, "samples": [0, 5], "tokens": 255}, "log": str(tmp_path / "injected.jsonl")}
    cfg = config(tokens, out, steps=10, checkpoint_every=100, eval_every=0, fingerprints={"every": 5})
    done = _two_ranks(tmp_path, "faulty", cfg, faults)
    injected = log_rows(tmp_path / "injected.jsonl")
    assert {(e["fault"], e["rank"], e["step"]) for e in injected} == {("poison", 0, 7), ("grad", 1, 9)}
    flags = [e for e in log_rows(out / "events.jsonl") if e["action"] == "rank_anomaly"]
    assert [(e["step"], e["rank"]) for e in flags] == [(7, 0), (9, 1)], flags
    poisoned, corrupted = flags
    assert poisoned["batch"] == 6 and set(poisoned["metrics"]) == {"top_token_share"}
    assert poisoned["metrics"]["top_token_share"]["value"] == 1.0
    # Rank 1's own gradient, before the reduction, is the outlier; the reduction spread it into both shards.
    assert set(corrupted["metrics"]) == {"grad_norm_local"}
    local = corrupted["metrics"]["grad_norm_local"]
    assert local["values"][1] > 1e4 * local["values"][0] and local["rule"] == "outlier"
    assert corrupted["host"] == socket.gethostname() and corrupted["device"] == "cpu"
    rows = {(r["step"], r["rank"]): r for r in log_rows(out / "ranks.jsonl")}
    assert rows[(9, 0)]["grad_norm_shard"] > 1e3 and rows[(9, 1)]["grad_norm_shard"] > 1e3
    assert rows[(7, 0)]["loss"] > rows[(7, 1)]["loss"]  # the poison shows on the rank that got it
    assert {k for k, r in rows.items() if "flagged" in r} == {(7, 0), (9, 1)}
    # Said once, naming the rank and its host.
    assert f"step 9: rank 1 on {socket.gethostname()} (cpu) flagged" in done.stderr


def test_the_fingerprints_block_is_checked_at_load(tokens, tmp_path):
    with pytest.raises(ConfigError, match=r"fingerprints\.every"):
        parse_train_config(config(tokens, tmp_path / "run", fingerprints={"every": 0}))
    with pytest.raises(ConfigError, match=r"fingerprints\.treshold"):
        parse_train_config(config(tokens, tmp_path / "run", fingerprints={"treshold": 3}))
    assert parse_train_config(config(tokens, tmp_path / "run")).fingerprints.enabled


def test_a_changed_fingerprints_block_resumes(tokens, tmp_path):
    """Fingerprints do not change what is trained: a run may turn them on, off or retune them on resume."""
    from tokenmill.train.trainer import Trainer

    out = tmp_path / "run"
    Trainer(parse_train_config(config(tokens, out, steps=3, checkpoint_every=3, eval_every=0,
                                      fingerprints={"enabled": False}))).run()
    summary = Trainer(parse_train_config(config(tokens, out, steps=5, eval_every=0,
                                                fingerprints={"every": 2}))).run()
    assert summary["steps"] == 5
    rows = log_rows(out / "ranks.jsonl")
    assert [(r["step"], r["rank"], r["param_checksum"] is not None) for r in rows] == [(4, 0, True), (5, 0, False)]


def _detector(world: int, **cfg) -> Detector:
    return Detector(FingerprintConfig(**cfg), world)


def _table(*rows) -> np.ndarray:
    """(loss, local, shard) per rank, with a top_token_share of real text (0.05)."""
    return np.array([[*row, 0.05] for row in rows], dtype=np.float64)


def test_one_rank_far_from_the_others_median_is_flagged_and_healthy_spread_is_not():
    d = _detector(4)
    assert d.check(_table([2.0, 1.0, 0.5], [2.1, 1.3, 0.6], [1.9, 0.8, 0.4], [2.05, 1.1, 0.55])) == []
    flags = d.check(_table([2.0, 1.0, 0.5], [2.1, 900.0, 0.6], [1.9, 0.8, 0.4], [2.05, 1.1, 0.55]))
    assert [(r, m, rule) for r, m, rule, *_ in flags] == [(1, "grad_norm_local", "outlier")]
    flags = d.check(_table([2.0, 1.0, 0.5], [2.1, 1.0, 0.6], [float("nan"), 0.8, 0.4], [2.05, float("inf"), 0.5]))
    assert sorted((r, m, rule) for r, m, rule, *_ in flags) == [(2, "loss", "non_finite"),
                                                                 (3, "grad_norm_local", "non_finite")]


def test_with_two_ranks_the_one_that_moved_is_named():
    """Two ranks give no spread: each is compared with its peer and with its own history; only the one that left
    its own history is flagged. Without history yet (the first steps), both are named."""
    d = _detector(2)
    for _ in range(5):
        assert d.check(_table([2.0, 1.0, 0.5], [2.2, 1.2, 0.6])) == []
    flags = d.check(_table([2.0, 1.0, 0.5], [2.2, 5e5, 0.6]))
    assert [(r, m) for r, m, *_ in flags] == [(1, "grad_norm_local")]
    flags = d.check(_table([2.0, 80.0, 0.5], [2.2, 1.2, 0.6]))
    assert [(r, m) for r, m, *_ in flags] == [(0, "grad_norm_local")]
    fresh = _detector(2)
    assert sorted(r for r, *_ in fresh.check(_table([2.0, 1.0, 0.5], [2.2, 5e5, 0.6]))) == [0, 1]


def test_the_parameter_checksum_sees_one_bit_and_not_the_order():
    g = torch.Generator().manual_seed(0)
    params = [torch.randn(33, 7, generator=g), torch.randn(5, generator=g), torch.randn(2, 3).bfloat16()]
    base = param_checksum(params)
    assert base == param_checksum(list(reversed(params))) and 0 <= base < 2**52
    flipped = [p.clone() for p in params]
    flipped[0].view(torch.int32)[3, 4] ^= 1 << 20
    assert param_checksum(flipped) != base


def test_one_rank_gathers_its_own_row_and_place_without_a_process_group():
    """The helpers the fingerprints and the replay share: one rank needs no collective."""
    from tokenmill.train.fingerprints import gather_table, grad_shard_norm, rank_places
    from tokenmill.train.replay import gather_values

    table = gather_table([1.5, math.nan, 3.0], 1, torch.device("cpu"))
    assert table.shape == (1, 3) and table.dtype == np.float64 and table[0, 0] == 1.5 and math.isnan(table[0, 1])
    assert gather_values([1.5, 2.0], 1, torch.device("cpu")) == ((1.5, 2.0),)
    assert rank_places(1, torch.device("cpu")) == ([socket.gethostname()], ["cpu"])
    a, b = torch.nn.Parameter(torch.zeros(2)), torch.nn.Parameter(torch.zeros(3))
    a.grad, b.grad = torch.tensor([3.0, 0.0]), torch.tensor([0.0, 4.0, 0.0])
    assert grad_shard_norm([a, b, torch.nn.Parameter(torch.zeros(1))]) == 5.0  # a parameter with no grad: left out
