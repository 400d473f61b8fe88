"""Megatron-LM's own dataset code on the tokenize stage's files: `IndexedDataset` reads them, and docs/tokenize.md's
per-file weights give a blend that `BlendedMegatronDatasetBuilder` builds at seq 2048, train and valid, on real data."""

from __future__ import annotations

import contextlib
import gzip
import importlib.util
import io
import json
import logging
import re
import warnings
from pathlib import Path

import numpy as np
import pytest
import yaml

from tests.conftest import write_jsonl
from tests.pipeline.test_runner import run_into
from tokenmill.pipeline.config import load_config
from tokenmill.pipeline.runner import run_pipeline
from tokenmill.tokenize import tokens_json
from tokenmill.tokenize.indexed import IndexedReader

# find_spec, not importorskip: every test process collects this file, and megatron-core's import takes about 4 s.
if importlib.util.find_spec("megatron") is None:
    pytest.skip("megatron-core is a test dependency (pip install -e '.[test]')", allow_module_level=True)
pytestmark = pytest.mark.ray

REPO = Path(__file__).resolve().parents[2]
SEQ = 2048
VALID_SIZES = range(3, 400, 9)
"""Valid sample counts the blend must build at: Megatron asks for `(train_iters // eval_interval + 1) * eval_iters
* global_batch_size`, a few hundred in a short run; 1 and 2 are left out, where every file rounds up to a sample."""


def docs_blocks() -> list[str]:
    """docs/tokenize.md's Megatron snippets, in order (they share one namespace, as a reader runs them)."""
    text = (REPO / "docs" / "tokenize.md").read_text(encoding="utf-8")
    section = text[text.index("## Megatron-LM"):]
    return re.findall(r"```python\n(.*?)```", section, re.S)


@pytest.fixture(scope="module")
def real_run(tmp_path_factory, ray_cluster) -> Path:
    from tests.conftest import SHARED_DATA

    if not SHARED_DATA.is_dir():
        pytest.skip(f"real-data samples not found at {SHARED_DATA}")
    return make_real_run(tmp_path_factory.mktemp("megatron"), SHARED_DATA)


def make_real_run(root: Path, shared: Path) -> Path:
    """The tokenize stage over real text of four sources, in shards of 100 documents: Pile and Common Crawl pages,
    Chinese news, Reddit comments (many short documents), GPT-2's tokenizer, 2% valid."""
    import csv

    pile = json.loads((shared / "pile" / "pearl_pile_texts.json").read_text(encoding="utf-8"))
    with gzip.open(shared / "commoncrawl" / "dolma_CC-MAIN-20190717121559-20190717143559-00140.jsonl.gz",
                   "rt", encoding="utf-8") as f:
        web = [json.loads(line)["text"] for line in f]
    zh = [line.split("\t", 1)[1].strip() for line in
          (shared / "chinese" / "thucnews_cnews.val.txt").read_text(encoding="utf-8").splitlines()[:300]]
    with open(shared / "reddit" / "reddit_lifestyle_drunk.csv", encoding="utf-8", newline="") as f:
        reddit = [row[1].strip() for row in csv.reader(f) if len(row) > 1 and len(row[1].strip()) > 20][:2000]
    sources = []
    for name, texts in (("pile", pile), ("web", web), ("zh", zh), ("reddit", reddit)):
        write_jsonl(root / f"{name}.jsonl", [{"id": f"{name}{i}", "text": t} for i, t in enumerate(texts)])
        sources.append({"name": name, "format": "jsonl", "paths": [f"{name}.jsonl"], "id_field": "id"})
    tokdir = shared / "tokenizer"
    config = {"output": "out", "seed": 7, "ingest": {"docs_per_shard": 100}, "sources": sources,
              "stages": {"tokenize": {"tokenizer": {"encoder": str(tokdir / "encoder.json"),
                                                    "merges": str(tokdir / "vocab.bpe")}, "valid_fraction": 0.02}}}
    (root / "run.yaml").write_text(yaml.safe_dump(config))
    run_into(root / "run.yaml", root / "out")
    return root / "out"


def _quiet():
    """Megatron logs every index it builds and prints from its C++ helpers: keep the test's output readable."""
    stack = contextlib.ExitStack()
    stack.enter_context(contextlib.redirect_stdout(io.StringIO()))
    stack.enter_context(warnings.catch_warnings())
    warnings.simplefilter("ignore")
    logging.getLogger("megatron").setLevel(logging.WARNING)
    return stack


def test_the_files_are_one_per_source_and_split_and_megatron_reads_them(real_run):
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    index = tokens_json.read(real_run)
    for split in ("train", "valid"):
        files = index.files(split)
        # Each source's split is small (well under max_tokens_per_file): one file each.
        assert [f["prefix"] for f in files] == [f"{split}/{s}.00000" for s in ("pile", "reddit", "web", "zh")]
        for f in files:
            with _quiet():
                theirs = IndexedDataset(str(index.prefix_path(f)))
            ours = IndexedReader(str(index.prefix_path(f)))
            assert len(theirs) == len(ours) == f["documents"] and int(theirs.sequence_lengths.sum()) == f["tokens"]
            assert np.array_equal(theirs.sequence_lengths, ours.sequence_lengths)
            assert np.array_equal(theirs.document_indices, np.arange(len(ours) + 1))
            for i in (0, len(ours) // 2, len(ours) - 1):
                assert np.array_equal(theirs[i], ours[i]) and ours[i][-1] == index.tokenizer["eos_id"]
    # Reddit's valid documents are short: a file under one sample, which the weighted blend must repeat.
    assert min(f["tokens"] for f in index.files("valid")) < SEQ


def run_docs(run: Path) -> dict:
    """docs/tokenize.md's Megatron snippets run as written on `run` (for "build/demo/run"): their namespace."""
    blocks = docs_blocks()
    assert len(blocks) == 2 and "sequence_length=2048" in blocks[1]
    namespace: dict = {}
    with _quiet():
        for i, code in enumerate(blocks):
            exec(compile(code.replace("build/demo/run", str(run)), f"docs/tokenize.md#{i}", "exec"), namespace)
    return namespace


def unbuilt_sizes(namespace: dict, split: str, sizes) -> list[str]:
    """The sample counts of `split` at which Megatron's builder refuses the docs' blend (with the docs' config), each
    with Megatron's message."""
    from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
    from megatron.core.datasets.gpt_dataset import GPTDataset

    config, i = namespace["config"], ("train", "valid").index(split)
    bad = []
    for n in sizes:
        config.blend_per_split = [namespace["blend"][split] if s == i else None for s in range(3)]
        try:
            with _quiet():
                built = BlendedMegatronDatasetBuilder(GPTDataset, [n if s == i else 0 for s in range(2)] + [None],
                                                      lambda: True, config).build()[i]
            assert len(built) >= n, f"{len(built)} samples"
        except (IndexError, AssertionError) as err:
            bad.append(f"{n}: {err}"[:200])
    return bad


def test_the_docs_blend_builds_at_seq_2048_for_train_and_valid(real_run, monkeypatch):
    """docs/tokenize.md's snippets as written (the run folder replaced): the weighted blend builds at seq 2048 for
    train and valid, its samples are the files' documents, and it builds at every valid size of `VALID_SIZES`."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # the tokenizer loads from the run folder alone
    namespace = run_docs(real_run)
    train, valid = namespace["train"], namespace["valid"]
    assert len(train) >= 20_000 and len(valid) >= 500
    index = namespace["index"]
    eos = index.tokenizer["eos_id"]
    for split, dataset in (("train", train), ("valid", valid)):
        readers = [IndexedReader(str(index.prefix_path(f))) for f in index.files(split)]
        documents = {r[i].tobytes() for r in readers for i in range(len(r))}
        for k in (0, len(dataset) // 2, len(dataset) - 1):
            tokens = np.asarray(dataset[k]["tokens"]).astype(readers[0].dtype)
            assert tokens.shape == (SEQ,)
            # GPTDataset packs documents in a shuffled order: every document whole between two end-of-text ids
            # is one of the split's.
            ends = np.flatnonzero(tokens == eos)
            whole = [tokens[a + 1:b + 1] for a, b in zip(ends[:-1], ends[1:])]
            assert all(w.tobytes() in documents for w in whole), f"{split} sample {k} is not the files' documents"
            assert whole or len(ends) < 2

    bad = unbuilt_sizes(namespace, "valid", VALID_SIZES)
    assert not bad, f"Megatron's builder refused the valid blend at {len(bad)} of {len(VALID_SIZES)} sizes: {bad[:3]}"


@pytest.mark.slow
def test_the_demo_runs_blend_builds_at_seq_2048_at_every_size(tmp_path, ray_cluster, monkeypatch):
    """The demo run as `make demo` makes it: a train and a valid file per source (26 and 22 files per shard and
    split before, 8 of the valid ones under 257 tokens), and the docs' blend at seq 2048 builds for valid sample
    counts from 3 to 2,000 (every 7th; with a file per shard, 67 of the counts 1 to 2,000 failed) and for train
    counts up to 10 epochs."""
    from tokenmill.demo import write_demo_corpus

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    write_demo_corpus(tmp_path, seed=1234)
    config = load_config(tmp_path / "demo.yaml")
    run_pipeline(config)
    index = tokens_json.read(config.output_dir)
    for split in ("train", "valid"):
        names = [f["prefix"].split("/", 1)[1] for f in index.files(split)]
        assert names == sorted(f"{s.name}.00000" for s in config.sources)
    namespace = run_docs(config.output_dir)
    assert len(namespace["valid"]) >= 500
    bad = unbuilt_sizes(namespace, "valid", range(3, 2001, 7))
    assert not bad, f"Megatron's builder refused the demo's valid blend at {len(bad)} sizes: {bad[:3]}"
    epoch = index.splits["train"]["tokens"] // SEQ
    bad = unbuilt_sizes(namespace, "train", [1, 3, 10, 100, epoch, 10 * epoch])
    assert not bad, f"Megatron's builder refused the demo's train blend at {len(bad)} sizes: {bad[:3]}"

