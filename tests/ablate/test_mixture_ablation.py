"""The mixture search recovers a planted optimum: with a junk source among 4, the predicted mixture gives the junk
source the least weight, and trained (3 seeds) its held-out loss on the clean sources beats natural proportions.
Tiny: 16 mixtures of 12 steps, then 2 x 3 check runs of 30 steps."""

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


@pytest.fixture(scope="module")
def ablation(tmp_path_factory, ray_cluster):
    root = tmp_path_factory.mktemp("ablate-mixture")
    write_mixture_corpus(root)
    path = write_ablation(root, {}, proxy={
        "model": "opt-tiny", "seq_len": 32, "global_batch_size": 8, "tokens": 32 * 8 * 30, "eval_every": 30,
        "lr": 0.01, "warmup_steps": 2, "train": {"dropout": 0.0, "loader": {"num_workers": 0}}},
        mixture={"runs": 16, "tokens": 32 * 8 * 12, "target": CLEAN, "candidates": 20_000, "top_k": 64,
                 "lightgbm": {"n_estimators": 300, "learning_rate": 0.03}})
    result = run_ablation(load_ablate_config(path))
    report_path = root / "ablation" / "report.json"
    return root, path, result, json.loads(report_path.read_text()), report_path.read_bytes()


def test_the_junk_source_gets_the_least_weight(ablation):
    _, _, result, report, _ = ablation
    m = report["mixture"]
    assert result["trained_now"] == 16 + 6
    assert m["sources"] == CLEAN + ["junk"] and len(m["runs"]) == 16
    predicted = m["predicted"]
    assert min(predicted, key=predicted.get) == "junk", predicted
    assert predicted["junk"] < m["natural"]["junk"]


def test_the_predicted_mixture_beats_natural_proportions_on_held_out_loss(ablation):
    _, _, _, report, _ = ablation
    check = report["mixture"]["check"]
    predicted, natural = check["arms"]["predicted"]["loss"], check["arms"]["natural"]["loss"]
    assert predicted["mean"] < natural["mean"], check
    assert check["difference"]["predicted_minus_natural"] < 0


def test_the_predicted_mixture_is_written_as_loader_weights_in_a_train_config(ablation):
    root, _, _, report, _ = ablation
    from tokenmill.train.config import parse_train_config

    path = root / "ablation" / report["mixture"]["train_config"]
    train = yaml.safe_load(path.read_text())
    assert train["weights"] == report["mixture"]["predicted"]
    config = parse_train_config(train, path.parent)
    assert config.weights == report["mixture"]["predicted"]


def test_rerun_trains_nothing_and_gives_the_same_report_bytes(ablation):
    assert_rerun_trains_nothing(ablation, 22)


def test_the_notebook_plots_the_mixture_search(ablation):
    from tests.ablate.notebook import images, run_notebook, text_of

    root, _, _, _, _ = ablation
    outputs = run_notebook(root / "ablation")
    assert images(outputs) == 1  # no variant curves: the mixture runs' losses against each source's weight
    assert "predicted - natural:" in text_of(outputs)
