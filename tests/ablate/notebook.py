"""Execute notebooks/ablate.ipynb on an ablation folder (nbclient, Agg backend): its code cells' outputs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "ablate.ipynb"


def run_notebook(folder: Path) -> list[dict]:
    nbformat = pytest.importorskip("nbformat", reason="the notebook needs nbformat, nbclient and ipykernel (test extra)")
    nbclient = pytest.importorskip("nbclient", reason="the notebook needs nbclient (test extra)")
    pytest.importorskip("matplotlib", reason="the notebook plots with matplotlib (notebooks extra)")
    nb = nbformat.read(str(NOTEBOOK), as_version=4)
    env = {"TOKENMILL_ABLATION": str(folder), "MPLBACKEND": "Agg"}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        nbclient.NotebookClient(nb, timeout=120, kernel_name="python3",
                                resources={"metadata": {"path": str(NOTEBOOK.parent)}}).execute()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    return outputs


def text_of(outputs: list[dict]) -> str:
    return "".join(o.get("text", "") for o in outputs if o.get("output_type") == "stream")


def images(outputs: list[dict]) -> int:
    return sum("image/png" in o.get("data", {}) for o in outputs if o.get("output_type") == "display_data")
