"""Incremental dedup's cost: the dedup stage of one run over a base corpus plus 10% more, against the dedup stage of a
run over the 10% alone `against` a finished run of the base; prints JSON with their seconds, per phase, the ratio
(goal <= 0.15), and whether the two removed the same documents of the 10%.

    python benchmarks/dedup_incremental.py [--mb 400] [--new 0.10] [--dir bench] [--workers 2] [--partitions 16]

The corpus is dedup_web.py's (web-like: 30% of documents in planted near-copy clusters, power-law sizes), its
documents in shuffled order, the first 1 / (1 + new) of them the base and the rest the new dump, so clusters span
both. Three runs of ingest + dedup on Ray (`keep: [lowest_id]`, ids numbered base first, so that one run over both
keeps what the base run kept): the base alone (untimed: it is the finished run), base + new (the full run), and the
new dump `against` the base (the incremental run). Timed: each dedup stage's `run_info.seconds` from its manifest,
the same wall clock for both; ingest is left out of both. The corpus is generated once per size and seed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np

from dedup_web import AVG_BYTES, Corpus


def _write(corpus: Corpus, docs: np.ndarray, ids: np.ndarray, folder: Path, per_file: int = 100_000) -> int:
    """Parquet files of (id, text) of `docs` in the order given; returns the text bytes written."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir(parents=True, exist_ok=True)
    total = 0
    for f, p0 in enumerate(range(0, docs.size, per_file)):
        part = docs[p0:p0 + per_file]
        text = pa.chunked_array([corpus.texts(part[i:i + 50_000]) for i in range(0, part.size, 50_000)])
        total += sum(chunk.buffers()[2].size for chunk in text.chunks)
        pq.write_table(pa.table({"id": pa.array([f"d{i:09d}" for i in ids[p0:p0 + per_file].tolist()]), "text": text}),
                       folder / f"part-{f:04d}.parquet", compression="zstd", row_group_size=20_000)
    return total


def _run(root: Path, name: str, patterns: list[str], workers: int, partitions: int, fresh: bool = True, **dedup
         ) -> dict:
    import yaml

    from tokenmill.pipeline.config import load_config
    from tokenmill.pipeline.runner import run_pipeline

    config = root / f"{name}.yaml"
    config.write_text(yaml.safe_dump({
        "output": f"out-{name}", "seed": 1, "ingest": {"docs_per_shard": 25_000},
        "sources": [{"name": "web", "format": "parquet", "paths": patterns, "id_field": "id"}],
        "stages": {"dedup": {"partitions": partitions, "keep": ["lowest_id"], **dedup}},
    }))
    if fresh:
        shutil.rmtree(root / f"out-{name}", ignore_errors=True)
    reports = run_pipeline(load_config(config), workers=workers)
    return json.loads(Path(next(r for r in reports if r.stage == "dedup").manifest).read_text())


def _removed(out: Path) -> set[str]:
    import pyarrow.parquet as pq

    return {i for p in (out / "dedup" / "dropped").glob("*.parquet") for i in pq.read_table(p, columns=["id"])
            .column("id").to_pylist()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=400.0, help="text of base + new, MB")
    parser.add_argument("--new", type=float, default=0.10, help="the new dump's size as a share of the base")
    parser.add_argument("--dir", default="bench")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--partitions", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    from tokenmill.pipeline.ray_cluster import start_local
    from tokenmill.stages.dedup.config import DedupConfig

    n_docs = max(2000, int(args.mb * 1e6 / AVG_BYTES))
    n_base = int(round(n_docs / (1 + args.new)))
    root = Path(args.dir) / f"dedup-incremental-{args.mb:g}mb-{args.new:g}-s{args.seed}"
    corpus = Corpus(n_docs, args.seed, DedupConfig().threshold)
    marker = root / "COMPLETE"
    if not marker.exists():
        shutil.rmtree(root, ignore_errors=True)
        t = time.perf_counter()
        # Ids number the documents in file order, base first: `lowest_id` then visits the base first.
        order = corpus.order
        _write(corpus, order[:n_base], np.arange(n_base), root / "base")
        _write(corpus, order[n_base:], np.arange(n_base, n_docs), root / "new")
        marker.write_text("")
        print(f"generated {n_docs:,} documents in {time.perf_counter() - t:.0f}s", file=sys.stderr)
    start_local(num_cpus=args.workers)
    # The base run is the finished one: kept from an earlier call of this script when its output is complete (the
    # runner finds it up to date), so that a rerun times the other two again.
    base = _run(root, "base", ["base/*.parquet"], args.workers, args.partitions, fresh=False)
    full = _run(root, "full", ["base/*.parquet", "new/*.parquet"], args.workers, args.partitions)
    incremental = _run(root, "incremental", ["new/*.parquet"], args.workers, args.partitions,
                       against=[str((root / "out-base").resolve())])
    full_s, incr_s = full["run_info"]["seconds"], incremental["run_info"]["seconds"]
    n_new = n_docs - n_base
    removed_full = {i for i in _removed(root / "out-full") if int(i[1:]) >= n_base}
    removed_incr = _removed(root / "out-incremental")

    def phases(manifest: dict) -> dict:
        return {k: v["wall_seconds"] for k, v in manifest["run_info"]["phases"].items()}

    print(json.dumps({
        "benchmark": "dedup_incremental", "mb": args.mb, "docs_base": n_base, "docs_new": n_new,
        "workers": args.workers, "cpus": os.cpu_count(), "partitions": args.partitions,
        "base_dedup_seconds": base["run_info"]["seconds"],
        "full_dedup_seconds": full_s, "incremental_dedup_seconds": incr_s,
        "ratios": {"incremental_vs_full_dedup": round(incr_s / full_s, 4) if full_s else None},
        "goal": "<= 0.15",
        "same_removals": removed_full == removed_incr,
        "removed_from_new": {"full_run": len(removed_full), "incremental_run": len(removed_incr)},
        "earlier_runs": incremental["content"]["report"].get("earlier_runs"),
        "phases": {"full": phases(full), "incremental": phases(incremental)},
        "index_bytes": sum(p.stat().st_size for p in (root / "out-base" / "dedup" / "index").glob("*.parquet")),
    }, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
