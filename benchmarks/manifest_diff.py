"""`tokenmill manifest diff` of two runs of N documents: the polars comparison against the previous pyarrow one, side by
side at a size both finish, and the polars one at N; wall time and peak RSS of each in its own process; prints JSON.

    python benchmarks/manifest_diff.py [--docs 10000000] [--common 1000000] [--dir bench] [--baseline-rev 6043f5a]

Two `clean` stage folders of N documents over 4 sources, written with the pipeline's own shard writer
(`split_and_write`: `text_hash` and content hashes as a stage writes them) and manifest (`build_content`,
`write_manifest`), 100,000 documents per shard. Texts are short (about 60 bytes): the diff reads the `id` and
`text_hash` columns only, and short texts keep the runs small on disk. Planted, each at `--rate` of the documents
(seeded, spread over every shard, so every shard's content hash differs and all are read): ids kept in A that B drops
(`too_short`), kept in B that A drops, kept in A and absent from B, kept in B and absent from A, kept in both with an
edited text, and dropped in both for different reasons (`too_short` in A, `too_long` in B: a change in the drop
counts, not in the documents). Runs are kept under <dir>/manifest_diff/ and reused.

Each diff runs `diff_runs(A, B)` in a fresh process (imports excluded from `seconds`; `peak_rss_mb` is the process's
ru_maxrss). The baseline is `src/tokenmill/manifests/diff.py` at `--baseline-rev` (from git), imported as a module
beside the current package. Both must report exactly the planted differences, and at the common size the same result.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SOURCES = {"books": 0.05, "cc": 0.7, "pile": 0.2, "reddit": 0.05}
"""Each source's share of the documents: one web source dominates, as in a web-scale run (the diff compares one
source at a time, so the largest source sets the memory)."""
SHARD_DOCS = 100_000
KINDS = ("dropped_in_b", "dropped_in_a", "only_a", "only_b", "edited", "reason_changed")
VERSION = 2  # of the generated layout: bump to regenerate kept runs


# ---------------------------------------------------------------------------------------------------------- runs


def plan(n_docs: int, rate: float, seed: int = 0) -> dict[str, np.ndarray]:
    """Per planted kind, the sorted global indices of the documents it changes (disjoint sets)."""
    rng = np.random.default_rng(seed)
    per_kind = max(1, int(n_docs * rate))
    chosen = rng.choice(n_docs, size=per_kind * len(KINDS), replace=False)
    return {kind: np.sort(chosen[i * per_kind:(i + 1) * per_kind]) for i, kind in enumerate(KINDS)}


def doc_ids(source: str, idx: np.ndarray) -> list[str]:
    """Ids shaped as the readers give them: WARC record ids (random UUIDs) for `cc`, path/line for `pile`, ..."""
    if source == "cc":
        raw = np.random.default_rng(int(idx[0])).bytes(16 * len(idx))
        return [f"<urn:uuid:{uuid.UUID(bytes=raw[k:k + 16])}>" for k in range(0, len(raw), 16)]
    if source == "pile":
        return [f"pile/{i // 1_000_000:02d}.jsonl.zst/{i % 1_000_000}" for i in idx.tolist()]
    if source == "reddit":
        return [f"t1_{np.base_repr(i + 36**6, 36).lower()}" for i in idx.tolist()]
    return [f"{source}-{i:09d}" for i in idx.tolist()]


def write_runs(folder: Path, n_docs: int, rate: float) -> dict:
    """Write runs A and B (each `<folder>/<a|b>/clean`) unless already written; return the expected differences."""
    import pyarrow as pa

    from tokenmill.pipeline import storage
    from tokenmill.config_base import StageConfig
    from tokenmill.pipeline.contract import RunContext, Stage
    from tokenmill.pipeline.manifest import build_content, write_manifest
    from tokenmill.pipeline.map_phase import split_and_write

    done = folder / "expected.json"
    if done.exists() and json.loads(done.read_text()).get("version") == VERSION:
        return json.loads(done.read_text())

    class Clean(Stage):
        name = "clean"
        drop_reasons = ("too_short", "too_long")

    class Folder:
        """What `split_and_write` needs of a task context: a place under the stage folder to write files."""

        def __init__(self, root: Path):
            self.root = root

        def write(self, relpath: str, data: bytes) -> None:
            (self.root / relpath).parent.mkdir(parents=True, exist_ok=True)
            (self.root / relpath).write_bytes(data)

    stage = Clean(StageConfig(), RunContext(seed=0, sources={}))
    planted = plan(n_docs, rate)
    kind_of = np.zeros(n_docs, np.int8)  # 0: unchanged, else 1 + index in KINDS
    for i, kind in enumerate(KINDS):
        kind_of[planted[kind]] = i + 1
    bounds = np.round(np.cumsum([0, *SOURCES.values()]) / sum(SOURCES.values()) * n_docs).astype(int)
    expected: dict = {"version": VERSION, "docs": n_docs, "rate": rate, "by_source": {}}
    entries: dict[str, list] = {"a": [], "b": []}
    fs = storage.filesystem_for(str(folder))[0]
    for s, source in enumerate(SOURCES):
        lo, hi = int(bounds[s]), int(bounds[s + 1])
        counts = {kind: int(np.count_nonzero(kind_of[lo:hi] == i + 1)) for i, kind in enumerate(KINDS)}
        expected["by_source"][source] = {
            "removed": counts["dropped_in_b"] + counts["only_a"], "added": counts["dropped_in_a"] + counts["only_b"],
            "changed": counts["edited"]}
        for shard, start in enumerate(range(lo, hi, SHARD_DOCS)):
            idx = np.arange(start, min(hi, start + SHARD_DOCS))
            kinds = kind_of[idx]
            ids = doc_ids(source, idx)
            texts = [f"{doc_id}: a short text about document {i * 7919 % 100003}" for doc_id, i in zip(ids, idx.tolist())]
            name = f"{source}.{shard:05d}"
            for side in ("a", "b"):
                present = kinds != 1 + KINDS.index("only_b" if side == "a" else "only_a")
                side_ids = [x for x, p in zip(ids, present) if p]
                side_texts = [t + " (edited)" if side == "b" and k == 1 + KINDS.index("edited") else t
                              for t, k, p in zip(texts, kinds.tolist(), present) if p]
                k = kinds[present]
                reason = np.full(len(k), None, object)
                reason[k == 1 + KINDS.index("dropped_in_a" if side == "a" else "dropped_in_b")] = "too_short"
                reason[k == 1 + KINDS.index("reason_changed")] = "too_short" if side == "a" else "too_long"
                table = pa.table({"id": side_ids, "text": side_texts, "source": [source] * len(side_ids),
                                  "subset": pa.nulls(len(side_ids), pa.string()), "meta": ["{}"] * len(side_ids)})
                entry = split_and_write(stage, Folder(folder / side / "clean"), name, source, table,
                                        pa.array(reason.tolist(), pa.string()))
                entries[side].append({**entry, "input": f"shards/{name}.parquet"})
    for side in ("a", "b"):
        content = build_content("clean", {"config": {}, "seed": 0}, {"stage": "sample", "manifest_hash": "x"},
                                entries[side])
        write_manifest(fs, str(folder / side / "clean"), content, {}, ".tmp")
    done.write_text(json.dumps(expected))
    return expected


# ---------------------------------------------------------------------------------------------------------- diffs


def load_baseline(rev: str, into: Path):
    """The module `tokenmill.manifests.diff` as it was at `rev`, loaded from git beside the current package."""
    text = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:src/tokenmill/manifests/diff.py"],
                          capture_output=True, text=True, check=True).stdout
    path = into / f"diff_{rev}.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location(f"baseline_diff_{rev}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def child(impl: str, a: str, b: str, out: str) -> None:
    """Run one diff in this process and write its result and time to `out`."""
    if impl == "new":
        from tokenmill.manifests.diff import diff_runs
    else:
        with tempfile.TemporaryDirectory() as tmp:
            diff_runs = load_baseline(impl, Path(tmp)).diff_runs
    start = time.perf_counter()
    result = diff_runs(a, b)
    seconds = time.perf_counter() - start
    Path(out).write_text(json.dumps({"seconds": seconds, "result": result}))


def run_child(impl: str, run: Path, out: Path) -> dict:
    """One diff in a fresh process: its result, `seconds` (the diff alone), and its peak RSS from wait4."""
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, __file__, "--child", impl, str(run / "a"), str(run / "b"), str(out)],
                            env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"the {impl} diff of {run} failed (exit {os.waitstatus_to_exitcode(status)})")
    got = json.loads(out.read_text())
    return {"seconds": round(got["seconds"], 3), "process_seconds": round(wall, 3),
            "peak_rss_mb": round(usage.ru_maxrss / 1024, 1), "result": got["result"]}


def found(result: dict) -> dict:
    """The per-source document counts a diff reported."""
    [stage] = result["stages"]
    return {r["source"]: {k: r[k] for k in ("removed", "added", "changed")} for r in stage["documents"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=10_000_000, help="documents per run for the new diff alone")
    parser.add_argument("--common", type=int, default=1_000_000, help="documents per run for old and new side by side")
    parser.add_argument("--rate", type=float, default=0.001, help="fraction of documents per planted difference")
    parser.add_argument("--repeats", type=int, default=3, help="side-by-side rounds (best of)")
    parser.add_argument("--dir", default="bench")
    parser.add_argument("--baseline-rev", default="6043f5a", help="git revision of the previous diff")
    parser.add_argument("--child", nargs=4, metavar=("IMPL", "A", "B", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return 0
    sys.path.insert(0, str(ROOT / "src"))
    try:
        with tempfile.TemporaryDirectory() as tmp:
            load_baseline(args.baseline_rev, Path(tmp))
    except (OSError, subprocess.CalledProcessError) as err:  # no git, or not a checkout that holds the revision
        print(json.dumps({"skipped": f"the baseline {args.baseline_rev} cannot be read from git: {err}"}))
        return 0
    base = Path(args.dir) / "manifest_diff"
    out: dict = {"docs": args.docs, "common_docs": args.common, "rate": args.rate, "sources": SOURCES,
                 "shard_docs": SHARD_DOCS, "baseline_rev": args.baseline_rev}
    with tempfile.TemporaryDirectory() as tmp:
        common = base / f"{args.common}"
        t = time.perf_counter()
        expected = write_runs(common, args.common, args.rate)["by_source"]
        out["generate_common_s"] = round(time.perf_counter() - t, 1)
        rounds: dict[str, list] = {"old": [], "new": []}
        for i in range(args.repeats):
            for impl in ("old", "new"):  # alternating, so both see the same machine load
                got = run_child(args.baseline_rev if impl == "old" else "new", common, Path(tmp) / f"{impl}{i}.json")
                if found(got["result"]) != expected:
                    raise SystemExit(f"{impl} diff at {args.common} documents: {found(got['result'])}, planted {expected}")
                rounds[impl].append(got)
        if rounds["old"][0]["result"] != rounds["new"][0]["result"]:
            raise SystemExit("the old and new diffs differ in their result")
        best = {impl: min(r, key=lambda x: x["seconds"]) for impl, r in rounds.items()}
        out["common"] = {impl: {k: v for k, v in best[impl].items() if k != "result"} | {
            "peak_rss_mb": max(x["peak_rss_mb"] for x in rounds[impl])} for impl in rounds}
        out["common"]["same_result"] = True
        out["ratios"] = {"old_vs_new_seconds": round(best["old"]["seconds"] / best["new"]["seconds"], 2),
                         "old_vs_new_peak_rss": round(out["common"]["old"]["peak_rss_mb"]
                                                      / out["common"]["new"]["peak_rss_mb"], 2)}
        if args.docs != args.common:
            full = base / f"{args.docs}"
            t = time.perf_counter()
            expected = write_runs(full, args.docs, args.rate)["by_source"]
            out["generate_full_s"] = round(time.perf_counter() - t, 1)
            got = run_child("new", full, Path(tmp) / "full.json")
            if found(got["result"]) != expected:
                raise SystemExit(f"new diff at {args.docs} documents: {found(got['result'])}, planted {expected}")
            out["full_new"] = {k: v for k, v in got.items() if k != "result"}
        out["goal"] = {"seconds": 60, "peak_rss_mb": 2048}
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
