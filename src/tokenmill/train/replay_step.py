"""Replaying an anomalous step: its passes re-run from the kept micro-batches, and the verdict (replay.py) acted on.

Every rank calls :func:`replay_step` with the same values (gathered, or reduced), so every rank takes the same branch
and runs the same collectives. The rules (when the passes agree, which rank is suspect, data / hardware / transient)
are ``replay.py``'s, pure; this module runs the passes on the built run and does what the verdict says: apply the
replayed step, roll back (through the guard's spike verdict), or write ``faulty_ranks.json`` and stop or go on.
"""

from __future__ import annotations

import copy
import math
import time
from typing import Any

import numpy as np
import torch

from tokenmill.train.errors import DiskFullError
from tokenmill.train.fingerprints import Anomaly, anomaly_event, grad_shard_norm, rank_places
from tokenmill.train.gradients import clip, forward_backward
from tokenmill.train.guard import Verdict
from tokenmill.train.replay import DATA, FAULTY_RANKS_JSON, RANK_VALUES, TRANSIENT, Decision, HardwareFault, Pass, \
    classify, exchange, gather_values, partner, reproduces, suspect, swapped_order, write_faulty_ranks
from tokenmill.train.run import Run

#: What the step does with its values: (loss, grad norm, verdict, metrics keys) of the pass whose gradients are held.
Outcome = tuple[float, float, Verdict | None, dict[str, Any]]


def replay_step(run: Run, step: int, batch: int, loss_value: float, grad_norm: float, local: list[float] | None,
                anomalies: list[Anomaly], params: list[torch.nn.Parameter]) -> Outcome:
    """Replay ``step`` if it is anomalous (or the test probe asks), classify it and act."""
    cfg = run.cfg
    judged = run.guard.judge(step, loss_value, grad_norm) if cfg.guard.enabled else None
    non_finite = not (math.isfinite(loss_value) and math.isfinite(grad_norm))
    anomalous = cfg.faults.replay and (bool(anomalies) or non_finite or (judged is not None and judged.spike))
    probe = not anomalous and run.faults is not None and run.faults.replay_due(step)
    if not anomalous and not probe:
        return loss_value, grad_norm, run.check(step, loss_value, grad_norm), {}
    original = _original(run, loss_value, grad_norm, local)
    hosts, devices = _where(run)
    if probe:
        return _probe(run, step, batch, original, params)
    trigger = "; ".join([f"rank {e['rank']}: {e['reason']}" for e in anomaly_event(step, anomalies)]
                        + ([judged.reason] if judged is not None and judged.spike and judged.reason else [])
                        + ([f"non-finite loss {loss_value} or grad norm {grad_norm}"] if non_finite else []))
    decision, same = _decide(run, step, original, sorted({a.rank for a in anomalies}), params)
    done = _what_is_done(decision.classification, cfg.faults.on_hardware)
    event = {"time": time.time(), **decision.event(step, batch, trigger, done, hosts, devices)}
    run.events.write(event)
    named = f"global batch {batch}" if decision.classification == DATA else \
        ", ".join(f"rank {x['rank']} on {x['host']} ({x['device']})" for x in event["ranks"])
    run.say.warn(f"step {step}: {decision.classification} fault ({named}): {decision.reason}; {done}")
    if decision.classification == TRANSIENT:  # the replay's gradients are held: the clean step is applied
        return same.loss, same.grad_norm, run.check(step, same.loss, same.grad_norm), {"classification": TRANSIENT}
    if decision.classification == DATA:
        verdict = run.guard.flag(step, judged.rule, judged.reason) if judged is not None and judged.spike and \
            judged.rule else run.guard.flag(step, "rank_anomaly", trigger)
        return loss_value, grad_norm, verdict, {"classification": DATA}
    return _hardware(run, step, event, done, loss_value, grad_norm)


def _original(run: Run, loss_value: float, grad_norm: float, local: list[float] | None) -> Pass:
    """The step as it ran, with every rank's values (one all_gather)."""
    if local is not None:
        mine = list(local[:len(RANK_VALUES)])
    else:  # no fingerprints: the local loss; on one rank the norm is the whole gradient's
        mine = [run.local_loss, math.nan, math.nan, run.local_share] if run.sharded else \
            [run.local_loss, grad_norm, grad_norm, run.local_share]
    world = run.d.world_size
    return Pass("original", loss_value, grad_norm, gather_values(mine, world, run.d.device), tuple(range(world)))


def _probe(run: Run, step: int, batch: int, original: Pass, params: list[torch.nn.Parameter]) -> Outcome:
    """A healthy step replayed on demand: swapped first, then on the same ranks, whose gradients (the original's,
    if the replay is exact) are applied."""
    world = run.d.world_size
    r = run.faults.plan.replay.rank % world
    passes = [original]
    if world > 1:
        passes.append(_replay_pass(run, "swapped", step, swapped_order(world, r, partner(r, world)), params))
    same = _replay_pass(run, "same", step, original.order, params)
    passes.append(same)
    run.events.write({"time": time.time(), "step": step, "action": "replay_probe", "batch": batch,
                      "reproduces": reproduces(original, same, 0.0), "evidence": [x.to_json() for x in passes]})
    return same.loss, same.grad_norm, run.check(step, same.loss, same.grad_norm), {"replay": "probe"}


def _decide(run: Run, step: int, original: Pass, flagged: list[int], params: list[torch.nn.Parameter]
            ) -> tuple[Decision, Pass]:
    """The passes an anomaly needs (on the same ranks; then swapped, if that reproduced, on several ranks) and the
    verdict drawn from them, with the pass on the same ranks."""
    cfg, world = run.cfg, run.d.world_size
    r = suspect(original.ranks, flagged)
    same = _replay_pass(run, "same", step, original.order, params)
    again = run.guard.judge(step, same.loss, same.grad_norm) if cfg.guard.enabled else None
    same_anomalous = (not (math.isfinite(same.loss) and math.isfinite(same.grad_norm))
                      or (again is not None and again.spike) or _flags(run, same))
    swapped = None
    if world > 1 and (same_anomalous or reproduces(original, same, cfg.faults.rtol)):
        swapped = _replay_pass(run, "swapped", step, swapped_order(world, r, partner(r, world)), params)
    return classify(original, same, swapped, r, cfg.faults.rtol, same_anomalous), same


def _what_is_done(classification: str, on_hardware: str) -> str:
    """The ``decision`` of the replay event: what the run does about the fault."""
    if classification == TRANSIENT:
        return "replayed step applied; run went on"
    if classification == DATA:  # what follows is the guard's: the rollback event records it, if it happens
        return "handed to the guard as bad data: rolled back and its batches skipped, if a rollback follows"
    return "stopped; faulty_ranks.json written" if on_hardware == "stop" else \
        "faulty_ranks.json written; run went on without this step's update (world size unchanged)"


def _hardware(run: Run, step: int, event: dict[str, Any], done: str, loss_value: float, grad_norm: float
              ) -> Outcome:
    """A fault that follows a rank: faulty_ranks.json for the operator or launcher, then stop (every rank, once
    the record is on disk) or go on without this step's update."""
    path = run.out / FAULTY_RANKS_JSON
    who = ", ".join(f"rank {x['rank']} on host {x['host']} ({x['device']})" for x in event["ranks"])
    message = (f"step {step}: hardware fault on {who}: {event['reason']}. Recorded in {path}: exclude that "
               "node and resume from the last checkpoint (or set faults.on_hardware: continue)")
    try:
        if run.d.main:
            run.disk.write(path, lambda: write_faulty_ranks(run.out, event, done))
        if run.cfg.faults.on_hardware == "stop":
            run.disk.check()  # the record is written before any rank exits (the launcher stops all)
    except DiskFullError as err:  # the fault is not on disk: the one line says it
        raise DiskFullError(f"{err}. It was recording a hardware fault, which stopped the run: "
                            f"{message.replace(f'. Recorded in {path}', '')}") from None
    if run.cfg.faults.on_hardware == "stop":
        raise HardwareFault(message)
    run.say.warn(message)
    return loss_value, grad_norm, None, {"classification": "hardware", "update_skipped": True}


def _replay_pass(run: Run, name: str, step: int, order: tuple[int, ...], params: list[torch.nn.Parameter]) -> Pass:
    """One more pass of ``step`` from the kept micro-batches, rank ``i`` running those of rank ``order[i]`` (with
    its dropout seeds; the two ranks that trade send theirs to each other): the gradients it leaves are held, and
    its values, measured as the original pass's were, gathered."""
    d, tap, faults = run.d, run.tap, run.faults
    run.optimizer.zero_grad(set_to_none=True)
    if faults is not None:
        faults.arm(step, tap)
    micros = run.step_micros
    if order[d.rank] != d.rank:
        micros = exchange(micros, order[d.rank], d.device)
    measure = run.sharded and tap is not None and run.fingerprints is not None
    if measure:
        tap.squared, tap.measure = None, True
    loss_value, _ = forward_backward(run, step, micros=micros, seed_rank=order[d.rank])
    if faults is not None:
        faults.corrupt_untapped(step, tap, params)
    shard = grad_shard_norm(params) if run.sharded and run.fingerprints is not None else math.nan
    grad_norm = clip(run, params)
    if not run.sharded:
        local = shard = grad_norm
    elif measure:
        local = math.sqrt(tap.take())
        tap.measure = False
    else:
        local = math.nan
    values = gather_values([run.local_loss, local, shard, run.local_share], d.world_size, d.device)
    return Pass(name, loss_value, grad_norm, values, order)


def _flags(run: Run, replayed: Pass) -> bool:
    """Whether the fingerprints would flag a rank in ``replayed`` (a copy of the detector: its history is the
    run's, not the replays')."""
    if run.fingerprints is None:
        return False
    detector = copy.deepcopy(run.fingerprints.detector)
    return bool(detector.check(np.array(replayed.ranks, dtype=np.float64)))


def _where(run: Run) -> tuple[list[str], list[str]]:
    """Every rank's host and device (the fingerprints know them; else one all_gather_object, once)."""
    if run.where is None:
        run.where = (run.fingerprints.hosts, run.fingerprints.devices) if run.fingerprints is not None \
            else rank_places(run.d.world_size, run.d.device)
    return run.where
