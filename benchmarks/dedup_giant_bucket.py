"""One giant LSH bucket through `cluster_bucket` (what the dedup stage runs on a bucket over the cap): time,
comparisons, pairs not verified, and (up to --check documents) recall of the duplicate clusters against all pairs
verified by brute force; prints JSON.

Scenarios (shingle sets of 400 random 64-bit hashes; threshold 0.95):
  boilerplate  every document = one shared base + 2 own shingles (pairwise Jaccard ~0.99): one cluster;
  powerlaw     clusters of Zipf sizes (up to --max-cluster) of edits of their own base (each 0.96..0.99 to it, so
               members chain: some member pairs fall below 0.95), plus 30% unrelated documents;
  family       one original and longer edits of it (12 shingles added: 0.97 to it, 0.94 to one another), the
               edits first as the keep order (longest) has them;
  hidden_base  every document = the base with 3% of its shingles replaced (pairwise ~0.91, never a duplicate):
               the worst case, every document a leader, each one compared with `--budget` leaders, twice.

    python benchmarks/dedup_giant_bucket.py [--docs 10000] [--budget 1000] [--check 3000]
"""

from __future__ import annotations

import argparse
import itertools
import json
import time

import numpy as np

from tokenmill.dedup.clusters import components
from tokenmill.dedup.leaders import cluster_bucket
from tokenmill.dedup.verify import verify

T = 0.95
SIZE = 400


def _rand(rng, n):
    return np.unique(rng.integers(0, 2**63, n).astype(np.uint64))


def _edit(rng, base, replace):
    kept = base[rng.random(base.size) >= replace]
    return np.unique(np.concatenate([kept, rng.integers(0, 2**63, base.size - kept.size).astype(np.uint64)]))


def scenario(name: str, k: int, max_cluster: int, rng) -> dict[int, np.ndarray]:
    if name == "boilerplate":
        base = _rand(rng, SIZE)
        return {i: np.unique(np.concatenate([base, rng.integers(0, 2**63, 2).astype(np.uint64)])) for i in range(k)}
    if name == "family":
        base = _rand(rng, SIZE)
        edits = {i: np.unique(np.concatenate([base, rng.integers(0, 2**63, 12).astype(np.uint64)]))
                 for i in range(k - 1)}
        return {**edits, k - 1: base}
    if name == "hidden_base":
        base = _rand(rng, SIZE)
        return {i: _edit(rng, base, 0.03) for i in range(k)}
    sets: list[np.ndarray] = []
    while len(sets) < int(0.7 * k):
        size = min(int(rng.zipf(1.6)), max_cluster, int(0.7 * k) - len(sets))
        base = _rand(rng, SIZE)
        sets += [_edit(rng, base, rng.uniform(0.0, 0.02)) for _ in range(size)]
    sets += [_rand(rng, SIZE) for _ in range(k - len(sets))]
    order = rng.permutation(k)
    return {i: sets[j] for i, j in enumerate(order)}


def _comp(edges: np.ndarray) -> dict[int, int]:
    nodes, comp = components(edges)
    return dict(zip(nodes.tolist(), comp.tolist()))


def recall(sets: dict[int, np.ndarray], found: np.ndarray) -> dict[str, float]:
    """Pairs above the threshold (by brute force) whose documents share a found cluster; found-edge precision."""
    pairs = np.array(list(itertools.combinations(range(len(sets)), 2)), dtype=np.uint64)
    true_edges = np.concatenate([pairs[s:s + 200_000][verify(pairs[s:s + 200_000], sets, T)[1]]
                                 for s in range(0, len(pairs), 200_000)])
    comp = _comp(found)
    hit = sum(comp.get(a, -1) == comp.get(b, -2) for a, b in true_edges.tolist())
    return {"true_pairs": len(true_edges), "pairs_recalled": hit / max(len(true_edges), 1),
            "true_components_equal": _comp(true_edges) == comp}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--docs", type=int, default=10_000)
    ap.add_argument("--budget", type=int, default=1_000)
    ap.add_argument("--max-cluster", type=int, default=2_000)
    ap.add_argument("--check", type=int, default=3_000, help="brute-force recall check up to this many documents")
    ap.add_argument("--scenarios", default="boilerplate,family,powerlaw,hidden_base")
    args = ap.parse_args()
    for name in args.scenarios.split(","):
        sets = scenario(name, args.docs, args.max_cluster, np.random.default_rng(0))
        start = time.perf_counter()
        r = cluster_bucket(list(range(len(sets))), sets, T, args.budget)
        row = {"scenario": name, "docs": len(sets), "budget": args.budget,
               "seconds": round(time.perf_counter() - start, 2), "pairs": len(sets) * (len(sets) - 1) // 2,
               "compared": r.compared, "edges": len(r.pairs), "rejected": r.rejected, "not_verified": r.not_verified,
               "second_pass": r.second_pass, "compared_vs_all_pairs": round(r.compared / max(1, len(sets) * (len(sets) - 1) // 2), 4)}
        if len(sets) <= args.check:
            row.update(recall(sets, r.pairs))
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
