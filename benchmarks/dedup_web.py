"""Dedup at a web-like duplicate rate: about 30% of documents in planted near-copy clusters whose sizes follow a
power law up to 10,000 members, run through ingest + dedup on Ray; prints JSON: wall time per phase, peak RSS of
the driver and of every Ray worker process, clusters found against planted, recall of planted pairs, merges of
unrelated documents with their true Jaccard, the candidate counts and their caps, and dedup's phase files against
its input.

    python benchmarks/dedup_web.py [--gb 10] [--dir bench] [--workers 2] [--partitions auto]

The corpus (generated once per size and seed, then reused): documents of 100-249 random words over a 5,000-word
vocabulary (about 1 KB). Cluster sizes are 1 + Zipf(2.0), redrawn above 10,000, until 30% of the documents are in
clusters: about 0.06% of the clusters hold 1,000 or more members, so at 10 GB (some 9 million documents, 480,000
clusters) a few hundred such clusters and dozens near 10,000 occur. A cluster is one random base and copies of it:
30% exact copies (5% of them with the first letter upper-cased: equal after normalization), the rest near copies
with the first or last k words replaced or k words appended, k drawn uniformly up to the largest k that keeps the
copy's true word-5-gram Jaccard to its base above the threshold + 0.001 (so the last k sits just above it: 0.951 to
0.96 for a 170-word base at 0.95). Every word is a keyed hash of (document, position), so any document's text is
regenerated from its index alone, in vectorized numpy, one output file at a time; rows are shuffled over files.

Recall: of the pairs of documents in one planted cluster, the share whose two documents end in one found cluster,
counted per (planted, found) cluster as n(n - 1)/2, never enumerated. A merge: a found cluster holding documents of
two planted clusters, or a planted one and an unplanted document; each is listed with the true Jaccard of the most
similar pair across the two (recomputed from the regenerated texts with the stage's shingles).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import sys
import threading
import time
from pathlib import Path

import numpy as np

VOCAB = 5_000
MIN_WORDS, MAX_WORDS = 100, 250
CLUSTER_SHARE = 0.30
MAX_CLUSTER = 10_000
ZIPF_A = 2.0
EXACT_SHARE = 0.30
AVG_BYTES = 1_200  # measured mean document size in bytes (175 words of ~5.9 letters + a space)
DOCS_PER_FILE = 200_000
NGRAM = 5
_M = np.uint64(0xFFFFFFFFFFFFFFFF)


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser over uint64 (a bijection): the keyed hash behind every random word."""
    x = np.array(x, dtype=np.uint64, ndmin=1)  # a copy; 1-d so that uint64 products wrap without a warning
    x ^= x >> np.uint64(30)
    x *= np.uint64(0xBF58476D1CE4E5B9)
    x ^= x >> np.uint64(27)
    x *= np.uint64(0x94D049BB133111EB)
    x ^= x >> np.uint64(31)
    return x


def _hash(seed: int, a: np.ndarray, b: np.ndarray | int = 0) -> np.ndarray:
    """A 64-bit hash of (seed, a, b), vectorized."""
    x = (np.asarray(a, np.uint64) * np.uint64(0x9E3779B97F4A7C15)) ^ _mix(np.asarray(b, np.uint64)
                                                                          + np.uint64(seed * 0x632BE59BD9B4E019 % 2**64))
    return _mix(x)


class Corpus:
    """The planted structure of n documents; text of any document from its index (random access)."""

    def __init__(self, n_docs: int, seed: int, threshold: float):
        self.n, self.seed, self.threshold = n_docs, seed, threshold
        rng = np.random.default_rng(seed)
        letters = rng.integers(ord("a"), ord("z") + 1, size=(VOCAB, 10), dtype=np.uint8)
        self.word_len = rng.integers(3, 10, size=VOCAB).astype(np.int64)
        # Fixed-width rows: the word's letters, then a space; a mask keeps each row's first len + 1 bytes.
        self.vocab = np.where(np.arange(10)[None, :] < self.word_len[:, None], letters, ord(" ")).astype(np.uint8)
        sizes: list[np.ndarray] = []
        want, have = int(n_docs * CLUSTER_SHARE), 0
        while have < want:
            s = rng.zipf(ZIPF_A, size=max(1024, (want - have) // 4)) + 1
            s = s[s <= min(MAX_CLUSTER, want)]  # redrawn above the cap (and above the whole share, for tiny runs)
            s = s[: np.searchsorted(np.cumsum(s), want - have, side="right") + 1]
            sizes.append(s)
            have += int(s.sum())
        self.sizes = np.concatenate(sizes).astype(np.int64) if sizes else np.zeros(0, np.int64)
        in_clusters = int(self.sizes.sum())
        if in_clusters > n_docs:
            raise ValueError(f"{n_docs} documents are too few for the planted clusters ({in_clusters})")
        # Documents 0 .. in_clusters - 1 are the clusters, each one base then its copies; the rest unplanted.
        self.group = np.full(n_docs, -1, np.int32)
        self.group[:in_clusters] = np.repeat(np.arange(self.sizes.size, dtype=np.int32), self.sizes)
        starts = np.r_[0, np.cumsum(self.sizes)[:-1]].astype(np.int64)
        self.base = np.arange(n_docs, dtype=np.int64)
        self.base[:in_clusters] = np.repeat(starts, self.sizes)
        self.base_words = MIN_WORDS + (_hash(seed, self.base, 1) % np.uint64(MAX_WORDS - MIN_WORDS)).astype(np.int64)
        copy = self.base != np.arange(n_docs)
        # Edit kind per copy: 0 exact, 1 exact up to case, 2 replace the last k, 3 replace the first k, 4 append k.
        kind = np.zeros(n_docs, np.int8)
        u = rng.random(n_docs)
        kind[copy] = np.where(u[copy] < EXACT_SHARE * 0.95, 0, np.where(u[copy] < EXACT_SHARE, 1,
                              2 + (rng.integers(0, 3, n_docs)[copy])))
        self.kind = kind
        m = np.maximum(self.base_words - NGRAM + 1, 1).astype(np.float64)
        t = threshold + 0.001
        # Replacing k words at either end changes k shingles: J = (m - k) / (m + k); appending k: J = m / (m + k).
        k_replace = np.floor(m * (1 - t) / (1 + t) - 1e-9).astype(np.int64)
        k_append = np.floor(m * (1 - t) / t - 1e-9).astype(np.int64)
        kmax = np.where(kind == 4, k_append, k_replace)
        self.k = np.where(kind >= 2, 1 + (rng.random(n_docs) * np.maximum(kmax, 1)).astype(np.int64), 0)
        self.words = self.base_words + np.where(kind == 4, self.k, 0)
        self.order = rng.permutation(n_docs)  # file position -> document index

    def true_jaccard_to_base(self) -> np.ndarray:
        """Per document, its word-5-gram Jaccard to its base (1.0 for bases, exact copies and unplanted)."""
        m = np.maximum(self.base_words - NGRAM + 1, 1).astype(np.float64)
        return np.where(self.kind == 4, m / (m + self.k), np.where(self.kind >= 2, (m - self.k) / (m + self.k), 1.0))

    def texts(self, docs: np.ndarray):
        """(offsets int32, UTF-8 bytes) of the documents `docs`, vectorized: an Arrow string array's buffers."""
        import pyarrow as pa

        docs = np.asarray(docs, np.int64)
        n_words = self.words[docs]
        doc_of = np.repeat(np.arange(docs.size), n_words)
        pos = np.arange(doc_of.size, dtype=np.int64) - np.repeat(np.cumsum(n_words) - n_words, n_words)
        d, kind, k = docs[doc_of], self.kind[docs][doc_of], self.k[docs][doc_of]
        bw = self.base_words[docs][doc_of]
        own = ((kind == 2) & (pos >= bw - k)) | ((kind == 3) & (pos < k)) | ((kind == 4) & (pos >= bw))
        who = np.where(own, d, self.base[docs][doc_of])
        wid = (_hash(self.seed, who, pos.astype(np.uint64) + np.where(own, np.uint64(1 << 40), np.uint64(0)))
               % np.uint64(VOCAB)).astype(np.int64)
        rows = self.vocab[wid]
        lens = self.word_len[wid] + 1
        last = np.r_[np.flatnonzero(np.diff(doc_of)), doc_of.size - 1] if doc_of.size else np.zeros(0, np.int64)
        lens[last] -= 1  # no space after a document's last word
        data = rows[np.arange(10)[None, :] < lens[:, None]]
        doc_bytes = np.bincount(doc_of, weights=lens, minlength=docs.size).astype(np.int64)
        offsets = np.r_[0, np.cumsum(doc_bytes)].astype(np.int32)
        upper = np.flatnonzero(self.kind[docs] == 1)
        data[offsets[upper]] -= 32  # exact up to case: the first letter upper-cased
        return pa.StringArray.from_buffers(docs.size, pa.py_buffer(offsets), pa.py_buffer(data))

    def write(self, folder: Path) -> int:
        """Parquet files of (id, text) in file order; returns the bytes of text written."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        folder.mkdir(parents=True, exist_ok=True)
        total = 0
        for f, p0 in enumerate(range(0, self.n, DOCS_PER_FILE)):
            docs = self.order[p0:p0 + DOCS_PER_FILE]
            # 50,000 documents at a time: the per-word arrays stay in cache-sized pieces (3x faster than whole).
            text = pa.chunked_array([self.texts(docs[i:i + 50_000]) for i in range(0, docs.size, 50_000)])
            ids = pa.array([f"w{i:09d}" for i in docs.tolist()], pa.string())
            total += sum(chunk.buffers()[2].size for chunk in text.chunks)
            pq.write_table(pa.table({"id": ids, "text": text}), folder / f"part-{f:04d}.parquet",
                           compression="zstd", row_group_size=20_000)
        return total


class RssSampler(threading.Thread):
    """Peak RSS of every Ray process (workers, raylet, GCS) and the driver, sampled every 0.5 s with psutil."""

    def __init__(self):
        super().__init__(daemon=True)
        self.peak: dict[int, tuple[str, float]] = {}
        self.stop = threading.Event()

    def run(self) -> None:
        import psutil

        me = psutil.Process()
        while not self.stop.wait(0.5):
            # This driver and what it started (Ray's processes are its descendants), not other runs on the machine.
            for p in [me, *me.children(recursive=True)]:
                try:
                    cmd = " ".join(p.cmdline())
                    name = "driver" if p.pid == me.pid else p.name()
                    if "default_worker" in cmd or name.startswith("ray::"):
                        name = "ray worker"
                    rss = p.memory_info().rss / 2**20
                except psutil.Error:
                    continue
                if rss > self.peak.get(p.pid, ("", 0.0))[1]:
                    self.peak[p.pid] = (name, rss)


def du(path: Path) -> int:
    """Bytes of the files under `path` (0 if it does not exist)."""
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.exists() else 0


def _pairs(n: np.ndarray) -> int:
    n = n.astype(np.int64)
    return int((n * (n - 1) // 2).sum())


def evaluate(corpus: Corpus, clusters, config) -> dict:
    """Found clusters against planted: counts, recall of planted pairs, and every merge with its true Jaccard."""
    import pyarrow.compute as pc

    from tokenmill.dedup.shingles import shingle_hashes_many
    from tokenmill.dedup.verify import jaccard

    doc = pc.cast(pc.utf8_slice_codeunits(clusters.column("id"), 1), "int64").to_numpy()
    found = pc.cast(pc.utf8_slice_codeunits(clusters.column("cluster"), 1), "int64").to_numpy()
    group = corpus.group[doc].astype(np.int64)
    planted_pairs = _pairs(corpus.sizes)
    in_group = group >= 0
    _, n_gf = np.unique(group[in_group] * corpus.n + found[in_group], return_counts=True)
    recalled = _pairs(n_gf)
    # A found cluster's "groups": its planted clusters, each unplanted document one of its own.
    label = np.where(in_group, group, corpus.sizes.size + doc)
    fg = np.unique(np.stack([found, label], axis=1), axis=0)
    fids, n_groups = np.unique(fg[:, 0], return_counts=True)
    merged = fids[n_groups > 1]
    whole = int(np.sum(np.bincount(group[in_group], minlength=corpus.sizes.size)[
        np.unique(group[in_group])] == corpus.sizes[np.unique(group[in_group])]))
    merges = []
    for f in merged.tolist()[:50]:
        members = doc[found == f]
        labels = label[found == f]
        parts = [members[labels == g][:20] for g in np.unique(labels)]
        sets = shingle_hashes_many(corpus.texts(np.concatenate(parts)).to_pylist(), None,
                                   word_ngram=config.word_ngram, char_ngram=config.char_ngram)
        at = np.r_[0, np.cumsum([len(p) for p in parts])]
        best = 0.0
        for i in range(len(parts)):
            for j in range(i + 1, len(parts)):
                best = max([best] + [jaccard(sets[x], sets[y]) for x in range(at[i], at[i + 1])
                                     for y in range(at[j], at[j + 1])])
        merges.append({"cluster": f"w{f:09d}", "docs": int(members.size), "groups": len(parts),
                       "true_jaccard_across": round(best, 4)})
    sizes = corpus.sizes
    return {
        "planted": {"docs_in_clusters": int(sizes.sum()), "clusters": int(sizes.size), "pairs": planted_pairs,
                    "largest": int(sizes.max()) if sizes.size else 0,
                    "clusters_1000_plus": int((sizes >= 1000).sum()), "clusters_100_plus": int((sizes >= 100).sum()),
                    "min_true_jaccard_to_base": round(float(corpus.true_jaccard_to_base().min()), 4)},
        "found": {"clusters": int(np.unique(found).size), "docs_in_clusters": int(doc.size),
                  "planted_clusters_found_whole": whole, "planted_pairs_recalled": recalled,
                  "merges": int(merged.size), "merge_list": merges,
                  "merges_below_0.90": sum(m["true_jaccard_across"] < 0.90 for m in merges)},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gb", type=float, default=10.0, help="text to generate, GB (about 830,000 documents each)")
    parser.add_argument("--dir", default="bench")
    parser.add_argument("--workers", type=int, default=2)
    # auto (the stage's default) sizes them from the input: 128 at 10 GB, 64 at 5 GB (each verify task holds the
    # shingles of its pairs' documents; at 10 GB, 64 partitions took one to 1,373 MB alone).
    parser.add_argument("--partitions", type=lambda v: v if v == "auto" else int(v), default="auto")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    import pyarrow.parquet as pq
    import yaml

    from tokenmill.pipeline.config import load_config
    from tokenmill.pipeline.ray_cluster import start_local
    from tokenmill.pipeline.runner import run_pipeline
    from tokenmill.stages.dedup.config import DedupConfig

    n_docs = max(1000, int(args.gb * 1e9 / AVG_BYTES))
    dedup = DedupConfig(partitions=args.partitions)
    root = Path(args.dir) / f"dedup-web-{args.gb:g}gb-s{args.seed}"
    t = time.perf_counter()
    corpus = Corpus(n_docs, args.seed, dedup.threshold)
    setup_seconds = time.perf_counter() - t
    marker = root / "data" / "COMPLETE"
    generate_seconds = None
    if not marker.exists():
        shutil.rmtree(root, ignore_errors=True)
        t = time.perf_counter()
        corpus.write(root / "data")
        generate_seconds = round(time.perf_counter() - t, 1)
        marker.write_text("")
        print(f"generated {n_docs:,} documents in {generate_seconds:.0f}s", file=sys.stderr)
    config_path = root / "run.yaml"
    config_path.write_text(yaml.safe_dump({
        "output": "out", "seed": 1, "ingest": {"docs_per_shard": 50_000},
        "sources": [{"name": "web", "format": "parquet", "paths": ["data/*.parquet"], "id_field": "id"}],
        "stages": {"dedup": {"partitions": args.partitions}},
    }))
    shutil.rmtree(root / "out", ignore_errors=True)
    start_local(num_cpus=args.workers)
    sampler = RssSampler()
    sampler.start()
    t = time.perf_counter()
    reports = run_pipeline(load_config(config_path), workers=args.workers)
    wall = time.perf_counter() - t
    sampler.stop.set()
    sampler.join()
    manifests = {r.stage: json.loads(Path(r.manifest).read_text()) for r in reports}
    t = time.perf_counter()
    quality = evaluate(corpus, pq.read_table(root / "out" / "dedup" / "clusters.parquet", columns=["cluster", "id"]),
                       dedup)
    report = manifests["dedup"]["content"]["report"]
    work = root / "out" / "dedup" / "_work"
    shard_bytes = du(root / "out" / "ingest" / "shards")
    text_bytes = manifests["dedup"]["content"]["totals"]["bytes_in"]
    workers = sorted((rss for name, rss in sampler.peak.values() if name == "ray worker"), reverse=True)
    others = {f"{name} {pid}": round(rss, 1) for pid, (name, rss) in sorted(sampler.peak.items())
              if name != "ray worker"}
    planted, found = quality["planted"], quality["found"]
    result = {
        "benchmark": "dedup_web", "gb": args.gb, "docs": n_docs, "text_bytes": text_bytes, "workers": args.workers,
        "cpus": os.cpu_count(), "partitions": args.partitions,
        "partitions_used": manifests["dedup"]["content"]["report"]["partitions"], "threshold": dedup.threshold,
        "generate_seconds": generate_seconds, "setup_seconds": round(setup_seconds, 1),
        "wall_seconds_total": round(wall, 1),
        "stage_seconds": {s: m["run_info"]["seconds"] for s, m in manifests.items()},
        "phases": {f"{stage}/{name}": s for stage, m in manifests.items() for name, s in m["run_info"]["phases"].items()},
        # The driver while the stages ran (sampled); this process's own high-water mark also covers generating
        # the corpus and evaluating the result, which no pipeline run does.
        "peak_rss_mb": {"driver": max((round(rss, 1) for name, rss in sampler.peak.values() if name == "driver"),
                                      default=None),
                        "benchmark_process_max": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
                        "ray_workers_sampled": [round(r, 1) for r in workers], "other_processes_sampled": others,
                        "max_worker_by_phase": {f"{stage}/{name}": s["max_worker_peak_rss_mb"]
                                                for stage, m in manifests.items()
                                                for name, s in m["run_info"]["phases"].items()}},
        **quality,
        "removed": manifests["dedup"]["content"]["totals"]["drops"],
        "candidates": report["candidates"],
        "summary": report["summary"],
        "phase_files": {"bytes": du(work), "by_folder": {p.name: du(p) for p in sorted(work.iterdir()) if p.is_dir()},
                        "input_shard_bytes": shard_bytes, "input_text_bytes": text_bytes},
        "evaluate_seconds": round(time.perf_counter() - t, 1),
    }
    removed = sum(result["removed"].values())
    expected_removed = planted["docs_in_clusters"] - planted["clusters"]
    result["ratios"] = {
        "planted_pairs_recalled_vs_planted": round(found["planted_pairs_recalled"] / max(planted["pairs"], 1), 6),
        "planted_clusters_found_whole_vs_planted": round(found["planted_clusters_found_whole"]
                                                         / max(planted["clusters"], 1), 4),
        "found_clusters_vs_planted": round(found["clusters"] / max(planted["clusters"], 1), 4),
        "removed_vs_planted_copies": round(removed / max(expected_removed, 1), 4),
        "dedup_phase_files_vs_input": round(du(work) / shard_bytes, 3) if shard_bytes else None,
        "dedup_phase_files_vs_text": round(du(work) / text_bytes, 3) if text_bytes else None,
    }
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
