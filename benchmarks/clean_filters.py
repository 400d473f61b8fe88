"""Benchmark the quality filters alone: tokenmill's Gopher quality + Gopher repetition + C4 against the same three
filters through datatrove's own pipeline, on >= 50 MB of generated English text, in one run; prints JSON.

    python benchmarks/clean_filters.py [--target-mb 50] [--dir bench]

Both sides read the same JSON-lines files (written once by `tokenmill.demo.write_format_files`) in this one
process and run the rules at the same thresholds (`QualityConfig()`):

- tokenmill: `json.loads` per line, then `quality(texts, langs, config)` over all documents.
- datatrove: `LocalPipelineExecutor` (1 task, 1 worker) over `JsonlReader` -> `GopherQualityFilter` ->
  `GopherRepetitionFilter` -> `C4QualityFilter` (C4 last: it rewrites the text). JsonlReader needs orjson; where
  it is missing, the same reader on the standard `json` module stands in (as tokenmill's side uses). datatrove's
  English word tokenizer is spaCy, which is not installed here, so its filters get tokenmill's regex tokenizer
  (`RegexWordTokenizer`; spaCy's blank English pipeline is ~9x slower still, so this is datatrove at its fastest).

MB/s per core is text MB (UTF-8) over process CPU seconds; wall MB/s is given too. The whole-stage benchmark (clean
stage on Ray, all steps) is another script; this one isolates the filters. Compare ratios across machines, not
absolute rates.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path


def timed(fn):
    wall, cpu = time.perf_counter(), time.process_time()
    result = fn()
    return result, time.perf_counter() - wall, time.process_time() - cpu


def rates(mb: float, wall: float, cpu: float) -> dict:
    return {"wall_seconds": round(wall, 2), "cpu_seconds": round(cpu, 2), "mb_per_s_wall": round(mb / wall, 2),
            "mb_per_s_per_core": round(mb / cpu, 2)}


def read_jsonl(files: list[Path]) -> tuple[list[str], list[str]]:
    ids, texts = [], []
    for path in files:
        with open(path, encoding="utf-8") as f:
            for line in f:
                record = json.loads(line)
                ids.append(str(record["id"]))
                texts.append(record["text"])
    return ids, texts


def run_tokenmill(files: list[Path], config) -> tuple[dict, list[str], list[str | None]]:
    from tokenmill.text.quality import quality

    (ids, texts), read_wall, read_cpu = timed(lambda: read_jsonl(files))
    (_, reasons), wall, cpu = timed(lambda: quality(texts, ["en"] * len(texts), config))
    mb = sum(len(t.encode("utf-8")) for t in texts) / 1e6
    return {
        "text_mb": round(mb, 2),
        "filters_only": rates(mb, wall, cpu),
        "with_reading": rates(mb, wall + read_wall, cpu + read_cpu),
        "kept": sum(r is None for r in reasons),
    }, ids, reasons


def jsonl_reader(folder: Path):
    """datatrove's JsonlReader; it needs orjson, so without orjson the same reader on the standard json module."""
    from datatrove.pipeline.readers import JsonlReader
    from datatrove.pipeline.readers.base import BaseDiskReader

    try:
        import orjson  # noqa: F401

        return JsonlReader(str(folder), glob_pattern="*.jsonl", id_key="id", text_key="text")
    except ImportError:
        pass

    class StdlibJsonlReader(BaseDiskReader):
        """JsonlReader.read_file with `json.loads` in place of `orjson.loads` (no media, no compression)."""

        name = "🐿 Jsonl (stdlib json)"

        def read_file(self, filepath: str):
            with self.data_folder.open(filepath, "r") as f:
                for li, line in enumerate(f):
                    with self.track_time():
                        document = self.get_document_from_dict(json.loads(line), filepath, li)
                        if not document:
                            continue
                    yield document

    return StdlibJsonlReader(str(folder), glob_pattern="*.jsonl", id_key="id", text_key="text")


def run_datatrove(folder: Path, config, workdir: Path) -> tuple[dict, set[str]]:
    from datatrove.executor import LocalPipelineExecutor

    from tokenmill.text.quality import datatrove_filters

    kept: set[str] = set()

    def collect(data, rank: int = 0, world_size: int = 1):
        for doc in data:
            kept.add(str(doc.id))
            yield doc

    reader = jsonl_reader(folder)
    executor = LocalPipelineExecutor(
        pipeline=[reader, *datatrove_filters(config), collect],
        tasks=1, workers=1, logging_dir=str(workdir / "datatrove-logs"), skip_completed=False,
    )
    stats, wall, cpu = timed(executor.run)
    steps = {step.name: round(step.time_stats.total, 2) for step in stats.stats if step.time_stats.total > 0}
    filter_seconds = sum(t for name, t in steps.items() if not name.endswith(reader.name))
    return {"reader": reader.name, "steps_seconds": steps, "filter_seconds": round(filter_seconds, 2),
            "wall_seconds": round(wall, 2), "cpu_seconds": round(cpu, 2)}, kept


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target-mb", type=float, default=50)
    parser.add_argument("--dir", default="bench")
    args = parser.parse_args()

    from importlib.metadata import version

    from tokenmill.demo import write_format_files
    from tokenmill.text.quality import QualityConfig

    folder = Path(args.dir) / f"clean-filters-jsonl-{int(args.target_mb)}mb"
    if not (folder / ".complete").exists():
        shutil.rmtree(folder, ignore_errors=True)
        t = time.perf_counter()
        write_format_files(folder, "jsonl", int(args.target_mb * 1e6))
        (folder / ".complete").touch()
        print(f"generated {folder} in {time.perf_counter() - t:.1f}s", file=sys.stderr)
    files = sorted(folder.glob("*.jsonl"))
    config = QualityConfig()

    ours, ids, reasons = run_tokenmill(files, config)
    with tempfile.TemporaryDirectory() as tmp:
        theirs, kept_ids = run_datatrove(folder, config, Path(tmp))
    text_mb = ours["text_mb"]
    theirs["mb_per_s_per_core"] = round(text_mb / theirs["cpu_seconds"], 2)  # reading included
    theirs["mb_per_s_wall"] = round(text_mb / theirs["wall_seconds"], 2)
    theirs["filters_only_mb_per_s"] = round(text_mb / theirs["filter_seconds"], 2)
    theirs["kept"] = len(kept_ids)
    agree = sum((r is None) == (i in kept_ids) for i, r in zip(ids, reasons)) / len(ids)
    result = {
        "benchmark": "clean_filters",
        "corpus": {"files": len(files), "docs": len(ids), "text_mb": round(text_mb, 1),
                   "file_mb": round(sum(f.stat().st_size for f in files) / 1e6, 1)},
        "cpus": os.cpu_count(),
        "datatrove_version": version("datatrove"),
        "reference_tokenizer": "tokenmill RegexWordTokenizer injected into datatrove (spaCy not installed)",
        "tokenmill": ours,
        "datatrove_pipeline": theirs,
        "keep_drop_agreement": round(agree, 5),
        "ratios": {
            "filters_only_per_core":
                round(ours["filters_only"]["mb_per_s_per_core"] / theirs["filters_only_mb_per_s"], 2),
            "with_reading_per_core": round(ours["with_reading"]["mb_per_s_per_core"] / theirs["mb_per_s_per_core"], 2),
        },
    }
    print(json.dumps(result, indent=1, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
