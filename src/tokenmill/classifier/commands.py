"""`tokenmill quality train CONFIG` in the terminal: progress while reading and training, then a summary table.

`train.train_classifier` computes, writes and logs; this module only prints. Names from files and sources are
escaped for rich.
"""

from __future__ import annotations

import argparse

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from tokenmill.classifier.train import TrainReporter, TrainResult


class RichTrainReporter(TrainReporter):
    """A bar over the files read (documents so far in its label), then a spinner while fastText trains."""

    def __init__(self, progress: Progress):
        self.progress = progress
        self.reading: int | None = None
        self.training: int | None = None
        self.documents = 0

    def files_listed(self, total: int) -> None:
        self.reading = self.progress.add_task("read", total=total)

    def file_read(self, display: str, documents: int) -> None:
        self.documents += documents
        if self.reading is not None:
            self.progress.update(self.reading, advance=1,
                                 description=f"read: {self.documents:,} documents, last {escape(display)}")

    def training_started(self, lines: int, epochs: int) -> None:
        self.training = self.progress.add_task(f"fastText: {lines:,} documents x {epochs} epochs, 1 thread",
                                               total=None)

    def training_ended(self, seconds: float) -> None:
        if self.training is not None:
            self.progress.update(self.training, total=1, completed=1,
                                 description=f"fastText: trained in {seconds:.1f} s")


def _number(value: float | None, digits: int = 4) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def summary_table(result: TrainResult) -> Table:
    """Documents per label and split, then the valid measures."""
    s = result.sidecar
    counts = s["counts"]
    table = Table(title="documents per label and split", title_justify="left")
    for col in ("label", "train", "valid"):
        table.add_column(col, justify="left" if col == "label" else "right", no_wrap=True)
    for label in (s["labels"]["positive"], s["labels"]["negative"]):
        table.add_row(escape(label), f"{counts['train'][label]:,}", f"{counts['valid'][label]:,}")
    return table


def metrics_table(result: TrainResult) -> Table:
    valid = result.sidecar["valid"]
    table = Table(title=f"valid split, positive at score >= {valid['threshold']}", title_justify="left")
    for col in ("precision", "recall", "F1", "ROC AUC"):
        table.add_column(col, justify="right", no_wrap=True)
    table.add_row(*(_number(valid[k]) for k in ("precision", "recall", "f1", "roc_auc")))
    return table


def quality_train(args: argparse.Namespace) -> int:
    """`tokenmill quality train CONFIG`: the classifier trained, `model.bin` and `model.json` written."""
    from tokenmill.classifier.config import load_train_config
    from tokenmill.fasttext.binding import fasttext_module
    from tokenmill.classifier.train import train_classifier

    config = load_train_config(args.config)  # every key checked before any file is read
    fasttext_module()  # a fastText that cannot train stops here too
    columns = [SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn()]
    with Progress(*columns, console=Console(stderr=True), transient=False) as progress:
        result = train_classifier(config, RichTrainReporter(progress))
    out = Console(width=max(Console().width, 100))
    out.print(summary_table(result))
    out.print(metrics_table(result))
    counts = result.sidecar["counts"]
    out.print(f"  {counts['read']:,} documents read; left out: {counts['duplicate']:,} duplicates, "
              f"{counts['both_classes']:,} in both classes, {counts['empty']:,} empty after preparation")
    fit = result.sidecar["fit"]
    chosen = "" if fit["rule"] == "configured" else " (epoch: auto, for the smaller class's " \
        f"{fit['smaller_class_documents']:,} documents)"
    out.print(f"  trained {result.sidecar['fasttext']['epoch']} passes{chosen}")
    out.print(f"  model: {escape(str(result.model_path))} ({result.sidecar['model']['bytes'] / 1e6:,.1f} MB, sha256 "
              f"{result.sidecar['model']['sha256'][:12]}); sidecar: {escape(str(result.sidecar_path))}")
    for warning in result.sidecar["warnings"]:
        out.print(f"[bold yellow]warning:[/] {escape(warning)}")
    return 0
