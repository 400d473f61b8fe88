"""A tiny fastText quality classifier trained for a test (about 1-2 s): prose-like positives, web-like negatives."""

from __future__ import annotations

from pathlib import Path

from tests.classifier.corpus import write_corpus
from tokenmill.classifier.config import load_train_config
from tokenmill.classifier.train import TrainResult, train_classifier

PROSE_TEXT = ("the study measured how river water changed after the long dry summer and the results suggest that "
              "local farmers adapted their methods carefully")
WEB_TEXT = "home login cart subscribe click here free shipping menu contact privacy policy cookies accept share"


def train_tiny(root: Path) -> TrainResult:
    """The corpus of `tests/classifier/corpus.py` written under `root` and trained into `root/model/`."""
    return train_classifier(load_train_config(write_corpus(root)))
