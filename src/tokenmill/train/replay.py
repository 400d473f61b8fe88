"""Replay on anomaly: the values of each run of one step, their comparison, and the verdict data / hardware / transient.

An anomalous step (a non-finite loss or gradient norm, a spike by the guard, a rank flagged by its fingerprints) is
run again before anything of it is applied, by every rank together (they all saw the same gathered values):

1. ``same``: the same micro-batches (kept in memory from the original pass, never read again from the loader), the
   same dropout seeds, on the same ranks. Values that change, and a replay that is healthy, mean the fault did not
   reproduce: **transient**; the replayed step (its gradients are the ones now held) is applied.
2. ``swapped``: only when it reproduced and there are several ranks. The suspect rank ``r`` and its partner
   ``(r + 1) % world`` exchange their micro-batches, each running the other's with the other's dropout seeds, so a
   batch gives the same values on any rank. Values that follow their batch mean **data** (rolled back and skipped);
   values that stay with rank ``r`` mean **hardware** (the rank is named; the run stops, or goes on without the
   step's update with ``faults.on_hardware: continue``).

Megatron-LM's ``RerunStateMachine`` reruns an iteration in place, and when the result reproduces, checkpoints and
asks for a restart on other GPUs to tell a persistent fault from a hardware one, comparing the validated values (the
loss) with a tolerance. Here every rank's local loss and local gradient norm are compared, and the swap is done
inside the job: the batch and the rank are told apart within the step, without a restart. With one rank
there is no other rank to move a batch to: a fault that reproduces is treated as data (what the run did before).

This module holds the config, the pure bookkeeping and the one exchange of micro-batches; ``replay_step.py`` runs
the passes on the built run and acts.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch
import torch.distributed as dist
from pydantic import Field

from tokenmill.config_base import StrictModel
from tokenmill.train.errors import EveryRankError
from tokenmill.train.atomic import write_atomic
from tokenmill.train.fingerprints import gather_table

DATA, HARDWARE, TRANSIENT = "data", "hardware", "transient"
CLASSIFICATIONS = (DATA, HARDWARE, TRANSIENT)
#: Per-rank values of a pass (the fingerprints' ``METRICS``), compared between passes (``grad_norm_shard`` is kept as
#: evidence only: the reduction mixes every rank's gradient into it, so it cannot follow a batch or a rank;
#: ``top_token_share`` is the samples', the same wherever they run).
RANK_VALUES = ("loss", "grad_norm_local", "grad_norm_shard", "top_token_share")
COMPARED = ("loss", "grad_norm_local")
FAULTY_RANKS_JSON = "faulty_ranks.json"


class HardwareFault(EveryRankError):
    """A fault that followed a rank through the swap: the run stops (``faults.on_hardware: stop``), naming it."""


class ReplayConfig(StrictModel):
    """The ``faults:`` block of a train config: replay an anomalous step and classify it (issue 22, item 2)."""

    replay: bool = False
    """Replay every anomalous step before its update (once on the same ranks, once with the suspect rank's
    micro-batches swapped) and classify it as data, hardware or transient. Off, a spike is rolled back as bad data
    and a flagged rank is only recorded."""
    on_hardware: Literal["stop", "continue"] = "stop"
    """What a fault that follows a rank does: stop the run (the default) with an error naming the rank, host and
    device and a ``faulty_ranks.json`` in the output folder, for the operator or launcher to exclude that node; or
    continue, dropping that step's update (the world size is not shrunk: restarting without the node is the
    launcher's)."""
    rtol: float = Field(default=1e-3, gt=0, lt=1)
    """Two passes' values are the same when they differ by at most this fraction (NaN equals NaN). Replays on CPU
    are bit for bit; a GPU whose kernels are not deterministic differs in the last bits, a fault by orders."""


@dataclass(frozen=True, slots=True)
class Pass:
    """One run of the step: the global loss and gradient norm, and every rank's values (``RANK_VALUES``), where
    rank ``i`` ran the micro-batches (and dropout seeds) of rank ``order[i]``."""

    name: str
    loss: float
    grad_norm: float
    ranks: tuple[tuple[float, ...], ...]
    order: tuple[int, ...]

    def to_json(self) -> dict[str, Any]:
        return {"pass": self.name, "loss": _num(self.loss), "grad_norm": _num(self.grad_norm),
                "ranks": [{"rank": i, "batch_of_rank": self.order[i],
                           **{k: _num(v) for k, v in zip(RANK_VALUES, values)}}
                          for i, values in enumerate(self.ranks)]}


@dataclass(slots=True)
class Decision:
    """The verdict on one anomalous step, with the passes it was drawn from."""

    classification: str
    suspect: int
    reason: str
    passes: list[Pass]
    partner: int | None = None
    ranks: list[int] = field(default_factory=list)
    """The ranks the verdict names: the faulty rank (hardware), the ranks whose values changed (transient)."""

    def event(self, step: int, batch: int, trigger: str, decision: str, hosts: list[str],
              devices: list[str]) -> dict[str, Any]:
        """The ``replay`` record of events.jsonl: the verdict, what triggered it, what was done, and the evidence
        (each pass's global and per-rank values)."""
        named = self.ranks or [self.suspect]
        out: dict[str, Any] = {"step": step, "action": "replay", "classification": self.classification,
                               "batch": batch, "trigger": trigger, "reason": self.reason, "decision": decision,
                               "suspect": self.suspect, "partner": self.partner}
        if self.classification != DATA:  # data is named by its documents (the rollback's), not by a rank
            out.update(rank=named[0], host=hosts[named[0]], device=devices[named[0]])
        out["ranks"] = [{"rank": r, "host": hosts[r], "device": devices[r]} for r in named]
        out["evidence"] = [p.to_json() for p in self.passes]
        return out


def _num(x: float) -> float | str:
    """JSON has no NaN or infinity: written as strings, so the evidence stays strict JSON."""
    return x if math.isfinite(x) else str(x)


def close(a: float, b: float, rtol: float) -> bool:
    """The same value within ``rtol``; non-finite values equal only the same non-finite value (NaN equals NaN)."""
    if not (math.isfinite(a) and math.isfinite(b)):
        return (math.isnan(a) and math.isnan(b)) or a == b
    return abs(a - b) <= rtol * max(abs(a), abs(b))


def _same_rank(x: tuple[float, ...], y: tuple[float, ...], rtol: float) -> bool:
    return all(close(x[RANK_VALUES.index(k)], y[RANK_VALUES.index(k)], rtol) for k in COMPARED)


def changed_ranks(original: Pass, replay: Pass, rtol: float) -> list[int]:
    """Ranks whose compared values differ between two passes of the same layout."""
    return [i for i, (x, y) in enumerate(zip(original.ranks, replay.ranks)) if not _same_rank(x, y, rtol)]


def reproduces(original: Pass, replay: Pass, rtol: float) -> bool:
    """Every rank's values and the global loss and gradient norm are the same."""
    return (not changed_ranks(original, replay, rtol) and close(original.loss, replay.loss, rtol)
            and close(original.grad_norm, replay.grad_norm, rtol))


def suspect(values: tuple[tuple[float, ...], ...], flagged: list[int] | None = None) -> int:
    """The rank most likely at fault: a non-finite value first, else the one whose loss or local gradient norm
    stands highest above the others' median (in log space: losses and norms are scales; faults push them up),
    among the ``flagged`` ranks when the fingerprints flagged some. Ties go to the lowest rank."""
    world = len(values)
    candidates = sorted(set(flagged)) if flagged else list(range(world))
    if world == 1:
        return 0

    def score(r: int) -> float:
        best = -math.inf
        for k in COMPARED:
            j = RANK_VALUES.index(k)
            x = values[r][j]
            if not math.isfinite(x):
                if math.isnan(x) and all(math.isnan(v[j]) for v in values):
                    continue  # not measured on this setup (no reduce-scatter tap): no evidence either way
                return math.inf
            others = sorted(math.log(max(v[j], 1e-30)) for i, v in enumerate(values) if i != r
                            and math.isfinite(v[j]))
            if others:
                median = others[len(others) // 2] if len(others) % 2 else (others[len(others) // 2 - 1]
                                                                             + others[len(others) // 2]) / 2
                best = max(best, math.log(max(x, 1e-30)) - median)
        return best

    return max(candidates, key=lambda r: (score(r), -r))


def partner(rank: int, world: int) -> int | None:
    """The rank that trades micro-batches with ``rank`` in the swapped pass; None with one rank."""
    return None if world < 2 else (rank + 1) % world


def swapped_order(world: int, a: int, b: int) -> tuple[int, ...]:
    """Whose micro-batches each rank runs when ``a`` and ``b`` trade theirs."""
    order = list(range(world))
    order[a], order[b] = b, a
    return tuple(order)


def classify(original: Pass, same: Pass, swapped: Pass | None, suspect_rank: int, rtol: float,
             same_anomalous: bool) -> Decision:
    """The verdict from the passes (pure). ``same_anomalous``: the replay on the same ranks is itself anomalous by
    the guard or the fingerprints (values that changed but still spike are not a transient)."""
    passes = [original, same] + ([swapped] if swapped is not None else [])
    changed = changed_ranks(original, same, rtol)
    if not reproduces(original, same, rtol) and not same_anomalous:
        who = ", ".join(f"rank {r}" for r in changed) or "the global values only"
        return Decision(TRANSIENT, suspect_rank, f"does not reproduce: replayed on the same ranks, {who} changed "
                        f"(loss {original.loss:.6g} -> {same.loss:.6g}, grad norm {original.grad_norm:.6g} -> "
                        f"{same.grad_norm:.6g})", passes, ranks=changed)
    again = "reproduces" if not changed else "is anomalous again with other values"
    if swapped is None:
        return Decision(DATA, suspect_rank, f"{again} on the same rank; with one rank there is no other to move the "
                        "batch to: taken as data", passes)
    r = suspect_rank
    p = next(i for i, o in enumerate(swapped.order) if o == r)  # the rank that ran r's micro-batches
    follows = _same_rank(swapped.ranks[p], original.ranks[r], rtol) and \
        _same_rank(swapped.ranks[r], original.ranks[p], rtol)
    after = suspect(swapped.ranks)
    values = _describe(original.ranks[r]), _describe(swapped.ranks[p]), _describe(swapped.ranks[r])
    if follows or (after == p and after != r):
        how = "the same values" if follows else "the anomaly"
        return Decision(DATA, r, f"{again}; with rank {r}'s micro-batches on rank {p}, {how} followed the batch "
                        f"(rank {r} had {values[0]}; rank {p} on that batch {values[1]})", passes, partner=p)
    return Decision(HARDWARE, r, f"{again}; with its micro-batches on rank {p} the anomaly stayed on rank {r} "
                    f"(rank {r} had {values[0]}; rank {p} on that batch {values[1]}; rank {r} on rank {p}'s "
                    f"{values[2]})", passes, partner=p, ranks=[r])


def _describe(values: tuple[float, ...]) -> str:
    return ", ".join(f"{k} {values[RANK_VALUES.index(k)]:.6g}" for k in COMPARED)


def gather_values(values: list[float], world: int, device: torch.device) -> tuple[tuple[float, ...], ...]:
    """Every rank's ``values`` (one all_gather), the same table on every rank."""
    return tuple(tuple(row) for row in gather_table(values, world, device).tolist())


def exchange(micros: list[dict[str, torch.Tensor]], peer: int, device: torch.device) -> list[dict[str, torch.Tensor]]:
    """Trade this rank's micro-batches with ``peer``'s (point to point; only the two ranks call it). Every rank's
    micro-batches have the same keys and shapes (the loader's layout), so one stacked tensor goes each way."""
    keys = sorted(micros[0])
    mine = torch.stack([torch.stack([m[k] for k in keys]) for m in micros]).to(device)  # (M, keys, B, T)
    theirs = torch.empty_like(mine)
    ops = [dist.P2POp(dist.isend, mine, peer), dist.P2POp(dist.irecv, theirs, peer)]
    for work in dist.batch_isend_irecv(ops):
        work.wait()
    theirs = theirs.cpu()
    return [{k: theirs[m, j] for j, k in enumerate(keys)} for m in range(len(micros))]


def write_faulty_ranks(output: Path, event: dict[str, Any], decision: str) -> Path:
    """Add the event's ranks to ``faulty_ranks.json`` (rank, host, device, step, evidence), atomically: the record
    an operator or launcher reads to exclude a node. Ranks already named by an earlier step are kept."""
    path = output / FAULTY_RANKS_JSON
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        faults = list(record.get("faults", []))
    except (OSError, ValueError, AttributeError):
        faults = []
    faults.append({"step": event["step"], "time": event.get("time", time.time()), "decision": decision,
                   "ranks": event["ranks"], "reason": event["reason"], "evidence": event["evidence"]})
    named: dict[int, dict[str, Any]] = {}
    for f in faults:
        for r in f["ranks"]:
            named.setdefault(r["rank"], {**r, "first_step": f["step"]})
    record = {"ranks": [named[k]["rank"] for k in sorted(named)],
              "hosts": sorted({r["host"] for r in named.values()}),
              "devices": [named[k] for k in sorted(named)], "faults": faults}
    write_atomic(path, json.dumps(record, indent=1) + "\n")
    return path
