"""The n-gram engine's hashes: a function of the text only, so quality scores do not move with PYTHONHASHSEED."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np

from tokenmill.text.quality import QualityConfig, quality_scores, split_words
from tokenmill.text.quality import measures, ngrams, vocab

TEXT = ("The committee met on Tuesday to discuss the new budget for the city library. Members agreed that the "
        "reading rooms should stay open later in the evening, and that the children's section needs more books.")

_CHILD = """
import json, sys
import numpy as np
from tokenmill.text.quality import QualityConfig, quality_scores, split_words
from tokenmill.text.quality.ngrams import token_hashes
texts = json.loads(sys.stdin.read())
scores = quality_scores(texts, ["en"] * len(texts), QualityConfig())
print(json.dumps({"hashes": [int(h) for h in token_hashes(split_words(texts[0]))],
                  "scores": {k: [None if v != v else float(v) for v in col] for k, col in scores.items()}}))
"""


def _child(seed: str, texts: list[str]) -> dict:
    env = {**os.environ, "PYTHONHASHSEED": seed}
    done = subprocess.run([sys.executable, "-c", _CHILD], input=json.dumps(texts), capture_output=True, text=True,
                          env=env, check=True, timeout=120)
    return json.loads(done.stdout)


def test_hashes_and_scores_do_not_depend_on_the_hash_seed():
    """Python salts `hash(str)` per process: word hashes built on it differed from run to run, and so could the
    rare n-gram collision that counts two different n-grams as one."""
    texts = [TEXT, TEXT + " " + TEXT, "Über naïve café — ünïcödé, 数字 and emoji 🙂 " * 20]
    one, two = _child("1", texts), _child("2", texts)
    assert one["hashes"] == two["hashes"]
    assert one["scores"] == two["scores"]
    assert len(set(one["hashes"])) == len(set(split_words(TEXT)))  # distinct words, distinct hashes


def test_token_hashes_are_a_function_of_the_characters():
    words = ["the", "the", "The", "eht", "", "a" * 1000, "\ud800", "🙂", "ab", "ba"]
    h = ngrams.token_hashes(words)
    assert h.dtype == np.uint64 and len(h) == len(words)
    assert h[0] == h[1] and len(set(h.tolist())) == len(words) - 1  # equal words only collide
    assert ngrams.token_hashes(words[::-1]).tolist() == h[::-1].tolist()  # independent of the neighbours
    assert ngrams.token_hashes([]).tolist() == []


def test_the_hash_decides_which_n_grams_repeat(monkeypatch):
    """Why the hash must be deterministic: its value reaches the scores (a collision makes n-grams repeat)."""
    honest = quality_scores([TEXT], ["en"], QualityConfig())["rep_dup_5_gram_char_frac"][0]
    monkeypatch.setattr(measures, "text_units", _colliding_units)
    colliding = quality_scores([TEXT], ["en"], QualityConfig())["rep_dup_5_gram_char_frac"][0]
    assert honest == 0.0 and colliding > 0.5


def _colliding_units(texts, words):
    units, ids = vocab.text_units(texts, words)
    units.hashes = np.zeros(len(ids), dtype=np.uint64)  # every word hashes alike
    return units, ids
