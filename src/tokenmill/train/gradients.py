"""One pass over a step's micro-batches: forward and backward under keyed dropout, then the global norm clipped."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch.distributed.tensor import DTensor

from tokenmill.train.fingerprints import top_token_share
from tokenmill.train.run import Run


def dropout_seed(seed: int, step: int, micro: int, rank: int) -> int:
    """The seed of one micro-batch's dropout masks: a keyed hash of (seed, step, micro-batch, rank), so no two of
    them share a stream whatever the run's length, accumulation or world size."""
    key = f"tokenmill.train.dropout:{seed}:{step}:{micro}:{rank}".encode()
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "little") >> 1  # manual_seed: < 2**63


def forward_backward(run: Run, step: int, micros: list[dict[str, torch.Tensor]] | None = None,
                     seed_rank: int | None = None) -> tuple[float, int]:
    """The step's micro-batches forward and backward (gradients reduced on the last): (global mean loss, batch).
    ``micros``: a replay's, the step's micro-batches as they were (poison included), run with the dropout seeds of
    ``seed_rank``; else the loader's next."""
    d = run.d
    loss_sum = torch.zeros((), device=d.device)
    # Only the fingerprints read it (a median per sample, every micro-batch): NaN, not measured, without them.
    share = 0.0 if run.fingerprints is not None else math.nan
    batch = -1 if micros is None else run.step_batch
    if micros is None and run.keep_micros:
        run.step_micros = []
    for m in range(run.accumulation):
        if micros is not None:
            micro = micros[m]
        else:
            micro, batch = _next_micro(run, step, m)
        if run.sharded:
            run.model.set_requires_gradient_sync(m == run.accumulation - 1)
        positions = micro.get("position_ids")
        if run.fingerprints is not None:  # before the copy to the device: no sync
            share = max(share, top_token_share(micro["input_ids"]))
        with dropout_rng(run.cfg.seed, step, m, d.rank if seed_rank is None else seed_rank, d.device):
            with run.autocast():
                loss = run.model(micro["input_ids"].to(d.device, non_blocking=True),
                                 labels=micro["labels"].to(d.device, non_blocking=True),
                                 position_ids=None if positions is None else positions.to(d.device))
            (loss / run.accumulation).backward()
        loss_sum += loss.detach().float()
    run.local_loss = float(loss_sum) / run.accumulation
    run.local_share = share
    run.step_batch = batch
    loss_value, full = d.all_mean([run.local_loss, run.disk.flag])  # a full disk held by a rank rides along
    run.disk.agree(full)
    return loss_value, batch


def _next_micro(run: Run, step: int, m: int) -> tuple[dict[str, torch.Tensor], int]:
    """Micro-batch ``m`` from the loader and its global batch: poisoned where the fault plan says, kept for a replay."""
    # Outside the dropout stream: the first next() of an iterator starts the loader's DataLoader, which draws its
    # workers' base seed from the global RNG (once per run, and again after a rollback).
    micro = next(run.iterator)
    batch = run.loader.last_batch
    if run.faults is not None:
        first = run.loader.layout.first_position(batch, m) - batch * run.loader.global_batch_size
        micro = run.faults.poison(step, batch, first, micro)
    if run.keep_micros:
        run.step_micros.append(micro)
    return micro, batch


@contextmanager
def dropout_rng(seed: int, step: int, micro: int, rank: int, device: torch.device) -> Iterator[None]:
    """Dropout (and any other random op of the forward and backward) from a stream keyed by (seed, step,
    micro-batch, rank) alone: whatever drew from the global RNG before (loader workers starting, a rollback, a
    resume, the caller) cannot shift the masks, and the caller's RNG state is given back unchanged. Neither
    ``nn.Dropout`` nor ``scaled_dot_product_attention`` takes a generator, hence a forked global stream. ``rank``:
    this rank, or another (a replay that runs that rank's micro-batches here: the same masks as there)."""
    seed = dropout_seed(seed, step, micro, rank)
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else [], device_type=device.type):
        torch.default_generator.manual_seed(seed)
        if device.type == "cuda":
            torch.cuda.default_generators[device.index].manual_seed(seed)
        yield


def clip(run: Run, params: list[torch.nn.Parameter]) -> float:
    """Clip the gradients to the global norm (the guard may have scaled the limit down); the norm before."""
    norm = torch.nn.utils.clip_grad_norm_(params, run.cfg.grad_clip * run.guard.clip_scale, foreach=True)
    if isinstance(norm, DTensor):
        norm = norm.full_tensor()
    return float(norm)
