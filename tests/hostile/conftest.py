"""Fixtures of the hostile suite: the generated corpus (fast or full sizes)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

GENERATOR = Path(__file__).resolve().parents[1] / "data" / "hostile" / "generate.py"


def load_generator():
    spec = importlib.util.spec_from_file_location("hostile_generate", GENERATOR)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _corpus(tmp_path_factory, full: bool) -> tuple[Path, dict[str, dict]]:
    out = tmp_path_factory.mktemp("hostile-full" if full else "hostile")
    path = load_generator().build(out, full=full)
    return out, {case["name"]: case for case in json.loads(path.read_text())["cases"]}


@pytest.fixture(scope="session")
def hostile_corpus(tmp_path_factory):
    """The fast corpus: (folder, cases by name)."""
    return _corpus(tmp_path_factory, full=False)


@pytest.fixture(scope="session")
def hostile_corpus_full(tmp_path_factory):
    """The corpus at issue 11's sizes (10 GiB bomb, 1 GiB line, 100 MB document); several GB of disk."""
    return _corpus(tmp_path_factory, full=True)
