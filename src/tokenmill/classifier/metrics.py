"""Valid-split measures of a binary classifier: precision, recall and F1 at a threshold, and ROC AUC by ranks."""

from __future__ import annotations

from typing import Any

import numpy as np


def average_ranks(values: np.ndarray) -> np.ndarray:
    """1-based ranks of `values` in ascending order, tied values sharing the mean of their ranks (float64)."""
    values = np.asarray(values)
    order = np.argsort(values, kind="stable")
    ordered = values[order]
    # starts of each run of equal values in sorted order, and the run each sorted position belongs to
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    ends = np.r_[starts[1:], len(values)]
    mean_rank = (starts + 1 + ends) / 2.0  # mean of ranks starts+1 .. ends
    ranks = np.empty(len(values), dtype=np.float64)
    ranks[order] = np.repeat(mean_rank, ends - starts)
    return ranks


def roc_auc(scores: np.ndarray, positive: np.ndarray) -> float | None:
    """ROC AUC: the probability that a random positive scores above a random negative, a tie counting one half.

    Mann-Whitney U from the ranks (ties averaged): U = (sum of the positives' ranks) - n_pos (n_pos + 1) / 2, and
    AUC = U / (n_pos n_neg). None when either class is empty (the AUC is undefined)."""
    positive = np.asarray(positive, dtype=bool)
    n_pos = int(positive.sum())
    n_neg = len(positive) - n_pos
    if n_pos == 0 or n_neg == 0:
        return None
    ranks = average_ranks(np.asarray(scores, dtype=np.float64))
    u = ranks[positive].sum() - n_pos * (n_pos + 1) / 2.0
    return float(u / (n_pos * n_neg))


def classification_report(scores: np.ndarray, positive: np.ndarray, threshold: float = 0.5) -> dict[str, Any]:
    """Counts, precision, recall and F1 of calling `score >= threshold` positive, and the ROC AUC.

    A measure whose denominator is 0 (no document called positive, no positive document) is None, not 0 or NaN."""
    scores = np.asarray(scores, dtype=np.float64)
    positive = np.asarray(positive, dtype=bool)
    called = scores >= threshold
    tp = int((called & positive).sum())
    fp = int((called & ~positive).sum())
    fn = int((~called & positive).sum())
    precision = tp / (tp + fp) if tp + fp else None
    recall = tp / (tp + fn) if tp + fn else None
    f1 = 2 * tp / (2 * tp + fp + fn) if tp + fp + fn else None
    return {"documents": len(scores), "positives": int(positive.sum()), "negatives": int((~positive).sum()),
            "threshold": threshold, "true_positives": tp, "false_positives": fp, "false_negatives": fn,
            "precision": precision, "recall": recall, "f1": f1, "roc_auc": roc_auc(scores, positive)}
