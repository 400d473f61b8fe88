"""Throughput and MFU, and the JSON-lines logs a run writes: metrics.jsonl (per step), ranks.jsonl (per rank per step)
and events.jsonl."""

from __future__ import annotations

import json
import resource
from pathlib import Path
from typing import Any

import torch

from tokenmill.train.atomic import write_atomic

#: The JSON-lines logs in a run's output folder (written by the trainer, read by ``tokenmill train doctor``).
METRICS_JSONL, EVENTS_JSONL, RANKS_JSONL = "metrics.jsonl", "events.jsonl", "ranks.jsonl"

# Dense bf16 peak TFLOP/s per device (vendor datasheets, no sparsity).
PEAK_TFLOPS = {"H200": 989.0, "H100": 989.0, "A100": 312.0, "A10G": 125.0, "L4": 121.0, "V100": 125.0}


def peak_tflops(device: torch.device, configured: float | None) -> float | None:
    if configured is not None:
        return configured
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        for key, value in PEAK_TFLOPS.items():
            if key in name:
                return value
    return None


def memory(device: torch.device) -> dict[str, float]:
    if device.type == "cuda":
        return {"memory_gb": round(torch.cuda.max_memory_allocated(device) / 2**30, 3)}
    return {"max_rss_gb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 3)}


class JsonLines:
    """An append-only JSON-lines file, flushed per row; on resume the rows after the checkpoint are dropped."""

    def __init__(self, path: Path, enabled: bool):
        self.path, self.enabled = path, enabled

    def write(self, row: dict[str, Any]) -> None:
        self.write_many([row])

    def write_many(self, rows: list[dict[str, Any]]) -> None:
        """Append several rows with one open (ranks.jsonl: one row per rank per step)."""
        if self.enabled and rows:
            with open(self.path, "a", encoding="utf-8") as f:
                f.write("".join(json.dumps(row, allow_nan=True) + "\n" for row in rows))

    def truncate_after(self, step: int) -> int:
        """Drop rows of steps after ``step`` (written after the checkpoint a restart resumes from). Returns how many."""
        if not self.enabled or not self.path.exists():
            return 0
        rows = [line for line in self.path.read_text(encoding="utf-8").splitlines() if line.strip()]
        keep = [r for r in rows if json.loads(r).get("step", 0) <= step]
        if len(keep) != len(rows):
            write_atomic(self.path, "".join(r + "\n" for r in keep))
        return len(rows) - len(keep)

    def mark_after(self, step: int, key: str) -> int:
        """Set ``key: true`` on rows of steps after ``step`` (a rollback's discarded steps). Returns how many."""
        if not self.enabled or not self.path.exists():
            return 0
        rows = self.rows()
        marked = 0
        for row in rows:
            if row.get("step", 0) > step and not row.get(key):
                row[key] = True
                marked += 1
        if marked:
            write_atomic(self.path, "".join(json.dumps(r, allow_nan=True) + "\n" for r in rows))
        return marked

    def rows(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        return [json.loads(line) for line in self.path.read_text(encoding="utf-8").splitlines() if line.strip()]

    def read(self) -> tuple[list[dict[str, Any]], int]:
        """The rows that parse, and how many lines did not (a killed run's truncated last line); none if absent.
        For readers of a finished or killed run (``tokenmill train doctor``); ``rows`` raises on a bad line."""
        if not self.path.exists():
            return [], 0
        rows, bad = [], 0
        for line in self.path.read_text(encoding="utf-8", errors="replace").splitlines():
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                bad += 1
                continue
            if isinstance(row, dict):
                rows.append(row)
            else:
                bad += 1
        return rows, bad
