"""Throughput and MFU, and the JSON-lines logs a run writes: metrics.jsonl (per step), ranks.jsonl (per rank per step)
and events.jsonl."""

from __future__ import annotations

import json
import logging
import resource
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from tokenmill.train.atomic import append_whole, write_atomic

log = logging.getLogger(__name__)

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
    """An append-only JSON-lines file, each write whole lines or nothing; on resume the rows after the checkpoint are
    dropped. ``disk``: what the writes go through (the trainer's ``RunDisk``: a full disk stops every rank at once);
    None writes directly."""

    def __init__(self, path: Path, enabled: bool, disk: Any = None):
        self.path, self.enabled, self.disk = path, enabled, disk
        self._mended = False

    def write(self, row: dict[str, Any]) -> None:
        self.write_many([row])

    def write_many(self, rows: list[dict[str, Any]]) -> None:
        """Append several rows with one write (ranks.jsonl: one row per rank per step). A write that fails (a full
        disk) is cut back: the file keeps whole lines only. The first write also mends a last line that an earlier,
        killed run left unfinished, which the rows would otherwise be glued onto."""
        if self.enabled and rows:
            data = "".join(json.dumps(row, allow_nan=True) + "\n" for row in rows).encode("utf-8")
            self._write(lambda: self._append(data))

    def _append(self, data: bytes) -> None:
        if not self._mended:
            self.mend()
            self._mended = True
        append_whole(self.path, data)

    def _write(self, write: Callable[[], Any]) -> Any:
        return write() if self.disk is None else self.disk.write(self.path, write)

    def mend(self) -> bool:
        """Cut a last line left unfinished (a run killed in the middle of a write), so the next row starts a line of
        its own. True if one was cut. A truncation: it needs no space on the disk."""
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            return False
        with open(self.path, "rb+") as f:
            end = size
            while end > 0:  # back to the last newline, a block at a time (the file may be large, a line is not)
                start = max(0, end - (1 << 16))
                f.seek(start)
                block = f.read(end - start)
                if end == size and block.endswith(b"\n"):
                    return False
                cut = block.rfind(b"\n")
                if cut >= 0:
                    end = start + cut + 1
                    break
                end = start
            f.truncate(end)
        log.warning("%s: its last line was unfinished (a run killed while writing it); removed %d bytes", self.path,
                    size - end)
        return True

    def truncate_after(self, step: int) -> int:
        """Drop rows of steps after ``step`` (written after the checkpoint a restart resumes from), and lines that are
        not JSON (a killed run's unfinished last line, which would stop every resume). Returns how many rows of
        later steps were dropped."""
        if not self.enabled or not self.path.exists():
            return 0
        text = self.path.read_text(encoding="utf-8", errors="replace")
        lines = [line for line in text.splitlines() if line.strip()]
        keep, later, bad = [], 0, 0
        for line in lines:
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                bad += 1
                continue
            if not isinstance(row, dict):
                bad += 1
            elif row.get("step", 0) <= step:
                keep.append(line)
            else:
                later += 1
        if bad:
            log.warning("%s: %d line(s) not JSON dropped (a run killed while writing one)", self.path, bad)
        if later or bad or (text and not text.endswith("\n")):
            self._write(lambda: write_atomic(self.path, "".join(r + "\n" for r in keep)))
        return later

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
            self._write(lambda: write_atomic(self.path, "".join(json.dumps(r, allow_nan=True) + "\n" for r in rows)))
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
