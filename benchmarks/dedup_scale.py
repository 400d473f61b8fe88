"""Dedup at scale on this machine: N generated ~1 KB documents with real duplicate clusters (sizes 2 to 50) and
near-duplicates; prints JSON: wall time per phase, peak RSS of every process, clusters found against planted, and
the bytes of dedup's phase files (`<output>/dedup/_work/`, per folder) against its input shards and its text.

    python benchmarks/dedup_scale.py [--docs 1000000] [--dir bench] [--workers 2]

Documents are random sentences over a 5,000-word vocabulary (numpy, seeded). 5% of documents are copies: a
planted cluster takes a base document and 1-49 copies, exact or with one of the last two words replaced
(Jaccard 0.976-0.988 to the base).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import sys
import time
from pathlib import Path

import numpy as np

VOCAB = 5_000
WORDS = 170  # ~1 KB of text


def du(path: Path) -> int:
    """Bytes of the files under `path` (0 if it does not exist)."""
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.exists() else 0


def generate(folder: Path, n_docs: int, seed: int = 0, files: int = 16) -> dict:
    """Write n_docs JSON lines over `files` files; return the planted clusters (base index -> copy indices)."""
    rng = np.random.default_rng(seed)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    vocab = ["".join(rng.choice(letters, size=rng.integers(3, 10))) for _ in range(VOCAB)]
    n_copies = int(n_docs * 0.05)
    sizes = []
    while sum(sizes) < n_copies:
        sizes.append(int(min(49, rng.zipf(1.6))))  # copies per cluster: mostly 1-3, a few up to 49
    n_bases = n_docs - sum(sizes)
    bases = rng.integers(0, VOCAB, size=(n_bases, WORDS), dtype=np.int32)
    planted = {}
    copy_rows = []
    chosen = rng.choice(n_bases, size=len(sizes), replace=False)
    for base, size in zip(chosen.tolist(), sizes):
        members = []
        for _ in range(size):
            row = bases[base].copy()
            # Exact, or one of the last two words replaced: a word changes every 5-gram over it, so an edit in the
            # middle of 166 shingles gives Jaccard 161/171 = 0.94 (not a duplicate at 0.95); at the end 0.976-0.988.
            if rng.integers(0, 2):
                row[WORDS - 1 - int(rng.integers(0, 2))] = rng.integers(0, VOCAB)
            copy_rows.append(row)
            members.append(n_bases + len(copy_rows) - 1)
        planted[base] = members
    rows = np.concatenate([bases, np.array(copy_rows, dtype=np.int32)]) if copy_rows else bases
    order = rng.permutation(len(rows))  # spread copies over files and shards
    folder.mkdir(parents=True, exist_ok=True)
    handles = [open(folder / f"part-{i:03d}.jsonl", "w", encoding="utf-8") for i in range(files)]  # noqa: SIM115 - closed below
    vocab_arr = np.array(vocab, dtype=object)
    for k, index in enumerate(order.tolist()):
        words = vocab_arr[rows[index]]
        text = ". ".join(" ".join(words[i:i + 17]).capitalize() for i in range(0, WORDS, 17)) + "."
        handles[k % files].write(json.dumps({"id": f"d{index:08d}", "text": text}) + "\n")
    for h in handles:
        h.close()
    return {"bases": n_bases, "copies": len(copy_rows), "clusters": len(planted),
            "planted": {f"d{b:08d}": [f"d{m:08d}" for m in ms] for b, ms in planted.items()}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=1_000_000)
    parser.add_argument("--dir", default="bench")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()

    import pyarrow.parquet as pq
    import yaml

    from tokenmill.pipeline.config import load_config
    from tokenmill.pipeline.ray_cluster import start_local
    from tokenmill.pipeline.runner import run_pipeline

    root = Path(args.dir) / f"dedup-scale-{args.docs}"
    truth_path = root / "planted.json"
    if not truth_path.exists():
        shutil.rmtree(root, ignore_errors=True)
        t = time.perf_counter()
        truth = generate(root / "data", args.docs)
        truth_path.write_text(json.dumps(truth))
        print(f"generated in {time.perf_counter() - t:.0f}s", file=sys.stderr)
    truth = json.loads(truth_path.read_text())
    config_path = root / "run.yaml"
    config_path.write_text(yaml.safe_dump({
        "output": "out", "seed": 1, "ingest": {"docs_per_shard": 20_000},
        "sources": [{"name": "web", "format": "jsonl", "paths": ["data/*.jsonl"], "id_field": "id"}],
        "stages": {"dedup": {"partitions": 32}},
    }))
    shutil.rmtree(root / "out", ignore_errors=True)
    start_local(num_cpus=args.workers)
    t = time.perf_counter()
    reports = run_pipeline(load_config(config_path), workers=args.workers)
    wall = time.perf_counter() - t
    manifests = {r.stage: json.loads(Path(r.manifest).read_text()) for r in reports}
    clusters = pq.read_table(root / "out" / "dedup" / "clusters.parquet").to_pylist()
    found: dict[str, set[str]] = {}
    for row in clusters:
        found.setdefault(row["cluster"], set()).add(row["id"])
    member_cluster = {i: c for c, ids in found.items() for i in ids}
    whole = sum(1 for base, copies in truth["planted"].items()
                if base in member_cluster and all(member_cluster.get(c) == member_cluster[base] for c in copies))
    peak = [s["max_worker_peak_rss_mb"] for m in manifests.values() for s in m["run_info"]["phases"].values()]
    result = {
        "benchmark": "dedup_scale",
        "docs": args.docs, "workers": args.workers, "cpus": os.cpu_count(),
        "wall_seconds_total": round(wall, 1),
        "phases": {f"{stage}/{name}": s for stage, m in manifests.items() for name, s in m["run_info"]["phases"].items()},
        "peak_rss_mb": {"any_worker": max(peak), "driver": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)},
        "planted": {"clusters": truth["clusters"], "copies": truth["copies"]},
        "found": {"clusters": len(found), "planted_clusters_found_whole": whole,
                  "removed": manifests["dedup"]["content"]["totals"]["drops"]},
        "report": manifests["dedup"]["content"]["report"]["clusters"]["size_histogram"]
        if "size_histogram" in manifests["dedup"]["content"]["report"]["clusters"] else
        manifests["dedup"]["content"]["report"]["clusters"].get("by_source"),
    }
    work = root / "out" / "dedup" / "_work"
    shard_bytes = du(root / "out" / "ingest" / "shards")  # dedup's input: ingest's kept shards
    text_bytes = manifests["dedup"]["content"]["totals"]["bytes_in"]
    result["phase_files"] = {"bytes": du(work), "by_folder": {p.name: du(p) for p in sorted(work.iterdir()) if p.is_dir()},
                             "input_shard_bytes": shard_bytes, "input_text_bytes": text_bytes}
    removed = sum(result["found"]["removed"].values())
    result["ratios"] = {"planted_clusters_found_whole_vs_planted": round(whole / truth["clusters"], 4) if truth["clusters"] else None,
                        "removed_vs_planted_copies": round(removed / truth["copies"], 4) if truth["copies"] else None,
                        "dedup_phase_files_vs_input": round(du(work) / shard_bytes, 3) if shard_bytes else None,
                        "dedup_phase_files_vs_text": round(du(work) / text_bytes, 3) if text_bytes else None}
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
