"""Benchmark the decontaminate stage's matching on >= 200 MB against every evaluation set in ../shared/data:
documents/s per core, index size and build time; prints JSON.

One process, one core: the index is built once (as the stage's driver does), then the documents go through
`find_matches_batch` a shard's worth (5,000) at a time and, where they match, `excise` (the stage's work, without
Parquet and Ray). Baselines side by side, on the same texts: `find_matches` called once per document (how the
stage matched before batches), and the per-document regex tokenization alone (`tokenize`), the floor of any
per-document matcher (`ratios`: the batch matcher's speed over each).

    python benchmarks/decontaminate.py [--target-mb 200] [--dir bench]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"
EVALSETS = [("gsm8k", "evalsets/gsm8k_test.jsonl", "gsm8k", "en"), ("hellaswag", "evalsets/hellaswag_val_full.txt.gz", "hellaswag_text", "en"),
            ("lambada", "evalsets/llmfoundry_lambada_openai.jsonl", "lambada", "en"), ("piqa", "evalsets/llmfoundry_piqa.jsonl", "piqa", "en"),
            ("winogrande", "evalsets/llmfoundry_winogrande.jsonl", "winogrande", "en"),
            ("arc_easy", "evalsets/llmfoundry_arc_easy.jsonl", "arc", "en"), ("arc_challenge", "evalsets/llmfoundry_arc_challenge.jsonl", "arc", "en"),
            ("triviaqa", "evalsets/llmfoundry_triviaqa_sm_sub.jsonl", "triviaqa", "en"), ("humaneval", "evalsets/HumanEval.jsonl.gz", "humaneval", "en"),
            ("cmrc", "chinese/cmrc2018_dev.json", "squad", "zh")]
SHARD_DOCS = 5_000  # documents matched together, as one shard of the stage


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target-mb", type=float, default=200)
    parser.add_argument("--dir", default="bench")
    args = parser.parse_args()
    if not SHARED.is_dir():
        print(json.dumps({"skipped": f"no evaluation sets at {SHARED}"}))
        return 0

    from tokenmill.demo import write_format_files
    from tokenmill.stages.decontaminate.evalsets import EvalSetConfig, load_evalset
    from tokenmill.stages.decontaminate.excise import excise
    from tokenmill.stages.decontaminate.ngrams import build_index, find_matches, find_matches_batch, tokenize

    folder = Path(args.dir) / f"decontaminate-jsonl-{int(args.target_mb)}mb"
    if not (folder / ".complete").exists():
        write_format_files(folder, "jsonl", int(args.target_mb * 1e6))
        (folder / ".complete").touch()

    def fields():
        for name, rel, fmt, lang in EVALSETS:
            for f in load_evalset(EvalSetConfig(name=name, path=rel, format=fmt, language=lang), str(SHARED / rel)):
                yield name, f.item, f.field, f.text, lang

    wall, cpu = time.perf_counter(), time.process_time()
    index = build_index(fields())
    build = {"wall_seconds": round(time.perf_counter() - wall, 2), "cpu_seconds": round(time.process_time() - cpu, 2)}

    texts = [json.loads(line)["text"] for p in sorted(folder.glob("*.jsonl")) for line in p.read_text(encoding="utf-8").split("\n") if line]
    # Plant one evaluation question in every 100th document, so the excision path is measured too.
    questions = [json.loads(line)["question"] for line in (SHARED / "evalsets" / "gsm8k_test.jsonl").read_text(encoding="utf-8").split("\n") if line]
    texts = [t + "\n\n" + questions[i % len(questions)] if i % 100 == 0 else t for i, t in enumerate(texts)]
    mb = sum(len(t.encode("utf-8")) for t in texts) / 1e6
    find_matches("warm up", "en", index)  # builds the code point tables, once per process as in a stage worker
    matched = 0
    cpu = time.process_time()
    for start in range(0, len(texts), SHARD_DOCS):
        batch = texts[start:start + SHARD_DOCS]
        for text, spans in zip(batch, find_matches_batch(batch, ["en"] * len(batch), index)):
            if spans:
                matched += 1
                excise(text, [(s, e) for s, e, _ in spans])
    seconds = time.process_time() - cpu
    # Baselines, side by side: one find_matches call per document, then the per-document tokenization alone.
    per_doc_matched = 0
    cpu = time.process_time()
    for text in texts:
        spans = find_matches(text, "en", index)
        if spans:
            per_doc_matched += 1
            excise(text, [(s, e) for s, e, _ in spans])
    per_doc = time.process_time() - cpu
    if per_doc_matched != matched:
        raise SystemExit(f"batch and per-document matching disagree: {matched} != {per_doc_matched} documents")
    cpu = time.process_time()
    for text in texts:
        tokenize(text, "en")
    floor = time.process_time() - cpu
    print(json.dumps({
        "benchmark": "decontaminate",
        "corpus": {"docs": len(texts), "text_mb": round(mb, 1)},
        "evalsets": [name for name, *_ in EVALSETS],
        "index": {"ngrams": int(len(index.hashes)), "mb": round(index.nbytes() / 1e6, 1), "build": build,
                  "window_lengths": {"words": index.word_lengths, "characters": index.char_lengths},
                  "coverage": {name: {"n": c.n, **c.items} for name, c in index.coverage.items()}},
        "match": {"cpu_seconds": round(seconds, 2), "docs_per_s_per_core": round(len(texts) / seconds),
                  "mb_per_s_per_core": round(mb / seconds, 2), "docs_with_matches": matched},
        "baseline_per_document": {"cpu_seconds": round(per_doc, 2), "mb_per_s_per_core": round(mb / per_doc, 2)},
        "baseline_tokenize_only": {"cpu_seconds": round(floor, 2), "mb_per_s_per_core": round(mb / floor, 2)},
        "ratios": {"batch_vs_per_document": round(per_doc / seconds, 3),
                   "match_vs_tokenize_only": round(floor / seconds, 3)},
    }, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
