"""One training step: learning rate, gradients, every rank's fingerprints, the guard's verdict or a replay, the update.

Every value the step judges is known before anything of it is applied: the micro-batches forward and backward
(``gradients.py``), global gradient-norm clipping, each rank's fingerprints (``fingerprints.py``: its own loss and
gradient norms, one all_gather, a flagged rank recorded), then the guard's verdict on the global mean loss and the
norm, or, with replay on, the step re-run and classified (``replay_step.py``). A spike's update is never applied:
the loop rolls back (``restore.py``).
"""

from __future__ import annotations

import logging
import time
from typing import Any

import torch

from tokenmill.train.fingerprints import Anomaly, anomaly_event
from tokenmill.train.gradients import clip, forward_backward
from tokenmill.train.guard import Verdict
from tokenmill.train.metrics import memory
from tokenmill.train.replay_step import replay_step
from tokenmill.train.run import Run
from tokenmill.train.schedule import learning_rate

log = logging.getLogger(__name__)


def train_step(run: Run, step: int) -> tuple[dict[str, Any], Verdict | None]:
    """Step ``step``, applied unless its verdict is a spike (or a tolerated hardware fault): its metrics row and the
    guard's verdict."""
    cfg, d, faults, fingerprints = run.cfg, run.d, run.faults, run.fingerprints
    lr = learning_rate(step, cfg.lr, cfg.warmup_steps, cfg.steps, cfg.min_lr_ratio) * run.guard.lr_scale
    for group in run.optimizer.param_groups:
        group["lr"] = lr
    if faults is not None:
        faults.before_step(step)  # the sleep fault
        faults.arm(step, run.tap)
    t0 = time.perf_counter()
    if fingerprints is not None:
        fingerprints.begin_step()
    loss_value, batch = forward_backward(run, step)
    params = list(run.model.parameters())
    if faults is not None:
        faults.corrupt_untapped(step, run.tap, params)
    # This rank's shard norm, before clipping scales the gradients (one rank: the clipping's norm is the same).
    shard = fingerprints.shard_norm(params) if fingerprints is not None and run.sharded else None
    grad_norm = clip(run, params)
    local, anomalies = _fingerprints(run, step, batch, params, grad_norm if shard is None else shard)
    replayed: dict[str, Any] = {}
    if run.keep_micros:  # an anomalous step is re-run and classified before anything is applied
        loss_value, grad_norm, verdict, replayed = replay_step(run, step, batch, loss_value, grad_norm, local,
                                                               anomalies, params)
    else:
        verdict = run.check(step, loss_value, grad_norm)
    if not (verdict is not None and verdict.spike or replayed.get("update_skipped")):
        run.optimizer.step()
    run.optimizer.zero_grad(set_to_none=True)
    if d.device.type == "cuda":
        torch.cuda.synchronize(d.device)
    row = _row(run, step, batch, loss_value, lr, grad_norm, time.perf_counter() - t0)
    row.update(replayed)
    return row, verdict


def _fingerprints(run: Run, step: int, batch: int, params: list[torch.nn.Parameter], shard: float
                  ) -> tuple[list[float] | None, list[Anomaly]]:
    """This rank's values and the anomalies among every rank's (one all_gather; every rank sees every rank's
    values, before any update), with their rows in ranks.jsonl; (None, []) with the fingerprints off."""
    fingerprints = run.fingerprints
    if fingerprints is None:
        return None, []
    local = fingerprints.local(step, run.local_loss, params, shard, run.local_share)
    rows, anomalies = fingerprints.gather(step, local, rows=run.ranks.enabled)
    run.ranks.write_many(rows)
    if anomalies:
        _record_anomalies(run, step, batch, anomalies)
    return local, anomalies


def _record_anomalies(run: Run, step: int, batch: int, anomalies: list[Anomaly]) -> None:
    """Ranks flagged by their fingerprints at ``step``, before its update is applied; called on every rank with
    the same anomalies (they come from one all_gather).

    It records them: a ``rank_anomaly`` event per flagged rank in events.jsonl (rank, host, device, the values
    and the others' spread) and a warning; the flagged rank also logs it on its own host. With
    ``faults.replay``, ``replay_step`` then re-runs the step and classifies it (data / hardware / transient), still
    before anything of the step is applied."""
    for event in anomaly_event(step, anomalies):
        run.events.write({"time": time.time(), **event, "batch": batch})
        run.say.warn(f"step {step}: rank {event['rank']} on {event['host']} ({event['device']}) flagged: "
                     f"{event['reason']}")
        if event["rank"] == run.d.rank and not run.d.main:
            log.warning("step %d: this rank (%d on %s) was flagged: %s", step, run.d.rank, event["host"],
                        event["reason"])


def _row(run: Run, step: int, batch: int, loss_value: float, lr: float, grad_norm: float, seconds: float
         ) -> dict[str, Any]:
    """The step's metrics.jsonl row: loss, learning rate, norm, tokens, throughput, MFU, memory."""
    cfg, d = run.cfg, run.d
    tokens = cfg.global_batch_size * cfg.seq_len
    tflops = run.flops_per_token * tokens / seconds / d.world_size / 1e12
    row = {"step": step, "batch": batch, "loss": loss_value, "lr": lr, "grad_norm": grad_norm,
           "tokens": run.tokens_seen + tokens, "step_s": round(seconds, 4),
           "tokens_per_s": round(tokens / seconds, 1), "tflops_per_device": round(tflops, 4),
           "mfu": round(tflops / run.peak, 4) if run.peak else None, "rollbacks": run.guard.rollbacks,
           **memory(d.device)}
    if run.fingerprints is not None:
        row["fingerprint_s"] = round(run.fingerprints.seconds, 6)
    return row
