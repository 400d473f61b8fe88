"""SIGKILL of `tokenmill quality train` (with its fastText child) at each point of its run, then a rerun: the same
model bytes and the same sidecar measures as a training never interrupted.

The kill points are the states a training passes through on disk, each waited for by polling the output folder:
reading (the folder not there yet, or empty), writing the training file (`.train-PID.txt`), fastText fitting in its
child process (the child's pid seen under the CLI), fastText's model saved but not yet renamed (`.model.bin.PID.tmp`),
and the model in place before its sidecar (`model.bin`, no `model.json`). The whole process group is killed and
gone before the rerun. A point the run passed between two polls skips its trial, saying so (not seen in practice:
fastText's fit takes about a second here).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.classifier.corpus import write_corpus
from tests.faults import counts
from tests.faults.harness import kill_group
from tokenmill.classifier.config import load_train_config
from tokenmill.classifier.train import train_classifier

POINTS = ("reading", "train_file", "fitting", "saved_tmp", "model_no_sidecar")
FAST_POINTS = {"fitting"}
"""The kill point `make test` runs (a training killed in fastText's child); the others are in `make test-slow`."""


def _state(out: Path, proc: subprocess.Popen) -> set[str]:
    names = {p.name for p in out.iterdir()} if out.is_dir() else set()
    seen = {"reading"}
    if any(n.startswith(".train-") for n in names):
        seen.add("train_file")
        if _children(proc.pid):
            seen.add("fitting")
    if any(n.startswith(".model.bin.") for n in names):
        seen.add("saved_tmp")
    if "model.bin" in names and "model.json" not in names:
        seen.add("model_no_sidecar")
    return seen


def _children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("killtrain")
    config = write_corpus(root, docs=1200)
    data = yaml.safe_load(config.read_text())
    data["fasttext"]["epoch"] = 40  # a fit long enough (about a second) for the poll to see the child
    config.write_text(yaml.safe_dump(data, sort_keys=False))
    reference = train_classifier(load_train_config(config).model_copy(update={"output": "reference"}))
    return root, config, reference


@pytest.mark.parametrize("point", [p if p in FAST_POINTS else pytest.param(p, marks=pytest.mark.slow) for p in POINTS])
def test_kill_quality_train_then_rerun_gives_the_same_model(corpus, point):
    root, config, reference = corpus
    out_name = f"killed-{point}"
    data = yaml.safe_load(config.read_text())
    data["output"] = out_name
    killed_config = root / f"{out_name}.yaml"
    killed_config.write_text(yaml.safe_dump(data, sort_keys=False))
    out = root / out_name

    proc = subprocess.Popen([sys.executable, "-m", "tokenmill", "quality", "train", str(killed_config)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    landed = None
    while proc.poll() is None:
        if point in _state(out, proc):
            kill_group(proc.pid)
            landed = point
            break
        time.sleep(0.002)
    proc.wait()
    if landed is None:
        pytest.skip(f"the training passed {point!r} between two polls (2 ms): nothing to kill there")
    counts.record_fault("quality train kill")
    assert proc.returncode == -signal.SIGKILL
    left = sorted(p.name for p in out.iterdir()) if out.is_dir() else []
    print(f"killed at {point}: left {left}")
    assert "model.json" not in left  # no sidecar: the folder does not claim a complete model

    rerun = train_classifier(load_train_config(killed_config))
    counts.record_trial("quality train kill")
    assert sorted(p.name for p in out.iterdir()) == ["model.bin", "model.json"]
    assert rerun.model_path.read_bytes() == reference.model_path.read_bytes()
    for key in ("model", "valid", "counts", "inputs", "fasttext", "prepare"):
        assert rerun.sidecar[key] == reference.sidecar[key], key
