"""Scoring texts with a fastText classifier: what the trainer's validation and the clean filter both call."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from tokenmill.classifier.config import PrepareOptions
from tokenmill.classifier.prepare import predict_line


def score_texts(model, texts: Sequence[str], options: PrepareOptions, label: str) -> np.ndarray:
    """The probability of `label` for each text (float32 in [0, 1]), each read as `prepare(text, options)`'s words.

    Texts come as the clean chain hands them on: normalized. A text with nothing left after preparation scores as
    fastText scores an empty line (the labels' prior learned from the bias alone). One call for the whole list,
    asking for every label (`k=-1`, with a negative threshold so that none is left out), so the score of `label` is
    read even where it is not the most likely one.

    The call is the one `model.predict(list)` makes (`model.f.multilinePredict`, the C++ binding), handed the lines
    `predict_line` gives: UTF-8 bytes already ending in the newline. `predict` itself would scan each line for a
    newline, copy it to append one and encode the copy again; tests/classifier/test_score.py checks that both give
    the same probabilities, bit for bit, on real text.
    """
    if not texts:
        return np.zeros(0, dtype=np.float32)
    lines = [predict_line(t, options) for t in texts]
    labels, probs = model.f.multilinePredict(lines, -1, -1.0, "strict")
    out = np.zeros(len(lines), dtype=np.float32)
    for i, (names, values) in enumerate(zip(labels, probs)):
        for name, value in zip(names, values):
            if name == label:
                out[i] = value
                break
    # fastText adds 1e-5 inside its log before exponentiating again: a sure answer reads 1.00001
    return np.clip(out, 0.0, 1.0)
