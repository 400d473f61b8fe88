"""A small two-class corpus: prose-like positives and boilerplate-like negatives, as JSON lines and plain text."""

from __future__ import annotations

import json
import random
from pathlib import Path

import yaml

PROSE = ("the study measured how river water changed after the long dry summer and the results suggest that "
         "local farmers adapted their methods carefully while scientists recorded each season with patience").split()
WEB = ("home login cart subscribe click here free shipping menu contact privacy policy cookies accept share "
       "tweet like follow deals sale offer best price buy now sign up newsletter terms copyright").split()


def _doc(rng: random.Random, words: list[str], noisy: bool) -> str:
    lines = [" ".join(rng.choice(words) for _ in range(rng.randint(6, 14))) for _ in range(rng.randint(2, 5))]
    if noisy:  # what the clean stage's normalization changes: CRLF, space runs, no-break spaces, full-width digits
        lines = [line.replace(" ", "  ", 1).replace(" ", "\u00a0", 1) + " \uff11\uff12" for line in lines]
        lines.append(f"write to someone{rng.randint(0, 99)}@example.com")  # the clean stage's PII step replaces it
        return "\r\n".join(lines)
    return "\n".join(lines)


def write_corpus(root: Path, docs: int = 240, seed: int = 0) -> Path:
    """Positives in `pos/*.jsonl` (two files, with ids), negatives in `neg/web.jsonl` (no ids) and `neg/page.txt`;
    returns the config's path. One in three documents needs normalizing and has an e-mail address."""
    rng = random.Random(seed)
    (root / "pos").mkdir(parents=True, exist_ok=True)
    (root / "neg").mkdir(parents=True, exist_ok=True)
    for part in range(2):
        with open(root / "pos" / f"part-{part}.jsonl", "w", encoding="utf-8") as f:
            for i in range(docs // 2):
                f.write(json.dumps({"id": f"p{part}-{i}", "text": _doc(rng, PROSE, i % 3 == 0)}) + "\n")
    with open(root / "neg" / "web.jsonl", "w", encoding="utf-8") as f:
        for i in range(docs):
            f.write(json.dumps({"text": _doc(rng, WEB, i % 3 == 0)}) + "\n")
    (root / "neg" / "page.txt").write_text(_doc(rng, WEB, False), encoding="utf-8")
    config = {
        "output": "model",
        "seed": 3,
        "positives": [{"name": "prose", "format": "jsonl", "paths": ["pos/*.jsonl"], "id_field": "id"}],
        "negatives": [{"name": "web", "format": "jsonl", "paths": ["neg/web.jsonl"]},
                      {"name": "page", "format": "text", "paths": ["neg/page.txt"]}],
        "valid_fraction": 0.25,
        "fasttext": {"dim": 8, "epoch": 3, "bucket": 20000},
    }
    path = root / "classifier.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return path
