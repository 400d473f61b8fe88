"""Benchmark the tokenize stage on >= 200 MB with 2 workers against a bare `Tokenizer.encode_batch` loop over the
same texts on the same cores, with the fast engine (tiktoken, where it applies) and without; prints JSON.

The GPT-2 tokenizer from ../shared/data (the fast engine applies to it). In the same run, every document's ids in
both stages' token files are checked equal to the bare loop's (`identical_ids`), and the two stages' token files
byte-identical.

`encode_cpu` times the stage's per-shard function (its encode phase, in this process, no Ray) in CPU seconds, which
other processes on the machine do not inflate as they do wall time, against a bare tiktoken `encode_ordinary` loop
over the same shards. With `--old-src DIR` (the `src` of a checkout of the previous code, e.g. made with `git
worktree add /tmp/old <commit>`), the same is timed with that code in a child process, old and new alternating,
best of `--rounds`: `stage_encode_speed_vs_old_cpu`.

`--threads` asks whether threads would serve better than Ray workers: the same texts encoded by `--workers`
processes of one thread and by one process of `--workers` threads (tiktoken's `encode_ordinary_batch`, which
releases the GIL), alternating, best of `--rounds`; `threads_vs_workers` above 1 means the threads were faster.

    python benchmarks/tokenize_speed.py [--target-mb 200] [--dir bench] [--old-src DIR] [--rounds 3] [--threads]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import time
from pathlib import Path

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def digest_tokens(out: Path) -> str:
    h = hashlib.sha256()
    for path in sorted((out / "tokenize").rglob("*.bin")):
        h.update(path.read_bytes())
    return h.hexdigest()


def doc_digests(out: Path) -> dict[str, bytes]:
    """Document id -> digest of its ids (the end-of-text id left off), from the stage's token files."""
    from tokenmill.tokenize import bundle
    from tokenmill.tokenize.indexed import IDX, IndexedReader

    digests = {}
    for idx in sorted((out / "tokenize").rglob(f"*{IDX}")):
        prefix = str(idx)[: -len(IDX)]
        ids = bundle.read_docs(prefix + bundle.DOCS, columns=["id"]).column("id").to_pylist()
        for doc_id, seq in zip(ids, IndexedReader(prefix)):
            digests[doc_id] = hashlib.blake2b(seq[:-1].astype("int64").tobytes(), digest_size=16).digest()
    return digests


def encode_cpu(config_path: str) -> dict:
    """CPU seconds of the tokenize stage's encode phase over the input shards of the run that `config_path` made
    (tokenizer already saved), in this process; the files it writes are counted and dropped (a shard the stage
    would link, as it does on a local disk, is neither written nor counted). And of a bare tiktoken
    `encode_ordinary` loop over the same texts."""
    import pyarrow.fs as pafs
    import pyarrow.parquet as pq

    import tokenmill
    from tokenmill.pipeline.config import load_config
    from tokenmill.pipeline.contract import Task, TaskContext
    from tokenmill.pipeline.config import build_stages
    from tokenmill.tokenize.fast_engine import tiktoken_encoding
    from tokenmill.tokenize.tokenizer import load_tokenizer

    class Discard:
        fs = pafs.LocalFileSystem()
        written = 0

        def write(self, relpath, data) -> None:
            self.written += len(data)

        def link(self, relpath, source) -> bool:  # an unchanged input shard, linked as on the run's local disk
            return True

    config = load_config(config_path)
    stages = build_stages(config)
    names = [s.name for s in stages]
    stage, previous = stages[names.index("tokenize")], names[names.index("tokenize") - 1]
    out = Path(config.output_dir)
    shards = json.loads((out / previous / "manifest.json").read_text())["content"]["shards"]
    tok = load_tokenizer(str(out / "tokenize" / "tokenizer.json"), stage.config.eos_token)
    encoding = tiktoken_encoding(tok)  # built once per worker process in the stage too: not timed
    writer = Discard()
    ctx = TaskContext(str(out / "tokenize"), str(out / previous), {"tokenizer": tok}, writer)
    encode = next(p for p in stage.phases() if p.name == "encode")  # the previous code has other phases before it
    tasks = [Task(key=s["path"].rsplit("/", 1)[-1].removesuffix(".parquet"), inputs=(s["path"],),
                  params={"source": s["source"]}) for s in shards]
    encode.run(stage, tasks[0], ctx)  # untimed: the imports and caches of a worker's first task
    writer.written = 0
    started = time.process_time()
    for task in tasks:
        encode.run(stage, task, ctx)
    stage_cpu = time.process_time() - started
    texts = [t for s in shards for t in pq.read_table(out / previous / s["path"], columns=["text"])
             .column("text").to_pylist()]
    started = time.process_time()
    for text in texts:
        encoding.encoding.encode_ordinary(text)
    return {"tokenmill": tokenmill.__file__, "stage_cpu_seconds": round(stage_cpu, 3),
            "bare_tiktoken_cpu_seconds": round(time.process_time() - started, 3), "bytes_written": writer.written}


def encode_threads(config_path: str, threads: int, part: int, parts: int) -> None:
    """A child of `--threads`: tiktoken over every `parts`-th text (from `part`) of the run's tokenize input, in
    batches of the stage's size on `threads` threads (`encode_ordinary_batch`), once the parent says go."""
    import pyarrow.parquet as pq

    from tokenmill.pipeline.config import load_config
    from tokenmill.tokenize.fast_engine import tiktoken_encoding
    from tokenmill.tokenize.tokenizer import load_tokenizer

    config = load_config(config_path)
    out = Path(config.output_dir)
    shards = json.loads((out / "ingest" / "manifest.json").read_text())["content"]["shards"]
    texts = [t for s in shards for t in pq.read_table(out / "ingest" / s["path"], columns=["text"])
             .column("text").to_pylist()][part::parts]
    encoding = tiktoken_encoding(load_tokenizer(str(out / "tokenize" / "tokenizer.json"))).encoding
    print("ready", flush=True)
    sys.stdin.readline()
    for i in range(0, len(texts), 1000):
        if threads == 1:
            [encoding.encode_ordinary(t) for t in texts[i:i + 1000]]
        else:
            encoding.encode_ordinary_batch(texts[i:i + 1000], num_threads=threads)
    print(json.dumps({"texts": len(texts)}), flush=True)


def threads_vs_workers(config_path: str, workers: int, rounds: int) -> dict:
    """Wall seconds to encode the same texts in `workers` processes of 1 thread and in 1 process of `workers`
    threads, alternating, best of `rounds`; each timed from a common go to the last process's end (loading the
    texts and the encoder not counted)."""
    import subprocess

    def timed(layout: list[tuple[int, int, int]]) -> float:
        procs = [subprocess.Popen([sys.executable, __file__, "--encode-threads", config_path, *map(str, args)],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) for args in layout]
        for p in procs:
            assert p.stdout.readline().strip() == "ready"
        started = time.perf_counter()
        for p in procs:
            p.stdin.write("go\n")
            p.stdin.flush()
        for p in procs:
            p.communicate()
            if p.returncode:
                raise RuntimeError(f"--encode-threads child failed ({p.returncode})")
        return time.perf_counter() - started

    seconds: dict[str, list[float]] = {"workers": [], "threads": []}
    for _ in range(rounds):
        seconds["workers"].append(round(timed([(1, i, workers) for i in range(workers)]), 2))
        seconds["threads"].append(round(timed([(workers, 0, 1)]), 2))
    return {"layout": f"{workers} processes x 1 thread vs 1 process x {workers} threads", "seconds": seconds,
            "threads_vs_workers": round(min(seconds["workers"]) / min(seconds["threads"]), 2)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target-mb", type=float, default=200)
    parser.add_argument("--dir", default="bench")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--old-src", help="the src folder of the previous code, for stage_encode_speed_vs_old_cpu")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the CPU timings; the best is kept")
    parser.add_argument("--threads", action="store_true", help="also time --workers processes of 1 thread against 1 "
                        "process of --workers threads over the same texts: threads_vs_workers")
    parser.add_argument("--encode-cpu", metavar="CONFIG", help=argparse.SUPPRESS)  # the child process's job
    parser.add_argument("--encode-threads", nargs=4, help=argparse.SUPPRESS)  # a child of --threads
    args = parser.parse_args()
    if args.encode_cpu:
        print(json.dumps(encode_cpu(args.encode_cpu)))
        return 0
    if args.encode_threads:
        config_path, threads, part, parts = args.encode_threads
        encode_threads(config_path, int(threads), int(part), int(parts))
        return 0
    tokenizer_json = SHARED / "tokenizer" / "gpt2_tokenizer.json"
    if not tokenizer_json.is_file():
        print(json.dumps({"skipped": f"no GPT-2 tokenizer at {tokenizer_json}"}))
        return 0

    import yaml
    from tokenizers import Tokenizer

    from tokenmill.demo import write_format_files
    from tokenmill.pipeline.config import load_config
    from tokenmill.pipeline.ray_cluster import start_local
    from tokenmill.pipeline.runner import run_pipeline

    root = Path(args.dir) / f"tokenize-{int(args.target_mb)}mb"
    if not (root / "data" / ".complete").exists():
        shutil.rmtree(root, ignore_errors=True)
        write_format_files(root / "data", "jsonl", int(args.target_mb * 1e6))
        (root / "data" / ".complete").touch()
    start_local(num_cpus=args.workers)
    runs = {}
    for engine in ("auto", "tokenizers"):
        config = {"output": f"out-{engine}", "seed": 1, "ingest": {"docs_per_shard": 10_000},
                  "sources": [{"name": "web", "format": "jsonl", "paths": ["data/*.jsonl"], "id_field": "id"}],
                  "stages": {"tokenize": {"tokenizer": str(tokenizer_json), "engine": engine, "valid_fraction": 0.001}}}
        (root / f"{engine}.yaml").write_text(yaml.safe_dump(config))
        shutil.rmtree(root / f"out-{engine}", ignore_errors=True)
        reports = run_pipeline(load_config(root / f"{engine}.yaml"), workers=args.workers)
        tok = next(r for r in reports if r.stage == "tokenize")
        mb = tok.totals["bytes_in"] / 1e6
        index = json.loads((root / f"out-{engine}" / "tokenize" / "tokens.json").read_text())
        engines = sorted({f["engine"] for s in index["splits"].values() for f in s["files"]})
        runs[engine] = {"stage_seconds": tok.seconds, "text_mb": round(mb, 1), "mb_per_s": round(mb / tok.seconds, 2),
                        "engines_used": engines, "tokens_sha256": digest_tokens(root / f"out-{engine}")}

    records = [json.loads(line) for p in sorted((root / "data").glob("*.jsonl")) for line in p.read_text(encoding="utf-8").split("\n") if line]
    texts = [r["text"] for r in records]
    bare = Tokenizer.from_file(str(tokenizer_json))
    t = time.perf_counter()
    bare_ids = []
    for i in range(0, len(texts), 1000):
        bare_ids.append(bare.encode_batch(texts[i:i + 1000], add_special_tokens=False))
    bare_seconds = time.perf_counter() - t
    t = time.perf_counter()
    for i in range(0, len(texts), 1000):  # what the stage's tokenizers path calls: no offsets
        bare.encode_batch_fast(texts[i:i + 1000], add_special_tokens=False)
    fast_seconds = time.perf_counter() - t
    import numpy as np

    reference = {r["id"]: hashlib.blake2b(np.asarray(e.ids, dtype=np.int64).tobytes(), digest_size=16).digest()
                 for r, e in zip(records, (e for batch in bare_ids for e in batch))}
    del bare_ids
    identical = {}
    for engine in runs:
        written = doc_digests(root / f"out-{engine}")
        # Every document the stage kept has the bare loop's ids (ingest may drop a few, e.g. empty texts).
        identical[engine] = bool(written) and all(reference.get(i) == d for i, d in written.items())
        runs[engine]["documents_checked"] = len(written)
    mb = sum(len(x.encode("utf-8")) for x in texts) / 1e6
    import subprocess

    def child(src: str | None) -> dict:
        env = dict(os.environ)
        if src:
            env["PYTHONPATH"] = src
        done = subprocess.run([sys.executable, __file__, "--encode-cpu", str(root / "auto.yaml")], env=env,
                              check=True, capture_output=True, text=True)
        return json.loads(done.stdout.strip().splitlines()[-1])

    cpu: dict[str, list[dict]] = {"new": [], "old": []}
    for _ in range(args.rounds):  # alternating, so that both see the same machine
        if args.old_src:
            cpu["old"].append(child(args.old_src))
        cpu["new"].append(child(None))
    best = {k: min(v, key=lambda r: r["stage_cpu_seconds"]) for k, v in cpu.items() if v}
    bare_cpu = min(r["bare_tiktoken_cpu_seconds"] for r in cpu["new"])
    result = {
        "benchmark": "tokenize_speed", "cpus": os.cpu_count(), "workers": args.workers, "docs": len(texts), "text_mb": round(mb, 1),
        "bare_encode_batch": {"seconds": round(bare_seconds, 2), "mb_per_s": round(mb / bare_seconds, 2)},
        "bare_encode_batch_fast": {"seconds": round(fast_seconds, 2), "mb_per_s": round(mb / fast_seconds, 2)},
        "stage": runs,
        "identical_token_files": runs["auto"]["tokens_sha256"] == runs["tokenizers"]["tokens_sha256"],
        "identical_ids": identical,
        "encode_cpu": {"text_mb": runs["auto"]["text_mb"], "bare_tiktoken_cpu_seconds": bare_cpu,
                       **{k: {"stage_cpu_seconds": v["stage_cpu_seconds"], "bytes_written": v["bytes_written"],
                              "tokenmill": v["tokenmill"]} for k, v in best.items()}},
        "ratios": {"stage_encode_speed_vs_bare_tiktoken_cpu": round(bare_cpu / best["new"]["stage_cpu_seconds"], 2),
                   **({"stage_encode_speed_vs_old_cpu": round(best["old"]["stage_cpu_seconds"]
                                                              / best["new"]["stage_cpu_seconds"], 2)}
                      if "old" in best else {}),"fast_engine_stage_vs_bare": round(runs["auto"]["mb_per_s"] / (mb / bare_seconds), 2),
                   "tokenizers_stage_vs_bare": round(runs["tokenizers"]["mb_per_s"] / (mb / bare_seconds), 2),
                   "tokenizers_stage_vs_bare_encode_batch_fast":
                       round(runs["tokenizers"]["mb_per_s"] / (mb / fast_seconds), 2)},
    }
    if args.threads:
        result["threads"] = threads_vs_workers(str(root / "auto.yaml"), args.workers, args.rounds)
        result["ratios"]["threads_vs_workers"] = result["threads"]["threads_vs_workers"]
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
