"""A generated corpus with a known truth for ablation tests: grammatical clean text, and planted junk (the clean
generator's text word-shuffled, and repeated boilerplate)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import yaml

SUBJECTS = "the cat|a dog|the old farmer|my sister|the small bird|a tall man|the teacher|our neighbour".split("|")
VERBS = "sees|likes|follows|carries|paints|finds|watches|feeds".split("|")
OBJECTS = "the red ball|a green apple|the wooden boat|a long letter|the quiet river|a bright lamp".split("|")
ENDINGS = "in the morning|after dinner|near the house|every day|with great care|before the rain".split("|")
BOILERPLATE = ("Click here to subscribe to our newsletter. All rights reserved. Cookie policy. Terms of use. "
               "Share this page on social media. ")


def clean_text(rng: np.random.Generator) -> str:
    """Five to nine sentences `<subject> <verb> <object> <ending> .`: a grammar a tiny model learns in a few steps."""
    sentences = []
    for _ in range(int(rng.integers(5, 10))):
        parts = [SUBJECTS[rng.integers(len(SUBJECTS))], VERBS[rng.integers(len(VERBS))],
                 OBJECTS[rng.integers(len(OBJECTS))], ENDINGS[rng.integers(len(ENDINGS))]]
        sentences.append(" ".join(parts) + ".")
    return " ".join(sentences).capitalize()


def junk_text(rng: np.random.Generator, k: int) -> str:
    """Every other junk document word-shuffled clean text, the others boilerplate repeated."""
    if k % 2:
        return BOILERPLATE * int(rng.integers(3, 7))
    words = clean_text(rng).split()
    rng.shuffle(words)
    return " ".join(words)


def write_corpus(root: Path, clean_docs: int = 300, junk_share: float = 0.3, seed: int = 0) -> dict[str, Path]:
    """`clean/docs.jsonl`, `junk/docs.jsonl` (junk_share of the clean+junk total) and `base.yaml`, a run config of
    the clean source alone (ingest and tokenize with a trained 320-token BPE, 10% held out)."""
    rng = np.random.default_rng(seed)
    (root / "clean").mkdir(parents=True, exist_ok=True)
    (root / "junk").mkdir(parents=True, exist_ok=True)
    with open(root / "clean" / "docs.jsonl", "w") as f:
        for i in range(clean_docs):
            f.write(json.dumps({"id": f"c{i}", "text": clean_text(rng)}) + "\n")
    n_junk = round(clean_docs * junk_share / (1 - junk_share))
    with open(root / "junk" / "docs.jsonl", "w") as f:
        for i in range(n_junk):
            f.write(json.dumps({"id": f"j{i}", "text": junk_text(rng, i)}) + "\n")
    base = {"output": "unused-run", "seed": 3,
            "sources": [{"name": "clean", "format": "jsonl", "paths": ["clean/*.jsonl"], "id_field": "id"}],
            "ingest": {"docs_per_shard": 200},
            "stages": {"tokenize": {"tokenizer": {"train": {"vocab_size": 320, "sample_docs": 300}},
                                    "valid_fraction": 0.1}}}
    (root / "base.yaml").write_text(yaml.safe_dump(base, sort_keys=False))
    return {"base": root / "base.yaml"}


JUNK_SOURCE = {"name": "junk", "format": "jsonl", "paths": ["junk/*.jsonl"], "id_field": "id"}


def write_ablation(root: Path, variants: dict, **overrides) -> Path:
    """`ablate.yaml` over `base.yaml`: tiny proxies (opt-tiny, seq_len 32, 8 sequences a step)."""
    config = {"base": "base.yaml", "output": "ablation", "variants": variants,
              "proxy": {"model": "opt-tiny", "seq_len": 32, "global_batch_size": 8, "tokens": 32 * 8 * 40,
                        "eval_every": 10, "lr": 0.01, "warmup_steps": 2, "train": {"dropout": 0.0, "loader": {"num_workers": 0}}},
              "evaluations": {"heldout": {"max_docs_per_source": 30}},
              "bootstrap": 500, **overrides}
    path = root / "ablate.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path
