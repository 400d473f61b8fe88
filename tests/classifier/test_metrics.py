"""Valid-split measures: the rank AUC against a pairwise count, ties included; precision, recall and F1 by hand."""

from __future__ import annotations

import numpy as np
import pytest

from tokenmill.classifier.metrics import average_ranks, classification_report, roc_auc


def pairwise_auc(scores: np.ndarray, positive: np.ndarray) -> float:
    """Every (positive, negative) pair counted: 1 when the positive scores higher, 1/2 on a tie."""
    pos, neg = scores[positive], scores[~positive]
    wins = (pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()
    return float(wins / (len(pos) * len(neg)))


@pytest.mark.parametrize("seed", range(20))
def test_rank_auc_matches_the_pairwise_count_with_ties(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 300))
    scores = rng.integers(0, int(rng.integers(1, 12)), n) / 10.0  # few distinct values: many ties
    positive = rng.random(n) < rng.uniform(0.1, 0.9)
    positive[0], positive[1] = True, False  # both classes present
    assert roc_auc(scores, positive) == pytest.approx(pairwise_auc(scores, positive), abs=1e-12)


def test_auc_extremes_and_an_empty_class():
    positive = np.array([True, True, False, False])
    assert roc_auc(np.array([0.9, 0.8, 0.1, 0.2]), positive) == 1.0
    assert roc_auc(np.array([0.1, 0.2, 0.9, 0.8]), positive) == 0.0
    assert roc_auc(np.full(4, 0.5), positive) == 0.5  # all tied: chance
    assert roc_auc(np.array([0.3, 0.4]), np.array([True, True])) is None


def test_average_ranks_share_the_mean_of_tied_ranks():
    assert average_ranks(np.array([3.0, 1.0, 3.0, 2.0, 3.0])).tolist() == [4.0, 1.0, 4.0, 2.0, 4.0]


def test_precision_recall_f1_at_the_threshold():
    scores = np.array([0.9, 0.6, 0.5, 0.4, 0.7, 0.1])
    positive = np.array([True, True, True, True, False, False])
    r = classification_report(scores, positive, threshold=0.5)
    # called positive: 0.9, 0.6, 0.5 (positives) and 0.7 (a negative); missed: 0.4
    assert (r["true_positives"], r["false_positives"], r["false_negatives"]) == (3, 1, 1)
    assert r["precision"] == 0.75 and r["recall"] == 0.75 and r["f1"] == 0.75
    none_called = classification_report(np.array([0.1, 0.2]), np.array([True, False]))
    assert none_called["precision"] is None and none_called["recall"] == 0.0 and none_called["f1"] == 0.0
