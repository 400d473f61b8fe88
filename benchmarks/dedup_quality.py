"""Dedup quality against brute force: a 10,000-document sample of real texts from ../shared/data with planted
edits at known Jaccard (0.99 ... 0.80), run through ingest + dedup; prints JSON.

Brute force: exact Jaccard of every pair's shingle sets (same shingles as the stage: word 5-grams, character
5-grams for Chinese), by a sparse product. Reported: recall of the pairs above the threshold (both in one cluster),
that every removed document's remover is kept and above the threshold, and the Chinese cases apart.

    python benchmarks/dedup_quality.py [--docs 10000] [--dir bench]   (needs ../shared/data and scipy: `make bench`)
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import re
import shutil
import sys
import time
from pathlib import Path

import numpy as np

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"
TARGETS = (0.99, 0.97, 0.96, 0.95, 0.93, 0.90, 0.85, 0.80)
_WORDS = re.compile(r"[^\W_]+")


def english_texts() -> list[str]:
    texts = json.loads(Path(SHARED / "pile" / "pearl_pile_texts.json").read_text(encoding="utf-8"))
    with gzip.open(SHARED / "commoncrawl" / "dolma_CC-MAIN-20190717121559-20190717143559-00140.jsonl.gz", "rt") as f:
        texts += [json.loads(line)["text"] for line in f]
    with open(SHARED / "evalsets" / "llmfoundry_lambada_openai.jsonl", encoding="utf-8") as f:
        lines = list(f)
    for line in lines:
        texts.append(json.loads(line)["context"])
    with open(SHARED / "evalsets" / "llmfoundry_triviaqa_sm_sub.jsonl", encoding="utf-8") as f:
        lines = list(f)
    for line in lines:
        texts.append(json.loads(line)["context"])
    with open(SHARED / "evalsets" / "gsm8k_test.jsonl", encoding="utf-8") as f:
        lines = list(f)
    for line in lines:
        item = json.loads(line)
        texts.append(item["question"] + "\n" + item["answer"])
    import csv

    with open(SHARED / "reddit" / "reddit_lifestyle_drunk.csv", newline="", encoding="utf-8") as f:
        texts += [row[1] for row in list(csv.reader(f))[1:] if len(row) > 1]
    # OCR books cut into 300-word passages: long, real, and two of them are scans of the same book.
    for book in sorted((SHARED / "dups" / "textreuse_ats").glob("*.txt")):
        words = book.read_text(encoding="utf-8", errors="replace").split()
        texts += [" ".join(words[i:i + 300]) for i in range(0, len(words) - 299, 300)]
    return [t for t in dict.fromkeys(texts) if len(_WORDS.findall(t)) >= 60]


def chinese_texts() -> list[str]:
    texts = [line.split("\t", 1)[1].strip() for line in (SHARED / "chinese" / "thucnews_cnews.val.txt").read_text(encoding="utf-8").split("\n") if line]
    cmrc = json.loads(Path(SHARED / "chinese" / "cmrc2018_dev.json").read_text(encoding="utf-8"))
    texts += [p["context"] for a in cmrc["data"] for p in a["paragraphs"]]
    return [t for t in dict.fromkeys(texts) if len(t) >= 200]


def edit_words(text: str, target: float, rng: random.Random) -> str:
    """Substitute words at random places (each kills up to 5 shingles and adds up to 5: m = n(1-J)/(5(1+J))); a
    text too short for one substitution to stay near the target gets k new words at its end instead (J = n/(n+k))."""
    words = text.split()
    n = len(_WORDS.findall(text))
    m = int(n * (1 - target) / (5 * (1 + target)))
    if m == 0:
        k = max(1, round(n * (1 - target) / target))
        return " ".join(words + [f"edit{rng.randrange(10**6)}" for _ in range(k)])
    for pos in rng.sample(range(len(words)), min(m, len(words))):
        words[pos] = f"edit{rng.randrange(10**6)}"
    return " ".join(words)


def edit_chars(text: str, target: float, rng: random.Random) -> str:
    """Chinese: replace one sentence (or characters) so that about the target share of 5-character shingles survive."""
    chars = list(text)
    m = max(1, round(len(chars) * (1 - target) / (5 * (1 + target))))
    for pos in rng.sample(range(len(chars)), min(m, len(chars))):
        chars[pos] = chr(0x4E00 + rng.randrange(20000))
    return "".join(chars)


def build(folder: Path, n_docs: int, seed: int = 0) -> dict:
    rng = random.Random(seed)
    en, zh = english_texts(), chinese_texts()
    n_copies = n_docs // 8
    n_zh_bases = min(len(zh), n_docs // 5)
    bases = [("en", t) for t in en[: n_docs - n_copies - n_zh_bases]] + [("zh", t) for t in zh[:n_zh_bases]]
    docs = [{"id": f"b{i:05d}", "lang": lang, "text": t} for i, (lang, t) in enumerate(bases)]
    planted = []
    for j in range(n_copies):
        i = rng.randrange(len(bases))
        lang, text = bases[i]
        target = TARGETS[j % len(TARGETS)]
        edited = edit_chars(text, target, rng) if lang == "zh" else edit_words(text, target, rng)
        docs.append({"id": f"c{j:05d}", "lang": lang, "text": edited})
        planted.append({"copy": f"c{j:05d}", "base": f"b{i:05d}", "target": target, "lang": lang})
    # The Chinese case: a THUCNews article with one sentence changed.
    article = zh[0]
    sentences = article.split("。")
    sentences[len(sentences) // 2] = "这一句是后来改写过的内容，与原文完全不同"
    docs.append({"id": "zh-sentence-changed", "lang": "zh", "text": "。".join(sentences)})
    folder.mkdir(parents=True, exist_ok=True)
    for lang in ("en", "zh"):
        with open(folder / f"{lang}.jsonl", "w", encoding="utf-8") as f:
            for d in docs:
                if d["lang"] == lang:
                    f.write(json.dumps({"id": d["id"], "text": d["text"]}, ensure_ascii=False) + "\n")
    return {"docs": docs, "planted": planted, "zh_case": ("b%05d" % (len(bases) - n_zh_bases), "zh-sentence-changed")}


def brute_force(docs: list[dict], threshold: float) -> tuple[dict, dict]:
    """All pairs above the threshold, by exact Jaccard of shingle sets (sparse product), and every doc's set size."""
    from scipy import sparse

    from tokenmill.dedup.shingles import shingle_hashes_many

    sets = shingle_hashes_many([d["text"] for d in docs], [d["lang"] for d in docs])
    values, inverse = np.unique(np.concatenate(sets), return_inverse=True)
    rows = np.repeat(np.arange(len(sets)), [len(s) for s in sets])
    x = sparse.csr_matrix((np.ones(len(rows), np.float32), (rows, inverse)), shape=(len(sets), len(values)))
    inter = sparse.triu(x @ x.T, k=1).tocoo()
    sizes = np.array([len(s) for s in sets], dtype=np.float64)
    jac = inter.data / (sizes[inter.row] + sizes[inter.col] - inter.data)
    above = jac > threshold
    ids = [d["id"] for d in docs]
    pairs = {(ids[a], ids[b]): float(j) for a, b, j in zip(inter.row[above], inter.col[above], jac[above])}
    all_j = {(ids[a], ids[b]): float(j) for a, b, j in zip(inter.row, inter.col, jac)}
    return pairs, all_j


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=10_000)
    parser.add_argument("--dir", default="bench")
    parser.add_argument("--threshold", type=float, default=0.95)
    args = parser.parse_args()
    if not SHARED.is_dir():
        print(json.dumps({"skipped": f"no real-data samples at {SHARED}"}))
        return 0

    import pyarrow.parquet as pq
    import yaml

    from tokenmill.pipeline.config import load_config
    from tokenmill.pipeline.ray_cluster import start_local
    from tokenmill.pipeline.runner import run_pipeline

    root = Path(args.dir) / f"dedup-quality-{args.docs}"
    shutil.rmtree(root, ignore_errors=True)
    sample = build(root / "data", args.docs)
    (root / "run.yaml").write_text(yaml.safe_dump({
        "output": "out", "seed": 1, "ingest": {"docs_per_shard": 1000},
        "sources": [{"name": "en", "format": "jsonl", "paths": ["data/en.jsonl"], "id_field": "id", "language": "en"},
                    {"name": "zh", "format": "jsonl", "paths": ["data/zh.jsonl"], "id_field": "id", "language": "zh"}],
        "stages": {"dedup": {"threshold": args.threshold}},
    }))
    start_local(num_cpus=2)
    t = time.perf_counter()
    run_pipeline(load_config(root / "run.yaml"))
    seconds = time.perf_counter() - t
    truth, all_j = brute_force(sample["docs"], args.threshold)
    clusters = pq.read_table(root / "out" / "dedup" / "clusters.parquet").to_pylist()
    cluster_of = {r["id"]: r["cluster"] for r in clusters}
    found = [p for p in truth if p[0] in cluster_of and cluster_of.get(p[1]) == cluster_of[p[0]]]
    kept = {r["id"] for r in clusters if r["kept"]}
    removed = [r for r in clusters if not r["kept"]]
    verified = [r for r in removed if r["removed_by"] in kept and
                (all_j.get(tuple(sorted((r["id"], r["removed_by"]))), 0.0) > args.threshold or r["reason"] == "exact_duplicate")]
    by_target = {}
    for p in sample["planted"]:
        key = tuple(sorted((p["copy"], p["base"])))
        j = all_j.get(key, 0.0)
        entry = by_target.setdefault(f'{p["lang"]} {p["target"]:.2f}', {"pairs": 0, "mean_jaccard": 0.0, "above": 0, "found": 0})
        entry["pairs"] += 1
        entry["mean_jaccard"] += j
        entry["above"] += j > args.threshold
        entry["found"] += j > args.threshold and cluster_of.get(p["copy"]) is not None and cluster_of.get(p["copy"]) == cluster_of.get(p["base"])
    for e in by_target.values():
        e["mean_jaccard"] = round(e["mean_jaccard"] / e["pairs"], 4)
    zh_base, zh_copy = sample["zh_case"]
    lang = {d["id"]: d["lang"] for d in sample["docs"]}
    zh_truth = [p for p in truth if lang[p[0]] == "zh"]
    result = {
        "benchmark": "dedup_quality", "docs": len(sample["docs"]), "threshold": args.threshold,
        "pipeline_seconds": round(seconds, 1),
        "true_pairs_above_threshold": len(truth),
        "pairs_found": len(found),
        "recall": round(len(found) / len(truth), 5) if truth else None,
        "chinese_pairs": len(zh_truth),
        "chinese_recall": round(sum(p in set(found) for p in zh_truth) / len(zh_truth), 5) if zh_truth else None,
        "removed": len(removed),
        "removed_with_kept_partner_above_threshold": len(verified),
        "planted_by_target": dict(sorted(by_target.items())),
        "chinese_sentence_changed": {"jaccard": round(all_j.get(tuple(sorted((zh_base, zh_copy))), 0.0), 4),
                                     "same_cluster": cluster_of.get(zh_copy) is not None
                                     and cluster_of.get(zh_copy) == cluster_of.get(zh_base)},
    }
    result["ratios"] = {"recall_vs_brute_force": result["recall"], "chinese_recall_vs_brute_force": result["chinese_recall"],
                        "removed_verified_vs_removed": round(len(verified) / len(removed), 5) if removed else None}
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
