"""One rank's run, built: its loaders, model, optimizer, logs, guard and fault hooks, and what a step hands the next."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from tokenmill.errors import TokenmillError
from tokenmill.loader import DataError, TokenLoader
from tokenmill.loader.loader import default_cache_dir
from tokenmill.train.checkpoint import CheckpointManager, ModelOptimizerState
from tokenmill.train.config import TrainConfig
from tokenmill.train.determinism import set_determinism
from tokenmill.train.disk import RunDisk
from tokenmill.train.distributed import Distributed
from tokenmill.train.errors import EveryRankError
from tokenmill.train.faults import TrainFaults
from tokenmill.train.fingerprints import Fingerprints, ReduceScatterTap, install_tap
from tokenmill.train.guard import DivergenceGuard, Verdict
from tokenmill.train.metrics import EVENTS_JSONL, METRICS_JSONL, RANKS_JSONL, JsonLines, peak_tflops
from tokenmill.train.model import Decoder
from tokenmill.train.parallelize import autocast, compute_dtype, parallelize
from tokenmill.train.report import QuietReporter, TrainReporter


def padded_vocab(vocab_size: int) -> int:
    """Rows of the embedding: the vocabulary rounded up to a multiple of 64, for fast matmuls (nanoGPT's 50304)."""
    return -(-vocab_size // 64) * 64


class Run:
    """What one process of a training job holds, shared by the loop (``trainer.py``), the step (``step.py``), the
    resume and rollback (``restore.py``) and the replay (``replay_step.py``). :meth:`build` makes it piece by piece,
    so :meth:`close` still closes what a build that failed half way opened."""

    d: Distributed
    say: TrainReporter
    """The reporter on the main rank; the others log at DEBUG (N ranks do not say each thing N times)."""
    disk: RunDisk
    metrics: JsonLines
    events: JsonLines
    ranks: JsonLines
    loader: TokenLoader
    valid: TokenLoader | None
    model: Decoder
    """OPT's or Llama's (``model.py``, ``llama.py``), as the config's ``model`` says."""
    sharded: bool
    """Several ranks: the model is FSDP2's (``parallelize.py``); one rank trains the plain module."""
    compute_dtype: torch.dtype
    accumulation: int
    """Micro-batches per step on this rank."""
    optimizer: torch.optim.Optimizer
    checkpoints: CheckpointManager
    guard: DivergenceGuard
    faults: TrainFaults | None
    """Test faults (TOKENMILL_TRAIN_FAULTS; None when unset: the step pays one ``is None`` test per hook)."""
    tap: ReduceScatterTap | None
    fingerprints: Fingerprints | None
    flops_per_token: float
    peak: float | None
    # -- what one step hands the next ------------------------------------------------------------------------------
    iterator: Iterator[dict[str, torch.Tensor]]
    """The loader's, made anew after a resume, a skip or a rollback."""
    tokens_seen: int
    keep_micros: bool
    """Replay on (``replay_step.py``): the step's micro-batches are kept until its update, for the passes that re-run
    it."""
    step_micros: list[dict[str, torch.Tensor]]
    step_batch: int
    local_loss: float
    """The mean loss of this rank's micro-batches in the last pass."""
    local_share: float
    """The largest share of one token id in any sample of this rank's micro-batches in the last pass
    (``fingerprints.top_token_share``)."""
    where: tuple[list[str], list[str]] | None
    """Every rank's host and device, once asked."""

    def __init__(self, config: TrainConfig, reporter: TrainReporter):
        self.cfg = config
        self.out = Path(config.output)
        self.reporter = reporter

    def build(self, d: Distributed) -> None:
        cfg = self.cfg
        self.d = d
        self.say = self.reporter if d.main else QuietReporter()
        self.out.mkdir(parents=True, exist_ok=True)
        set_determinism(cfg.deterministic, d.device)  # before the first CUDA matrix product
        # Every file this rank writes between checkpoints goes through it: a full disk stops all ranks together.
        self.disk = RunDisk(d, self.previous)
        self.metrics = JsonLines(self.out / METRICS_JSONL, d.main, self.disk)
        self.events = JsonLines(self.out / EVENTS_JSONL, d.main, self.disk)
        self.loader = self._train_loader()
        self.accumulation = self.loader.layout.micro_batches
        vocab = self.loader.info["vocab_size"]
        mcfg = cfg.resolved_model(vocab_size=padded_vocab(vocab))
        self.compute_dtype = compute_dtype(cfg.dtype, d.device)
        self.sharded = d.world_size > 1
        self.model = parallelize(mcfg, cfg.seed, self.compute_dtype, cfg.compile, d)
        self.faults = TrainFaults.from_env(d.rank, vocab)
        fp = cfg.fingerprints
        # The reduce-scatter tap reads (and a grad fault alters) each rank's gradient before FSDP2 reduces it.
        self.tap = install_tap(self.model) if self.sharded and (
            fp.enabled or (self.faults is not None and self.faults.plan.grad is not None)) else None
        self.fingerprints = Fingerprints(fp, d.rank, d.world_size, d.device, self.tap, self.sharded) \
            if fp.enabled else None
        self.ranks = JsonLines(self.out / RANKS_JSONL, d.main and fp.enabled, self.disk)
        self.keep_micros = cfg.faults.replay or (self.faults is not None and self.faults.plan.replay is not None)
        self.step_micros = []
        self.step_batch = -1
        self.where = None
        self.local_loss = math.nan
        self.local_share = math.nan
        self.optimizer = torch.optim.AdamW(self.model.param_groups(cfg.weight_decay), lr=cfg.lr, betas=cfg.betas,
                                           eps=cfg.eps)
        self.checkpoints = CheckpointManager(self.out / "checkpoints", keep=cfg.keep_checkpoints, progress=d.progress)
        self.guard = DivergenceGuard(cfg.guard)
        self.flops_per_token = self.model.flops_per_token(cfg.seq_len)
        self.peak = peak_tflops(d.device, cfg.peak_tflops)
        self.valid = self._valid_loader()

    def _train_loader(self) -> TokenLoader:
        cfg, d = self.cfg, self.d
        weights = cfg.weights if cfg.weights is not None else [x.weight for x in cfg.data]
        try:
            return TokenLoader(cfg.resolved_paths(), seq_len=cfg.seq_len, global_batch_size=cfg.global_batch_size,
                               micro_batch_size=cfg.micro_batch_size, seed=cfg.seed, rank=d.rank,
                               world_size=d.world_size, weights=weights, pin_memory=d.device.type == "cuda",
                               **self._loader_options())
        except TokenmillError:  # the data's own errors (a DataError is also a ValueError), as they are
            raise
        except ValueError as err:  # values of the config that this world size cannot take: the same on every rank
            raise EveryRankError(f"train config: {err}") from None

    def _valid_loader(self) -> TokenLoader | None:
        cfg, d = self.cfg, self.d
        if not cfg.eval_every:
            return None
        try:
            # Unshuffled, in this process. From an object store, in a cache folder of its own with room for its
            # own data: one folder's bound is for all its loaders, and the train loader's files fill the train one.
            base = Path(cfg.loader.cache_dir) if cfg.loader.cache_dir is not None else default_cache_dir()
            options = {**self._loader_options(), "shuffle": False, "shuffle_block": None, "num_workers": 0,
                       "cache_dir": str(base / "valid"), "cache_bytes": None, "prefetch_bytes": None}
            return TokenLoader(cfg.resolved_paths(), seq_len=cfg.seq_len, global_batch_size=cfg.global_batch_size,
                               micro_batch_size=cfg.micro_batch_size, seed=cfg.seed, rank=d.rank,
                               world_size=d.world_size, split="valid", **options)
        except (DataError, ValueError) as err:
            self.say.warn(f"no validation loss: the valid split cannot be read ({err})")
            return None

    def _loader_options(self) -> dict[str, Any]:
        # A model that masks documents needs the position ids, which restart at each document (config.py).
        return {**self.cfg.loader.model_dump(), "position_ids": self.cfg.loader_position_ids}

    def close(self) -> None:
        """The loaders' workers and threads, of a run that ended or of a build that failed half way."""
        for loader in (getattr(self, "loader", None), getattr(self, "valid", None)):
            if loader is not None:
                loader.close()

    # -- shared by the loop's helpers ----------------------------------------------------------------------------

    def autocast(self) -> torch.autocast:
        return autocast(self.d.device, self.compute_dtype, self.sharded)

    def check(self, step: int, loss_value: float, grad_norm: float) -> Verdict | None:
        """The guard's verdict on the step (counted and learnt from); None with the guard off."""
        return self.guard.check(step, loss_value, grad_norm) if self.cfg.guard.enabled else None

    def event(self, event: dict[str, Any]) -> None:
        """A line of events.jsonl (time first), also said as a note except for a resume."""
        event = {"time": time.time(), **event}
        self.events.write(event)
        if event["action"] != "resume":
            self.say.note(f"event: {json.dumps({k: v for k, v in event.items() if k != 'documents'})}")

    def app_state(self) -> dict[str, Any]:
        return {"train": ModelOptimizerState(self.model, self.optimizer)}

    def extra(self) -> dict[str, Any]:
        return {"loader": self.loader.state_dict(), "guard": self.guard.state_dict(),
                "config": json.loads(self.cfg.model_dump_json()), "tokens_seen": self.tokens_seen}

    def save(self, step: int, healthy: bool) -> None:
        """A checkpoint, once every rank knows that none holds a full disk: a checkpoint past rows that were lost
        would resume with a hole in the logs."""
        self.disk.check()
        self.checkpoints.save(step, self.app_state(), healthy=healthy, extra=self.extra())

    def previous(self) -> int | None:
        """The step of the newest committed checkpoint (what a rerun resumes from), for a full disk's message."""
        manager = getattr(self, "checkpoints", None)
        return max((c.step for c in manager.checkpoints()), default=None) if manager is not None else None
