"""The hang watchdog allows the first step of a start or a resume longer than a steady one (it compiles, warms up):
a slow first step on a loaded machine is not a hang of every rank; a later step still is one."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.train.runs import config, env, write_config, write_tokens
from tokenmill.train.faults import ENV
from tokenmill.train.watchdog import HANG_EXIT, Progress, Watchdog, WatchdogConfig


def test_the_first_step_has_its_own_limit_then_timeout_s():
    progress = Progress()
    dog = Watchdog(WatchdogConfig(timeout_s=8), progress, 0, 1, "cpu", Path("unused"))
    assert dog.limit() == 300.0  # the default for the first step without compile: at least 300 s
    progress.done(1)
    assert dog.limit() == 8.0
    compiled = Watchdog(WatchdogConfig(timeout_s=8), Progress(), 0, 1, "cpu", Path("unused"), compiled=True)
    assert compiled.limit() == 1800.0
    assert WatchdogConfig(timeout_s=900).first_step_limit(False) == 900.0  # never below timeout_s
    assert WatchdogConfig(timeout_s=8, first_step_timeout_s=20).first_step_limit(True) == 20.0


def _run(tmp_path: Path, name: str, sleep_step: int) -> subprocess.CompletedProcess:
    tokens = write_tokens(tmp_path / "tokens")
    cfg = config(tokens, tmp_path / name, steps=3, checkpoint_every=10, eval_every=0,
                 watchdog={"timeout_s": 2, "first_step_timeout_s": 30})
    plan = tmp_path / f"{name}.json"
    plan.write_text(json.dumps({"sleep": {"rank": 0, "step": sleep_step, "seconds": 4}}))
    return subprocess.run([sys.executable, "-m", "tokenmill.cli", "train", str(write_config(tmp_path / f"{name}.yaml",
                                                                                          cfg))],
                          capture_output=True, text=True, timeout=180, env=env(**{ENV: str(plan)}))


@pytest.mark.slow  # two runs, each asleep 4 s: about 18 s; the limits in `make test`: the test above
def test_a_first_step_slower_than_timeout_s_is_no_hang_and_a_later_one_is(tmp_path):
    first = _run(tmp_path, "first", 1)
    assert first.returncode == 0, first.stderr[-3000:]
    later = _run(tmp_path, "later", 2)
    assert later.returncode == HANG_EXIT, later.stderr[-3000:]
