"""Benchmark the TokenLoader against a nanoGPT-style loader (``np.memmap`` + random offsets) on the same files; JSON.

Measured in one run, side by side: samples/s at seq_len 2048, batch 8, with 0 and 2 workers (the loader) and the
baseline's ``get_batch`` (a fresh memmap per batch, ``torch.randint`` offsets, ``torch.stack``); time to the first
batch and to resume at sample 10^9 on a dataset of >= 10^8 tokens; ``RssAnon`` after 1k and after 100k samples.

    python benchmarks/loader.py [--tokens 100000000] [--dir bench]
"""

from __future__ import annotations

import os
import sys


import argparse  # noqa: E402
import hashlib  # noqa: E402
import json  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

from tokenmill.tokenize import bundle, tokens_json  # noqa: E402
from tokenmill.tokenize.indexed import IndexedWriter  # noqa: E402

SOURCES = {"web": 0.6, "books": 0.3, "code": 0.1}
FILE_TOKENS = 20_000_000


def write_dataset(root: Path, total_tokens: int, seed: int = 0, file_tokens: int = FILE_TOKENS) -> Path:
    """Random uint16 tokens in the tokenize stage's layout, written by its own writer: per source, files of
    ``file_tokens`` (20M by default), documents of ~1,000 tokens each ending with the end-of-text id 0, both files'
    sha256 and the head's in tokens.json. Reused when present. benchmarks/streaming.py reads the same kind of data."""
    path = root / tokens_json.FILE
    try:
        reuse = path.exists() and all("head" in f or f["tokens"] * 2 <= bundle.HEAD_BYTES
                                      for f in tokens_json.read(path).files("train"))
    except tokens_json.DataError:  # an older version's index ("sha256": "random") that tokens.json now refuses
        reuse = False
    if reuse:
        return path  # (written by an older version without heads: written again)
    rng = np.random.default_rng(seed)
    (root / "train").mkdir(parents=True, exist_ok=True)
    entries = []
    for source, share in SOURCES.items():
        left, part = int(total_tokens * share), 0
        while left > 0:
            n = min(left, file_tokens)
            lengths = np.maximum(2, rng.lognormal(6.5, 1.0, size=n // 500 + 10).astype(np.int64))
            lengths = lengths[np.cumsum(lengths) <= n]
            if n - lengths.sum() > 0:
                lengths = np.append(lengths, n - lengths.sum())
            tokens = rng.integers(1, 50000, size=n, dtype=np.uint16)
            tokens[np.cumsum(lengths) - 1] = 0
            writer = IndexedWriter(np.dtype(np.uint16))
            writer.add_documents(tokens, lengths)
            prefix = f"train/{source}.{part:04d}"
            data = dict(zip((".bin", ".idx"), writer.finalize()))  # hashed from the bytes in hand, not read back
            for ext, raw in data.items():
                (root / f"{prefix}{ext}").write_bytes(raw)
            entries.append({"prefix": prefix, "documents": int(len(lengths)), "tokens": n,
                            "by_source": {source: {"documents": int(len(lengths)), "tokens": n}},
                            "sha256": {ext: hashlib.sha256(raw).hexdigest() for ext, raw in data.items()}})
            if (head := bundle.head_record(data[".bin"])) is not None:
                entries[-1]["head"] = head
            left -= n
            part += 1
    index = tokens_json.build({"file": "tokenizer.json", "vocab_size": 50257, "eos_id": 0},
                              "uint16", {"train": entries})
    path.write_bytes(tokens_json.dumps(index))
    return path


def nanogpt_samples_per_s(root: Path, seq_len: int, batch: int, batches: int) -> float:
    """nanoGPT's get_batch (train.py), round-robin over the same files."""
    bins = sorted((root / "train").glob("*.bin"))
    t = time.perf_counter()
    for i in range(batches):
        # nanoGPT recreates the memmap every batch to avoid a memory leak (nanoGPT#287).
        data = np.memmap(bins[i % len(bins)], dtype=np.uint16, mode="r")
        ix = torch.randint(len(data) - seq_len, (batch,))
        x = torch.stack([torch.from_numpy(data[i:i + seq_len].astype(np.int64)) for i in ix])
        y = torch.stack([torch.from_numpy(data[i + 1:i + 1 + seq_len].astype(np.int64)) for i in ix])
        assert x.shape == y.shape
    return batches * batch / (time.perf_counter() - t)


def loader_samples_per_s(path: Path, seq_len: int, batch: int, batches: int, workers: int) -> float:
    from tokenmill.loader import TokenLoader

    loader = TokenLoader([path], seq_len=seq_len, global_batch_size=batch, num_workers=workers, seed=1)
    it = iter(loader)
    # Past start-up and past what the workers prefetched while we waited (2 chunks each of 64 micro-batches).
    for _ in range(4 * 64 * max(1, workers) + 8):
        next(it)
    t = time.perf_counter()
    for _ in range(batches):
        b = next(it)
        assert b["input_ids"].shape == (batch, seq_len)
    return batches * batch / (time.perf_counter() - t)


def startup(path: Path, workers: int, consumed: int) -> dict:
    """Seconds to build a loader and get its first batch, fresh or resumed at ``consumed`` samples, in a new process
    (so no file is already open or mapped)."""
    code = f"""
import json, time  # noqa: E402
t = time.perf_counter()
from tokenmill.loader import TokenLoader  # noqa: E402
imported = time.perf_counter()
loader = TokenLoader([{str(path)!r}], seq_len=2048, global_batch_size=8, num_workers={workers})
if {consumed}:
    state = loader.state_dict(); state["consumed_samples"] = {consumed}; loader.load_state_dict(state)
b = next(iter(loader))
done = time.perf_counter()
print(json.dumps({{"seconds": done - imported, "import_seconds": imported - t, "epochs": loader.epochs()}}))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def rss_anon_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def rss_growth(path: Path) -> dict:
    from tokenmill.loader import TokenLoader

    loader = TokenLoader([path], seq_len=2048, global_batch_size=8, seed=2)
    it = iter(loader)
    out = {}
    for n in range(1, 100_000 // 8 + 1):
        next(it)
        if n * 8 == 1000:
            out["rss_anon_mb_after_1k"] = round(rss_anon_mb(), 1)
    out["rss_anon_mb_after_100k"] = round(rss_anon_mb(), 1)
    out["rss_anon_growth_mb"] = round(out["rss_anon_mb_after_100k"] - out["rss_anon_mb_after_1k"], 1)
    out["tokens_read"] = loader.state_dict()["consumed_samples"] * 2049
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=100_000_000)
    parser.add_argument("--dir", default="bench")
    parser.add_argument("--batches", type=int, default=3000)
    args = parser.parse_args()
    root = Path(args.dir) / f"loader-{args.tokens}"
    path = write_dataset(root, args.tokens)
    for f in sorted((root / "train").glob("*.bin")):
        f.read_bytes()  # warm the page cache for every contender alike
    result: dict = {"tokens": args.tokens, "seq_len": 2048, "batch": 8, "cpus": os.cpu_count()}
    rounds = []
    for _ in range(2):  # alternate, and keep each contender's best
        rounds.append({"nanogpt": nanogpt_samples_per_s(root, 2048, 8, args.batches),
                       "workers_0": loader_samples_per_s(path, 2048, 8, args.batches, 0),
                       "workers_2": loader_samples_per_s(path, 2048, 8, args.batches, 2)})
    best = {k: max(r[k] for r in rounds) for k in rounds[0]}
    result["samples_per_s"] = {k: round(v) for k, v in best.items()}
    result["ratio_vs_nanogpt"] = {k: round(best[k] / best["nanogpt"], 2) for k in ("workers_0", "workers_2")}
    result["first_batch_s"] = {f"workers_{w}": round(startup(path, w, 0)["seconds"], 3) for w in (0, 2)}
    resumed = startup(path, 0, 10**9)
    result["resume_at_1e9_s"] = round(resumed["seconds"], 3)
    result["epochs_at_1e9"] = resumed["epochs"]
    result.update(rss_growth(path))
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
