"""How the trainer tells a person what it does: a reporter protocol, and the library's default that only logs."""

from __future__ import annotations

import logging
from typing import Any, Protocol

log = logging.getLogger(__name__)


class TrainReporter(Protocol):
    """What the trainer says, on the main rank only; the CLI draws a progress bar, the library default logs.

    ``start`` is called once before the first step and ``stop`` once after the last or when the run fails, so a
    live display never outlives its run."""

    def start(self, total: int, done: int) -> None:
        """Training begins: ``total`` steps in all, ``done`` of them taken by an earlier run (a resume)."""

    def step(self, step: int, row: dict[str, Any]) -> None:
        """A healthy step was applied; ``row`` is its metrics.jsonl row (loss, lr, tokens_per_s, ...)."""

    def note(self, text: str) -> None:
        """Something a person watching wants to know: a rollback, a skip, an event."""

    def warn(self, text: str) -> None:
        """Something a person must not miss (a data change, no validation split); said once."""

    def stop(self) -> None:
        """Training ended, finished or failed."""


class LogReporter:
    """The library's reporter: notes at INFO, warnings at WARNING, progress every ``log_every`` steps at INFO."""

    def __init__(self, log_every: int = 1):
        self.log_every = log_every
        self.total = 0

    def start(self, total: int, done: int) -> None:
        self.total = total
        log.info("training: %d steps, %d done before", total, done)

    def step(self, step: int, row: dict[str, Any]) -> None:
        if step % self.log_every == 0 or step == self.total:
            log.info("step %d/%d  %s", step, self.total, progress_text(row))

    def note(self, text: str) -> None:
        log.info(text)

    def warn(self, text: str) -> None:
        log.warning(text)

    def stop(self) -> None:
        pass


class QuietReporter(LogReporter):
    """The reporter of every rank but the main one: all at DEBUG, so N ranks do not say each thing N times."""

    def note(self, text: str) -> None:
        log.debug(text)

    def warn(self, text: str) -> None:
        log.debug(text)

    def start(self, total: int, done: int) -> None:
        self.total = total

    def step(self, step: int, row: dict[str, Any]) -> None:
        pass


def progress_text(row: dict[str, Any]) -> str:
    """A step's row as one progress line: loss, learning rate, throughput."""
    return f"loss {row['loss']:.4f}  lr {row['lr']:.2e}  {row['tokens_per_s']:,.0f} tok/s"
