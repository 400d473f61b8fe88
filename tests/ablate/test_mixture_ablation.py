"""The mixture search recovers a planted optimum: with a junk source among 4, the predicted mixture gives the junk
source the least weight, and trained (5 seeds) its held-out loss on the clean sources beats natural proportions,
the paired interval excluding 0. Tiny: 300 documents a clean source, 16 mixtures of 12 steps, then 2 x 5 check runs
of 30 steps (with 120 documents a source, 12 held out each, and 3 seeds, the difference was in every seed but its
interval reached over 0)."""

from __future__ import annotations

import importlib.util
import json

import pytest
import yaml

from tests.ablate.corpus import assert_rerun_trains_nothing, write_ablation, write_mixture_corpus
from tokenmill.ablate.ablation import run_ablation
from tokenmill.ablate.config import load_ablate_config

pytestmark = [pytest.mark.ray, pytest.mark.slow]
# find_spec, not importorskip: every test process collects this file, and lightgbm's import (with scikit-learn's)
# takes about 3 s.
if importlib.util.find_spec("lightgbm") is None:
    pytest.skip("lightgbm is not installed (the `ablate` and `test` extras have it)", allow_module_level=True)

CLEAN = ["farm", "kitchen", "harbour"]
SEEDS = [0, 1, 2, 3, 4]


@pytest.fixture(scope="module")
def ablation(tmp_path_factory, ray_cluster):
    root = tmp_path_factory.mktemp("ablate-mixture")
    write_mixture_corpus(root, docs_per_source=300, junk_docs=375)
    path = write_ablation(root, {}, proxy={
        "model": "opt-tiny", "seq_len": 32, "global_batch_size": 8, "tokens": 32 * 8 * 30, "eval_every": 30,
        "lr": 0.01, "warmup_steps": 2, "train": {"dropout": 0.0, "loader": {"num_workers": 0}}},
        mixture={"runs": 16, "tokens": 32 * 8 * 12, "target": CLEAN, "candidates": 20_000, "top_k": 64,
                 "check_seeds": SEEDS, "lightgbm": {"n_estimators": 300, "learning_rate": 0.03}},
        evaluations={"heldout": {"max_docs_per_source": 100}})
    result = run_ablation(load_ablate_config(path))
    report_path = root / "ablation" / "report.json"
    return root, path, result, json.loads(report_path.read_text()), report_path.read_bytes()


def test_the_junk_source_gets_the_least_weight(ablation):
    _, _, result, report, _ = ablation
    m = report["mixture"]
    assert result["trained_now"] == 16 + 2 * len(SEEDS)
    assert m["sources"] == CLEAN + ["junk"] and len(m["runs"]) == 16
    predicted = m["predicted"]
    assert min(predicted, key=predicted.get) == "junk", predicted
    assert predicted["junk"] < m["natural"]["junk"]


def test_the_predicted_mixture_beats_natural_proportions_on_held_out_loss(ablation):
    _, _, _, report, _ = ablation
    check = report["mixture"]["check"]
    predicted, natural = check["arms"]["predicted"]["loss"], check["arms"]["natural"]["loss"]
    assert predicted["mean"] < natural["mean"], check
    difference = check["difference"]
    assert difference["predicted_minus_natural"] < 0
    assert difference["high"] < 0 and difference["verdict"] == "better", difference
    assert check["seeds"] == SEEDS


def test_the_predicted_mixture_is_written_as_loader_weights_in_a_train_config(ablation):
    root, _, _, report, _ = ablation
    from tokenmill.train.config import parse_train_config

    path = root / "ablation" / report["mixture"]["train_config"]
    train = yaml.safe_load(path.read_text())
    assert train["weights"] == report["mixture"]["predicted"]
    config = parse_train_config(train, path.parent)
    assert config.weights == report["mixture"]["predicted"]


def test_rerun_trains_nothing_and_gives_the_same_report_bytes(ablation):
    assert_rerun_trains_nothing(ablation, 16 + 2 * len(SEEDS))


def test_the_notebook_plots_the_mixture_search(ablation):
    from tests.ablate.notebook import images, run_notebook, text_of

    root, _, _, _, _ = ablation
    outputs = run_notebook(root / "ablation")
    assert images(outputs) == 1  # no variant curves: the mixture runs' losses against each source's weight
    assert "predicted - natural:" in text_of(outputs)
