"""The subdoc stage at two sizes: N copies of the shared Common Crawl samples (dolma's CC jsonl, two WET and two WARC
files: 719 documents, 3.4 MB of text), with each copy's content lines made its own so that only boilerplate
repeats across copies, as it repeats across the pages of a crawl.

Copy 0 is the samples as the pipeline's readers give them; copy k > 0 has every line of at least `--content-words`
words tagged with ` ~k` (an article's sentences: unique per copy), while shorter lines (navigation, footers, form
labels) stay as they are and so are held by k times more documents. Ingest runs first, in shards of
`--docs-per-shard` documents at every size (the same task sizes); then the subdoc stage alone at its defaults on a
fresh local Ray cluster with `--workers` workers, so each worker's peak RSS (its high-water mark) is subdoc's own.
Prints JSON per size: documents, text MB, shards, the stage's wall and task seconds, microseconds per document (task
seconds over documents, whatever the worker count) and wall microseconds per document, MB/s per core, each phase's
largest worker peak RSS, the report's counts, and the machine's 1-minute load average before and after the stage
(task seconds include time waiting for a core on a loaded machine). Then `one_process`: every task of the stage run
again one after another in a fresh process over the run's files: CPU seconds per phase, CPU microseconds per
document and MB/s per core (process time: not inflated by other work on the machine), and that process's peak RSS.

    python benchmarks/subdoc_scale.py [--copies 8 32] [--dir bench] [--workers 2] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "commoncrawl"
FILES = {"dolma": ["dolma_CC-MAIN-20190717121559-20190717143559-00140.jsonl.gz"],
         "cc_wet": ["CC-MAIN-2016-50_filter_test_1.warc.wet.gz", "whirlwind.warc.wet.gz"],
         "cc_warc": ["whirlwind.warc.gz", "dolma_wget_sample-0000.warc.gz"]}


def _run_child(config: Path, stage: str, workers: int) -> None:
    """One stage of the config in this process (a fresh local Ray cluster)."""
    from tokenmill.pipeline.config import load_config
    from tokenmill.pipeline.runner import run_pipeline

    run_pipeline(load_config(config), only=stage, workers=workers)


def _replay_child(config_path: Path) -> dict:
    """Every task of the finished subdoc stage again, one after another in this process, over the run's committed
    files (each task's writes go to an attempt folder, removed after it; the run is left as it was), each phase
    planned from the earlier phases' completion records as the driver planned it: CPU seconds per phase
    (`time.process_time`, what a loaded machine's waiting does not inflate) and this process's peak RSS, which
    bounds every task's (the baseline: the same process with everything imported, before any task)."""
    import pyarrow.fs

    from tokenmill.pipeline import storage
    from tokenmill.pipeline.commit import TaskWriter, tmp_root
    from tokenmill.pipeline.config import build_stages, load_config
    from tokenmill.pipeline.contract import PlanContext, TaskContext

    config = load_config(config_path)
    ordered = build_stages(config)
    at = [s.name for s in ordered].index("subdoc")
    stage, upstream = ordered[at], ordered[at - 1].name
    out, fs = Path(config.output_dir), pyarrow.fs.LocalFileSystem()
    shards = json.loads((out / upstream / "manifest.json").read_text())["content"]["shards"]
    stage_dir, input_dir = str(out / "subdoc"), str(out / upstream)
    shared: dict = {}
    ctx = PlanContext(stage_dir, input_dir, shards, shared, fs)
    result: dict = {"baseline_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}
    for phase in stage.phases():
        tasks = phase.plan(stage, ctx)
        cpu = time.process_time()
        for task in tasks:
            writer = TaskWriter(fs, stage_dir, f"replay-{phase.name}", task.key)
            try:
                phase.run(stage, task, TaskContext(stage_dir, input_dir, shared, writer))
            finally:
                storage.remove_tree(fs, tmp_root(stage_dir, writer.phase, task.key))
        result[phase.name] = {"tasks": len(tasks), "cpu_s": round(time.process_time() - cpu, 3)}
        commits = out / "subdoc" / "_work" / "commits" / phase.name
        shared[phase.name] = phase.reduce(stage, {t.key: json.loads((commits / f"{t.key}.json").read_text())["result"]
                                                  for t in tasks}, ctx)
    result["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    return result


def stage(config: Path, name: str, workers: int) -> None:
    subprocess.run([sys.executable, __file__, "--child", str(config), name, str(workers)], check=True)


def samples(root: Path, workers: int) -> list[dict]:
    """The samples through ingest's own readers: (source, id, text) per document, in ingest's order."""
    import pyarrow.parquet as pq
    import yaml

    sources = [{"name": n, "format": "jsonl" if n == "dolma" else n, "paths": [str(SHARED / f) for f in fs],
                "language": "any", **({"id_field": "id"} if n == "dolma" else {})} for n, fs in FILES.items()]
    config = root / "samples.yaml"
    if not (root / "samples" / "ingest" / "manifest.json").is_file():  # a previous run's, with --keep
        config.write_text(yaml.safe_dump({"output": str(root / "samples"), "seed": 1, "sources": sources}))
        stage(config, "ingest", workers)
    shards = sorted((root / "samples" / "ingest" / "shards").glob("*.parquet"))
    return [r for p in shards for r in pq.read_table(p, columns=["source", "id", "text"]).to_pylist()]


def copy_text(text: str, k: int, content_words: int) -> str:
    """Copy k of a text: lines of at least `content_words` words tagged ` ~k` (copy 0 unchanged)."""
    if k == 0:
        return text
    return "\n".join(f"{line} ~{k}" if len(line.split()) >= content_words else line for line in text.split("\n"))


def write_corpus(docs: list[dict], copies: int, root: Path, content_words: int, docs_per_shard: int) -> Path:
    """Per source, one Parquet file per copy (id `<id>~<k>`, text), and the run config reading them."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    import yaml

    by_source: dict[str, list[dict]] = {}
    for d in docs:
        by_source.setdefault(d["source"], []).append(d)
    for source, rows in by_source.items():
        (root / source).mkdir(parents=True, exist_ok=True)
        for k in range(copies):
            pq.write_table(pa.table({"id": [f"{d['id']}~{k}" for d in rows],
                                     "text": [copy_text(d["text"], k, content_words) for d in rows]}),
                           root / source / f"copy-{k:04d}.parquet")
    config = root / "run.yaml"
    config.write_text(yaml.safe_dump({
        "output": str(root / "run"), "seed": 1, "ingest": {"docs_per_shard": docs_per_shard},
        "sources": [{"name": s, "format": "parquet", "paths": [f"{s}/*.parquet"], "text_field": "text",
                     "id_field": "id", "language": "any"} for s in sorted(by_source)],
        "stages": {"subdoc": {}}}))
    return config


def measure(root: Path, copies: int, docs: list[dict], args: argparse.Namespace) -> dict:
    config = root / "run.yaml"
    if not (args.keep and (root / "run" / "ingest" / "manifest.json").is_file()):
        shutil.rmtree(root, ignore_errors=True)
        config = write_corpus(docs, copies, root, args.content_words, args.docs_per_shard)
        stage(config, "ingest", args.workers)
    shutil.rmtree(root / "run" / "subdoc", ignore_errors=True)
    load_before = os.getloadavg()[0]
    started = time.time()
    stage(config, "subdoc", args.workers)
    process_wall = time.time() - started
    replay = json.loads(subprocess.run([sys.executable, __file__, "--replay", str(config)], check=True,
                                       capture_output=True, text=True).stdout.strip().splitlines()[-1])
    manifest = json.loads((root / "run" / "subdoc" / "manifest.json").read_text())
    content, info = manifest["content"], manifest["run_info"]
    report, totals = content["report"], content["totals"]
    n = totals["docs_in"]
    task_s = sum(p["task_seconds"] for p in info["phases"].values())
    text_mb = totals["bytes_in"] / 1e6
    removed = {k: sum(s.get(k, 0) for s in report["by_source"].values())
               for k in ("spans_removed", "chars_removed", "docs_changed")}
    cpu_s = sum(p["cpu_s"] for name, p in replay.items() if isinstance(p, dict))
    return {"copies": copies, "docs": n, "text_mb": round(text_mb, 1), "shards": len(content["shards"]),
            "workers": args.workers, "stage_wall_s": info["seconds"], "process_wall_s": round(process_wall, 1),
            "task_s": round(task_s, 2), "us_per_doc": round(1e6 * task_s / n, 1),
            "wall_us_per_doc": round(1e6 * info["seconds"] / n, 1), "mb_s_per_core": round(text_mb / task_s, 2),
            "phases": {name: {"wall_s": p["wall_seconds"], "task_s": p["task_seconds"], "tasks": p["tasks_run"],
                              "max_task_s": p["max_task_seconds"], "max_worker_peak_rss_mb": p["max_worker_peak_rss_mb"]}
                       for name, p in info["phases"].items()},
            "max_worker_peak_rss_mb": max(p["max_worker_peak_rss_mb"] for p in info["phases"].values()),
            "one_process": {**replay, "cpu_s": round(cpu_s, 2), "cpu_us_per_doc": round(1e6 * cpu_s / n, 1),
                            "mb_s_per_core": round(text_mb / cpu_s, 2)},
            "driver_peak_rss_mb": info.get("driver_peak_rss_mb"),
            "distinct_spans": report["count"]["distinct_spans"], "repeated_spans": report["count"]["repeated_spans"],
            **removed, "dropped": totals["drops"],
            "load_average_1min": [round(load_before, 2), round(os.getloadavg()[0], 2)]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, nargs="+", default=[8, 32])
    parser.add_argument("--dir", type=Path, default=Path("bench"))
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--content-words", type=int, default=12)
    parser.add_argument("--docs-per-shard", type=int, default=1000)
    parser.add_argument("--child", nargs=3, metavar=("CONFIG", "STAGE", "WORKERS"), help=argparse.SUPPRESS)
    parser.add_argument("--keep", action="store_true",
                        help="reuse the corpora and ingest output a previous run left under --dir (subdoc runs again)")
    parser.add_argument("--replay", type=Path, metavar="CONFIG", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.replay:
        print(json.dumps(_replay_child(args.replay)))
        return 0
    if args.child:
        _run_child(Path(args.child[0]), args.child[1], int(args.child[2]))
        return 0
    if not all((SHARED / f).is_file() for fs in FILES.values() for f in fs):
        print(json.dumps({"skipped": f"Common Crawl samples not found under {SHARED}"}))
        return 0
    base = args.dir.resolve() / "subdoc_scale"
    if not args.keep:
        shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True, exist_ok=True)
    docs = samples(base, args.workers)
    result = {"samples": {"docs": len(docs), "text_mb": round(sum(len(d["text"].encode()) for d in docs) / 1e6, 2)},
              "sizes": []}
    for copies in args.copies:
        result["sizes"].append(measure(base / f"x{copies}", copies, docs, args))
        print(json.dumps(result["sizes"][-1]), file=sys.stderr)
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
