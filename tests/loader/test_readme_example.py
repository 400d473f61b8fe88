"""The README's loader example, run as written (only the run folder replaced) on token files with the demo's nine
streams: it names three of them, which raised `no weight for stream 'cc_html'` before unnamed streams got weight 0."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from tests.loader.tokens import labelled_docs, write_dataset

REPO = Path(__file__).resolve().parents[2]
DEMO_STREAMS = ["books_en", "cc_html", "cc_wet", "forum_en", "news_zh", "news_zh_gb", "pile", "reddit", "web_en"]


def readme_example() -> str:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    found = re.search(r"## Feeding a training job\n.*?```python\n(.*?)```", text, re.S)
    assert found, "README.md: no python block under '## Feeding a training job'"
    return found.group(1)


def run_example(run: Path) -> None:
    code = readme_example()
    assert "build/demo/run" in code
    exec(compile(code.replace("build/demo/run", str(run)), "README.md", "exec"), {})


@pytest.fixture
def demo_like_run(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("TOKENMILL_VERIFIED_CACHE", "off")
    rng = np.random.default_rng(0)
    write_dataset(tmp_path / "run" / "tokenize", {name: labelled_docs(40, rng, base=1 + 1000 * i, min_len=80,
                                                                      max_len=160)
                                                  for i, name in enumerate(DEMO_STREAMS)})
    return tmp_path / "run"


def test_the_readme_loader_example_runs_on_the_demo_streams(demo_like_run):
    run_example(demo_like_run)
