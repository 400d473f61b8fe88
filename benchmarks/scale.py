"""Scale run: a generated corpus of >= 10 GB through every stage on this machine, and a projection to The Pile.

Per stage: wall seconds, text MB in, MB/s, MB/s per core (cores = the workers Ray ran), the largest peak RSS of
any worker and of the driver, disk written (the stage's folder, and for dedup its phase files: the shuffle) and per
byte of the text ingest read, the Parquet settings its shards were written with, and where its core-seconds went
(inside tasks, or Ray and idle workers around them). A file hard-linked from an earlier stage's (a shard a stage
kept unchanged) counts once, in the stage that wrote it. Each stage gets a fresh Ray cluster, so a worker's peak
RSS (its high-water mark) is that stage's alone; the corpus is generated in a child process, so the driver's peak
is the pipeline's. Then a projection for The Pile (825 GB of text) on a cluster, shown as the computation from the
measured per-core throughput and the measured dedup shuffle volume per input GB. Prints JSON; `--gb` sets the size.

    python benchmarks/scale.py --gb 10 [--dir bench] [--nodes 64 --cores-per-node 32 --nic-gbit 25]
    python benchmarks/scale.py --gb 2 --corpus bench/scale-2gb/corpus --dir /tmp/scale-new   # a generated corpus

`--corpus` runs an already generated corpus (a folder with demo.yaml), so the previous code can run the same one
after: `PYTHONPATH=/tmp/old/src python benchmarks/scale.py --gb 2 --corpus ... --dir /tmp/scale-old`. The run folder
(<dir>/scale-<gb>gb/run) is removed first, so every stage runs.

Every stage runs by default, the two the demo's config leaves out included, with the settings `EXTRA_STAGES` gives
them: `metadata_filter` (downvoted Reddit comments and forum posts dropped: a score below 0) and `subdoc` (its
defaults: lines held by more than 3 documents removed from all but the first). `--stages` names a subset, e.g.
`--stages ingest,sample,clean,dedup,decontaminate,tokenize` for the set the runs before 2026-11-28 measured.
"""

from __future__ import annotations

import os
import sys


import argparse  # noqa: E402
import json  # noqa: E402
import resource  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

STAGES = ("ingest", "sample", "metadata_filter", "clean", "dedup", "subdoc", "decontaminate", "tokenize")
"""Every stage, in pipeline order: the default of `--stages`."""
EXTRA_STAGES = {
    # The demo generates scores for Reddit comments (`score`, Pushshift's field) and forum posts, some downvoted.
    "metadata_filter": {"rules": [{"source": "reddit", "field": "score", "min": 0},
                                  {"source": "forum_en", "field": "score", "min": 0}]},
    "subdoc": {},
}
"""The stages demo.yaml leaves out, with the settings this benchmark gives them when `--stages` names them."""
PILE_GB = 825.0


def du(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.exists() else 0


def new_bytes(path: Path, seen: set[tuple[int, int]]) -> tuple[int, int]:
    """(bytes of files under `path` whose inode is not in `seen`, bytes of those that are: hard links to files an
    earlier stage wrote); adds the new inodes to `seen`, so a linked file counts once, where it was written."""
    fresh = linked = 0
    for f in path.rglob("*") if path.exists() else ():
        st = f.lstat()
        if not f.is_file() or f.is_symlink():
            continue
        if (st.st_dev, st.st_ino) in seen:
            linked += st.st_size
        else:
            seen.add((st.st_dev, st.st_ino))
            fresh += st.st_size
    return fresh, linked


def parquet_settings(folder: Path) -> dict | None:
    """How the stage's first shard was written: codec, the text column's encodings, row groups, statistics."""
    import pyarrow.parquet as pq

    shards = sorted((folder / "shards").glob("*.parquet"))
    if not shards:
        return None
    meta = pq.ParquetFile(shards[0]).metadata
    if meta.num_row_groups == 0:
        return None
    names = [meta.schema.column(i).name for i in range(meta.num_columns)]
    text = meta.row_group(0).column(names.index("text")) if "text" in names else None
    return {"created_by": meta.created_by, "rows": meta.num_rows, "row_groups": meta.num_row_groups,
            "rows_per_group": meta.row_group(0).num_rows,
            "codec": meta.row_group(0).column(0).compression,
            "text_encodings": sorted(text.encodings) if text is not None else None,
            "text_dictionary_page": bool(text.has_dictionary_page) if text is not None else None,
            "text_statistics": bool(text.is_stats_set) if text is not None else None,
            "text_compressed_vs_uncompressed": round(text.total_compressed_size / text.total_uncompressed_size, 3)
            if text is not None and text.total_uncompressed_size else None}


def projection(stages: dict, gb_in: float, args) -> dict:
    """Hours for The Pile on `nodes` x `cores_per_node`: per stage, text MB / (MB/s per core x cores), and the dedup
    shuffle (bytes per input GB x 825 GB, spread over the nodes' NICs) added to dedup."""
    cores = args.nodes * args.cores_per_node
    out, total = {}, 0.0
    for name, s in stages.items():
        if not s.get("mb_per_s_per_core"):
            continue
        text_mb = PILE_GB * 1e3 * s["text_mb_in"] / (gb_in * 1e3)
        hours = text_mb / (s["mb_per_s_per_core"] * cores) / 3600
        out[name] = {"text_mb": round(text_mb), "formula": f"{text_mb:,.0f} MB / ({s['mb_per_s_per_core']} MB/s x "
                     f"{cores} cores) / 3600", "hours": round(hours, 3)}
        total += hours
    shuffle = stages.get("dedup", {}).get("shuffle_bytes", 0)
    if shuffle:
        pile_shuffle_gb = shuffle / 1e9 * PILE_GB / gb_in
        # Each node sends and receives its share once; the NICs work in parallel.
        hours = pile_shuffle_gb * 8 / (args.nic_gbit * args.nodes) / 3600
        out["dedup_shuffle"] = {"gb": round(pile_shuffle_gb, 1), "formula": f"{pile_shuffle_gb:,.1f} GB x 8 / "
                                f"({args.nic_gbit} Gbit/s x {args.nodes} nodes) / 3600", "hours": round(hours, 4)}
        total += hours
    out["total_hours"] = round(total, 2)
    out["assumes"] = (f"{args.nodes} nodes x {args.cores_per_node} cores at this machine's per-core speed, linear "
                      "scaling across nodes (every stage's tasks are partitioned, dedup's components and groups "
                      "in rounds; the one single task left, dedup's cluster_table, merges sorted files in bounded "
                      "memory), storage fast enough not to limit")
    return out


def with_stages(corpus: Path, stages: list[str]):
    """demo.yaml with the stages of `stages` it leaves out added (`EXTRA_STAGES`) and those not named removed,
    validated as any config file is."""
    import yaml

    from tokenmill.pipeline.config import parse_config

    data = yaml.safe_load((corpus / "demo.yaml").read_text(encoding="utf-8"))
    configured = data.setdefault("stages", {})
    for name in stages:
        if name in EXTRA_STAGES and name not in configured:
            configured[name] = EXTRA_STAGES[name]
    data["stages"] = {name: value for name, value in configured.items() if name in stages}
    return parse_config(data, base_dir=corpus)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gb", type=float, default=10.0, help="text to generate, in GB")
    parser.add_argument("--dir", default="bench")
    parser.add_argument("--corpus", default=None, help="an already generated corpus (its folder, with demo.yaml); "
                        "--gb then only names the output folder")
    parser.add_argument("--workers", type=int, default=os.cpu_count())
    parser.add_argument("--nodes", type=int, default=64)
    parser.add_argument("--cores-per-node", type=int, default=32)
    parser.add_argument("--nic-gbit", type=float, default=25.0)
    parser.add_argument("--stages", default=",".join(STAGES),
                        help="the stages to run, comma-separated (default: all, in pipeline order)")
    args = parser.parse_args()
    stages = [name for name in STAGES if name in args.stages.split(",")]
    if unknown := sorted(set(args.stages.split(",")) - set(STAGES)):
        parser.error(f"--stages: unknown {', '.join(unknown)} (known: {', '.join(STAGES)})")
    if "ingest" not in stages:
        parser.error("--stages: ingest is needed (every other stage reads its shards)")

    import ray

    from tokenmill.pipeline.ray_cluster import start_local
    from tokenmill.pipeline.runner import run_pipeline

    root = Path(args.dir) / f"scale-{args.gb:g}gb"
    corpus = Path(args.corpus) if args.corpus else root / "corpus"
    if args.corpus and not (corpus / "demo.yaml").exists():
        parser.error(f"--corpus {corpus}: no demo.yaml there; generate one with `python benchmarks/scale.py --gb N`")
    generated = generate_rss = None
    if not args.corpus and not (corpus / ".complete").exists():
        t = time.perf_counter()
        # A child process: the generator's own memory must not count as the pipeline driver's.
        # Without the demo's quality classifier: the pipeline measured is the one earlier code can run too.
        subprocess.run([sys.executable, "-c", "import sys; from tokenmill.demo import write_demo_corpus; "
                        "write_demo_corpus(sys.argv[1], target_bytes=int(float(sys.argv[2])), classifier=False)",
                        str(corpus), str(args.gb * 1e9)], check=True)
        (corpus / ".complete").touch()
        generated = round(time.perf_counter() - t, 1)
        generate_rss = round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, 1)
    config = with_stages(corpus, stages)
    # Production-sized shards; the demo's are small so that its few MB still spread over tasks.
    shutil.rmtree(root / "run", ignore_errors=True)  # a run left here would be "up to date" and measure nothing
    config = config.model_copy(update={"output": str(root / "run"),
                                       "ingest": config.ingest.model_copy(update={"docs_per_shard": 20_000})})
    result: dict = {"corpus_gb_target": args.gb, "corpus_files_bytes": du(corpus), "cpus": os.cpu_count(),
                    "workers": args.workers, "generate_seconds": generated, "generate_peak_rss_mb": generate_rss,
                    "max_shard_bytes": config.ingest.max_shard_bytes,
                    "added_stages": {name: stage.model_dump(mode="json") for name, stage in config.stages.configured()
                                     if name in EXTRA_STAGES},  # their settings, as run
                    "stages": {}}
    bytes_in: dict[str, int] = {}
    seen: set[tuple[int, int]] = set()
    for stage in stages:
        start_local(num_cpus=args.workers)  # fresh workers: their peak RSS is this stage's
        start = time.perf_counter()
        (report,) = [r for r in run_pipeline(config, only=stage, workers=args.workers) if r.stage == stage]
        wall = time.perf_counter() - start
        ray.shutdown()
        manifest = json.loads(Path(report.manifest).read_text())
        info = manifest["run_info"]
        mb = report.totals["bytes_in"] / 1e6
        bytes_in[stage] = report.totals["bytes_in"]
        folder = Path(config.output) / stage
        written, linked = new_bytes(folder, seen)
        phases = info.get("phases", {}).values()
        task_seconds = sum(p.get("task_seconds", 0.0) for p in phases)
        entry = {"seconds": round(wall, 1), "docs_in": report.totals["docs_in"], "text_mb_in": round(mb, 1),
                 "mb_per_s": round(mb / wall, 2), "mb_per_s_per_core": round(mb / wall / args.workers, 3),
                 "max_worker_peak_rss_mb": max((p.get("max_worker_peak_rss_mb", 0) for p in
                                                info.get("phases", {}).values()), default=None),
                 "driver_peak_rss_mb": info.get("driver_peak_rss_mb"), "disk_written_bytes": written,
                 "linked_bytes": linked, "tasks": sum(p.get("tasks_run", 0) for p in phases),
                 # Core-seconds inside tasks (reading, the stage's work, encoding, writing, committing) against
                 # those the stage held: the rest is Ray, the driver's phases and workers waiting.
                 "task_seconds": round(task_seconds, 1) if task_seconds else None,
                 "in_task_share": round(task_seconds / (wall * args.workers), 3) if task_seconds else None,
                 "parquet": parquet_settings(folder)}
        if stage == "dedup":
            entry["shuffle_bytes"] = du(folder / "_work")
            entry["phase_bytes"] = {p.name: du(p) for p in sorted((folder / "_work").iterdir()) if p.is_dir()}
        result["stages"][stage] = entry
        print(f"{stage}: {json.dumps(entry)}", file=sys.stderr, flush=True)
    gb_in = result["stages"]["ingest"]["text_mb_in"] / 1e3
    result["projection_the_pile"] = projection(result["stages"], gb_in, args)
    stages = result["stages"]
    for s in stages.values():
        s["disk_written_per_text_byte"] = round(s["disk_written_bytes"] / bytes_in["ingest"], 3)
    result["ratios"] = {  # the goals of issue 19: disk written per byte of text, dedup's phase files per input byte
        "disk_written_per_text_byte": round(sum(s["disk_written_bytes"] for s in stages.values()) / bytes_in["ingest"], 3),
        "dedup_phase_files_vs_input": round(stages["dedup"]["shuffle_bytes"] / bytes_in["dedup"], 3)
        if "dedup" in stages else None,
    }
    total = sum(s["seconds"] for s in stages.values())
    result["end_to_end"] = {  # issue 35's goal: the whole pipeline at least 4 MB/s per core
        "seconds": round(total, 1), "stages": list(stages),
        "mb_per_s_per_core": round(stages["ingest"]["text_mb_in"] / total / args.workers, 3)}
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
