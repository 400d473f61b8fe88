"""Mixture search: the draws around the natural proportions, and the LightGBM fit and search on synthetic
(weights -> loss) data with a known optimum."""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest

from tokenmill.ablate import mixture

# find_spec, not importorskip: every test process collects this file, and lightgbm's import (with scikit-learn's)
# takes about 3 s.
if importlib.util.find_spec("lightgbm") is None:
    pytest.skip("lightgbm is not installed (the `ablate` and `test` extras have it)", allow_module_level=True)

NATURAL = np.array([0.3, 0.2, 0.2, 0.3])  # the last source: junk, 30% of the tokens
FAST = {"n_estimators": 300, "learning_rate": 0.03}  # RegMix's 1000 rounds at 0.01 take seconds more, to no change here


def test_draws_are_mixtures_around_the_natural_proportions_seeded():
    a = mixture.draw(NATURAL, 2000, (0.1, 5.0), 1e-3, np.random.default_rng(1))
    assert a.shape == (2000, 4) and np.allclose(a.sum(axis=1), 1.0) and (a >= 0).all()
    assert ((a > 0) & (a < 1e-3)).sum() == 0  # under the floor: 0
    assert np.abs(a.mean(axis=0) - NATURAL).max() < 0.03  # Dirichlet(natural x s) has mean natural
    assert (a.max(axis=1) > 0.9).mean() > 0.1  # small strengths reach the corners
    assert np.array_equal(a, mixture.draw(NATURAL, 2000, (0.1, 5.0), 1e-3, np.random.default_rng(1)))


def _loss(w: np.ndarray) -> np.ndarray:
    """A known truth: junk (the last source) costs the most, and the clean sources are best at (0.5, 0.3, 0.2)."""
    clean = w[:, :3] / np.maximum(w[:, :3].sum(axis=1, keepdims=True), 1e-9)
    return 2.0 + 1.5 * w[:, 3] + 0.8 * ((clean - np.array([0.5, 0.3, 0.2])) ** 2).sum(axis=1)


def test_fit_and_search_find_the_planted_optimum_from_a_few_dozen_noisy_runs():
    rng = np.random.default_rng(0)
    weights = mixture.draw(NATURAL, 48, (0.1, 5.0), 1e-3, rng)
    losses = _loss(weights) + rng.normal(0, 0.01, size=len(weights))
    model = mixture.fit(weights, losses, FAST, seed=0)
    best, predicted = mixture.search(model, NATURAL, 5000, 64, (0.1, 5.0), 1e-3, np.random.default_rng(1))
    assert abs(best.sum() - 1) < 1e-9
    assert best[3] == best.min() and best[3] < 0.05, best  # the junk source gets the least weight
    assert _loss(best[None])[0] < _loss(NATURAL[None])[0] - 0.3  # far better than natural proportions
    assert best[0] == best[:3].max(), best  # and the clean source of the largest optimal share leads
    assert abs(predicted - _loss(best[None])[0]) < 0.15
    # the same inputs give the same mixture (one thread, deterministic histograms, seeded)
    again, _ = mixture.search(mixture.fit(weights, losses, FAST, seed=0), NATURAL, 5000, 64, (0.1, 5.0), 1e-3,
                              np.random.default_rng(1))
    assert np.array_equal(best, again)


def test_cross_validated_rank_correlation_sees_a_fit_that_ranks_and_one_that_cannot():
    rng = np.random.default_rng(2)
    weights = mixture.draw(NATURAL, 32, (0.1, 5.0), 1e-3, rng)
    good = mixture.cross_validated_rank_correlation(weights, _loss(weights), FAST, seed=0)
    noise = mixture.cross_validated_rank_correlation(weights, rng.normal(size=32), FAST, seed=0)
    assert good > 0.7 and abs(noise) < 0.5, (good, noise)


def test_spearman_matches_scipy():
    from scipy.stats import spearmanr

    rng = np.random.default_rng(3)
    a, b = rng.normal(size=50), rng.normal(size=50)
    b[:10] = a[:10]
    a[20:25] = 1.0  # ties
    assert abs(mixture.spearman(a, b) - spearmanr(a, b).statistic) < 1e-12


def test_mixture_config_is_checked_before_any_work(tmp_path):
    from tests.ablate.corpus import write_ablation, write_mixture_corpus
    from tokenmill.ablate.config import load_ablate_config
    from tokenmill.ablate.validate import problems
    from tokenmill.errors import ConfigError

    write_mixture_corpus(tmp_path, docs_per_source=5, junk_docs=5)
    good = load_ablate_config(write_ablation(tmp_path, {}, mixture={"target": ["farm", "kitchen"]}))
    assert problems(good) == [] and good.names == ["base"]
    bad = load_ablate_config(write_ablation(tmp_path, {}, mixture={"sources": ["farm", "web"], "target": ["junk2"],
                                                                   "tokens": 10, "model": "opt-huge"}))
    found = problems(bad)
    assert any(p.startswith("mixture.model") and "opt-huge" in p for p in found), found
    assert any(p.startswith("mixture.sources: web is not a source of the base run config") for p in found), found
    assert any(p.startswith("mixture.target: junk2") for p in found), found
    assert any(p.startswith("mixture.tokens: 10 is less than one step") for p in found), found
    with pytest.raises(ConfigError, match="give at least one variant, or a mixture block"):
        load_ablate_config(write_ablation(tmp_path, {}))
    with pytest.raises(ConfigError, match="top_k"):
        load_ablate_config(write_ablation(tmp_path, {}, mixture={"candidates": 100, "top_k": 200}))
    with pytest.raises(ConfigError, match="early_stop: there are no variants"):
        load_ablate_config(write_ablation(tmp_path, {}, mixture={}, early_stop={}))


def test_a_mixture_folder_made_with_other_settings_is_refused(tmp_path):
    from tests.ablate.corpus import write_ablation, write_mixture_corpus
    from tokenmill.ablate.config import load_ablate_config
    from tokenmill.errors import TokenmillError

    write_mixture_corpus(tmp_path, docs_per_source=5, junk_docs=5)
    config = load_ablate_config(write_ablation(tmp_path, {}, mixture={"runs": 8}))
    saved = {"sources": ["farm", "kitchen", "harbour", "junk"], "natural": [0.25] * 4, "mixtures": [[0.25] * 4] * 8,
             "settings": {**config.mixture.model_dump(mode="json"), "sources": mixture.sources_of(config),
                          "proxy": config.proxy.model_dump(mode="json"), "seeds": config.seeds}}
    mixture.folder(config).mkdir(parents=True)
    (mixture.folder(config) / "plan.json").write_text(json.dumps(saved))
    assert mixture.plan(config)["mixtures"] == saved["mixtures"]  # read back, not drawn again
    other = load_ablate_config(write_ablation(tmp_path, {}, mixture={"runs": 9}))
    with pytest.raises(TokenmillError, match=r"other mixture settings \(runs changed\)"):
        mixture.plan(other)
