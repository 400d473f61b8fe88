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
    return domain_text(rng, (SUBJECTS, VERBS, OBJECTS, ENDINGS))


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


DOMAINS = {
    # Three clean sources, each its own small grammar (the clean generator's, with its own words), and junk.
    "farm": (SUBJECTS, VERBS, OBJECTS, ENDINGS),
    "kitchen": ("the cook|a baker|my uncle|the waiter|our chef|a young girl".split("|"),
                "stirs|bakes|serves|tastes|cuts|pours".split("|"),
                "the hot soup|a fresh loaf|the sweet cake|a bowl of rice|the sharp knife".split("|"),
                "at noon|for the guests|in the oven|on the table|with a smile".split("|")),
    "harbour": ("the captain|a sailor|the fisherman|an old pilot|the crew".split("|"),
                "steers|repairs|loads|ties|spots|sails".split("|"),
                "the big ship|a heavy net|the white sail|a rusty anchor|the small ferry".split("|"),
                "at dawn|in the storm|across the bay|by the pier|under the moon".split("|")),
}


def domain_text(rng: np.random.Generator, words) -> str:
    """`clean_text`'s grammar over the given (subjects, verbs, objects, endings)."""
    subjects, verbs, objects, endings = words
    sentences = []
    for _ in range(int(rng.integers(5, 10))):
        parts = [subjects[rng.integers(len(subjects))], verbs[rng.integers(len(verbs))],
                 objects[rng.integers(len(objects))], endings[rng.integers(len(endings))]]
        sentences.append(" ".join(parts) + ".")
    return " ".join(sentences).capitalize()


def write_mixture_corpus(root: Path, docs_per_source: int = 120, junk_docs: int = 150, seed: int = 0) -> Path:
    """`<source>/docs.jsonl` for the three clean sources of `DOMAINS` and `junk` (word-shuffled clean text and
    repeated boilerplate, as `junk_text`), and `base.yaml`: a run config of all four (ingest, tokenize with a
    trained 320-token BPE, 10% held out)."""
    rng = np.random.default_rng(seed)
    sources = []
    for name, words in DOMAINS.items():
        (root / name).mkdir(parents=True, exist_ok=True)
        with open(root / name / "docs.jsonl", "w") as f:
            for i in range(docs_per_source):
                f.write(json.dumps({"id": f"{name}{i}", "text": domain_text(rng, words)}) + "\n")
        sources.append({"name": name, "format": "jsonl", "paths": [f"{name}/*.jsonl"], "id_field": "id"})
    (root / "junk").mkdir(parents=True, exist_ok=True)
    with open(root / "junk" / "docs.jsonl", "w") as f:
        for i in range(junk_docs):
            f.write(json.dumps({"id": f"j{i}", "text": junk_text(rng, i)}) + "\n")
    sources.append(JUNK_SOURCE)
    base = {"output": "unused-run", "seed": 3, "sources": sources, "ingest": {"docs_per_shard": 200},
            "stages": {"tokenize": {"tokenizer": {"train": {"vocab_size": 320, "sample_docs": 400}},
                                    "valid_fraction": 0.1}}}
    (root / "base.yaml").write_text(yaml.safe_dump(base, sort_keys=False))
    return root / "base.yaml"


def assert_rerun_trains_nothing(ablation, runs: int) -> None:
    """`tokenmill ablate` run again on a finished ablation (the tests' `ablation` fixture: root, config path, ...,
    the first report's bytes): no run trained, all `runs` found finished, the report byte for byte the same."""
    from tokenmill.ablate.ablation import run_ablation
    from tokenmill.ablate.config import load_ablate_config

    root, path, *_, first = ablation
    again = run_ablation(load_ablate_config(path))
    assert again["trained_now"] == 0 and again["found_finished"] == runs
    assert (root / "ablation" / "report.json").read_bytes() == first
