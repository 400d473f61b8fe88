"""Every notebook executes on a small real run (and a training run) and draws its plots; the committed notebooks are
what notebooks/build.py writes, without outputs."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat", reason="the notebook tests need nbformat, nbclient and ipykernel (test extra)")
pytest.importorskip("nbclient", reason="the notebook tests need nbclient (test extra)")
pytest.importorskip("ipykernel", reason="nbclient needs ipykernel for a python3 kernel (test extra)")
pytest.importorskip("matplotlib", reason="the notebooks plot with matplotlib (notebooks extra)")

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
NAMES = ["inspect_samples", "dedup_clusters", "tokens", "contamination", "training", "classifiers"]
RUNS = {"classifiers": "classifier_run"}
"""The run fixture a notebook executes on, when not `small_run` (the demo pipeline, which has no classifier)."""


def _build_module():
    spec = importlib.util.spec_from_file_location("notebooks_build", NOTEBOOKS / "build.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_committed_notebooks_are_the_generated_ones_without_outputs(tmp_path):
    build = _build_module()
    assert sorted(build.NOTEBOOKS) == sorted(NAMES)
    for path in build.main(tmp_path):
        committed = NOTEBOOKS / path.name
        assert committed.read_bytes() == path.read_bytes(), f"{committed}: rerun `python notebooks/build.py`"
        nb = nbformat.read(str(committed), as_version=4)
        assert all(not c.get("outputs") and c.get("execution_count") is None for c in nb.cells if c.cell_type == "code")


EXECUTED: dict[tuple[str, str, str], list] = {}
"""Outputs by (notebook, run, training run): tests that read the same execution share it (a kernel and its imports
cost several seconds a notebook)."""


def _execute(name: str, run, train_output, monkeypatch) -> list:
    """The notebook run on `run`; its code cells' outputs, after checking none is an error."""
    key = (name, str(run), str(train_output))
    if key not in EXECUTED:
        EXECUTED[key] = _execute_once(name, run, train_output, monkeypatch)
    return EXECUTED[key]


def _execute_once(name: str, run, train_output, monkeypatch) -> list:
    from nbclient import NotebookClient

    monkeypatch.setenv("TOKENMILL_RUN", str(run))
    monkeypatch.setenv("TOKENMILL_TRAIN", str(train_output))
    monkeypatch.setenv("MPLBACKEND", "Agg")  # `%matplotlib inline` in the notebook takes over in the kernel
    nb = nbformat.read(str(NOTEBOOKS / f"{name}.ipynb"), as_version=4)
    NotebookClient(nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOKS)}}).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"], [o for o in outputs if o.output_type == "error"]
    return outputs


FAST = {"inspect_samples", "training", "classifiers"}
"""Executed in `make test` (the last two once for this test and the specific ones below); each other notebook's kernel
and imports take 2-5 s: `make test-slow`."""


@pytest.mark.ray
@pytest.mark.parametrize("name", [n if n in FAST else pytest.param(n, marks=pytest.mark.slow) for n in NAMES])
def test_notebook_executes_and_plots(name, request, train_output, monkeypatch):
    outputs = _execute(name, request.getfixturevalue(RUNS.get(name, "small_run")), train_output, monkeypatch)
    assert any("image/png" in o.get("data", {}) for o in outputs), f"{name}: no plot"
    assert any("text/html" in o.get("data", {}) or o.output_type == "stream" for o in outputs), f"{name}: no table"


@pytest.mark.ray
def test_the_classifiers_notebook_shows_samples_around_the_threshold(classifier_run, train_output, monkeypatch):
    outputs = _execute("classifiers", classifier_run, train_output, monkeypatch)
    html = "".join(o.get("data", {}).get("text/html", "") for o in outputs)
    assert "low_hq_score" in html and "above" in html and "below" in html
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert "best by hq_score" in text and "worst by hq_score" in text


@pytest.mark.ray
def test_the_classifiers_notebook_on_a_run_without_one_says_so(small_run, train_output, monkeypatch):
    outputs = _execute("classifiers", small_run, train_output, monkeypatch)
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert "no classifier ran in this run's clean stage" in text
    assert not any("image/png" in o.get("data", {}) for o in outputs)


@pytest.mark.ray
def test_the_training_notebook_marks_the_runs_faults_on_the_loss_curve(small_run, train_output, monkeypatch):
    """The training run rolls back once (a poisoned batch): the doctor calls it a data fault, and the notebook draws
    it on the loss curve, at the rollback's step (what it prints is read back from the plot's own lines)."""
    import json

    rollback, = [e for e in map(json.loads, (train_output / "events.jsonl").read_text().splitlines())
                 if e["action"] == "rollback"]
    # The execution of test_notebook_executes_and_plots[training] (this notebook reads no RUN, only the training run).
    outputs = _execute("training", small_run, train_output, monkeypatch)
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert f"marked on the loss curve: data at step {rollback['step']}\n" in text, text[-2000:]
    assert "1 fault in " in text and sum("image/png" in o.get("data", {}) for o in outputs) >= 2


def test_the_notebook_kernel_listens_on_the_loopback_only():
    """A kernel started as nbclient starts one binds its ZMQ ports to 127.0.0.1 (docs/security.md)."""
    from jupyter_client import KernelManager
    from nbclient import NotebookClient

    from tests.netstat import is_loopback, listeners

    # nbclient's own manager class is the async twin of this one; both take `ip` from the same default.
    assert issubclass(NotebookClient.kernel_manager_class.default_value, KernelManager)
    km = KernelManager(kernel_name="python3")
    km.start_kernel()
    try:
        kc = km.client()
        kc.start_channels()
        kc.wait_for_ready(timeout=120)
        seen = listeners([km.provisioner.process.pid])
        kc.stop_channels()
    finally:
        km.shutdown_kernel(now=True)
    # shell, iopub, stdin, control and heartbeat: five ZMQ ports, each on the loopback.
    assert len(seen) >= 5 and all(is_loopback(a) for a, _ in seen), seen
