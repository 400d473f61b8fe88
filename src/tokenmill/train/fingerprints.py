"""Per-rank fingerprints: which rank, on which host, went wrong at which step (issue 22, item 1).

Every step each rank measures, before the optimizer applies anything:

- ``loss``: the mean loss of its own micro-batches (the trainer's loss is the mean of these over ranks);
- ``grad_norm_local``: the L2 norm of the gradient its own micro-batches produced, *before* the reduction. With FSDP2
  no rank ever holds its whole gradient after the backward: the reduce-scatter averages every rank's contribution
  and leaves each rank a shard of the mean. So the local norm is read where the rank's own gradient still exists:
  the flat buffer FSDP2 hands to the reduce-scatter (``ReduceScatterTap``, one ``vector_norm`` per FSDP group on a
  contiguous buffer, on the last micro-batch, where gradients are reduced). A device that computes a bad gradient
  shows there, on its own rank, before the reduction mixes it into every shard. On one rank there is no reduction:
  the local norm is the norm of the whole gradient.
- ``grad_norm_shard``: the L2 norm of the shard of the *reduced* gradient that the rank holds (its local tensors, so
  the sum over ranks of the squares is the squared global norm the clipping uses). Shard norms are NOT comparable
  across ranks: FSDP2 shards each parameter by rows, and the token embedding's rows are token ids, so rank 0 holds
  the frequent ids and most of the embedding's gradient (on the demo's tokens, two ranks: about 0.75 against 0.15
  at every step of a healthy run). A shard is therefore judged against its own past only: its norm relative to the
  ranks' median, against that rank's recent ratios. A gradient that goes bad before the reduction raises every
  shard alike (the reduction spreads it: the ratios stay) and shows in the local norm; a rank whose ratio jumps went
  bad after the reduction (its reduction output, its memory), or the step's gradient sits in the rows it holds (a
  batch of one token repeated puts it in that token's embedding row).
- ``top_token_share``: the largest share of one token id in any of its samples (a zero- or 0xFF-filled block of a
  ``.bin`` reads as one id repeated: a share of 1). Judged on its own, not against the ranks: real text stays
  below ``max_token_share`` (0.99; code's indentation reaches 0.80 of a 128-token sample). Such a batch's gradient
  alone does not tell it from real text: one rank's local norm 9-12x its peers' at step 24 of opt-tiny on the
  demo's tokens, where heterogeneous real batches reach 11x.
- ``param_checksum`` every ``every`` steps: an integer sum of the bit patterns of the rank's parameter shard (the
  parameters this step's forward used), modulo 2**52. Any single bit flip changes it; integer sums do not depend on
  the summation order, so a rerun of the same steps, or a replay of the step, gives the same value bit for bit.

The values go to every rank in one ``all_gather`` of a small float64 tensor per step (every rank then reaches the
same verdict, which the replay of next session needs) and rank 0 appends them to ``ranks.jsonl``, one row per rank
per step. ``Detector`` flags a rank at once when a value is non-finite, when its loss or local norm is far outside
the others' spread (values of the same kind: each rank's own micro-batches), or when its shard's norm relative to the
ranks' median leaves that rank's own recent ratios; the step records it (``step._record_anomalies``), and with replay on the step is re-run and classified (``replay_step.py``).
"""

from __future__ import annotations

import math
import socket
import time
from collections import deque
from dataclasses import asdict, dataclass
from typing import Any, Callable

import numpy as np
import torch
import torch.distributed as dist
from pydantic import Field, model_validator

from tokenmill.config_base import StrictModel

#: The per-step values checked for anomalies, in the order of the gathered tensor (the checksum follows).
METRICS = ("loss", "grad_norm_local", "grad_norm_shard", "top_token_share")
#: Judged across ranks: each rank's value comes from its own micro-batches, so healthy ranks agree up to the data.
ACROSS_RANKS = ("loss", "grad_norm_local")
#: Judged against the rank's own recent values only, relative to the ranks' median (see the module doc).
OWN_SHARE = ("grad_norm_shard",)
#: Judged against a fixed bound (``max_token_share``): what the rank's samples hold, not how the model took them.
CONTENT = ("top_token_share",)
CHECKSUM_MOD = 2**52  # exact in a float64, so it travels in the same gathered tensor


class FingerprintConfig(StrictModel):
    """The ``fingerprints:`` block of a train config: per-rank values every step, and when a rank is flagged."""

    enabled: bool = True
    """Measure, gather and check every step, and write ranks.jsonl. The values never change what is trained."""
    every: int = Field(default=100, ge=1)
    """Steps between parameter checksums (the other values are taken every step)."""
    threshold: float = Field(default=6.0, gt=0)
    """A rank is flagged when its value is more than this many spreads from the others' median (in log space:
    losses and norms are scales). With the floor below, at least (1 + min_rel_spread) ** threshold times apart."""
    min_rel_spread: float = Field(default=0.25, gt=0)
    """Floor of the spread, as a relative difference (log1p of it): ranks see different samples, so their values
    differ by some tens of percent in a healthy run, and a run whose ranks agree closely must not flag noise."""
    severe: float = Field(default=12.0, gt=0)
    """A value this many spreads away or more is flagged at once; one between ``threshold`` and ``severe`` only when
    it recurs (``recurrences`` below). A gradient scaled by 1e6 is about 60 spreads away, a NaN is flagged at once;
    on real text a rank's own micro-batches alone put its local gradient norm 4-12x from its peers' now and then
    (up to 9.9 spreads in 36 clean runs of the shared data's Pile and Common Crawl tokens, once per run, on any
    rank): that is the data, not the rank."""
    recurrences: int = Field(default=3, ge=1)
    """A value between ``threshold`` and ``severe`` is flagged when it is the ``recurrences``-th of its rank and
    metric within the last ``window`` steps: a device that computes wrong does so again, a heterogeneous batch
    does not (1: every such value is flagged at once, the rule before)."""
    window: int = Field(default=16, ge=1)
    """Steps (checks) over which ``recurrences`` are counted."""
    max_token_share: float = Field(default=0.99, ge=0.5, le=1)
    """A rank whose samples hold one with more than this share of one token id is flagged at once (rule
    ``degenerate``): a block of zeros or 0xFF bytes read as tokens, or a document that is one token repeated. Real
    text comes close: a PHP file's indentation is 0.80 of a 128-token sample in GPT-2's BPE (0.46 at 2,048), in the
    shared data's Pile, Reddit and Common Crawl texts. At least 0.5: the share is measured exactly above one half."""
    history: int = Field(default=16, ge=3)
    """Recent values kept per rank and metric. A shard's norm relative to the ranks' median is judged against its
    rank's last ``history`` ratios (from the fourth step on); a ratio ``severe`` spreads away, or of a rank flagged
    by another rule, stays out, a moderate one joins (a shard's share drifts as training goes, and a history that
    froze would flag the drift at every step). With two ranks there is no spread of the
    others (one value, and the rule is symmetric: each is as far from the other): their difference is judged
    against its last ``history`` values (a lasting difference is learnt), and when it is flagged the one named is
    the one further from its own recent values, the rank that moved, not its healthy peer; both are named while
    either has fewer than three (the first steps of a run), and those values still join the history, so a run
    whose first steps disagree learns each rank's level instead of naming both at every step."""

    @model_validator(mode="after")
    def _severe_not_below_threshold(self) -> "FingerprintConfig":
        if self.severe < self.threshold:
            raise ValueError(f"severe ({self.severe}) must be at least threshold ({self.threshold}): a value is "
                             "flagged at once from severe spreads, when it recurs from threshold")
        return self


@dataclass(frozen=True, slots=True)
class Anomaly:
    """One value of one rank at one step that is non-finite or far outside the others' spread."""

    step: int
    rank: int
    host: str
    device: str
    metric: str
    rule: str
    """``non_finite``; ``outlier`` (more than ``threshold`` spreads from the others' median); ``departure`` (a
    shard's norm relative to the ranks' median more than ``threshold`` spreads from that rank's recent ratios); or
    ``degenerate`` (a sample with more than ``max_token_share`` of one token id)."""
    value: float
    reference: float | None
    """The others' median (the other rank's value with two ranks); for a ``departure``, the rank's usual ratio to
    the ranks' median (its recent median)."""
    score: float | None
    """Distance from the reference in spreads (log space)."""
    values: tuple[float, ...]
    """Every rank's value of this metric at this step."""

    def describe(self) -> str:
        if self.rule == "non_finite":
            return f"{self.metric} {self.value} is not finite"
        if self.rule == "degenerate":
            return (f"{self.metric} {self.value:.3g}: a sample is {self.value:.0%} one token id, against at most "
                    f"{self.reference:.0%} allowed (a block of zeros or 0xFF bytes read as tokens?)")
        if self.rule == "departure":
            # The ranks' median as the detector takes it: in log space (two middle values: their geometric mean)
            median = math.exp(float(np.median(np.log(np.maximum(self.values, 1e-30)))))
            now = self.value / median
            return (f"{self.metric} {self.value:.4g} is {now:.3g}x the ranks' median, against its usual "
                    f"{self.reference:.3g}x ({self.score:.1f} spreads)")
        return f"{self.metric} {self.value:.4g} vs the others' {self.reference:.4g} ({self.score:.1f} spreads)"


class Detector:
    """Flags ranks from the gathered values; the same on every rank (it sees the same values in the same order)."""

    def __init__(self, cfg: FingerprintConfig, world_size: int, skip: tuple[str, ...] = ()):
        self.cfg, self.skip = cfg, skip
        self.history = [[deque(maxlen=cfg.history) for _ in METRICS] for _ in range(world_size)]
        """Per rank and metric, recent values as judged, unflagged or a shard's moderate departure (log; a shard's
        relative to the ranks' median)."""
        self.own = [[deque(maxlen=cfg.history) for _ in METRICS] for _ in range(world_size)]
        """Per rank and metric, a shard's own recent log norms (which of two ranks moved)."""
        self.gaps = [deque(maxlen=cfg.history) for _ in METRICS]
        """Per metric, with two ranks: their recent unflagged differences (log ratio, rank 0's over rank 1's)."""
        self.suspects = [[deque() for _ in METRICS] for _ in range(world_size)]
        """Per rank and metric, the checks at which a value was between ``threshold`` and ``severe`` spreads away,
        within the last ``window``: such a value is flagged only as the ``recurrences``-th."""
        self.checks = 0

    def check(self, values: np.ndarray) -> list[tuple[int, str, str, float, float | None, float | None]]:
        """``values``: (world, len(METRICS)). Returns (rank, metric, rule, value, reference, score) per flag: every
        non-finite value and every value ``severe`` spreads away, and a value between ``threshold`` and ``severe``
        when it recurs. Adds every finite value within ``threshold`` (a shard's relative to the ranks' median) to its
        rank's history: one beyond it stays out, flagged or not, so that a rank going bad is not learnt."""
        self.checks += 1
        return [f for f in self._beyond_threshold(values) if self._confirmed(f)]

    def _confirmed(self, flag: tuple[int, str, str, float, float | None, float | None]) -> bool:
        """Whether a value beyond ``threshold`` is a flag: at once when not finite or ``severe``, else only as the
        ``recurrences``-th of its rank and metric within ``window`` checks."""
        rank, metric, rule, _, _, score = flag
        if rule in ("non_finite", "degenerate") or score is None or score >= self.cfg.severe:
            return True
        seen = self.suspects[rank][METRICS.index(metric)]
        seen.append(self.checks)
        while seen[0] <= self.checks - self.cfg.window:
            seen.popleft()
        return len(seen) >= self.cfg.recurrences

    def _beyond_threshold(self, values: np.ndarray) -> list[tuple[int, str, str, float, float | None, float | None]]:
        """Every value beyond ``threshold`` (or not finite), as ``check`` returns flags; the history as ``check``
        says."""
        floor = math.log1p(self.cfg.min_rel_spread)
        flags: list[tuple[int, str, str, float, float | None, float | None]] = []
        for j, metric in enumerate(METRICS):
            if metric in self.skip:
                continue
            x = values[:, j]
            finite = np.isfinite(x)
            flagged: set[int] = set()
            if metric in OWN_SHARE and not finite.all() and self._spread_from_a_local(values):
                continue  # a rank's non-finite gradient, spread to every shard by the reduction: its local names it
            if metric in CONTENT:
                bound = self.cfg.max_token_share
                flags += [(r, metric, "degenerate", float(x[r]), bound, None) for r in np.nonzero(x > bound)[0].tolist()]
                continue  # not finite: not measured (a pass that had no samples of its own)
            for r in np.nonzero(~finite)[0].tolist():
                flags.append((r, metric, "non_finite", float(x[r]), None, None))
                flagged.add(r)
            if metric in OWN_SHARE:
                if finite.all() and len(x) > 1:  # one rank's shard is the whole gradient: nothing to compare
                    self._check_shards(j, metric, x, floor, flags, flagged)
                continue
            ok = np.nonzero(finite)[0]
            y = np.log(np.maximum(x, 1e-30))
            if len(ok) == 2:
                learn = self._check_pair(j, metric, x, y, ok.tolist(), floor, flags, flagged)
            else:
                learn = set()
                if len(ok) >= 3:
                    self._check_spread(metric, x, y, ok, floor, flags, flagged)
            for r in ok.tolist():
                if r not in flagged or r in learn:
                    self.history[r][j].append(float(y[r]))
        return flags

    def _spread_from_a_local(self, values: np.ndarray) -> bool:
        """Some rank's local norm (measured here) is not finite: the shards' non-finite values came from it."""
        if "grad_norm_local" in self.skip:
            return False
        return not np.isfinite(values[:, METRICS.index("grad_norm_local")]).all()

    def _check_spread(self, metric: str, x: np.ndarray, y: np.ndarray, ok: np.ndarray, floor: float,
                      flags: list, flagged: set[int]) -> None:
        """Three ranks or more: each against the others' median and MAD (log space)."""
        for r in ok.tolist():
            others = y[ok[ok != r]]
            m = float(np.median(others))
            spread = max(1.4826 * float(np.median(np.abs(others - m))), floor)
            score = abs(y[r] - m) / spread
            if score > self.cfg.threshold:
                flags.append((r, metric, "outlier", float(x[r]), math.exp(m), round(score, 2)))
                flagged.add(r)

    def _check_pair(self, j: int, metric: str, x: np.ndarray, y: np.ndarray, pair: list[int], floor: float,
                    flags: list, flagged: set[int]) -> set[int]:
        """Two ranks: the other one is no spread, so their difference (log ratio) is judged against its own recent
        values: a lasting difference is learnt, a new one is flagged (before three such values, against none: more
        than ``threshold`` floors apart). Which one moved is told by each one's departure from its own recent
        values; both are named while either has none yet, and the ranks named for want of a history are returned:
        their values still join it."""
        a, b = pair
        gap = float(y[a] - y[b])
        past = np.asarray(self.gaps[j])
        if len(past) < 3:
            usual, spread = 0.0, floor
        else:
            usual = float(np.median(past))
            spread = max(1.4826 * float(np.median(np.abs(past - usual))), floor)
        score = abs(gap - usual) / spread
        if score <= self.cfg.threshold:
            self.gaps[j].append(gap)
            return set()
        moved = [self._departure(r, j, y[r], floor) for r in (a, b)]
        unknown = None in moved
        named = (a, b) if unknown else ((a,) if moved[0] >= moved[1] else (b,))
        for r in named:
            other = b if r == a else a
            flags.append((r, metric, "outlier", float(x[r]), float(x[other]), round(score, 2)))
            flagged.add(r)
        if unknown:  # the first steps: learn this difference rather than name both ranks at every step
            self.gaps[j].append(gap)
        return set(named) if unknown else set()

    def _check_shards(self, j: int, metric: str, x: np.ndarray, floor: float, flags: list, flagged: set[int]) -> None:
        """Each rank's shard norm relative to the ranks' median (log space), against that rank's own recent relative
        values: a rank's lasting offset (the frequent token ids' rows on rank 0) is learnt, a global change (every
        shard alike) cancels, and one rank's jump moves the median of three or more little. With two ranks the
        median is the mean, so both move alike: the one named is the one whose own norm left its recent norms more
        (both while unknown). None judged before three values."""
        y = np.log(np.maximum(x, 1e-30))
        rel = y - float(np.median(y))
        departs = {}
        for r in range(len(x)):
            score = self._departure(r, j, float(rel[r]), floor)
            if score is not None and score > self.cfg.threshold:
                departs[r] = score
        if len(x) == 2 and len(departs) == 2:
            own = [self._departure(r, j, float(y[r]), floor, self.own) for r in (0, 1)]
            if None not in own:
                departs = {r: departs[r] for r in ((0,) if own[0] >= own[1] else (1,))}
        before = set(flagged)  # flagged by another rule at this step
        for r in range(len(x)):
            if r in departs:
                usual = float(np.median(np.asarray(self.history[r][j])))
                flags.append((r, metric, "departure", float(x[r]), math.exp(usual), round(departs[r], 2)))
                flagged.add(r)
            # A moderate departure (below `severe`) still joins the history: a shard's share of the norm drifts as
            # training goes (rank 0's frequent-token rows: 13x the median at step 15, 2x by step 35, on the demo's
            # tokens at 8 ranks), and a history that left out each moved value would freeze at the old level and
            # flag the drift step after step. A fault that persists is flagged again before the median moves: the
            # `recurrences`-th within `window` is confirmed while the first few of `history` values have joined.
            if r not in before and departs.get(r, 0.0) < self.cfg.severe:
                self.history[r][j].append(float(rel[r]))
                self.own[r][j].append(float(y[r]))

    def _departure(self, rank: int, j: int, y: float, floor: float, history: list | None = None) -> float | None:
        """How far ``rank``'s value is from its own recent values (``history``, default the judged
        values'), in their spreads; None with fewer than three of them."""
        h = np.asarray((history or self.history)[rank][j])
        if len(h) < 3:
            return None
        m = float(np.median(h))
        return abs(y - m) / max(1.4826 * float(np.median(np.abs(h - m))), floor)


def top_token_share(input_ids: torch.Tensor) -> float:
    """The largest share of one token id in any sample (row) of ``input_ids`` (batch, seq), exact wherever it is above
    one half (an id that fills more than half a sample is its median); below, the share of each sample's median id,
    a lower bound. NaN for no sample. The median, not the mode: 0.36 ms against 2.3 ms for 8 samples of 2,048 tokens
    on this machine's CPU, in every step's loop."""
    if input_ids.numel() == 0:
        return math.nan
    rows = input_ids.reshape(input_ids.shape[0], -1)
    median = rows.median(dim=1).values
    return float((rows == median[:, None]).sum(dim=1).max()) / rows.shape[1]


_CHUNK = 2**20  # words per float64 partial sum: |sum| < 2**31 * 2**20 = 2**51, an exact integer in a float64


def param_checksum(params: list[torch.Tensor]) -> int:
    """An integer sum of the parameters' bit patterns (as int16/int32/int64 words), modulo 2**52: exact, and the same
    whatever the summation order or device.

    Summed in float64 by chunks of 2**20 words: every partial sum is then an integer below 2**53, so each addition is
    exact in any order, and a float sum is vectorised where an int64 one is not (about 2.5x faster on CPU)."""
    total = 0
    words = {2: torch.int16, 4: torch.int32, 8: torch.int64}
    for p in params:
        t = _local(p.detach())
        if t.numel() == 0:
            continue
        w = t.reshape(-1).view(words[t.element_size()])
        if w.dtype == torch.int64:  # 8-byte words do not fit a float64 exactly
            total += int(w.sum())
            continue
        sums = torch.stack([c.sum(dtype=torch.float64) for c in w.split(_CHUNK)])
        total += int(sums.to(torch.int64).sum())
    return total % CHECKSUM_MOD


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if hasattr(t, "to_local") else t


def _norm(tensors: list[torch.Tensor]) -> float:
    if not tensors:
        return 0.0
    norms = torch._foreach_norm(tensors)
    return float(torch.linalg.vector_norm(torch.stack([n.to(torch.float64) for n in norms])))


def grad_shard_norm(params: list[torch.nn.Parameter]) -> float:
    """The norm of this rank's local gradients (its shard, with FSDP2), in float64."""
    return _norm([_local(p.grad) for p in params if p.grad is not None])


def gather_table(values: list[float], world_size: int, device: torch.device) -> np.ndarray:
    """Every rank's ``values`` in one all_gather of a float64 tensor: (world, len(values)), the same on every rank."""
    mine = torch.tensor(values, dtype=torch.float64, device=device)
    if world_size == 1:
        return mine.cpu().numpy()[None, :]
    parts = [torch.empty_like(mine) for _ in range(world_size)]
    dist.all_gather(parts, mine)
    return torch.stack(parts).cpu().numpy()


def rank_places(world_size: int, device: torch.device) -> tuple[list[str], list[str]]:
    """Every rank's host and device (with the GPU's name on CUDA): one all_gather_object on several ranks."""
    name = str(device)
    if device.type == "cuda":
        name += f" ({torch.cuda.get_device_name(device)})"
    everyone: list[Any] = [(socket.gethostname(), name)]
    if world_size > 1:
        everyone = [None] * world_size
        dist.all_gather_object(everyone, (socket.gethostname(), name))
    return [h for h, _ in everyone], [dv for _, dv in everyone]


try:  # FSDP2's default reduce-scatter: a public hook (``set_custom_reduce_scatter``) over a private class
    from torch.distributed.fsdp._fully_shard._fsdp_collectives import DefaultReduceScatter as _BaseReduceScatter
except ImportError:  # pragma: no cover - another torch: no local (pre-reduction) norm on several ranks
    _BaseReduceScatter = None


class ReduceScatterTap(_BaseReduceScatter or object):  # type: ignore[misc]
    """FSDP2's reduce-scatter, with a look at its input first: the gradient this rank's micro-batches produced,
    flattened, before any other rank's is added. ``corrupt`` (fault injection) may alter it; ``measure`` adds its
    squared norm to ``squared`` (a tensor on the device, read once per step, so no extra synchronisation)."""

    def __init__(self) -> None:
        super().__init__()
        self.measure = False
        self.corrupt: Callable[[list[torch.Tensor]], None] | None = None
        self.squared: torch.Tensor | None = None
        self.seconds = 0.0

    def __call__(self, output_tensor, input_tensor, group, op, async_op=False):
        if self.corrupt is not None:
            self.corrupt([input_tensor])
        if self.measure:
            t0 = time.perf_counter()
            sq = torch.linalg.vector_norm(input_tensor, dtype=torch.float32).to(torch.float64).square()
            self.squared = sq if self.squared is None else self.squared + sq
            self.seconds += time.perf_counter() - t0
        return super().__call__(output_tensor=output_tensor, input_tensor=input_tensor, group=group, op=op,
                                async_op=async_op)

    def take(self) -> float:
        """The squared local norm gathered since the last call (0 when no reduce-scatter ran), and reset."""
        value = 0.0 if self.squared is None else float(self.squared)
        self.squared = None
        return value


def install_tap(model: torch.nn.Module) -> ReduceScatterTap | None:
    """One tap as the reduce-scatter of every FSDP2 module of ``model``; None where this torch has no such hook."""
    from torch.distributed.fsdp import FSDPModule

    if _BaseReduceScatter is None:
        return None
    tap = ReduceScatterTap()
    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.set_custom_reduce_scatter(tap)
    return tap


class Fingerprints:
    """One rank's fingerprints: measure after the backward, gather, flag. Built on every rank (it gathers the
    hosts and devices once, a collective)."""

    def __init__(self, cfg: FingerprintConfig, rank: int, world_size: int, device: torch.device,
                 tap: ReduceScatterTap | None, sharded: bool):
        self.cfg, self.rank, self.world_size, self.device = cfg, rank, world_size, device
        self.tap, self.sharded = tap, sharded
        self.hosts, self.devices = rank_places(world_size, device)
        # A torch without FSDP2's reduce-scatter hook: no local norm on several ranks (NaN), and not checked.
        self.detector = Detector(cfg, world_size, ("grad_norm_local",) if sharded and tap is None else ())
        self.seconds = 0.0

    def begin_step(self) -> None:
        if self.tap is not None:
            self.tap.measure = True
            self.tap.seconds = 0.0
        self.seconds = 0.0

    def shard_norm(self, params: list[torch.nn.Parameter]) -> float:
        """The norm of this rank's shard of the reduced gradient; before clipping scales it. Several ranks only: on
        one rank it is the norm that clipping computes anyway (``local``'s ``shard``)."""
        t0 = time.perf_counter()
        value = grad_shard_norm(params)
        self.seconds += time.perf_counter() - t0
        return value

    def local(self, step: int, loss: float, params: list[torch.nn.Parameter], shard: float, share: float
              ) -> list[float]:
        """This rank's values: loss, local and shard norms (``shard``: ``shard_norm``, or on one rank the clipping's
        total norm, the same value at no cost), its samples' ``top_token_share``, and the checksum or NaN."""
        t0 = time.perf_counter()
        if self.sharded:
            local = math.nan  # no tap on this torch: not measured
            if self.tap is not None:
                local = math.sqrt(self.tap.take())
                self.tap.measure = False
                self.seconds += self.tap.seconds
        else:
            local = shard  # one rank: no reduction, its gradient is the whole gradient
        checksum = float(param_checksum(params)) if step % self.cfg.every == 0 else math.nan
        self.seconds += time.perf_counter() - t0
        return [loss, local, shard, share, checksum]

    def gather(self, step: int, values: list[float], rows: bool = True) -> tuple[list[dict[str, Any]], list[Anomaly]]:
        """Every rank's values (one all_gather), their ranks.jsonl rows (none unless ``rows``: only the rank that
        writes ranks.jsonl needs them), and the anomalies found."""
        t0 = time.perf_counter()
        table = gather_table(values, self.world_size, self.device)
        found = self.detector.check(table[:, :len(METRICS)])
        anomalies = [Anomaly(step, r, self.hosts[r], self.devices[r], metric, rule, value, ref, score,
                             tuple(float(v) for v in table[:, METRICS.index(metric)]))
                     for r, metric, rule, value, ref, score in found]
        if not rows:
            self.seconds += time.perf_counter() - t0
            return [], anomalies
        flagged: dict[int, list[str]] = {}
        for a in anomalies:
            flagged.setdefault(a.rank, []).append(a.metric)
        table_rows = []
        for r in range(self.world_size):
            row: dict[str, Any] = {"step": step, "rank": r, "host": self.hosts[r], "device": self.devices[r]}
            row.update({m: float(table[r, j]) for j, m in enumerate(METRICS)})
            checksum = table[r, len(METRICS)]
            row["param_checksum"] = None if math.isnan(checksum) else int(checksum)
            if r in flagged:
                row["flagged"] = flagged[r]
            table_rows.append(row)
        self.seconds += time.perf_counter() - t0
        return table_rows, anomalies


def anomaly_event(step: int, anomalies: list[Anomaly]) -> list[dict[str, Any]]:
    """events.jsonl records: one ``rank_anomaly`` per flagged rank, with every flagged value and all ranks' values."""
    by_rank: dict[int, list[Anomaly]] = {}
    for a in anomalies:
        by_rank.setdefault(a.rank, []).append(a)
    events = []
    for rank, found in sorted(by_rank.items()):
        events.append({"step": step, "action": "rank_anomaly", "rank": rank, "host": found[0].host,
                       "device": found[0].device,
                       "metrics": {a.metric: {k: v for k, v in asdict(a).items()
                                              if k in ("rule", "value", "reference", "score", "values")}
                                   for a in found},
                       "reason": "; ".join(a.describe() for a in found)})
    return events
