"""A training run's logs (``tokenmill train``): ``metrics.jsonl`` (one row per step: loss, lr, grad_norm, tokens,
throughput; ``valid_loss`` rows; a ``spike`` key on a step the guard refused) and ``events.jsonl`` (resume, rollback,
skip; a rollback names the documents of the offending batch).

After a rollback the steps from the healthy checkpoint on are trained again, so step numbers repeat in
``metrics.jsonl``; ``loss_segments`` cuts the rows where the step goes back.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from tokenmill.errors import TokenmillError


def train_dir(output: str | os.PathLike | None = None) -> Path:
    """The training output folder: ``output``, else ``$TOKENMILL_TRAIN``; it must hold ``metrics.jsonl``."""
    path = Path(output if output is not None else os.environ.get("TOKENMILL_TRAIN") or "build/demo/run/train")
    if not (path / "metrics.jsonl").is_file():
        raise TokenmillError(f"{path / 'metrics.jsonl'} does not exist: run `tokenmill train CONFIG` with "
                             f"output: {path}")
    return path


def _rows(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def training_metrics(output=None) -> dict[str, list[dict]]:
    """``{"train": rows with a loss, "valid": rows with valid_loss, "spikes": train rows with a spike}``, file order."""
    rows = _rows(train_dir(output) / "metrics.jsonl")
    train = [r for r in rows if "loss" in r]
    return {"train": train, "valid": [r for r in rows if "valid_loss" in r],
            "spikes": [r for r in train if "spike" in r]}


def loss_segments(rows: list[dict]) -> list[list[dict]]:
    """Train rows cut where the step goes back (a rollback or a resume from an earlier checkpoint)."""
    segments: list[list[dict]] = []
    for r in rows:
        if not segments or r["step"] <= segments[-1][-1]["step"]:
            segments.append([])
        segments[-1].append(r)
    return segments


def training_events(output=None, action: str | None = None) -> list[dict]:
    """Rows of ``events.jsonl`` (every action, or only ``action``: resume, rollback, skip), file order."""
    events = _rows(train_dir(output) / "events.jsonl")
    return [e for e in events if action in (None, e.get("action"))]


def event_documents(output=None) -> list[dict]:
    """One row per document named by a rollback: the event's step, reason and batch, then the document's fields."""
    out = []
    for e in training_events(output, "rollback"):
        for d in e.get("documents", []):
            out.append({"step": e["step"], "reason": e.get("reason"), "batch": e.get("batch"), **d})
    return out
