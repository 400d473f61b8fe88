"""docs/loader.md's two ways to keep the loader's state in a DCP checkpoint, run as written in a one-process gloo
group: a loader resumed from either checkpoint serves the batch the saved one would have served next."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.loader.tokens import labelled_docs, write_dataset
from tokenmill.loader import TokenLoader

REPO = Path(__file__).resolve().parents[2]


def snippets() -> list[str]:
    text = (REPO / "docs" / "loader.md").read_text(encoding="utf-8")
    section = text.split("## In a DCP checkpoint", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(blocks) == 2, "docs/loader.md: expected two python blocks under '## In a DCP checkpoint'"
    return blocks


@pytest.fixture
def gloo(tmp_path):
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'pg'}", rank=0, world_size=1)
    try:
        yield
    finally:
        dist.barrier()
        dist.destroy_process_group()


@pytest.fixture
def tokens(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("TOKENMILL_VERIFIED_CACHE", "off")
    rng = np.random.default_rng(0)
    return write_dataset(tmp_path / "tokens", {"alpha": labelled_docs(60, rng, 1), "beta": labelled_docs(60, rng, 501)})


def _loader(path: Path) -> TokenLoader:
    return TokenLoader([path], seq_len=16, global_batch_size=4, weights={"alpha": 2, "beta": 1})


@pytest.mark.parametrize("which", [0, 1], ids=["checkpoint-manager", "plain-dcp"])
def test_the_documented_checkpoint_code_resumes_the_loader(tmp_path, monkeypatch, gloo, tokens, which):
    monkeypatch.chdir(tmp_path)
    loader = _loader(tokens)
    it = iter(loader)
    for _ in range(5):
        next(it)
    model = torch.nn.Linear(4, 4)
    namespace = {"loader": loader, "model": model, "optimizer": torch.optim.SGD(model.parameters(), lr=0.1),
                 "step": 5}
    exec(compile(snippets()[which], "docs/loader.md", "exec"), namespace)  # saves, then loads back into `loader`

    resumed = _loader(tokens)  # a fresh loader at position 0, resumed from what the documented code saved
    if which == 0:
        loaded = namespace["CheckpointManager"]("checkpoints").load({"model": namespace["ModelOptimizerState"](model)})
        resumed.load_state_dict(loaded.extra["loader"])
    else:
        import torch.distributed.checkpoint as dcp

        dcp.load({"loader": namespace["LoaderState"](resumed)}, storage_reader=namespace["SafeReader"]("dcp/step-5"),
                 planner=namespace["SafeLoadPlanner"]())
    assert resumed.consumed_samples == loader.consumed_samples == 5 * 4
    first = next(iter(_loader(tokens)))["input_ids"]  # where a loader without the state starts
    after = next(iter(resumed))["input_ids"]
    assert after.equal(next(iter(loader))["input_ids"]) and not after.equal(first)
    loader.close(), resumed.close()
