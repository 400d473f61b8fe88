"""Every python block of docs/loader.md runs as written, in order, in one namespace (only the folders replaced): on
token files with the demo's streams, the object-storage block on the local S3 server. A PyTorch DataLoader takes the
loader without workers of its own, and refuses it, saying what to do, with them."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from tests.loader.test_readme_example import DEMO_STREAMS
from tests.loader.tokens import labelled_docs, write_dataset
from tokenmill.loader import TokenLoader

REPO = Path(__file__).resolve().parents[2]


def blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", (REPO / "docs" / "loader.md").read_text(encoding="utf-8"), re.S)


def test_every_block_of_the_loader_docs_runs_as_written(tmp_path, monkeypatch, s3_server):
    monkeypatch.setenv("TOKENMILL_VERIFIED_CACHE", "off")
    rng = np.random.default_rng(0)
    write_dataset(tmp_path / "run" / "tokenize", {name: labelled_docs(40, rng, base=1 + 1000 * i, min_len=80,
                                                                      max_len=160)
                                                  for i, name in enumerate(DEMO_STREAMS)})
    s3_server.create_bucket("bucket")
    s3_server.upload_tree(tmp_path / "run", "bucket", "run")
    monkeypatch.chdir(tmp_path)  # the blocks' relative folders: run/, checkpoints/, dcp/
    found = blocks()
    assert len(found) == 4
    namespace: dict = {}
    for i, code in enumerate(found):
        exec(compile(code.replace("/local_nvme/tokenmill", str(tmp_path / "cache")), f"docs/loader.md[{i}]",
                     "exec"), namespace)
        if i == 0:  # the first block's loader and state, before the later blocks replace them
            first, state = namespace["loader"], namespace["checkpoint"]["loader"]
            wrapped = next(iter(namespace["batches"]))["input_ids"]
    assert namespace["step"] == 10 and state["consumed_samples"] == 10 * 4
    again = TokenLoader(["run/tokenize/tokens.json"], seq_len=2048, global_batch_size=512, micro_batch_size=4,
                        weights={"web_en": 0.6, "books_en": 0.3, "pile": 0.1})
    again.load_state_dict(state)
    assert wrapped.equal(next(iter(again))["input_ids"])  # the DataLoader served the loader's next micro-batch
    streamed = next(iter(namespace["loader"]))["input_ids"]  # the object-storage block's loader
    local = TokenLoader(["run/tokenize/tokens.json"], seq_len=2048, global_batch_size=512, micro_batch_size=4)
    assert streamed.equal(next(iter(local))["input_ids"])
    for loader in (first, again, local, namespace["loader"]):
        loader.close()


def test_a_dataloader_with_workers_of_its_own_is_refused_saying_what_to_do(tmp_path, monkeypatch):
    monkeypatch.setenv("TOKENMILL_VERIFIED_CACHE", "off")
    rng = np.random.default_rng(0)
    path = write_dataset(tmp_path / "tokens", {"a": labelled_docs(40, rng)})
    loader = TokenLoader([str(path)], seq_len=16, global_batch_size=4, seed=1)
    assert isinstance(loader, torch.utils.data.IterableDataset)
    plain = [b["input_ids"] for _, b in zip(range(3), DataLoader(loader, batch_size=None))]
    direct = TokenLoader([str(path)], seq_len=16, global_batch_size=4, seed=1)
    assert all(a.equal(b["input_ids"]) for a, (_, b) in zip(plain, zip(range(3), direct)))
    with pytest.raises(RuntimeError, match=r"iterated in a DataLoader worker: give it to DataLoader\(loader, "
                                           r"batch_size=None\) with num_workers=0"):
        next(iter(DataLoader(loader, batch_size=None, num_workers=2)))
    loader.close(), direct.close()
