"""Fixtures for tokenmill.inspect: one small real run of the demo pipeline (Ray), and one tiny training run with a
rollback (a poisoned batch), both built once per session."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

try:  # the notebooks and plots render with Agg, never a GUI backend
    import matplotlib

    matplotlib.use("Agg")
except ImportError:  # plots tests skip with a reason
    pass


@pytest.fixture(scope="session")
def small_run(tmp_path_factory, ray_cluster) -> Path:
    """The demo corpus at 40 documents per source through every stage; returns the run folder."""
    from tokenmill.demo import write_demo_corpus
    from tokenmill.pipeline.config import load_config
    from tokenmill.pipeline.runner import run_pipeline

    root = tmp_path_factory.mktemp("inspect-demo")
    write_demo_corpus(root, docs_per_source=40, classifier=False)
    config = load_config(root / "demo.yaml")
    run_pipeline(config)
    return config.output_dir


def _poisoned_tokens(root: Path):
    """Constant documents plus one of random tokens, with weights that serve it once, at step 12 to 17 (as in
    tests/train/test_trainer.py)."""
    from tokenmill.loader import TokenLoader
    from tests.train.runs import constant_docs, write_tokens

    rng = np.random.default_rng(11)
    poison = [rng.integers(1, 255, size=33).tolist()]
    tokens = write_tokens(root / "tokens", extra={"poison": poison}, docs=constant_docs)
    for share in range(40, 120):
        weights = {"alpha": 0.6, "beta": 0.4, "poison": 1.0 / share}
        loader = TokenLoader([str(tokens)], seq_len=32, global_batch_size=4, weights=weights)
        stream = [s.name for s in loader.streams].index("poison")
        hits = np.nonzero(loader.order.locate(np.arange(4 * 29)).stream == stream)[0] // 4
        if len(hits) == 1 and 11 <= hits[0] <= 16:
            return tokens, weights
    raise AssertionError("no weight serves the poison once in the window")


@pytest.fixture(scope="session")
def train_output(tmp_path_factory) -> Path:
    """A 24-step opt-tiny run that rolls back once (the poisoned batch) and evaluates every 10 steps."""
    from tokenmill.train.config import parse_train_config
    from tokenmill.train.trainer import Trainer
    from tests.train.runs import CONSTANT_FINGERPRINTS, config

    root = tmp_path_factory.mktemp("inspect-train")
    tokens, weights = _poisoned_tokens(root)
    out = root / "run"
    guard = {"warmup_steps": 8, "ewm_alpha": 0.5, "z_threshold": 12.0, "lr_factor": 0.5}
    cfg = config(tokens, out, weights=weights, global_batch_size=4, steps=24, lr=1e-2, warmup_steps=0,
                 eval_every=10, checkpoint_every=5, guard=guard, fingerprints=CONSTANT_FINGERPRINTS)
    summary = Trainer(parse_train_config(cfg, root)).run()
    assert summary["rollbacks"] == 1, summary
    return out


@pytest.fixture(scope="session")
def classifier_run(tmp_path_factory, ray_cluster) -> Path:
    """A run whose clean stage applies the tiny quality classifier of tests/stages/clean/classifier_model.py to its
    own training corpus, threshold 0.518 and 0.482 for the web source through an override (about half of each source
    below it), the quality rules off so that the classifier decides; returns the run folder."""
    import yaml

    from tests.stages.clean.classifier_model import train_tiny
    from tokenmill.pipeline.config import load_config
    from tokenmill.pipeline.runner import run_pipeline

    root = tmp_path_factory.mktemp("inspect-classifier")
    quality_off = {"gopher_quality": None, "gopher_repetition": None, "c4": None, "cjk": None}
    train_tiny(root)
    hq = {"name": "hq", "model": "model/model.bin"}
    config = {"output": "run", "seed": 1, "sources": [
        {"name": "prose", "format": "jsonl", "paths": ["pos/*.jsonl"], "id_field": "id", "language": "en"},
        {"name": "web", "format": "jsonl", "paths": ["neg/web.jsonl"], "language": "any"}],
        "stages": {"clean": {"escapes": {"mode": "flag"}, "langid": None, "quality": quality_off,
                             "classifiers": [{**hq, "keep": {"threshold": 0.518}}],
                             "overrides": [{"source": "web", "classifiers": [{**hq, "keep": {"threshold": 0.482}}]}]}}}
    (root / "run.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    loaded = load_config(root / "run.yaml")
    run_pipeline(loaded)
    return loaded.output_dir
