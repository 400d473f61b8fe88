"""How many fault-injection trials ran and faults were injected in this pytest session, for the terminal summary.

Suites that inject faults or feed hostile input report here; `pytest_terminal_summary` (registered by
`tests/faults/conftest.py`) prints one line at the end of the session, e.g.

    fault injection: 12 trials, 14 faults injected (6 driver kill, 6 worker kill, 2 write error); hostile inputs: 31 cases

tests/hostile reports through its `CHECKED` list (a case is counted once its outcome was asserted); other suites may
call `counts.record_hostile()` once per case they feed.
"""

from __future__ import annotations

import sys
from collections import Counter

import pytest

TRIALS = Counter()
"""Trials (one interrupted or failed run, then the rerun and the comparison), by kind."""
FAULTS = Counter()
"""Faults actually injected (a SIGKILL sent or fired, an OSError raised), by kind."""
HOSTILE = Counter()
"""Hostile input cases fed to the pipeline, by suite or kind."""


def record_trial(kind: str) -> None:
    TRIALS[kind] += 1


def record_fault(kind: str, n: int = 1) -> None:
    FAULTS[kind] += n


def record_hostile(kind: str = "case", n: int = 1) -> None:
    HOSTILE[kind] += n


def hostile_cases() -> int:
    """Cases recorded here, plus the distinct cases whose outcome tests/hostile asserted (its CHECKED list)."""
    hostile = sys.modules.get("tests.hostile")
    return sum(HOSTILE.values()) + len(set(getattr(hostile, "CHECKED", ())))


def summary() -> str:
    by_kind = ", ".join(f"{n} {kind.replace('_', ' ')}" for kind, n in sorted(FAULTS.items()))
    return (f"fault injection: {sum(TRIALS.values())} trials, {sum(FAULTS.values())} faults injected"
            f"{f' ({by_kind})' if by_kind else ''}; hostile inputs: {hostile_cases()} cases checked")


def pytest_sessionfinish(session) -> None:
    """In a pytest-xdist worker: hand this process's counts to the controller, which prints the one line."""
    output = getattr(session.config, "workeroutput", None)
    if output is not None:
        hostile = sys.modules.get("tests.hostile")
        output["tokenmill_counts"] = {"trials": dict(TRIALS), "faults": dict(FAULTS), "hostile": dict(HOSTILE),
                                      "checked": sorted(map(str, set(getattr(hostile, "CHECKED", ()))))}


@pytest.hookimpl(optionalhook=True)  # an xdist hook: `-p no:xdist` runs without it
def pytest_testnodedown(node, error) -> None:
    """In the controller: add a finished worker's counts (its hostile cases as `checked:` names, once each)."""
    counts = getattr(node, "workeroutput", {}).get("tokenmill_counts")
    if counts:
        TRIALS.update(counts["trials"])
        FAULTS.update(counts["faults"])
        HOSTILE.update(counts["hostile"])
        for case in counts["checked"]:
            HOSTILE[f"checked:{case}"] = 1


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    # Printed once even if this hook is registered twice (a conftest import and a `pytest_plugins` entry).
    if getattr(config, "_tokenmill_counts_printed", False) or not (TRIALS or FAULTS or hostile_cases()):
        return
    config._tokenmill_counts_printed = True
    terminalreporter.write_sep("-", "fault injection and hostile inputs")
    terminalreporter.write_line(summary())
