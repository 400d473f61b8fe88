"""Benchmark the whole clean stage against datatrove running the same quality filters, on >= 200 MB; prints JSON.

tokenmill: every step of `CleanStage.process` (escape checks and repair, ftfy/NFC/whitespace/width normalization,
PII, fastText language id, Gopher quality + repetition + C4) over Arrow tables of 5,000 documents, in this one
process. datatrove: its own `LocalPipelineExecutor` (1 task, 1 worker) with the same three filters at the same
thresholds (see benchmarks/clean_filters.py for how; spaCy is not installed, so datatrove gets tokenmill's regex
tokenizer and runs at its fastest). Both read the same JSON-lines files. MB/s per core = text MB / CPU seconds.

    python benchmarks/clean.py [--target-mb 200] [--dir bench]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent))

from clean_filters import read_jsonl, run_datatrove, timed  # noqa: E402

BATCH = 5_000


def run_stage(files: list[Path]) -> tuple[dict, list[str], list]:
    from tokenmill.pipeline.config import SourceConfig
    from tokenmill.pipeline.contract import RunContext
    from tokenmill.stages.clean.config import CleanConfig
    from tokenmill.stages.clean.stage import CleanStage

    (ids, texts), _, read_cpu = timed(lambda: read_jsonl(files))
    run = RunContext(seed=0, sources={"web": SourceConfig(name="web", format="jsonl", paths=["x"], language="en")})
    stage = CleanStage(CleanConfig(), run)
    stage.setup({})
    reasons: list = []

    def process():
        for start in range(0, len(texts), BATCH):
            n = len(texts[start:start + BATCH])
            table = pa.table({"id": ids[start:start + BATCH], "text": texts[start:start + BATCH],
                              "source": ["web"] * n, "subset": pa.nulls(n, pa.string()), "meta": ["{}"] * n})
            reasons.extend(stage.process(table, {}).drop_reason.to_pylist())

    _, wall, cpu = timed(process)
    mb = sum(len(t.encode("utf-8")) for t in texts) / 1e6
    return {"text_mb": round(mb, 1), "cpu_seconds": round(cpu, 2), "wall_seconds": round(wall, 2),
            "read_cpu_seconds": round(read_cpu, 2), "mb_per_s_per_core": round(mb / cpu, 2),
            "mb_per_s_per_core_with_reading": round(mb / (cpu + read_cpu), 2)}, ids, reasons


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target-mb", type=float, default=200)
    parser.add_argument("--dir", default="bench")
    args = parser.parse_args()

    from tokenmill.demo import write_format_files
    from tokenmill.stages.clean.quality import QualityConfig

    folder = Path(args.dir) / f"clean-jsonl-{int(args.target_mb)}mb"
    if not (folder / ".complete").exists():
        shutil.rmtree(folder, ignore_errors=True)
        write_format_files(folder, "jsonl", int(args.target_mb * 1e6))
        (folder / ".complete").touch()
    files = sorted(folder.glob("*.jsonl"))
    ours, ids, reasons = run_stage(files)
    with tempfile.TemporaryDirectory() as tmp:
        theirs, kept = run_datatrove(folder, QualityConfig(), Path(tmp))
    theirs["mb_per_s_per_core"] = round(ours["text_mb"] / theirs["cpu_seconds"], 2)  # its reading included
    quality_drops = [r for r in reasons if r is not None]
    result = {
        "benchmark": "clean",
        "corpus": {"files": len(files), "docs": len(ids), "text_mb": ours["text_mb"]},
        "cpus": os.cpu_count(),
        "tokenmill_whole_stage": {**ours, "dropped": len(quality_drops)},
        "datatrove_same_filters": {**theirs, "kept": len(kept)},
        "ratio_per_core_tokenmill_whole_stage_vs_datatrove_filters":
            round(ours["mb_per_s_per_core_with_reading"] / theirs["mb_per_s_per_core"], 2),
    }
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
