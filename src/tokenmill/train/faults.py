"""Fault injection for the trainer's fault tests (issue 22); inert unless switched on.

Switched on by the environment variable ``TOKENMILL_TRAIN_FAULTS``, the path of a JSON file read once when a rank
builds its trainer (``TrainFaults.from_env``). Unset, every hook is skipped: the trainer holds ``None`` and pays one
``is None`` test per step. A file that is missing or does not parse stops the run at once, naming the variable: a
fault test that silently injected nothing would pass for the wrong reason. The file holds any of:

```
{"grad":   {"rank": 1, "step": 5, "mode": "once", "kind": "scale", "factor": 1e6},
 "sleep":  {"rank": 1, "step": 7},
 "poison": {"batch": 9, "samples": [6, 11], "tokens": 255},
 "log": "/tmp/x/injected.jsonl"}
```

- ``grad``: the rank returns a corrupted gradient, as a device with a fault in its arithmetic or memory would: the
  gradient its own micro-batches produced is multiplied by ``factor`` (``kind: scale``) or set to NaN
  (``kind: nan``) before it enters the reduction. On several ranks that is the flat buffer FSDP2 hands to the
  reduce-scatter (``fingerprints.ReduceScatterTap``), so the reduction spreads it as it would spread a real one; on
  one rank, every ``.grad`` after the backward. ``mode: once`` fires at ``step`` only, the first time this process
  runs it: the original pass, so its replays (``replay.py``) run clean, a transient fault; ``mode: always`` fires at
  every step from ``step`` on, in every pass, whatever the batch (a persistent fault, tied to the rank).
- ``sleep``: the rank sleeps at the start of ``step`` (before its first micro-batch), forever unless ``seconds``
  is given. Its peers wait in their next collective: a hang, for the watchdog.
- ``poison``: the samples ``samples`` (first and last position inside the global batch, inclusive; the whole
  batch when left out) of global batch ``batch`` are replaced by bad tokens before the forward: ``tokens`` one id
  repeated (what a zero- or 0xFF-filled block of a ``.bin`` decodes to) or ``"random"`` (ids drawn uniformly from
  the vocabulary, garbage bytes, seeded by the batch and the sample). The poison is keyed by the data (global batch
  and position), not by the rank: whichever rank serves those samples, in whatever layout, world size or replay,
  gets the same tokens. That is what a data fault is, and what the replay must tell apart from a device fault,
  which follows the rank. Scaling one rank's logits would be a fault of the rank, not of the data. The trainer keeps
  the poisoned micro-batches of the step for its replays, so the swapped replay moves the poison to the other rank.
- ``replay``: no fault: ``{"step": 4, "rank": 0}`` replays that healthy step as an anomalous one would be (with
  ``rank``'s micro-batches swapped first, then on the same ranks), and writes a ``replay_probe`` event with each
  pass's values; the test that a replay is exact, bit for bit.
- ``log``: one JSON line per fault injected (fault, rank, step, ...), flushed, so tests see what fired and when.

Megatron-LM's ``RerunErrorInjector`` injects into the validated value (the loss) at a random rate; faults here are
placed at a given step and rank or batch, so a test can name the rank, the step and the documents it expects.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any, Literal

import numpy as np
import torch
from pydantic import Field, ValidationError, model_validator

from tokenmill.errors import ConfigError
from tokenmill.config_base import StrictModel
from tokenmill.train.fingerprints import ReduceScatterTap

ENV = "TOKENMILL_TRAIN_FAULTS"


class GradFault(StrictModel):
    """A rank whose gradient is corrupted before the reduction."""

    rank: int = Field(ge=0)
    """The rank that returns the corrupted gradient."""
    step: int = Field(ge=1)
    """The (first) step at which it does."""
    mode: Literal["once", "always"] = "once"
    """once: at ``step`` only, the first time this process runs it; always: at every step from ``step`` on."""
    kind: Literal["scale", "nan"] = "scale"
    """scale: multiplied by ``factor``; nan: every element set to NaN."""
    factor: float = 1e6
    """The multiplier of ``kind: scale``."""


class SleepFault(StrictModel):
    """A rank that stops at a step: its peers wait in their next collective."""

    rank: int = Field(ge=0)
    """The rank that sleeps."""
    step: int = Field(ge=1)
    """It sleeps at the start of this step, before its first micro-batch."""
    seconds: float | None = Field(default=None, gt=0)
    """How long; None: forever."""


class PoisonFault(StrictModel):
    """Bad tokens in some samples of one global batch, whichever rank serves them."""

    batch: int = Field(ge=0)
    """The global batch index (metrics.jsonl's ``batch``)."""
    samples: tuple[int, int] | None = None
    """First and last position inside the global batch (inclusive); None: every sample of the batch."""
    tokens: int | Literal["random"] = "random"
    """One token id repeated, or ids drawn uniformly from the vocabulary (seeded by batch and sample)."""

    @model_validator(mode="after")
    def _order(self) -> "PoisonFault":
        if self.samples is not None and not 0 <= self.samples[0] <= self.samples[1]:
            raise ValueError(f"samples {list(self.samples)}: give [first, last] with 0 <= first <= last")
        if isinstance(self.tokens, int) and self.tokens < 0:
            raise ValueError(f"tokens {self.tokens}: a token id is >= 0")
        return self


class ReplayProbe(StrictModel):
    """No fault: a healthy step replayed on demand, as an anomalous one would be (the test that a replay is exact)."""

    step: int = Field(ge=1)
    """The step replayed (once per process): on the same ranks, and first with ``rank``'s micro-batches swapped."""
    rank: int = Field(default=0, ge=0)
    """The rank whose micro-batches trade places with those of ``(rank + 1) % world`` in the swapped pass."""


class FaultPlan(StrictModel):
    """The JSON file that ``TOKENMILL_TRAIN_FAULTS`` names."""

    grad: GradFault | None = None
    sleep: SleepFault | None = None
    poison: PoisonFault | None = None
    replay: ReplayProbe | None = None
    log: str | None = None
    """A JSON-lines file: one line per fault injected."""


class TrainFaults:
    """One rank's view of the plan: the hooks the trainer calls, each a no-op unless the plan names this rank or
    the batch at hand."""

    def __init__(self, plan: FaultPlan, rank: int, vocab_size: int | None = None):
        self.plan, self.rank, self.vocab_size = plan, rank, vocab_size
        self._fired: set[tuple[str, int]] = set()
        self.host = os.uname().nodename

    @classmethod
    def from_env(cls, rank: int, vocab_size: int | None = None) -> "TrainFaults | None":
        """The plan named by ``TOKENMILL_TRAIN_FAULTS``, or None when it is unset (the trainer then skips every
        hook). Raises ConfigError for a file that cannot be read or is not a valid plan."""
        path = os.environ.get(ENV)
        if not path:
            return None
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
        except (OSError, json.JSONDecodeError) as err:
            raise ConfigError(f"{ENV}={path}: cannot read the fault plan: {err}") from None
        try:
            plan = FaultPlan.model_validate(data)
        except ValidationError as err:
            lines = [f"  {'.'.join(map(str, e['loc']))}: {e['msg']}" for e in err.errors()]
            raise ConfigError(f"{ENV}={path}: invalid fault plan:\n" + "\n".join(lines)) from None
        return cls(plan, rank, vocab_size)

    # -- hooks ---------------------------------------------------------------------------------------------------

    def grad_due(self, step: int) -> bool:
        """Whether this rank corrupts its gradient at ``step`` (the trainer arms the hook for that step only)."""
        spec = self.plan.grad
        if spec is None or spec.rank != self.rank or step < spec.step:
            return False
        if spec.mode == "once":
            return step == spec.step and ("grad", step) not in self._fired
        return True

    def corrupt(self, step: int, grads: list[torch.Tensor]) -> None:
        """Corrupt ``grads`` in place (the reduce-scatter's input buffer, or every ``.grad`` on one rank)."""
        spec = self.plan.grad
        assert spec is not None  # only called when grad_due() said so
        with torch.no_grad():
            for g in grads:
                if spec.kind == "nan":
                    g.fill_(float("nan"))
                else:
                    g.mul_(spec.factor)
        if ("grad", step) not in self._fired:
            self._fired.add(("grad", step))
            self._log({"fault": "grad", "step": step, "kind": spec.kind, "factor": spec.factor, "mode": spec.mode})

    def arm(self, step: int, tap: ReduceScatterTap | None) -> None:
        """The grad fault for this pass of ``step``: a reduce-scatter that corrupts this rank's gradient, or none
        (``once`` has fired in the original pass, so a replay runs clean; ``always`` fires in every pass)."""
        if tap is not None:
            tap.corrupt = (lambda grads: self.corrupt(step, grads)) if self.grad_due(step) else None

    def corrupt_untapped(self, step: int, tap: ReduceScatterTap | None, params: list[torch.nn.Parameter]) -> None:
        """The grad fault where no reduce-scatter tap carries it (one rank): every ``.grad`` after the backward."""
        if tap is None and self.grad_due(step):
            self.corrupt(step, [p.grad for p in params if p.grad is not None])

    def replay_due(self, step: int) -> bool:
        """Whether to replay ``step`` though it is healthy (the ``replay`` probe), the first time this process runs it."""
        spec = self.plan.replay
        if spec is None or spec.step != step or ("replay", step) in self._fired:
            return False
        self._fired.add(("replay", step))
        self._log({"fault": "replay", "step": step})
        return True

    def before_step(self, step: int) -> None:
        """The sleep fault: stop this rank at the start of ``step``."""
        spec = self.plan.sleep
        if spec is None or spec.rank != self.rank or spec.step != step or ("sleep", step) in self._fired:
            return
        self._fired.add(("sleep", step))
        self._log({"fault": "sleep", "step": step, "seconds": spec.seconds})
        if spec.seconds is not None:
            time.sleep(spec.seconds)
            return
        while True:  # forever: only a signal ends it
            time.sleep(3600)

    def poison(self, step: int, batch: int, first: int, micro: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """``micro`` (samples ``first ..`` of global batch ``batch``) with the poisoned samples replaced."""
        spec = self.plan.poison
        if spec is None or spec.batch != batch:
            return micro
        ids = micro["input_ids"]
        n = ids.shape[0]
        lo, hi = spec.samples if spec.samples is not None else (0, 10**18)
        rows = [i for i in range(n) if lo <= first + i <= hi]
        if not rows:
            return micro
        ids, labels = ids.clone(), micro["labels"].clone()
        for i in rows:
            seq = poison_tokens(spec, batch, first + i, ids.shape[1] + 1, self.vocab_size)
            ids[i], labels[i] = seq[:-1], seq[1:]
        self._log({"fault": "poison", "step": step, "batch": batch, "samples": [first + i for i in rows]})
        return {**micro, "input_ids": ids, "labels": labels}

    def _log(self, event: dict[str, Any]) -> None:
        path = self.plan.log
        if path:
            with open(path, "a", encoding="utf-8") as f:
                f.write(json.dumps({**event, "rank": self.rank, "host": self.host, "pid": os.getpid()}) + "\n")
                f.flush()
                os.fsync(f.fileno())


def poison_tokens(spec: PoisonFault, batch: int, sample: int, length: int, vocab_size: int | None) -> torch.Tensor:
    """The ``length`` tokens that replace sample ``sample`` of global batch ``batch``: a function of the data's
    position alone (never of the rank), so the poison follows the batch to whichever rank serves it."""
    if spec.tokens != "random":
        return torch.full((length,), int(spec.tokens), dtype=torch.int64)
    if not vocab_size:
        raise ConfigError(f"{ENV}: poison tokens 'random' needs the vocabulary size")
    rng = np.random.default_rng([batch, sample, 0x7031])  # keyed by the position: the same on every rank
    return torch.from_numpy(rng.integers(0, vocab_size, size=length, dtype=np.int64))
