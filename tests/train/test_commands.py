"""`tokenmill train`'s reporter: a progress bar on a terminal that stops, a line per `log_every` steps off one."""

from __future__ import annotations

import sys

from tokenmill.train.commands import RichTrainReporter

ROW = {"loss": 2.5, "lr": 1e-3, "tokens_per_s": 1000.0}


def test_on_a_terminal_the_bar_is_drawn_then_stopped(monkeypatch):
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    reporter = RichTrainReporter()
    reporter.start(4, 1)
    bar = reporter.bar
    assert bar is not None and bar.live.is_started
    reporter.step(2, ROW)
    assert bar.tasks[0].completed == 2 and "loss 2.5000" in bar.tasks[0].description
    reporter.stop()
    assert not bar.live.is_started and reporter.bar is None
    reporter.stop()  # twice is harmless


def test_off_a_terminal_a_line_every_log_every_steps_and_the_last(monkeypatch, capsys):
    monkeypatch.setattr(sys.stderr, "isatty", lambda: False)
    reporter = RichTrainReporter(log_every=2)
    reporter.start(5, 0)
    for step in range(1, 6):
        reporter.step(step, ROW)
    reporter.warn("no validation loss [x].bin")
    reporter.stop()
    lines = capsys.readouterr().err.splitlines()
    assert [line.split("  ")[0] for line in lines[:-1]] == ["step 2/5", "step 4/5", "step 5/5"]
    assert lines[-1] == "warning: no validation loss [x].bin"
