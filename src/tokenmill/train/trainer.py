"""The training loop: FSDP2 over a device mesh, exact resume from DCP checkpoints, and the divergence guard.

One ``Trainer.run()`` is one process of a job (torchrun starts several; one process works alone). Every step:
the learning rate from the step; ``M`` micro-batches forward and backward (gradients reduced on the last only);
global gradient-norm clipping; each rank's fingerprints (``fingerprints.py``: its own loss and gradient norms, one
all_gather, a flagged rank recorded) before anything is applied; the guard's verdict on the global mean loss and the
norm. A healthy step updates the weights; a spike is never applied: the run rolls back to the newest healthy
checkpoint, cuts the learning rate, skips the offending global batches through the loader and writes the event, with
the documents of those batches, to ``events.jsonl``. With ``faults.replay`` an anomalous step is first re-run from its
kept micro-batches, on the same ranks and then with the suspect rank's batch swapped, and classified data (rolled
back), hardware (stopped, ``faulty_ranks.json``) or transient (the replayed step applied): ``replay.py``.
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import math
import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import DTensor

from tokenmill.errors import TokenmillError
from tokenmill.loader import DataError, ResumeError, TokenLoader
from tokenmill.loader.batches import next_served, parse_ranges
from tokenmill.train.atomic import write_atomic
from tokenmill.train.checkpoint import CheckpointManager, ModelOptimizerState
from tokenmill.train.config import TrainConfig
from tokenmill.train.disk import RunDisk
from tokenmill.train.distributed import Distributed, setup
from tokenmill.train.errors import DiskFullError, EveryRankError, disk_full_message, full_errno
from tokenmill.train.faults import TrainFaults
from tokenmill.train.fingerprints import Anomaly, Fingerprints, anomaly_event, grad_shard_norm, install_tap, \
    rank_places
from tokenmill.train.guard import DivergenceGuard, Verdict
from tokenmill.train.launch import note_error
from tokenmill.train.metrics import EVENTS_JSONL, METRICS_JSONL, RANKS_JSONL, JsonLines, memory, peak_tflops
from tokenmill.train.model import OPTDecoder, model_config
from tokenmill.train.replay import DATA, FAULTY_RANKS_JSON, TRANSIENT, HardwareFault, Pass, classify, exchange, \
    gather_values, partner, reproduces, suspect, swapped_order, write_faulty_ranks
from tokenmill.train.report import LogReporter, QuietReporter, TrainReporter
from tokenmill.train.schedule import learning_rate
from tokenmill.train.watchdog import Watchdog

log = logging.getLogger(__name__)

# Test and fault-injection hook: SIGKILL this process right after the given step (and its checkpoint) completes.
KILL_AFTER_STEP_ENV = "TOKENMILL_KILL_AFTER_STEP"
# Config keys a resumed run may change without changing what it computes.
RESUMABLE_CHANGES = {"steps", "checkpoint_every", "keep_checkpoints", "eval_every", "eval_batches", "num_workers",
                     "log_every", "peak_tflops", "guard", "output", "compile", "allow_data_change",
                     "fingerprints", "watchdog", "faults"}


def dropout_seed(seed: int, step: int, micro: int, rank: int) -> int:
    """The seed of one micro-batch's dropout masks: a keyed hash of (seed, step, micro-batch, rank), so no two of
    them share a stream whatever the run's length, accumulation or world size."""
    key = f"tokenmill.train.dropout:{seed}:{step}:{micro}:{rank}".encode()
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "little") >> 1  # manual_seed: < 2**63


def _without_data_paths(config: dict[str, Any]) -> dict[str, Any]:
    """A resolved config with each dataset reduced to its weight (where the data is does not matter)."""
    data = config.get("data")
    if not isinstance(data, list):
        return config
    return {**config, "data": [d.get("weight") if isinstance(d, dict) else d for d in data]}


def padded_vocab(vocab_size: int) -> int:
    """Rows of the embedding: the vocabulary rounded up to a multiple of 64, for fast matmuls (nanoGPT's 50304)."""
    return -(-vocab_size // 64) * 64


class Trainer:
    """One process of a training job. It prints nothing: it tells ``reporter`` (on the main rank; the others log
    at DEBUG), whose default only logs; the CLI passes one that draws a progress bar."""

    def __init__(self, config: TrainConfig, skip_batches: str | None = None,
                 on_step: Callable[[dict[str, Any]], None] | None = None, reporter: TrainReporter | None = None):
        self.cfg = config
        self.skip_batches = skip_batches
        self.on_step = on_step
        self.out = Path(config.output)
        self.reporter: TrainReporter = reporter if reporter is not None else LogReporter(config.log_every)

    # -- set-up --------------------------------------------------------------------------------------------------

    def _build(self, d: Distributed) -> None:
        cfg = self.cfg
        self.d = d
        self.say: TrainReporter = self.reporter if d.main else QuietReporter()
        self.out.mkdir(parents=True, exist_ok=True)
        # Every file this rank writes between checkpoints goes through it: a full disk stops all ranks together.
        self.disk = RunDisk(d, self._previous)
        self.metrics = JsonLines(self.out / METRICS_JSONL, d.main, self.disk)
        self.events = JsonLines(self.out / EVENTS_JSONL, d.main, self.disk)
        weights = cfg.weights if cfg.weights is not None else [x.weight for x in cfg.data]
        try:
            self.loader = TokenLoader(cfg.resolved_paths(), seq_len=cfg.seq_len,
                                      global_batch_size=cfg.global_batch_size, micro_batch_size=cfg.micro_batch_size,
                                      seed=cfg.seed, rank=d.rank, world_size=d.world_size,
                                      num_workers=cfg.num_workers, weights=weights,
                                      position_ids=cfg.reset_position_ids, pin_memory=d.device.type == "cuda")
        except TokenmillError:  # the data's own errors (a DataError is also a ValueError), as they are
            raise
        except ValueError as err:  # values of the config that this world size cannot take: the same on every rank
            raise EveryRankError(f"train config: {err}") from None
        self.accumulation = self.loader.layout.micro_batches
        vocab = self.loader.info["vocab_size"]
        self.mcfg = model_config(cfg.model, vocab_size=padded_vocab(vocab), max_seq_len=cfg.seq_len,
                                 dropout=cfg.dropout)
        self.model = self._model(d)
        # Test faults (TOKENMILL_TRAIN_FAULTS; None when unset: the step pays one `is None` test per hook).
        self.faults = TrainFaults.from_env(d.rank, vocab)
        fp = cfg.fingerprints
        # The reduce-scatter tap reads (and a grad fault alters) each rank's gradient before FSDP2 reduces it.
        self.tap = install_tap(self.model) if self.sharded and (
            fp.enabled or (self.faults is not None and self.faults.plan.grad is not None)) else None
        self.fingerprints = Fingerprints(fp, d.rank, d.world_size, d.device, self.tap, self.sharded) \
            if fp.enabled else None
        self.ranks = JsonLines(self.out / RANKS_JSONL, d.main and fp.enabled, self.disk)
        # Replay (replay.py): the step's micro-batches are kept until its update, for the passes that re-run it.
        self.keep_micros = cfg.faults.replay or (self.faults is not None and self.faults.plan.replay is not None)
        self.step_micros: list[dict[str, torch.Tensor]] = []
        self.step_batch = -1
        self.where: tuple[list[str], list[str]] | None = None  # every rank's host and device, once asked
        self.local_loss = float("nan")
        self.optimizer = torch.optim.AdamW(self.model.param_groups(cfg.weight_decay), lr=cfg.lr, betas=cfg.betas,
                                           eps=cfg.eps)
        self.checkpoints = CheckpointManager(self.out / "checkpoints", keep=cfg.keep_checkpoints)
        self.guard = DivergenceGuard(cfg.guard)
        self.flops_per_token = self.model.flops_per_token(cfg.seq_len)
        self.peak = peak_tflops(d.device, cfg.peak_tflops)
        self.valid: TokenLoader | None = None
        if cfg.eval_every:
            try:
                self.valid = TokenLoader(cfg.resolved_paths(), seq_len=cfg.seq_len,
                                         global_batch_size=cfg.global_batch_size,
                                         micro_batch_size=cfg.micro_batch_size, seed=cfg.seed, rank=d.rank,
                                         world_size=d.world_size, split="valid", shuffle=False)
            except (DataError, ValueError) as err:
                self.say.warn(f"no validation loss: the valid split cannot be read ({err})")

    def _model(self, d: Distributed) -> OPTDecoder:
        """Sharded per block then at the root (FSDP2) on several ranks, and filled with weights made by rank 0 from
        the seed alone: the same initial model whatever the world size. One rank trains the plain module (FSDP2
        over one rank only adds DTensor dispatch, about 7% of an opt-tiny step on CPU); its checkpoints hold plain
        tensors, which DCP reshards onto any world size, and back."""
        cfg = self.cfg
        dtype = torch.bfloat16 if cfg.dtype == "bfloat16" or (cfg.dtype == "auto" and d.device.type == "cuda") \
            else torch.float32
        self.compute_dtype = dtype
        self.sharded = d.world_size > 1
        if not self.sharded:
            model = self._initial_model()
            if cfg.compile:
                for block in model.blocks:
                    block.compile()
            return model.to(d.device)
        with torch.device("meta"):
            model = OPTDecoder(self.mcfg)
        policy = MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32) if dtype != torch.float32 \
            else MixedPrecisionPolicy()
        for i, block in enumerate(model.blocks):
            if cfg.compile:
                block.compile()
            # The last block's parameters are needed at once by the backward: keep them gathered.
            fully_shard(block, mesh=d.mesh, mp_policy=policy, reshard_after_forward=i < len(model.blocks) - 1)
        fully_shard(model, mesh=d.mesh, mp_policy=policy)
        model.to_empty(device=d.device)
        full = {}
        if d.main:
            full = self._initial_model().state_dict()
        set_model_state_dict(model, full, options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True))
        return model

    def _initial_model(self) -> OPTDecoder:
        """The initial weights, on the CPU, from the seed alone: built on the meta device (a module built on a real
        device initialises itself from the global RNG first), then filled through a seeded generator."""
        with torch.device("meta"):
            model = OPTDecoder(self.mcfg)
        model.to_empty(device="cpu")
        model.init_weights(torch.Generator().manual_seed(self.cfg.seed))
        return model

    def _autocast(self):
        """bf16 compute on one rank (FSDP2's MixedPrecisionPolicy does it when sharded); fp32 master weights."""
        enabled = not self.sharded and self.compute_dtype != torch.float32
        return torch.autocast(self.d.device.type, dtype=self.compute_dtype, enabled=enabled)

    def _app_state(self) -> dict[str, Any]:
        return {"train": ModelOptimizerState(self.model, self.optimizer)}

    def _extra(self) -> dict[str, Any]:
        return {"loader": self.loader.state_dict(), "guard": self.guard.state_dict(),
                "config": json.loads(self.cfg.model_dump_json()), "tokens_seen": self.tokens_seen}

    # -- resume ----------------------------------------------------------------------------------------------------

    def _resume(self) -> int:
        # The config and the data are compared before any tensor is read: a changed model is named, not a shape
        # mismatch, and changed data are named by stream.
        for info in self.checkpoints.checkpoints():
            self._check_config(info.step, info.meta.get("extra", {}).get("config", {}))
        newest = self.checkpoints.latest(verify=False)
        if newest is not None:
            self._check_loader(newest.step, newest.meta.get("extra", {}).get("loader"))
        loaded = self.checkpoints.load(self._app_state())
        if loaded is None:
            self.tokens_seen = 0
            # An attempt stopped before its first checkpoint (a full disk, a kill) left rows that step 0 undoes.
            dropped = self.metrics.truncate_after(0)
            self.ranks.truncate_after(0)
            if dropped:
                self.say.note(f"no checkpoint in {self.out}: starting at step 0, the {dropped} metrics row(s) of an "
                              "earlier attempt dropped")
            return 0
        extra = loaded.extra
        allow = self._check_loader(loaded.step, extra["loader"], record=True)
        self.loader.load_state_dict(extra["loader"], allow=allow)
        self.guard.load_state_dict(extra["guard"])
        self.tokens_seen = int(extra.get("tokens_seen", 0))
        dropped = self.metrics.truncate_after(loaded.step)
        self.ranks.truncate_after(loaded.step)
        self._event({"step": loaded.step, "action": "resume", "checkpoint": str(loaded.path),
                     "healthy": loaded.healthy, "metrics_rows_dropped": dropped, "world_size": self.d.world_size})
        return loaded.step

    def _check_loader(self, step: int, state: dict[str, Any] | None, record: bool = False) -> tuple[str, ...]:
        """The checkpoint's loader state against this run's data and layout; what ``load_state_dict`` must allow.

        Changed data stop the run, naming each stream and the flag, unless ``allow_data_change`` is set: then the
        mixture follows the new data too (the configured weights were compared with the config) and, with
        ``record``, the reporter is warned and a ``data_change`` event is written."""
        try:
            changes = self.loader.data_changes(state) if isinstance(state, dict) and "data" in state else []
        except (KeyError, TypeError):
            changes = []
        if changes and not self.cfg.allow_data_change:
            raise EveryRankError(f"the data changed since the checkpoint at step {step} in {self.out}: "
                                 f"{'; '.join(changes)}. To go on at the same position of the new data's order "
                                 "(not what the old data would have given), rerun with --allow-data-change or set "
                                 "allow_data_change: true; or restore the data, or use another output")
        allow = ("data", "weights") if changes else ()
        try:
            self.loader.check_state_dict(state, allow)
        except ResumeError as err:
            raise EveryRankError(f"{self.out} holds a checkpoint (step {step}) that this run cannot continue: "
                                 f"{err}") from None
        if changes and record:
            self.say.warn(f"DATA CHANGED since the checkpoint at step {step}: {'; '.join(changes)}. Continuing at "
                          f"sample {state['consumed_samples']} of the new data's order, as allow_data_change asks; "
                          "the samples from here are not those the old data would have given")
            self._event({"step": step, "action": "data_change", "changes": changes,
                         "consumed_samples": state["consumed_samples"],
                         "data": {"before": state["data"], "after": self.loader.state_dict()["data"]},
                         "weights": {"before": state["weights"]["slots"], "after": self.loader.slots()},
                         "datasets": {"before": state.get("datasets"), "after": self.loader.paths}})
        return allow

    def _check_config(self, step: int, old: dict[str, Any]) -> None:
        # Data are known by content: the loader's fingerprints (``_check_loader``) compare them, so the same files
        # under another path (another working directory, a copy) resume. Only the dataset weights are compared here.
        old, new = _without_data_paths(old), _without_data_paths(json.loads(self.cfg.model_dump_json()))
        if self.cfg.allow_data_change and len(old.get("data") or []) != len(new["data"]):
            old = {**old, "data": new["data"]}  # datasets added or removed: a data change, which this run allows
        changed = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k) and k not in RESUMABLE_CHANGES)
        if changed:
            raise EveryRankError(f"{self.out} holds a checkpoint (step {step}) of a run with another "
                                 f"{', '.join(changed)}: " + "; ".join(f"{k}: {old.get(k)!r} -> {new.get(k)!r}"
                                                                      for k in changed)
                                 + ". Use another output, or restore those values.")

    # -- one step ------------------------------------------------------------------------------------------------

    def forward_backward(self, step: int, micros: list[dict[str, torch.Tensor]] | None = None,
                         seed_rank: int | None = None) -> tuple[float, int]:
        """The step's micro-batches forward and backward (gradients reduced on the last): (global mean loss, batch)."""
        d = self.d
        loss_sum = torch.zeros((), device=d.device)
        batch = -1 if micros is None else self.step_batch
        if micros is None and self.keep_micros:
            self.step_micros = []
        for m in range(self.accumulation):
            if micros is not None:  # a replay: the step's micro-batches as they were (poison included)
                micro = micros[m]
            else:
                # Outside the dropout stream: the first next() of an iterator starts the loader's DataLoader, which
                # draws its workers' base seed from the global RNG (once per run, and again after a rollback).
                micro = next(self.iterator)
                batch = self.loader.last_batch
                if self.faults is not None:
                    first = self.loader.layout.first_position(batch, m) - batch * self.loader.global_batch_size
                    micro = self.faults.poison(step, batch, first, micro)
                if self.keep_micros:
                    self.step_micros.append(micro)
            if self.sharded:
                self.model.set_requires_gradient_sync(m == self.accumulation - 1)
            positions = micro.get("position_ids")
            with self._dropout_rng(step, m, seed_rank):
                with self._autocast():
                    loss = self.model(micro["input_ids"].to(d.device, non_blocking=True),
                                      labels=micro["labels"].to(d.device, non_blocking=True),
                                      position_ids=None if positions is None else positions.to(d.device))
                (loss / self.accumulation).backward()
            loss_sum += loss.detach().float()
        self.local_loss = float(loss_sum) / self.accumulation
        self.step_batch = batch
        loss_value, full = d.all_mean([self.local_loss, self.disk.flag])  # a full disk held by a rank rides along
        self.disk.agree(full)
        return loss_value, batch

    @contextmanager
    def _dropout_rng(self, step: int, micro: int, rank: int | None = None) -> Iterator[None]:
        """Dropout (and any other random op of the forward and backward) from a stream keyed by (seed, step,
        micro-batch, rank) alone: whatever drew from the global RNG before (loader workers starting, a rollback, a
        resume, the caller) cannot shift the masks, and the caller's RNG state is given back unchanged. Neither
        ``nn.Dropout`` nor ``scaled_dot_product_attention`` takes a generator, hence a forked global stream. ``rank``:
        another rank's stream (a replay that runs that rank's micro-batches here: the same masks as there)."""
        device = self.d.device
        seed = dropout_seed(self.cfg.seed, step, micro, self.d.rank if rank is None else rank)
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else [], device_type=device.type):
            torch.default_generator.manual_seed(seed)
            if device.type == "cuda":
                torch.cuda.default_generators[device.index].manual_seed(seed)
            yield

    def _step(self, step: int) -> tuple[dict[str, Any], Verdict | None]:
        cfg, d = self.cfg, self.d
        lr = learning_rate(step, cfg.lr, cfg.warmup_steps, cfg.steps, cfg.min_lr_ratio) * self.guard.lr_scale
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        faults, fingerprints = self.faults, self.fingerprints
        if faults is not None:
            faults.before_step(step)  # the sleep fault
            self._arm_grad_fault(step)
        t0 = time.perf_counter()
        if fingerprints is not None:
            fingerprints.begin_step()
        loss_value, batch = self.forward_backward(step)
        params = list(self.model.parameters())
        self._corrupt_untapped(step, params)
        # This rank's shard norm, before clipping scales the gradients (one rank: the clipping's norm is the same).
        shard = fingerprints.shard_norm(params) if fingerprints is not None and self.sharded else None
        grad_norm = self._clip(params)
        local: list[float] | None = None
        anomalies: list[Anomaly] = []
        if fingerprints is not None:  # one all_gather; every rank sees every rank's values, before any update
            local = fingerprints.local(step, self.local_loss, params, grad_norm if shard is None else shard)
            rows, anomalies = fingerprints.gather(step, local, rows=self.ranks.enabled)
            self.ranks.write_many(rows)
            if anomalies:
                self._rank_anomaly(step, batch, anomalies)
        replayed: dict[str, Any] = {}
        if self.keep_micros:  # replay.py: an anomalous step is re-run and classified before anything is applied
            loss_value, grad_norm, verdict, replayed = self._replay(step, batch, loss_value, grad_norm, local,
                                                                    anomalies, params)
        else:
            verdict = self._check(step, loss_value, grad_norm)
        if verdict is not None and verdict.spike or replayed.get("update_skipped"):
            self.optimizer.zero_grad(set_to_none=True)
        else:
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
        if d.device.type == "cuda":
            torch.cuda.synchronize(d.device)
        seconds = time.perf_counter() - t0
        tokens = cfg.global_batch_size * cfg.seq_len
        tflops = self.flops_per_token * tokens / seconds / d.world_size / 1e12
        row = {"step": step, "batch": batch, "loss": loss_value, "lr": lr, "grad_norm": grad_norm,
               "tokens": self.tokens_seen + tokens, "step_s": round(seconds, 4),
               "tokens_per_s": round(tokens / seconds, 1), "tflops_per_device": round(tflops, 4),
               "mfu": round(tflops / self.peak, 4) if self.peak else None, "rollbacks": self.guard.rollbacks,
               **memory(d.device)}
        if fingerprints is not None:
            row["fingerprint_s"] = round(fingerprints.seconds, 6)
        row.update(replayed)
        return row, verdict

    # -- replay on anomaly (issue 22, item 2; the bookkeeping and the verdict are replay.py's) --------------------

    def _arm_grad_fault(self, step: int) -> None:
        """The grad fault for this pass of ``step``: a reduce-scatter that corrupts this rank's gradient, or none
        (``once`` has fired in the original pass, so a replay runs clean; ``always`` fires in every pass)."""
        faults = self.faults
        if faults is not None and self.tap is not None:
            self.tap.corrupt = (lambda grads: faults.corrupt(step, grads)) if faults.grad_due(step) else None

    def _check(self, step: int, loss_value: float, grad_norm: float) -> Verdict | None:
        """The guard's verdict on the step (counted and learnt from); None with the guard off."""
        return self.guard.check(step, loss_value, grad_norm) if self.cfg.guard.enabled else None

    def _corrupt_untapped(self, step: int, params: list[torch.nn.Parameter]) -> None:
        """The grad fault where no reduce-scatter tap carries it (one rank): every ``.grad`` after the backward."""
        if self.faults is not None and self.tap is None and self.faults.grad_due(step):
            self.faults.corrupt(step, [p.grad for p in params if p.grad is not None])

    def _clip(self, params: list[torch.nn.Parameter]) -> float:
        """Clip the gradients to the global norm (the guard may have scaled the limit down); the norm before."""
        norm = torch.nn.utils.clip_grad_norm_(params, self.cfg.grad_clip * self.guard.clip_scale, foreach=True)
        if isinstance(norm, DTensor):
            norm = norm.full_tensor()
        return float(norm)

    def _replay(self, step: int, batch: int, loss_value: float, grad_norm: float, local: list[float] | None,
                anomalies: list[Anomaly], params: list[torch.nn.Parameter]
                ) -> tuple[float, float, Verdict | None, dict[str, Any]]:
        """Replay ``step`` if it is anomalous (or the test probe asks), classify it and act: (loss, grad norm,
        verdict, metrics keys) of the pass whose gradients are now held. Every rank calls it with the same values
        (gathered, or reduced), so every rank takes the same branch and runs the same collectives."""
        cfg, guard = self.cfg, self.guard
        judged = guard.judge(step, loss_value, grad_norm) if cfg.guard.enabled else None
        non_finite = not (math.isfinite(loss_value) and math.isfinite(grad_norm))
        anomalous = cfg.faults.replay and (bool(anomalies) or non_finite or (judged is not None and judged.spike))
        probe = not anomalous and self.faults is not None and self.faults.replay_due(step)
        if not anomalous and not probe:
            return loss_value, grad_norm, self._check(step, loss_value, grad_norm), {}
        world = self.d.world_size
        if local is not None:
            mine = list(local[:3])
        else:  # no fingerprints: the local loss; on one rank the norm is the whole gradient's
            mine = [self.local_loss, math.nan, math.nan] if self.sharded else [self.local_loss, grad_norm, grad_norm]
        identity = tuple(range(world))
        original = Pass("original", loss_value, grad_norm, gather_values(mine, world, self.d.device), identity)
        hosts, devices = self._where()
        if probe:
            # A healthy step replayed on demand: swapped first, then on the same ranks, whose gradients (the
            # original's, if the replay is exact) are applied.
            r = self.faults.plan.replay.rank % world
            passes = [original]
            if world > 1:
                p = partner(r, world)
                passes.append(self._replay_pass("swapped", step, swapped_order(world, r, p), params))
            same = self._replay_pass("same", step, identity, params)
            passes.append(same)
            self.events.write({"time": time.time(), "step": step, "action": "replay_probe", "batch": batch,
                               "reproduces": reproduces(original, same, 0.0),
                               "evidence": [x.to_json() for x in passes]})
            verdict = self._check(step, same.loss, same.grad_norm)
            return same.loss, same.grad_norm, verdict, {"replay": "probe"}
        flagged = sorted({a.rank for a in anomalies})
        r = suspect(original.ranks, flagged)
        trigger = "; ".join([f"rank {e['rank']}: {e['reason']}" for e in anomaly_event(step, anomalies)]
                            + ([judged.reason] if judged is not None and judged.spike and judged.reason else [])
                            + ([f"non-finite loss {loss_value} or grad norm {grad_norm}"] if non_finite else []))
        same = self._replay_pass("same", step, identity, params)
        again = guard.judge(step, same.loss, same.grad_norm) if cfg.guard.enabled else None
        same_anomalous = (not (math.isfinite(same.loss) and math.isfinite(same.grad_norm))
                          or (again is not None and again.spike) or self._flags(same))
        swapped = None
        if world > 1 and (same_anomalous or reproduces(original, same, cfg.faults.rtol)):
            p = partner(r, world)
            swapped = self._replay_pass("swapped", step, swapped_order(world, r, p), params)
        decision = classify(original, same, swapped, r, cfg.faults.rtol, same_anomalous)
        if decision.classification == TRANSIENT:
            done = "replayed step applied; run went on"
        elif decision.classification == DATA:
            done = "rolled back and skipped its batches (the rollback event names the documents)"
        else:
            done = "stopped; faulty_ranks.json written" if cfg.faults.on_hardware == "stop" else \
                "faulty_ranks.json written; run went on without this step's update (world size unchanged)"
        event = {"time": time.time(), **decision.event(step, batch, trigger, done, hosts, devices)}
        self.events.write(event)
        named = f"global batch {batch}" if decision.classification == DATA else \
            ", ".join(f"rank {x['rank']} on {x['host']} ({x['device']})" for x in event["ranks"])
        self.say.warn(f"step {step}: {decision.classification} fault ({named}): {decision.reason}; {done}")
        if decision.classification == TRANSIENT:  # the replay's gradients are held: the clean step is applied
            verdict = self._check(step, same.loss, same.grad_norm)
            return same.loss, same.grad_norm, verdict, {"classification": TRANSIENT}
        if decision.classification == DATA:
            verdict = guard.flag(step, judged.rule, judged.reason) if judged is not None and judged.spike and \
                judged.rule else guard.flag(step, "rank_anomaly", trigger)
            return loss_value, grad_norm, verdict, {"classification": DATA}
        return self._hardware(step, event, done, loss_value, grad_norm)

    def _hardware(self, step: int, event: dict[str, Any], done: str, loss_value: float, grad_norm: float
                  ) -> tuple[float, float, Verdict | None, dict[str, Any]]:
        """A fault that follows a rank: faulty_ranks.json for the operator or launcher, then stop (every rank, once
        the record is on disk) or go on without this step's update."""
        path = self.out / FAULTY_RANKS_JSON
        who = ", ".join(f"rank {x['rank']} on host {x['host']} ({x['device']})" for x in event["ranks"])
        message = (f"step {step}: hardware fault on {who}: {event['reason']}. Recorded in {path}: exclude that "
                   "node and resume from the last checkpoint (or set faults.on_hardware: continue)")
        try:
            if self.d.main:
                self.disk.write(path, lambda: write_faulty_ranks(self.out, event, done))
            if self.cfg.faults.on_hardware == "stop":
                self.disk.check()  # the record is written before any rank exits (the launcher stops all)
        except DiskFullError as err:  # the fault is not on disk: the one line says it
            raise DiskFullError(f"{err}. It was recording a hardware fault, which stopped the run: "
                                f"{message.replace(f'. Recorded in {path}', '')}") from None
        if self.cfg.faults.on_hardware == "stop":
            raise HardwareFault(message)
        self.say.warn(message)
        return loss_value, grad_norm, None, {"classification": "hardware", "update_skipped": True}

    def _replay_pass(self, name: str, step: int, order: tuple[int, ...], params: list[torch.nn.Parameter]) -> Pass:
        """One more pass of ``step`` from the kept micro-batches, rank ``i`` running those of rank ``order[i]`` (with
        its dropout seeds; the two ranks that trade send theirs to each other): the gradients it leaves are held, and
        its values, measured as the original pass's were, gathered."""
        d = self.d
        self.optimizer.zero_grad(set_to_none=True)
        self._arm_grad_fault(step)
        micros = self.step_micros
        if order[d.rank] != d.rank:
            micros = exchange(micros, order[d.rank], d.device)
        measure = self.sharded and self.tap is not None and self.fingerprints is not None
        if measure:
            self.tap.squared, self.tap.measure = None, True
        loss_value, _ = self.forward_backward(step, micros=micros, seed_rank=order[d.rank])
        self._corrupt_untapped(step, params)
        shard = grad_shard_norm(params) if self.sharded and self.fingerprints is not None else math.nan
        grad_norm = self._clip(params)
        if not self.sharded:
            local = shard = grad_norm
        elif measure:
            local = math.sqrt(self.tap.take())
            self.tap.measure = False
        else:
            local = math.nan
        return Pass(name, loss_value, grad_norm, gather_values([self.local_loss, local, shard], d.world_size,
                                                               d.device), order)

    def _flags(self, replayed: Pass) -> bool:
        """Whether the fingerprints would flag a rank in ``replayed`` (a copy of the detector: its history is the
        run's, not the replays')."""
        if self.fingerprints is None:
            return False
        detector = copy.deepcopy(self.fingerprints.detector)
        return bool(detector.check(np.array([v[:3] for v in replayed.ranks], dtype=np.float64)))

    def _where(self) -> tuple[list[str], list[str]]:
        """Every rank's host and device (the fingerprints know them; else one all_gather_object, once)."""
        if self.where is None:
            self.where = (self.fingerprints.hosts, self.fingerprints.devices) if self.fingerprints is not None \
                else rank_places(self.d.world_size, self.d.device)
        return self.where

    # -- divergence ------------------------------------------------------------------------------------------------

    def _rollback(self, verdict: Verdict, row: dict[str, Any]) -> int:
        from tokenmill.loader.explain import explain_batch

        documents = self._documents(explain_batch, row["batch"]) if self.d.main else []
        healthy = self.checkpoints.latest(healthy_only=True)
        if healthy is None:
            raise EveryRankError(f"step {verdict.step}: {verdict.reason}; no healthy checkpoint to roll back to "
                                 f"(the first is written at step {self.cfg.checkpoint_every})")
        loaded = self.checkpoints.load(self._app_state(), healthy_only=True)
        plan = self.guard.plan_rollback(verdict, loaded.step, loaded.extra.get("guard"))
        self.checkpoints.discard_after(loaded.step)
        # The steps after the checkpoint (the spike's included) were undone: their rows say so.
        self.metrics.mark_after(loaded.step, "rolled_back")
        self.ranks.mark_after(loaded.step, "rolled_back")
        # A checkpoint from before a data change that a resume accepted (every resume checks its checkpoint, so an
        # older one on other data means the change was accepted): the same position of the current data.
        state = loaded.extra["loader"]
        self.loader.load_state_dict(state, allow=("data", "weights") if self.loader.data_changes(state) else ())
        skipped = self.upcoming_batches(plan.skip_from - loaded.step - 1, plan.skip_batches)
        if skipped:
            self.loader.skip([(k, k) for k in skipped])
        self.iterator = iter(self.loader)
        self.tokens_seen = int(loaded.extra.get("tokens_seen", 0))
        self._event({"step": verdict.step, "action": "rollback", "rule": verdict.rule, "reason": verdict.reason,
                     "loss": row["loss"], "grad_norm": row["grad_norm"], "batch": row["batch"],
                     "resumed_from_step": loaded.step, "lr_scale": plan.lr_scale, "clip_scale": plan.clip_scale,
                     "skipped_batches": skipped, "rollbacks": plan.rollbacks, "documents": documents,
                     **({"classification": row["classification"]} if "classification" in row else {})})
        # Saved again at once, so a crash from here on resumes with the skips and the lower learning rate.
        self._save(loaded.step, healthy=True)
        return loaded.step

    def _rank_anomaly(self, step: int, batch: int, anomalies: list[Anomaly]) -> None:
        """Ranks flagged by their fingerprints at ``step``, before its update is applied; called on every rank with
        the same anomalies (they come from one all_gather).

        It records them: a ``rank_anomaly`` event per flagged rank in events.jsonl (rank, host, device, the values
        and the others' spread) and a warning; the flagged rank also logs it on its own host. With
        ``faults.replay``, ``_replay`` then re-runs the step and classifies it (data / hardware / transient), still
        before anything of the step is applied."""
        for event in anomaly_event(step, anomalies):
            self.events.write({"time": time.time(), **event, "batch": batch})
            self.say.warn(f"step {step}: rank {event['rank']} on {event['host']} ({event['device']}) flagged: "
                          f"{event['reason']}")
            if event["rank"] == self.d.rank and not self.d.main:
                log.warning("step %d: this rank (%d on %s) was flagged: %s", step, self.d.rank, event["host"],
                            event["reason"])

    def upcoming_batches(self, offset: int, count: int) -> list[int]:
        """Global batch indices the loader serves ``offset`` .. ``offset + count - 1`` steps from its state."""
        k = next_served(self.loader.consumed_samples // self.loader.global_batch_size, self.loader.skips)
        out = []
        for i in range(offset + count):
            if i >= offset:
                out.append(k)
            k = next_served(k + 1, self.loader.skips)
        return out

    def _documents(self, explain_batch, batch: int, limit: int = 64) -> list[dict[str, Any]]:
        try:
            rows = explain_batch(self.loader, batch)
        except Exception as err:  # noqa: BLE001 - attribution must never stop a rollback
            return [{"error": f"explain failed: {err}"}]
        keep = ("sample_in_batch", "rank", "source", "subset", "id", "tokens", "document_tokens", "preview")
        return [{k: r[k] for k in keep} for r in rows[:limit]]

    def _event(self, event: dict[str, Any]) -> None:
        event = {"time": time.time(), **event}
        self.events.write(event)
        if event["action"] != "resume":
            self.say.note(f"event: {json.dumps({k: v for k, v in event.items() if k != 'documents'})}")

    # -- evaluation ----------------------------------------------------------------------------------------------

    def evaluate(self) -> float | None:
        if self.valid is None:
            return None
        self.model.eval()
        total, n = 0.0, 0
        with torch.no_grad():
            for k in range(self.cfg.eval_batches):
                for m in range(self.valid.layout.micro_batches):
                    micro = self.valid.micro_batch(k, m)
                    with self._autocast():
                        loss = self.model(micro["input_ids"].to(self.d.device),
                                          labels=micro["labels"].to(self.d.device))
                    total += float(loss)
                    n += 1
        self.model.train()
        value, = self.d.all_mean([total / n])
        return value

    # -- the run ---------------------------------------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        d = setup()
        try:
            return self._run(d)
        except OSError as err:  # any write that no guard above caught: a full disk is still one line and exit 74
            code = full_errno(err)
            if code is None:
                raise
            what, folder = (Path(err.filename).name, Path(err.filename).parent) if isinstance(err.filename, str) \
                else ("a file", self.out)
            full = DiskFullError(disk_full_message(what, folder, code, "the run stopped", self._previous()),
                                 every_rank=False)  # met by this rank alone, which says it
            note_error(full, d.rank, d.world_size)
            raise full from err
        except TokenmillError as err:
            note_error(err, d.rank, d.world_size)  # rank 0 says an error every rank shares; the others stay quiet
            raise
        finally:
            for loader in (getattr(self, "loader", None), getattr(self, "valid", None)):
                if loader is not None:
                    loader.close()
            d.close()

    def _run(self, d: Distributed) -> dict[str, Any]:
        cfg = self.cfg
        self._build(d)
        step = self._resume()
        if d.main:
            path = self.out / "config.json"
            self.disk.write(path, lambda: write_atomic(path, self.cfg.model_dump_json(indent=1) + "\n"))
        if self.skip_batches:
            ranges = parse_ranges(self.skip_batches)
            self.loader.skip(ranges)
            self._event({"step": step, "action": "skip", "skipped_batches": [list(r) for r in ranges],
                         "by": "command line"})
        self.iterator = iter(self.loader)
        kill_after = int(os.environ.get(KILL_AFTER_STEP_ENV, "0") or 0)
        spike_since_checkpoint = False
        started, first_step = time.perf_counter(), step
        last: dict[str, Any] = {}
        first_loss = None
        self.model.train()
        self.say.start(cfg.steps, step)
        self.watchdog = Watchdog.start(cfg.watchdog, d, self.out, self.model)  # hangs: watchdog.py
        try:  # a live display must not outlive a failed run
            while step < cfg.steps:
                self.watchdog.begin(step + 1)
                row, verdict = self._step(step + 1)
                self.watchdog.done(step + 1)
                if verdict is not None and verdict.spike:
                    row["spike"] = verdict.reason
                    self.metrics.write(row)
                    step = self._rollback(verdict, row)
                    spike_since_checkpoint = False
                    self.say.note(f"step {row['step']}: {verdict.reason}; rolled back to step {step}")
                    continue
                step += 1
                first_loss = row["loss"] if first_loss is None else first_loss
                self.tokens_seen = row["tokens"]
                self.metrics.write(row)
                last = row
                if self.on_step:
                    self.on_step(row)
                if cfg.eval_every and step % cfg.eval_every == 0:
                    value = self.evaluate()
                    if value is not None:
                        self.metrics.write({"step": step, "valid_loss": value, "tokens": self.tokens_seen})
                        last = {**last, "valid_loss": value}
                if step % cfg.checkpoint_every == 0 or step == cfg.steps:
                    self._save(step, healthy=not spike_since_checkpoint)
                    spike_since_checkpoint = False
                self.say.step(step, row)
                if kill_after and step >= kill_after:
                    os.kill(os.getpid(), signal.SIGKILL)
        finally:
            self.watchdog.stop()
            self.say.stop()
        seconds = time.perf_counter() - started
        summary = {"steps": step, "steps_this_run": step - first_step, "seconds": round(seconds, 2),
                   "first_loss": first_loss, "loss": last.get("loss"), "valid_loss": last.get("valid_loss"), "tokens": self.tokens_seen,
                   "tokens_per_s": last.get("tokens_per_s"), "mfu": last.get("mfu"),
                   "rollbacks": self.guard.rollbacks, "world_size": d.world_size, "device": str(d.device),
                   "params": self.model.num_params(), "metrics": str(self.out / METRICS_JSONL),
                   "events": str(self.out / EVENTS_JSONL), "checkpoints": str(self.out / "checkpoints")}
        if d.main:
            path = self.out / "summary.json"
            self.disk.write(path, lambda: write_atomic(path, json.dumps(summary, indent=1) + "\n"))
        self.disk.check()  # a full disk met since the last step's all-reduce (its last rows, summary.json)
        return summary

    def _previous(self) -> int | None:
        """The step of the newest committed checkpoint (what a rerun resumes from), for a full disk's message."""
        manager = getattr(self, "checkpoints", None)
        return max((c.step for c in manager.checkpoints()), default=None) if manager is not None else None

    def _save(self, step: int, healthy: bool) -> None:
        """A checkpoint, once every rank knows that none holds a full disk: a checkpoint past rows that were lost
        would resume with a hole in the logs."""
        self.disk.check()
        self.checkpoints.save(step, self._app_state(), healthy=healthy, extra=self._extra())

