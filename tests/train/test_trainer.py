"""The trainer end to end on CPU: torchrun with gloo, exact resume, resharding, fallback, and divergence handling."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from tokenmill.loader import TokenLoader
from tokenmill.train.config import load_train_config, parse_train_config
from tokenmill.train.model import OPTDecoder, model_config
from tokenmill.train.run import padded_vocab
from tokenmill.train.trainer import KILL_AFTER_STEP_ENV, Trainer
from tests.train.runs import CONSTANT_FINGERPRINTS, config, constant_docs, env, losses, metrics, torchrun, write_config, \
    write_tokens

HERE = Path(__file__).parent
GOLDEN = HERE / "golden_losses.json"


@pytest.fixture(scope="module")
def tokens(tmp_path_factory):
    return write_tokens(tmp_path_factory.mktemp("train-tokens"))


def _run(cfg: dict, base: Path, **kwargs) -> dict:
    return Trainer(parse_train_config(cfg, base), **kwargs).run()


@pytest.mark.slow  # three torchrun launches (2, 1 and 3 ranks): `make test-slow`; 2 ranks resume in test_launch.py
def test_two_processes_with_torchrun_then_resume_on_one_and_on_three(tokens, tmp_path):
    # Without dropout: the 1- and 3-rank continuations are compared with each other, and each rank draws its own
    # masks, so with dropout they differ by more than the summation order. Exact resume with dropout on the same
    # world size: test_two_ranks_killed_between_checkpoints_resume_with_the_same_losses.
    out = tmp_path / "run"
    path = write_config(tmp_path / "train.yaml", config(tokens, out, dropout=0.0))
    done = torchrun(2, ["train", str(path)])
    assert done.returncode == 0, done.stderr[-3000:]
    rows = metrics(out)
    first, last = [r["loss"] for r in rows if "loss" in r][:3], [r["loss"] for r in rows if "loss" in r][-3:]
    assert len([r for r in rows if "loss" in r]) == 20 and np.mean(last) < np.mean(first) - 0.5
    assert any("valid_loss" in r for r in rows)
    assert json.loads((out / "checkpoints" / "step-000000020" / "meta.json").read_text())["world_size"] == 2
    # Resharded: the 2-rank checkpoint continues on 1 rank and on 3 (global batch 12 divides by 6).
    results = {}
    for n in (1, 3):
        copy = tmp_path / f"resume-{n}"
        subprocess.run(["cp", "-r", str(out), str(copy)], check=True)
        cfg_n = write_config(tmp_path / f"train-{n}.yaml", config(tokens, copy, dropout=0.0, steps=24))
        done = torchrun(n, ["train", str(cfg_n)])
        assert done.returncode == 0, done.stderr[-3000:]
        rows_n = [r for r in metrics(copy) if "loss" in r]
        assert [r["step"] for r in rows_n] == list(range(1, 25))
        assert [r["batch"] for r in rows_n[20:]] == [20, 21, 22, 23]
        results[n] = [r["loss"] for r in rows_n[20:]]
    assert np.allclose(results[1], results[3], rtol=1e-4), results
    # And back: the 1-process checkpoint (plain tensors: one rank trains unsharded) continues on 2 ranks.
    back = write_config(tmp_path / "train-back.yaml", config(tokens, tmp_path / "resume-1", dropout=0.0, steps=26))
    done = torchrun(2, ["train", str(back)])
    assert done.returncode == 0, done.stderr[-3000:]
    rows_back = [r for r in metrics(tmp_path / "resume-1") if "loss" in r]
    assert [r["batch"] for r in rows_back[24:]] == [24, 25] and all(np.isfinite(r["loss"]) for r in rows_back)


@pytest.mark.long  # two ranks against one process: 16 s on 2 loaded cores
def test_fsdp_gradients_equal_a_single_process_reference(tokens, tmp_path):
    path = write_config(tmp_path / "train.yaml", config(tokens, tmp_path / "run", dropout=0.0, micro_batch_size=3))
    out = tmp_path / "grads.pt"
    done = torchrun(2, [str(HERE / "grad_check.py"), str(path), str(out)])
    assert done.returncode == 0, done.stderr[-3000:]
    got = torch.load(out, weights_only=True)
    cfg = load_train_config(path)
    loader = TokenLoader([str(tokens)], seq_len=32, global_batch_size=12, seed=cfg.seed)
    batch = loader.global_batch(int(got["batch"]))
    model = OPTDecoder(model_config("opt-tiny", vocab_size=padded_vocab(256), max_seq_len=32, dropout=0.0))
    model.init_weights(torch.Generator().manual_seed(cfg.seed))
    loss = model(batch[:, :-1], labels=batch[:, 1:])
    loss.backward()
    assert abs(loss.item() - float(got["loss"])) < 1e-5
    for name, p in model.named_parameters():
        ref, g = p.grad, got["grads"][name]
        assert torch.linalg.norm(g - ref) <= 1e-5 * torch.linalg.norm(ref) + 1e-12, name


def test_first_losses_equal_the_golden_file(tokens, tmp_path):
    summary = _run(config(tokens, tmp_path / "run", steps=10, eval_every=0), tmp_path)
    assert summary["steps"] == 10
    got = [losses(tmp_path / "run")[s] for s in range(1, 11)]
    if os.environ.get("TOKENMILL_UPDATE_GOLDEN") == "1":
        GOLDEN.write_text(json.dumps({"config": "tests/train/runs.py config(), steps 10", "losses": got}, indent=1))
    want = json.loads(GOLDEN.read_text())["losses"]
    assert np.allclose(got, want, rtol=0, atol=1e-4), list(zip(got, want))


def _defaults(cfg: dict) -> dict:
    """``cfg`` with dropout at the trainer's default (on) and the loader building micro-batches in a worker: exact
    resume is claimed for both (the default is no worker since issue 33; a worker's start draws from the global RNG,
    so the claim is tested with one)."""
    cfg = {**{k: v for k, v in cfg.items() if k != "dropout"}, "loader": {"num_workers": 1}}
    parsed = parse_train_config(cfg)
    assert parsed.dropout > 0 and parsed.loader.num_workers > 0, "the defaults changed: this test no longer tests them"
    return cfg


def _train(cmd: list[str], kill_after: int | None = None) -> subprocess.CompletedProcess:
    # Every run in a subprocess with the same threads, so floating-point sums are ordered alike.
    extra = {KILL_AFTER_STEP_ENV: str(kill_after)} if kill_after else {}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=env(**extra))


def _whole_and_killed(tmp_path: Path, cfg: dict, kill_after: int, launch: list[str]) -> tuple[Path, Path]:
    """Runs ``cfg`` uninterrupted, and again SIGKILLed after step ``kill_after`` then rerun to the end: both outputs."""
    whole, out = tmp_path / "whole", tmp_path / "killed"
    done = _train([*launch, str(write_config(tmp_path / "whole.yaml", {**cfg, "output": str(whole)}))])
    assert done.returncode == 0, done.stderr[-3000:]
    cmd = [*launch, str(write_config(tmp_path / "killed.yaml", {**cfg, "output": str(out)}))]
    killed = _train(cmd, kill_after)
    # SIGKILL: the process itself (-9), or the --nproc launcher naming its killed rank (128 + 9).
    assert killed.returncode in (-signal.SIGKILL, 128 + signal.SIGKILL), killed.stderr[-3000:]
    assert max(losses(out)) == kill_after
    resumed = _train(cmd)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    return whole, out


def _rows(output: Path) -> list[tuple]:
    """Every loss and validation row, in order: (step, loss, valid loss, rolled back)."""
    return [(r["step"], r.get("loss"), r.get("valid_loss"), r.get("rolled_back", False)) for r in metrics(output)]


@pytest.mark.long  # two runs of torchrun, one SIGKILLed and resumed: about 25 s, `make test-all`
def test_killed_between_checkpoints_resumes_with_the_same_losses(tokens, tmp_path):
    """With the defaults (dropout 0.1, one loader worker), killed two steps past the step-10 checkpoint and its
    validation: the resumed steps have bit-identical losses."""
    cfg = _defaults(config(tokens, tmp_path / "unused", checkpoint_every=5, eval_every=10))
    whole, out = _whole_and_killed(tmp_path, cfg, 12, [sys.executable, "-m", "tokenmill.cli", "train"])
    events = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    assert [e["action"] for e in events] == ["resume"] and events[0]["checkpoint"].endswith("step-000000010")
    assert sorted(losses(out)) == list(range(1, 21))
    assert _rows(out) == _rows(whole)  # exact floats, steps 11 to 20 trained after the resume


def test_a_corrupted_latest_checkpoint_falls_back(tokens, tmp_path, caplog):
    out = tmp_path / "run"
    _run(config(tokens, out, steps=15, eval_every=0), tmp_path)
    shard = sorted((out / "checkpoints" / "step-000000015").glob("*.distcp"))[0]
    shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])
    with caplog.at_level(logging.WARNING):
        summary = _run(config(tokens, out, steps=20, eval_every=0), tmp_path)
    assert summary["steps"] == 20 and summary["steps_this_run"] == 10
    assert any("step-000000015" in r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING)
    events = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    assert events[-1]["action"] == "resume" and events[-1]["checkpoint"].endswith("step-000000010")
    assert [r["step"] for r in metrics(out) if "loss" in r] == list(range(1, 21))


def _poisoned(tmp_path: Path) -> tuple[Path, dict[str, float]]:
    """Pattern data plus one document of random tokens, and mixture weights that serve it once, at step 12 to 17."""
    rng = np.random.default_rng(11)
    poison = [rng.integers(1, 255, size=33).tolist()]  # exactly one sample of seq_len 32
    tokens = write_tokens(tmp_path / "tokens", extra={"poison": poison}, docs=constant_docs)
    for share in range(40, 120):
        weights = {"alpha": 0.6, "beta": 0.4, "poison": 1.0 / share}
        loader = TokenLoader([str(tokens)], seq_len=32, global_batch_size=4, weights=weights)
        poison_stream = [s.name for s in loader.streams].index("poison")
        where = loader.order.locate(np.arange(4 * 29))  # 24 steps and up to 5 skipped batches
        hits = np.nonzero(where.stream == poison_stream)[0] // 4
        if len(hits) == 1 and 11 <= hits[0] <= 16:
            return tokens, weights
    raise AssertionError("no weight serves the poison once in the window")


def test_a_poisoned_batch_rolls_back_cuts_the_lr_and_is_skipped(tmp_path):
    tokens, weights = _poisoned(tmp_path)
    out = tmp_path / "run"
    # Fast statistics (the loss settles within 10 steps) and a wide threshold: the poison scores z = 24, noise < 7.
    guard = {"warmup_steps": 8, "ewm_alpha": 0.5, "z_threshold": 12.0, "lr_factor": 0.5}
    summary = _run(config(tokens, out, weights=weights, global_batch_size=4, steps=24, lr=1e-2, warmup_steps=0,
                          eval_every=0, checkpoint_every=5, guard=guard, fingerprints=CONSTANT_FINGERPRINTS), tmp_path)
    assert summary["steps"] == 24 and summary["rollbacks"] == 1
    events = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    rollback = next(e for e in events if e["action"] == "rollback")
    assert "poison-0" in {d["id"] for d in rollback["documents"]}
    assert rollback["batch"] in rollback["skipped_batches"] and rollback["lr_scale"] == 0.5
    rows = [r for r in metrics(out) if "loss" in r]
    spike = next(i for i, r in enumerate(rows) if "spike" in r)
    # The undone steps, from the checkpoint to the spike, are marked; every step counts once otherwise.
    assert [r["step"] for r in rows if r.get("rolled_back")] == list(range(rollback["resumed_from_step"] + 1,
                                                                          rollback["step"] + 1))
    assert sorted(r["step"] for r in rows if not r.get("rolled_back")) == list(range(1, 25))
    # Rows after the spike are the steps trained after the rollback: from the checkpoint's step on, none skipped.
    after_rollback = rows[spike + 1:]
    assert [r["step"] for r in after_rollback] == list(range(rollback["resumed_from_step"] + 1, 25))
    assert not set(rollback["skipped_batches"]) & {r["batch"] for r in after_rollback}
    after = [r for r in rows if r["step"] > rollback["step"]]
    assert after and all(r["rollbacks"] == 1 for r in after)
    from tokenmill.train.schedule import learning_rate
    for r in after:
        assert r["lr"] == pytest.approx(0.5 * learning_rate(r["step"], 1e-2, 0, 24, 0.1))


@pytest.mark.slow  # three launches of 24 steps: about 25 s busy; `make test` kills between checkpoints (above)
def test_killed_after_a_rollback_resumes_with_the_same_losses(tmp_path):
    """A rollback rebuilds the loader's iterator (its worker starts again) and replays steps; a kill after the
    step-20 checkpoint that follows it, with the defaults, still resumes bit for bit."""
    tokens, weights = _poisoned(tmp_path)
    guard = {"warmup_steps": 8, "ewm_alpha": 0.5, "z_threshold": 12.0, "lr_factor": 0.5}
    cfg = _defaults(config(tokens, tmp_path / "unused", weights=weights, global_batch_size=4, steps=24, lr=1e-2,
                           warmup_steps=0, eval_every=0, checkpoint_every=5, guard=guard,
                           fingerprints=CONSTANT_FINGERPRINTS))
    whole, out = _whole_and_killed(tmp_path, cfg, 22, [sys.executable, "-m", "tokenmill.cli", "train"])
    events = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    assert [e["action"] for e in events] == ["rollback", "resume"], events
    assert events[1]["checkpoint"].endswith("step-000000020")
    assert any(rolled_back for *_, rolled_back in _rows(whole))
    assert _rows(out) == _rows(whole)


@pytest.mark.slow  # three launches of two ranks: about a minute on two busy cores
def test_two_ranks_killed_between_checkpoints_resume_with_the_same_losses(tokens, tmp_path):
    """The same on two FSDP ranks (``--nproc 2``; both ranks SIGKILLed): each rank's masks come from its own
    (seed, step, micro-batch, rank) stream, here with two micro-batches per step."""
    cfg = _defaults(config(tokens, tmp_path / "unused", steps=10, micro_batch_size=3, checkpoint_every=4,
                           eval_every=0))
    nproc = [sys.executable, "-m", "tokenmill.cli", "train", "--nproc", "2"]
    whole, out = _whole_and_killed(tmp_path, cfg, 6, nproc)
    assert json.loads((out / "checkpoints" / "step-000000010" / "meta.json").read_text())["world_size"] == 2
    events = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    assert [e["action"] for e in events] == ["resume"] and events[0]["checkpoint"].endswith("step-000000004")
    assert sorted(losses(out)) == list(range(1, 11))
    assert _rows(out) == _rows(whole)


def _no_valid_split(tmp_path: Path) -> Path:
    from tests.loader.tokens import write_dataset
    from tests.train.runs import VOCAB, pattern_docs

    rng = np.random.default_rng(4)
    return write_dataset(tmp_path / "tokens", {"alpha": pattern_docs(60, rng)}, vocab_size=VOCAB)


def test_skip_batches_by_hand_and_no_valid_split(tmp_path, capsys, caplog):
    tokens = _no_valid_split(tmp_path)
    out = tmp_path / "run"
    with caplog.at_level(logging.WARNING):
        summary = _run(config(tokens, out, steps=8, eval_every=4), tmp_path, skip_batches="2-3,6")
    assert summary["steps"] == 8 and summary["valid_loss"] is None
    # The library logs the warning, once; it prints nothing (the CLI's reporter does).
    assert [r.levelno for r in caplog.records if "no validation loss" in r.getMessage()] == [logging.WARNING]
    assert "no validation loss" not in capsys.readouterr().err
    assert [r["batch"] for r in metrics(out)] == [0, 1, 4, 5, 7, 8, 9, 10]
    events = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    assert events[0]["action"] == "skip" and events[0]["skipped_batches"] == [[2, 3], [6, 6]]
    # The skips live in the loader state of every checkpoint: a resumed run keeps them.
    meta = json.loads((out / "checkpoints" / "step-000000008" / "meta.json").read_text())
    assert meta["extra"]["loader"]["skip"] == [[2, 3], [6, 6]]


def test_a_checkpoint_of_another_model_is_refused(tokens, tmp_path):
    out = tmp_path / "run"
    _run(config(tokens, out, steps=5, eval_every=0), tmp_path)
    with pytest.raises(Exception, match="seq_len: 32 -> 64"):
        _run(config(tokens, out, steps=10, eval_every=0, seq_len=64), tmp_path)


def test_one_process_opens_no_port(tokens, tmp_path):
    """One process trains the plain module with no process group: nothing listens while training runs."""
    from tests.netstat import listeners

    before = listeners([os.getpid()])  # other tests' Ray driver may already listen in this process
    seen: list[set] = []
    _run(config(tokens, tmp_path / "run", steps=3, eval_every=0),
         tmp_path, on_step=lambda row: seen.append(listeners([os.getpid()]) - before))
    assert len(seen) == 3 and all(not s for s in seen), seen


def test_a_run_leaves_the_global_rng_alone(tokens, tmp_path):
    """Dropout draws from a forked stream: the caller's global RNG is the same after training as before."""
    before = torch.get_rng_state()
    _run(config(tokens, tmp_path / "run", steps=3, eval_every=0), tmp_path)
    assert torch.equal(torch.get_rng_state(), before)


def test_a_spike_beyond_max_rollbacks_stops_the_run(tmp_path):
    from tokenmill.train.guard import RollbacksExhausted

    tokens, weights = _poisoned(tmp_path)
    guard = {"warmup_steps": 8, "ewm_alpha": 0.5, "z_threshold": 12.0, "max_rollbacks": 0}
    reporter = Recorder()
    with pytest.raises(RollbacksExhausted, match="max_rollbacks=0"):
        _run(config(tokens, tmp_path / "run", weights=weights, global_batch_size=4, steps=24, lr=1e-2,
                    warmup_steps=0, eval_every=0, checkpoint_every=5, guard=guard, fingerprints=CONSTANT_FINGERPRINTS),
             tmp_path, reporter=reporter)
    assert reporter.calls[0] == ("start", 24, 0) and reporter.calls[-1] == ("stop",)


class Recorder:
    """A reporter that keeps what it was told."""

    def __init__(self):
        self.calls: list[tuple] = []

    def start(self, total, done):
        self.calls.append(("start", total, done))

    def step(self, step, row):
        self.calls.append(("step", step))

    def note(self, text):
        self.calls.append(("note", text))

    def warn(self, text):
        self.calls.append(("warn", text))

    def stop(self):
        self.calls.append(("stop",))


def test_a_run_that_fails_mid_way_stops_its_reporter(tokens, tmp_path):
    """The CLI's reporter holds a live progress display: a failed run must stop it, or the terminal is left drawn."""
    reporter = Recorder()

    def fail_at_step_2(row):
        if row["step"] == 2:
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        _run(config(tokens, tmp_path / "run", steps=5, eval_every=0), tmp_path, on_step=fail_at_step_2,
             reporter=reporter)
    assert reporter.calls == [("start", 5, 0), ("step", 1), ("stop",)]


def test_the_cli_says_a_warning_once_and_a_line_per_step(tmp_path):
    """`tokenmill train` shows each warning once (it was logged and printed: twice)."""
    cfg = write_config(tmp_path / "train.yaml", config(_no_valid_split(tmp_path), tmp_path / "run", steps=3,
                                                       eval_every=2))
    done = _train([sys.executable, "-m", "tokenmill.cli", "train", str(cfg)])
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stderr.count("no validation loss") == 1, done.stderr
    assert "warning: no validation loss: the valid split cannot be read" in done.stderr
    assert [line.split("  ")[0] for line in done.stderr.splitlines() if line.startswith("step ")] == \
        ["step 1/3", "step 2/3", "step 3/3"]


def test_corrupt_token_files_stop_the_run_before_a_step_naming_the_file(tmp_path, capsys):
    """Two bytes flipped in every train .bin, sizes unchanged: the first batch is refused, no step is trained."""
    from tokenmill.cli import main

    tokens = write_tokens(tmp_path / "tokens")
    for path in (tmp_path / "tokens" / "train").glob("*.bin"):
        raw = bytearray(path.read_bytes())
        raw[6] ^= 1
        raw[len(raw) // 2] ^= 2
        path.write_bytes(bytes(raw))
    cfg = write_config(tmp_path / "train.yaml", config(tokens, tmp_path / "run", steps=3, eval_every=0))
    assert main(["train", str(cfg)]) == 2
    err = "".join(capsys.readouterr().err.split())  # rich wraps the message
    assert ".bin:sha256" in err and "recordedintokens.json" in err
    assert not (tmp_path / "run" / "metrics.jsonl").exists() or not metrics(tmp_path / "run")
