"""MinHash signature throughput (documents/s on one core, tokenisation into word 5-gram shingles included):
tokenmill vs datasketch vs rensa on the same ~2 KB English documents; prints JSON.

    .venv/bin/python benchmarks/dedup_speed.py [--docs 2000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from importlib import metadata

os.environ.setdefault("RAYON_NUM_THREADS", "1")  # rensa's bulk paths may use a thread pool: one core for all
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

from tokenmill.dedup.minhash import MinHasher  # noqa: E402
from tokenmill.dedup.shingles import shingle_hashes, shingle_hashes_many, words  # noqa: E402

NGRAM = 5


def make_docs(count: int, size: int = 2048) -> list[str]:
    """`count` documents of about `size` characters cut at word boundaries from the demo jsonl corpus."""
    from tokenmill.demo import write_format_files

    with tempfile.TemporaryDirectory() as tmp:
        paths = write_format_files(tmp, "jsonl", count * size * 2 + 1_000_000)
        texts = [json.loads(line)["text"] for path in paths for line in Path(path).read_text(encoding="utf-8").split("\n") if line]
    docs, current = [], []
    length = 0
    for word in " ".join(texts).split(" "):
        current.append(word)
        length += len(word) + 1
        if length >= size:
            docs.append(" ".join(current))
            current, length = [], 0
            if len(docs) == count:
                break
    if len(docs) < count:
        raise RuntimeError(f"corpus gave only {len(docs)} documents")
    return docs


def py_shingles(text: str) -> list[str]:
    """The same word 5-gram shingles tokenmill hashes, as strings (what datasketch and rensa are fed)."""
    w = words(text)
    return [" ".join(w[i:i + NGRAM]) for i in range(max(1, len(w) - NGRAM + 1))] if w else []


def best_rate(fn, count: int, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return round(count / best, 1)


def datasketch_rates(docs: list[str], num_perm: int, repeats: int) -> dict:
    """datasketch's MinHash three ways: per document, per document with shared permutations, and in bulk."""
    import xxhash
    from datasketch import MinHash

    n = len(docs)

    def ds_update_batch():
        for d in docs:
            m = MinHash(num_perm=num_perm)
            m.update_batch([s.encode("utf-8") for s in py_shingles(d)])
            m.digest()

    template = MinHash(num_perm=num_perm)

    def ds_update_batch_shared_perms():
        for d in docs:
            m = MinHash(num_perm=num_perm, permutations=template.permutations, scheme="affine32")
            m.update_batch([s.encode("utf-8") for s in py_shingles(d)])
            m.digest()

    def ds_bulk_xxh32():
        MinHash.bulk([[s.encode("utf-8") for s in py_shingles(d)] for d in docs], num_perm=num_perm,
                     hashfunc=xxhash.xxh32_intdigest)

    return {"datasketch_update_batch": best_rate(ds_update_batch, n, repeats),
            "datasketch_update_batch_shared_perms": best_rate(ds_update_batch_shared_perms, n, repeats),
            "datasketch_bulk_xxh32": best_rate(ds_bulk_xxh32, n, repeats)}


def rensa_rates(docs: list[str], num_perm: int, repeats: int) -> dict:
    """rensa's RMinHash per document and as one digest matrix."""
    from rensa import RMinHash

    n = len(docs)

    def rensa_per_doc():
        for d in docs:
            m = RMinHash(num_perm=num_perm, seed=42)
            m.update(py_shingles(d))
            m.digest()

    def rensa_digest_matrix():
        RMinHash.digest_matrix_from_token_sets([py_shingles(d) for d in docs], num_perm, 42)

    return {"rensa_per_doc": best_rate(rensa_per_doc, n, repeats),
            "rensa_digest_matrix": best_rate(rensa_digest_matrix, n, repeats)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})  # one core
    docs = make_docs(args.docs)
    n = len(docs)
    shingle_hashes(docs[0], None)  # builds the code-point table once (~0.1 s), like any import-time cost

    # sanity: tokenmill hashes exactly the distinct shingles the others get
    counts_ok = all(len(h) == len(set(py_shingles(d))) for h, d in zip(shingle_hashes_many(docs[:200], None),
                                                                       docs[:200]))
    result: dict = {
        "docs": n, "mean_doc_chars": round(float(np.mean([len(d) for d in docs])), 1),
        "mean_shingles": round(float(np.mean([len(set(py_shingles(d))) for d in docs[:500]])), 1),
        "shingle_counts_match": counts_ok, "repeats_best_of": args.repeats, "cores": 1,
        "python": platform.python_version(), "cpu": platform.processor() or platform.machine(),
        "versions": {}, "docs_per_s": {},
    }
    for pkg in ("numpy", "xxhash", "datasketch", "rensa"):
        try:
            result["versions"][pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            result["versions"][pkg] = None

    rates: dict = {}
    rates["python_tokenize_shingle_floor"] = best_rate(lambda: [py_shingles(d) for d in docs], n, args.repeats)
    rates["tokenmill_shingles_only_batched"] = best_rate(lambda: shingle_hashes_many(docs, None), n, args.repeats)
    for num_perm in (128, 320):
        r: dict = {}
        hasher = MinHasher(num_perm)
        r["tokenmill_batched"] = best_rate(lambda: hasher.signatures(shingle_hashes_many(docs, None)), n,
                                           args.repeats)
        r["tokenmill_per_doc_shingling"] = best_rate(
            lambda: hasher.signatures([shingle_hashes(d, None) for d in docs]), n, args.repeats)
        if result["versions"]["datasketch"]:
            r.update(datasketch_rates(docs, num_perm, args.repeats))
        if result["versions"]["rensa"]:
            r.update(rensa_rates(docs, num_perm, args.repeats))
        if "datasketch_update_batch" in r:
            r["tokenmill_vs_datasketch_update_batch"] = round(r["tokenmill_batched"] / r["datasketch_update_batch"], 2)
        if "rensa_per_doc" in r:
            r["tokenmill_vs_rensa_per_doc"] = round(r["tokenmill_batched"] / r["rensa_per_doc"], 2)
            r["tokenmill_vs_rensa_digest_matrix"] = round(r["tokenmill_batched"] / r["rensa_digest_matrix"], 2)
        # Always present (no optional package needed): signatures included, against shingling alone in Python.
        r["tokenmill_vs_python_shingle_floor"] = round(r["tokenmill_batched"] / rates["python_tokenize_shingle_floor"], 2)
        rates[f"num_perm_{num_perm}"] = r
    result["docs_per_s"] = rates
    json.dump(result, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
