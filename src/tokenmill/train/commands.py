"""`tokenmill train`: the command's body, and the reporter through which it shows a run (the CLI's, not the library's)."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Any

from rich.console import Console
from rich.table import Table

from tokenmill.errors import TokenmillError
from tokenmill.train.report import progress_text


class RichTrainReporter:
    """A rich progress bar on a terminal, otherwise a line every ``log_every`` steps; notes and warnings printed
    once each, above the bar. Only the main rank's trainer calls it."""

    def __init__(self, log_every: int = 1):
        self.log_every = log_every
        self.total = 0
        self.bar: Any = None
        self.task: Any = None

    def start(self, total: int, done: int) -> None:
        self.total = total
        if sys.stderr.isatty():
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self.bar = Progress(TextColumn("train"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                                TextColumn("{task.description}"), console=Console(stderr=True))
            self.bar.start()
            self.task = self.bar.add_task("", total=total, completed=done)

    def step(self, step: int, row: dict[str, Any]) -> None:
        text = progress_text(row)
        if self.bar is not None:
            self.bar.update(self.task, completed=step, description=text)
        elif step % self.log_every == 0 or step == self.total:
            print(f"step {step}/{self.total}  {text}", file=sys.stderr, flush=True)

    def note(self, text: str) -> None:
        if self.bar is not None:
            self.bar.console.print(text, markup=False, highlight=False)  # file names such as `[x].bin` are no markup
        else:
            print(text, file=sys.stderr, flush=True)

    def warn(self, text: str) -> None:
        self.note(f"warning: {text}")

    def stop(self) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None


def train(args: argparse.Namespace) -> int:
    """`tokenmill train CONFIG`: train (or resume) an OPT-style decoder on token files; `--nproc N` or torchrun for
    several ranks."""
    if args.config == "doctor":
        return doctor(args)
    if getattr(args, "run", None) is not None:
        raise TokenmillError(f"tokenmill train: unexpected argument {args.run!r} (only `train doctor RUN` takes two)")
    if getattr(args, "json", False):
        raise TokenmillError("tokenmill train: --json is for `train doctor RUN`")
    from tokenmill.train.config import load_train_config
    from tokenmill.train.trainer import Trainer

    overrides: dict[str, Any] = {"steps": args.steps} if args.steps else {}
    if args.allow_data_change:
        overrides["allow_data_change"] = True
    config = load_train_config(args.config, overrides)  # a bad config stops here, before any rank starts
    if args.nproc is not None and "RANK" not in os.environ:
        if args.nproc < 1:
            raise TokenmillError("--nproc: must be at least 1")
        if args.nproc > 1:
            from tokenmill.train.launch import launch

            argv = ["train", args.config] + (["--steps", str(args.steps)] if args.steps else []) + (
                ["--skip-batches", args.skip_batches] if args.skip_batches else []) + (
                ["--allow-data-change"] if args.allow_data_change else [])
            return launch((["-v"] if args.verbose else []) + argv, args.nproc, say=_say)
    summary = Trainer(config, skip_batches=args.skip_batches, reporter=RichTrainReporter(config.log_every)).run()
    if int(os.environ.get("RANK", "0")) == 0:
        Console(width=max(Console().width, 100)).print(summary_table(summary))
    if summary["world_size"] > 1:
        _leave_rank()
    return 0


def _leave_rank() -> None:
    """End a rank of a finished run now, skipping the interpreter's teardown. Its work is on disk (checkpoints
    written and synced, the group destroyed), but torch's C++ objects freed during finalization abort a gloo rank
    now and then ("terminate called without an active exception", SIGABRT with no Python frame: seen in 2 of 8
    resumes on a loaded 2-core machine), and torchrun then reports a finished run as failed."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(0)


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def summary_table(summary: dict[str, Any]) -> Table:
    """What a run did, from the trainer's summary: losses, throughput, MFU, rollbacks, where its files are."""
    table = Table(title=f"tokenmill train: {summary['steps']} steps ({summary['steps_this_run']} in this run)",
                  title_justify="left", show_header=False)

    def num(value, spec):
        return "n/a" if value is None else format(value, spec)

    table.add_row("loss", f"{num(summary['first_loss'], '.4f')} -> {num(summary['loss'], '.4f')} "
                          "(first and last step of this run)")
    table.add_row("valid loss", num(summary["valid_loss"], ".4f"))
    table.add_row("tokens", f"{summary['tokens']:,}")
    table.add_row("tokens/s", num(summary["tokens_per_s"], ",.0f"))
    table.add_row("MFU", num(summary["mfu"], ".1%") + ("" if summary["mfu"] is not None else
                                                      " (no peak TFLOP/s for this device; set peak_tflops)"))
    table.add_row("rollbacks", str(summary["rollbacks"]))
    table.add_row("model", f"{summary['params']:,} parameters on {summary['world_size']} x {summary['device']}")
    table.add_row("time", f"{summary['seconds']:.1f} s")
    for key in ("metrics", "events", "checkpoints"):
        table.add_row(key, summary[key])
    return table


def doctor(args: argparse.Namespace) -> int:
    """`tokenmill train doctor RUN`: the run's history of faults (what, when, which rank or documents, what was
    done), a one-line summary first; `--json` for the list as JSON."""
    import json
    from pathlib import Path

    from tokenmill.train.doctor import diagnose
    from tokenmill.train.metrics import EVENTS_JSONL, METRICS_JSONL, RANKS_JSONL

    if not args.run:
        raise TokenmillError("tokenmill train doctor RUN: name the run's output folder")
    run = Path(args.run)
    if not run.is_dir():
        raise TokenmillError(f"tokenmill train doctor: {run}: no such folder")
    found = diagnose(run)
    if EVENTS_JSONL in found.missing and METRICS_JSONL in found.missing:
        raise TokenmillError(f"tokenmill train doctor: {run}: neither events.jsonl nor metrics.jsonl (not a train "
                             "run's output folder?)")
    if getattr(args, "json", False):
        print(json.dumps(found.to_json(), indent=1, default=str))
        return 0
    console = Console(width=max(Console().width, 120))
    console.print(found.summary(), markup=False, highlight=False)
    for name in found.missing:
        console.print(f"note: no {name}" + (" (an older run: ranks' values not shown)" if name == RANKS_JSONL
                                           else ""), markup=False, highlight=False)
    for name, bad in found.unreadable.items():
        console.print(f"note: {name}: {bad} line(s) not JSON skipped (a killed run's truncated last line?)",
                      markup=False, highlight=False)
    if found.faults:
        console.print(doctor_table(found.faults))
    if found.notes:
        console.print("other events: " + "; ".join(f"step {e.get('step')}: {e.get('action')}" for e in found.notes),
                      markup=False, highlight=False)
    return 0


def doctor_table(faults) -> Table:
    """One row per fault: step and time, kind, what, which ranks (host, device) or documents, what was done."""
    import datetime

    table = Table(title="faults", title_justify="left", show_lines=True)
    for column in ("step", "kind", "what", "where", "done"):
        table.add_column(column, overflow="fold")
    for f in faults:
        when = str(f.step) if f.time is None else f"{f.step}\n" + datetime.datetime.fromtimestamp(
            f.time, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
        what = f.what + "".join(f"\nrank {r['rank']}: {r.get('reason')}" for r in f.ranks if r.get("reason"))
        where = [f"rank {r['rank']} on host {r.get('host')} ({r.get('device')})" for r in f.ranks]
        if f.batch is not None:
            where.append(f"batch {f.batch}")
        docs = [d for d in f.documents if "id" in d]
        if docs:
            where.append("documents: " + ", ".join(f"{d.get('source')}/{d['id']}" for d in docs[:5])
                         + (f" and {len(docs) - 5} more" if len(docs) > 5 else ""))
        where += [d["error"] for d in f.documents if "error" in d]
        table.add_row(when, f.kind, what, "\n".join(where), f.action)
    return table
