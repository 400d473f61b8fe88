"""One proxy run: an ordinary trainer run on a variant's tokens, scored at every evaluation point, marked when done."""

from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from tokenmill.ablate.config import AblateConfig
from tokenmill.ablate.tasks import Item
from tokenmill.train.atomic import write_atomic

log = logging.getLogger(__name__)

DONE = "done.json"
"""Written atomically when the run has trained its last step and scored its last point, or when the early-stopping
rule stopped its variant (`stopped` in it: the step and why): never trained again."""
MODEL_INFO = "proxy.json"
"""The model's `flops_per_token` and parameters, written at the run's first start (what a stopped run's marker
needs without building the model again)."""
EVALS = "evals"
"""`step_<N>.json` per evaluation point, each written atomically."""


@dataclass(frozen=True)
class ProxyJob:
    """What one proxy run needs, picklable for a worker process."""

    variant: str
    seed: int
    train: dict[str, Any]
    """The `tokenmill train` mapping (data, output, seed, steps ...)."""
    points: tuple[int, ...]
    heldout: dict[str, list[tuple[str, str]]]
    """{source: [(id, text)]}."""
    tasks: dict[str, list[Item]]
    threads: int = 0
    """torch threads in this process (0: leave as is)."""
    until: int | None = None
    """Train to this step only, and return without a done marker (one round of an early-stopping ablation); None:
    to the last step."""

    @property
    def output(self) -> Path:
        return Path(self.train["output"])


def eval_path(output: Path, step: int) -> Path:
    return output / EVALS / f"step_{step:06d}.json"


def is_done(output: Path) -> bool:
    return (output / DONE).is_file()


def _round(x: float) -> float:
    return float(f"{x:.6g}") if math.isfinite(x) else x


def evaluate(model, tokenizer, seq_len: int, job: ProxyJob, step: int, tokens: int) -> dict[str, Any]:
    """Every evaluation of one model: per source each held-out document's nats and bytes, per task each item's
    metrics."""
    from tokenmill.ablate.scoring import Scorer, score_items

    scorer = Scorer(model, tokenizer, seq_len)
    heldout = {}
    for source, docs in job.heldout.items():
        scored = scorer.document_nll([t for _, t in docs])
        heldout[source] = {"nll": [_round(n) for n, _ in scored], "bytes": [b for _, b in scored]}
    tasks = {}
    for name, items in job.tasks.items():
        rows = score_items(scorer, items)
        tasks[name] = {m: [_round(r[m]) for r in rows] for m in ("acc", "acc_norm", "p_correct")}
    return {"step": step, "tokens": tokens, "heldout": heldout, "tasks": tasks}


def _trainer_class():
    from tokenmill.train.trainer import Trainer

    class ScoredTrainer(Trainer):
        """The trainer, with the ablation's evaluations written at each of `points` (before that step's checkpoint,
        so a run killed between the two scores the step again, to the same values)."""

        def __init__(self, config, job: ProxyJob):
            super().__init__(config)
            self.job = job
            self.full = config
            self.flops_per_token = 0
            self.tokenizer = None

        def _train(self, run, d):
            # A round ends at `until`: the loop's bound (and its last checkpoint) is `until`, while the run's own
            # config (`run.cfg`: the learning-rate schedule, the loader) keeps every step, so training in rounds
            # gives the same weights as one go (the resume is exact).
            if self.job.until is not None and self.job.until < self.full.steps:
                self.cfg = self.full.model_copy(update={"steps": self.job.until})
            try:
                return super()._train(run, d)
            finally:
                self.cfg = self.full

        def _start(self, run, d):
            cut, self.cfg = self.cfg, self.full  # config.json records the whole run, not the round
            try:
                step = super()._start(run, d)
            finally:
                self.cfg = cut
            self.flops_per_token = run.flops_per_token
            path = self.out / MODEL_INFO
            if not path.is_file():
                info = {"flops_per_token": run.flops_per_token, "params": run.model.num_params()}
                write_atomic(path, json.dumps(info, sort_keys=True) + "\n")
            return step

        def _log(self, run, step, row):
            last = super()._log(run, step, row)
            if step in self.job.points:
                path = eval_path(self.out, step)
                path.parent.mkdir(parents=True, exist_ok=True)
                tokenizer = self._tokenizer() if self.job.heldout or self.job.tasks else None
                result = evaluate(run.model, tokenizer, self.cfg.seq_len, self.job, step, row["tokens"])
                write_atomic(path, json.dumps(result, sort_keys=True) + "\n")
            return last

        def _tokenizer(self):
            if self.tokenizer is None:
                from tokenmill.tokenize import tokens_json
                from tokenmill.tokenize.tokenizer import load_tokenizer

                index_path = Path(self.cfg.resolved_paths()[0])
                info = tokens_json.read(index_path).tokenizer
                self.tokenizer = load_tokenizer(str(index_path.parent / info["file"]), info["eos_token"])
            return self.tokenizer

    return ScoredTrainer


def train_proxy(job: ProxyJob) -> dict[str, Any]:
    """Train (or resume) one proxy run and score it; a finished run (its `done.json`) is not trained again.
    Returns the done marker's content, with `trained_now` (False for a run found finished); for a round
    (`job.until` before the last step), {variant, seed, steps: until, trained_now: True} and no marker."""
    out = job.output
    if is_done(out):
        return {**json.loads((out / DONE).read_text(encoding="utf-8")), "trained_now": False}
    last = int(job.train["steps"])
    until = last if job.until is None else min(job.until, last)
    if until < last and eval_path(out, until).is_file():
        # Scored at `until` already (a rerun): nothing to train in this round; a checkpoint missing there (a kill
        # between score and checkpoint) is made up by the next round, which scores the step again to the same
        # values.
        return {"variant": job.variant, "seed": job.seed, "steps": until, "trained_now": False}
    import torch

    from tokenmill.train.config import parse_train_config

    if job.threads:
        torch.set_num_threads(job.threads)
    config = parse_train_config(job.train, out.parent)
    trainer = _trainer_class()(config, job)
    summary = trainer.run()
    missing = [p for p in job.points if p <= until and not eval_path(out, p).is_file()]
    if missing:
        # Steps trained by an earlier attempt that died after its checkpoint and before its evaluation: none, since
        # the evaluation is written first; kept as a check, as a marker over a hole would be final.
        raise RuntimeError(f"{out}: evaluation points {missing} have no scores; delete the run folder to retrain")
    if until < last:
        return {"variant": job.variant, "seed": job.seed, "steps": until, "trained_now": True}
    done = {"variant": job.variant, "seed": job.seed, "steps": summary["steps"], "tokens": summary["tokens"],
            "flops_per_token": trainer.flops_per_token, "params": summary["params"]}
    write_atomic(out / DONE, json.dumps(done, sort_keys=True) + "\n")
    return {**done, "trained_now": True}


def stop_proxy(job: ProxyJob, step: int, why: dict[str, Any]) -> dict[str, Any]:
    """Mark a run its variant's early stop ended at `step` (scored there): `done.json` with `stopped`, so that no
    rerun trains it further and the report counts it finished. Its newest checkpoint is that step's (or, after a
    kill between score and checkpoint, an earlier one: the marker is what counts). Returns the marker."""
    out = job.output
    if is_done(out):
        return json.loads((out / DONE).read_text(encoding="utf-8"))
    scored = json.loads(eval_path(out, step).read_text(encoding="utf-8"))
    info = json.loads((out / MODEL_INFO).read_text(encoding="utf-8"))
    done = {"variant": job.variant, "seed": job.seed, "steps": step, "tokens": scored["tokens"],
            "flops_per_token": info["flops_per_token"], "params": info["params"],
            "stopped": {"step": step, "of_steps": int(job.train["steps"]), **why}}
    write_atomic(out / DONE, json.dumps(done, sort_keys=True) + "\n")
    return done


def run_proxies(config: AblateConfig, all_jobs: list[ProxyJob], say: Callable[[str], None]) -> list[dict]:
    """Train every proxy run not yet finished, up to `workers` at once (processes); finished ones are skipped."""
    todo = [j for j in all_jobs if not is_done(j.output)]
    say(f"proxy runs: {len(all_jobs)}, {len(all_jobs) - len(todo)} finished earlier")
    results = [train_proxy(j) for j in all_jobs if is_done(j.output)]
    if config.workers == 1 or len(todo) < 2:
        for j in todo:
            say(f"training {j.variant} seed {j.seed}")
            results.append(train_proxy(j))
        return results
    with pool_of(config) as pool:
        for j, result in zip(todo, pool.map(train_proxy, todo)):
            say(f"trained {j.variant} seed {j.seed}")
            results.append(result)
    return results


def pool_of(config: AblateConfig):
    """Processes for `workers` proxy runs at once (spawned: a forked trainer would inherit the parent's threads)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    return ProcessPoolExecutor(config.workers, mp_context=multiprocessing.get_context("spawn"))
