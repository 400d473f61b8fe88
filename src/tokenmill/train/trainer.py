"""The training loop: build the run, resume it, then step, log, evaluate and checkpoint until the last step.

One ``Trainer.run()`` is one process of a job (torchrun starts several; one process works alone). Its parts, each in
its own module: the built run (``run.py``: loaders, model, optimizer, logs), the model sharded with FSDP2 over the
device mesh (``parallelize.py``), one step (``step.py``: gradients, fingerprints, the guard's verdict or a replay),
the resume and the rollback after a spike (``restore.py``: a spike is never applied; the run goes back to the newest
healthy checkpoint, cuts the learning rate and skips the offending batches), the replay of an anomalous step
(``replay_step.py``, its verdict ``replay.py``) and the hang watchdog (``watchdog.py``).
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any, Callable

import torch

from tokenmill.errors import TokenmillError
from tokenmill.loader.batches import parse_ranges
from tokenmill.train.atomic import write_atomic
from tokenmill.train.config import TrainConfig
from tokenmill.train.determinism import explained
from tokenmill.train.distributed import Distributed, setup
from tokenmill.train.errors import DiskFullError, disk_full_message, full_errno
from tokenmill.train.guard import Verdict
from tokenmill.train.launch import note_error
from tokenmill.train.metrics import EVENTS_JSONL, METRICS_JSONL
from tokenmill.train.report import LogReporter, TrainReporter
from tokenmill.train.restore import resume, rollback
from tokenmill.train.run import Run
from tokenmill.train.step import train_step
from tokenmill.train.watchdog import Watchdog

# Test and fault-injection hook: SIGKILL this process right after the given step (and its checkpoint) completes.
KILL_AFTER_STEP_ENV = "TOKENMILL_KILL_AFTER_STEP"


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

    def run(self) -> dict[str, Any]:
        """Train to ``steps`` (resuming from the output's newest checkpoint): the run's summary."""
        d = setup()
        run = Run(self.cfg, self.reporter)
        try:
            return self._train(run, d)
        except OSError as err:  # any write that no guard above caught: a full disk is still one line and exit 74
            code = full_errno(err)
            if code is None:
                raise
            what, folder = (Path(err.filename).name, Path(err.filename).parent) if isinstance(err.filename, str) \
                else ("a file", self.out)
            full = DiskFullError(disk_full_message(what, folder, code, "the run stopped", run.previous()),
                                 every_rank=False)  # met by this rank alone, which says it
            note_error(full, d.rank, d.world_size)
            raise full from err
        except TokenmillError as err:
            note_error(err, d.rank, d.world_size)  # rank 0 says an error every rank shares; the others stay quiet
            raise
        except RuntimeError as err:
            refused = explained(err)  # an operation with no deterministic kernel: name the option
            if refused is None:
                raise
            note_error(refused, d.rank, d.world_size)
            raise refused from err
        finally:
            run.close()
            d.close()

    def _train(self, run: Run, d: Distributed) -> dict[str, Any]:
        """The loop: one step at a time to ``steps``, a spike rolled back, the rest logged and checkpointed."""
        cfg = self.cfg
        step = self._start(run, d)
        kill_after = int(os.environ.get(KILL_AFTER_STEP_ENV, "0") or 0)
        started, first_step = time.perf_counter(), step
        last: dict[str, Any] = {}
        first_loss = None
        run.model.train()
        run.say.start(cfg.steps, step)
        watchdog = Watchdog.start(cfg.watchdog, d, self.out, run.model, compiled=cfg.compile)  # hangs: watchdog.py
        try:  # a live display must not outlive a failed run
            while step < cfg.steps:
                watchdog.begin(step + 1)
                row, verdict = train_step(run, step + 1)
                watchdog.done(step + 1)
                if verdict is not None and verdict.spike:
                    step = self._roll_back(run, verdict, row)
                    continue
                step += 1
                first_loss = row["loss"] if first_loss is None else first_loss
                last = self._log(run, step, row)
                if step % cfg.checkpoint_every == 0 or step == cfg.steps:
                    run.save(step, healthy=True)  # a spike is never applied: every step kept is healthy
                run.say.step(step, row)
                if kill_after and step >= kill_after:
                    os.kill(os.getpid(), signal.SIGKILL)
        finally:
            watchdog.stop()
            run.say.stop()
        return self._finish(run, d, {"steps": step, "steps_this_run": step - first_step,
                                     "seconds": round(time.perf_counter() - started, 2), "first_loss": first_loss,
                                     "loss": last.get("loss"), "valid_loss": last.get("valid_loss")}, last)

    def _start(self, run: Run, d: Distributed) -> int:
        """Build the run, resume it, write its config and the command line's skips: the step to go on from."""
        run.build(d)
        step = resume(run)
        if d.main:
            path = self.out / "config.json"
            run.disk.write(path, lambda: write_atomic(path, self.cfg.model_dump_json(indent=1) + "\n"))
        if self.skip_batches:
            ranges = parse_ranges(self.skip_batches)
            run.loader.skip(ranges)
            run.event({"step": step, "action": "skip", "skipped_batches": [list(r) for r in ranges],
                       "by": "command line"})
        run.iterator = iter(run.loader)
        return step

    def _roll_back(self, run: Run, verdict: Verdict, row: dict[str, Any]) -> int:
        """The spike's row (marked) in metrics.jsonl, then back to the newest healthy checkpoint: its step."""
        row["spike"] = verdict.reason
        run.metrics.write(row)
        step = rollback(run, verdict, row)
        run.say.note(f"step {row['step']}: {verdict.reason}; rolled back to step {step}")
        return step

    def _log(self, run: Run, step: int, row: dict[str, Any]) -> dict[str, Any]:
        """An applied step's row (and, when due, the validation loss) in metrics.jsonl: the latest values."""
        run.tokens_seen = row["tokens"]
        run.metrics.write(row)
        last = row
        if self.on_step:
            self.on_step(row)
        if self.cfg.eval_every and step % self.cfg.eval_every == 0:
            value = evaluate(run)
            if value is not None:
                run.metrics.write({"step": step, "valid_loss": value, "tokens": run.tokens_seen})
                last = {**last, "valid_loss": value}
        return last

    def _finish(self, run: Run, d: Distributed, summary: dict[str, Any], last: dict[str, Any]) -> dict[str, Any]:
        """The run's summary, also written to summary.json by the main rank."""
        summary = {**summary, "tokens": run.tokens_seen, "tokens_per_s": last.get("tokens_per_s"),
                   "mfu": last.get("mfu"), "rollbacks": run.guard.rollbacks, "world_size": d.world_size,
                   "device": str(d.device), "params": run.model.num_params(),
                   "metrics": str(self.out / METRICS_JSONL), "events": str(self.out / EVENTS_JSONL),
                   "checkpoints": str(self.out / "checkpoints")}
        if d.main:
            path = self.out / "summary.json"
            run.disk.write(path, lambda: write_atomic(path, json.dumps(summary, indent=1) + "\n"))
        run.disk.check()  # a full disk met since the last step's all-reduce (its last rows, summary.json)
        return summary


def evaluate(run: Run) -> float | None:
    """The mean loss of ``eval_batches`` batches of the valid split, over every rank; None without one."""
    if run.valid is None:
        return None
    run.model.eval()
    total, n = 0.0, 0
    with torch.no_grad():
        for k in range(run.cfg.eval_batches):
            for m in range(run.valid.layout.micro_batches):
                micro = run.valid.micro_batch(k, m)
                positions = micro.get("position_ids")  # as in training: restarted positions, documents masked
                with run.autocast():
                    loss = run.model(micro["input_ids"].to(run.d.device), labels=micro["labels"].to(run.d.device),
                                     position_ids=None if positions is None else positions.to(run.d.device))
                total += float(loss)
                n += 1
    run.model.train()
    value, = run.d.all_mean([total / n])
    return value
