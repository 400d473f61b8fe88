"""Benchmark the whole clean stage: on the scale run's corpus mix (and against an older checkout), and against
datatrove running the same quality filters; prints JSON.

1. `scale_mix`: the figure the scale run (`benchmarks/scale.py`) sees for clean. The demo generator's mix of nine
   sources (`write_demo_corpus`, `--mix-mb` of text; default a quarter of `--target-mb`) goes through ingest and
   sample on Ray once (20,000-document shards, as the scale run); then the clean stage's map task (read the shard,
   `CleanStage.process`, split and encode kept and dropped rows as Parquet, in memory) runs over every shard in a
   fresh process, without Ray. MB/s per core = text MB in / CPU seconds. With `--baseline-src DIR` (the `src/` of
   another checkout, e.g. a `git worktree` of the previous commit) the same measurement runs with that code too,
   alternating with this checkout's, best of `--rounds` each: `ratio_stage_vs_baseline`.
2. tokenmill vs datatrove: every step of `CleanStage.process` (escape checks and repair, ftfy/NFC/whitespace/width
   normalization, PII, fastText language id, Gopher quality + repetition + C4) over Arrow tables of 5,000 generated
   English documents, in this one process; datatrove: its own `LocalPipelineExecutor` (1 task, 1 worker) with the
   same three filters at the same thresholds (see benchmarks/clean_filters.py for how; spaCy is not installed, so
   datatrove gets tokenmill's regex tokenizer and runs at its fastest). Both read the same JSON-lines files.

   With `--baseline-src DIR`, the baseline's whole stage runs over the same files too (in a child process, after
   datatrove), so that both ratios to datatrove's one measurement come from one run:
   `ratio_per_core_baseline_whole_stage_vs_datatrove_filters` beside this checkout's.

   `--langid-quick-chars N` measures this checkout with the clean stage's `langid.quick_chars` set to N (language
   identified on a text's first N characters where that verdict is confident; the baseline runs as it is).

    python benchmarks/clean.py [--target-mb 200] [--mix-mb MB] [--baseline-src DIR] [--rounds 3] [--dir bench]
                               [--langid-quick-chars N]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent))

from clean_filters import read_jsonl, run_datatrove, timed  # noqa: E402

BATCH = 5_000


def run_stage(files: list[Path]) -> tuple[dict, list[str], list]:
    from tokenmill.sources.config import SourceConfig
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


def whole_stage_in_child(folder: Path, src: Path) -> dict:
    """Part 2's whole-stage measurement with the tokenmill of `src` (its figures and the documents it dropped)."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    out = subprocess.run([sys.executable, __file__, "--measure-whole-stage", str(folder)], env=env, check=True,
                         stdout=subprocess.PIPE, text=True).stdout
    return json.loads(out)


def mix_shards(folder: Path, mb: float) -> Path:
    """The demo generator's mix through ingest and sample, once (kept under `folder`); the sample shards' folder."""
    import ray

    from tokenmill.demo import write_demo_corpus
    from tokenmill.pipeline.config import load_config
    from tokenmill.pipeline.ray_cluster import start_local
    from tokenmill.pipeline.runner import run_pipeline

    if not (folder / ".complete").exists():
        shutil.rmtree(folder, ignore_errors=True)
        write_demo_corpus(folder / "corpus", target_bytes=int(mb * 1e6), classifier=False)
        config = load_config(folder / "corpus" / "demo.yaml")
        config = config.model_copy(update={"output": str((folder / "run").resolve()),
                                           "ingest": config.ingest.model_copy(update={"docs_per_shard": 20_000})})
        start_local(num_cpus=os.cpu_count())
        try:
            for stage in ("ingest", "sample"):
                run_pipeline(config, only=stage)
        finally:
            ray.shutdown()
        (folder / ".complete").touch()
    return folder


def measure_stage(folder: Path, quick_chars: int | None = None) -> dict:
    """The clean stage's map task over every sample shard of `folder`, in this process (whichever tokenmill the
    path gives): text MB in, CPU seconds, MB/s per core. `quick_chars`: the stage's `langid.quick_chars`."""
    import pyarrow.parquet as pq

    import tokenmill
    from tokenmill.pipeline.columns import with_fallbacks
    from tokenmill.pipeline.config import load_config
    from tokenmill.pipeline.map_phase import split_and_write
    from tokenmill.pipeline.config import build_stages
    from tokenmill.pipeline.stats import text_bytes

    class Memory:  # the task context's `write`, into memory: the disk is not what is measured
        def write(self, path, data):
            pass

    config = load_config(folder / "corpus" / "demo.yaml")
    (stage,) = [s for s in build_stages(config) if s.name == "clean"]
    if quick_chars is not None:
        langid = stage.config.langid.model_copy(update={"quick_chars": quick_chars})
        stage = type(stage)(stage.config.model_copy(update={"langid": langid}), stage.run)
    stage.setup({})
    files = sorted((folder / "run" / "sample" / "shards").glob("*.parquet"))
    mb, docs, dropped = 0.0, 0, 0
    wall, cpu = time.perf_counter(), time.process_time()
    for path in files:
        table = pq.read_table(path)
        received = text_bytes(table)
        filled = [c for c in sorted(stage.uses) if c not in table.column_names]
        processed = stage.process(with_fallbacks(table, stage), {})
        out = processed.table.drop_columns([c for c in filled if c not in {f.name for f in stage.adds}])
        split_and_write(stage, Memory(), path.stem, table.column("source")[0].as_py(), out, processed.drop_reason,
                        processed.stats, bytes_in=received)
        mb += sum(received.to_pylist()) / 1e6
        docs += table.num_rows
        dropped += len(processed.drop_reason) - processed.drop_reason.null_count
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return {"code": str(Path(tokenmill.__file__).parent.parent), "shards": len(files), "docs": docs,
            "dropped": dropped, "text_mb": round(mb, 2), "cpu_seconds": round(cpu, 2),
            "wall_seconds": round(wall, 2), "mb_per_s_per_core": round(mb / cpu, 3)}


def measure_in_child(folder: Path, src: Path | None, quick_chars: int | None = None) -> dict:
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = str(src)
    quick = ["--langid-quick-chars", str(quick_chars)] if quick_chars is not None else []
    out = subprocess.run([sys.executable, __file__, "--measure-stage", str(folder), *quick], env=env, check=True,
                         stdout=subprocess.PIPE, text=True).stdout
    return json.loads(out)


def scale_mix(args) -> dict:
    """Part 1 (see the docstring): this checkout's stage figure, and the baseline's alternating with it."""
    mix_mb = args.mix_mb if args.mix_mb is not None else args.target_mb / 4
    folder = mix_shards(Path(args.dir) / f"clean-mix-{mix_mb:g}mb", mix_mb)
    ours: list[dict] = []
    theirs: list[dict] = []
    for _ in range(args.rounds):
        ours.append(measure_in_child(folder, None, args.langid_quick_chars))
        if args.baseline_src:
            theirs.append(measure_in_child(folder, Path(args.baseline_src).resolve()))
    best = max(ours, key=lambda r: r["mb_per_s_per_core"])
    result = {"corpus": str(folder), "rounds": args.rounds, "langid_quick_chars": args.langid_quick_chars,
              "tokenmill_stage": best,
              "mb_per_s_per_core_each_round": [r["mb_per_s_per_core"] for r in ours]}
    if theirs:
        base = max(theirs, key=lambda r: r["mb_per_s_per_core"])
        if (base["docs"], base["dropped"]) != (best["docs"], best["dropped"]) and args.langid_quick_chars is None:
            raise SystemExit(f"baseline and this checkout disagree: {base} vs {best}")
        result["baseline_stage"] = base
        result["baseline_mb_per_s_per_core_each_round"] = [r["mb_per_s_per_core"] for r in theirs]
        result["ratio_stage_vs_baseline"] = round(best["mb_per_s_per_core"] / base["mb_per_s_per_core"], 3)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target-mb", type=float, default=200)
    parser.add_argument("--mix-mb", type=float, default=None, help="the scale mix's text (default: target-mb / 4)")
    parser.add_argument("--baseline-src", default=None, help="src/ of another checkout, measured side by side")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dir", default="bench")
    parser.add_argument("--langid-quick-chars", type=int, default=None,
                        help="this checkout's stage with langid.quick_chars set (the baseline as it is)")
    parser.add_argument("--measure-stage", default=None, help=argparse.SUPPRESS)  # the child's half of part 1
    parser.add_argument("--measure-whole-stage", default=None, help=argparse.SUPPRESS)  # the baseline's part 2
    args = parser.parse_args()
    if args.measure_stage:
        print(json.dumps(measure_stage(Path(args.measure_stage), args.langid_quick_chars)))
        return 0
    if args.measure_whole_stage:
        figures, _, reasons = run_stage(sorted(Path(args.measure_whole_stage).glob("*.jsonl")))
        print(json.dumps({**figures, "dropped": sum(r is not None for r in reasons)}))
        return 0
    mix = scale_mix(args)

    from tokenmill.demo import write_format_files
    from tokenmill.text.quality import QualityConfig

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
        "scale_mix": mix,
        "corpus": {"files": len(files), "docs": len(ids), "text_mb": ours["text_mb"]},
        "cpus": os.cpu_count(),
        "tokenmill_whole_stage": {**ours, "dropped": len(quality_drops)},
        "datatrove_same_filters": {**theirs, "kept": len(kept)},
        "ratio_per_core_tokenmill_whole_stage_vs_datatrove_filters":
            round(ours["mb_per_s_per_core_with_reading"] / theirs["mb_per_s_per_core"], 2),
    }
    if args.baseline_src:
        base = whole_stage_in_child(folder, Path(args.baseline_src).resolve())
        if base["dropped"] != len(quality_drops) and args.langid_quick_chars is None:
            raise SystemExit(f"baseline and this checkout drop different documents: {base} vs {ours}")
        result["baseline_whole_stage"] = base
        result["ratio_per_core_baseline_whole_stage_vs_datatrove_filters"] = \
            round(base["mb_per_s_per_core_with_reading"] / theirs["mb_per_s_per_core"], 2)
        result["ratio_whole_stage_vs_baseline"] = \
            round(ours["mb_per_s_per_core_with_reading"] / base["mb_per_s_per_core_with_reading"], 3)
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
