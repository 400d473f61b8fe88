"""Benchmark the demo pipeline with its sources and output on a local object store against the same run on local
disk; JSON with the time ratio, the requests the store served by kind, and whether the bytes are the same.

One process, one Ray cluster (``--workers`` CPUs) for every run. The demo corpus (`tokenmill.demo.write_demo_corpus`,
no classifier, shards of 20 documents, 2 dedup partitions, a 512-token tokenizer: the shape
tests/objectstore/test_sources_s3.py runs) is run into a local folder, then from and into each store: the moto S3
server (tests/s3server.py) and, when installed, the GCS emulator (tests/gcsserver.py, gcp-storage-emulator), both
on 127.0.0.1. Reported per store: seconds against the local run (``ratios``; the issue's goal is 3x at most), the
requests the server logged by kind (an S3 copy is logged as a PUT, so ``DELETE`` counts the moves of the old commit
protocol; ``PUT folder marker`` is an empty object whose key ends in ``/``; ``multipart`` are the 3 requests pyarrow
spends on an object it does not PUT whole), requests per output file, and ``same_bytes``: every file the store run
wrote is the local run's, bit for bit, but JSON records (they hold the source patterns as written and hashes over
them; tests/objectstore compares them field by field).

    python benchmarks/object_store.py [--docs-per-source 40] [--sources web_en,books_en,news_zh,cc_wet]
        [--stores s3,gs] [--workers 2] [--dir bench]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests/s3server.py and tests/gcsserver.py: the servers the tests start

import yaml  # noqa: E402

from tests.gcsserver import GcsServer, GcsUnavailable  # noqa: E402
from tests.s3server import S3Server  # noqa: E402

_LINE = re.compile(r'"(GET|PUT|POST|DELETE|HEAD|PATCH) (\S+) HTTP/[\d.]+"')


def demo_config(corpus: Path, docs: int, keep: list[str] | None) -> dict:
    """The demo corpus written under `corpus`, cut to `keep` (all: None); its config as a mapping."""
    from tokenmill.demo import write_demo_corpus

    write_demo_corpus(corpus, docs_per_source=docs, classifier=False)
    data = yaml.safe_load((corpus / "demo.yaml").read_text())
    if keep:
        for source in data["sources"]:
            if source["name"] not in keep:
                shutil.rmtree(corpus / source["paths"][0].split("/")[0])
        data["sources"] = [s for s in data["sources"] if s["name"] in keep]
        data["stages"]["clean"].pop("overrides", None)
    data["stages"]["dedup"] = {"partitions": 2}
    data["stages"]["tokenize"]["tokenizer"] = {"train": {"vocab_size": 512, "sample_docs": 200}}
    data["ingest"] = {"docs_per_shard": 20}
    return data


def request_kinds(log: Path, scheme: str) -> dict[str, int]:
    """Requests by kind from a server's access log (werkzeug's `"METHOD /path HTTP/1.1"` lines)."""
    counts: collections.Counter[str] = collections.Counter()
    for method, target in _LINE.findall(log.read_text(errors="replace")):
        path, _, query = target.partition("?")
        if scheme == "s3":
            if method == "GET" and ("list-type" in query or "delimiter" in query or "prefix=" in query):
                kind = "LIST"
            elif method == "POST" and "delete" in query:
                kind = "POST delete (batch)"
            elif "uploads" in query or "uploadId" in query:
                kind = f"{method} multipart"
            elif method == "PUT" and path.endswith("/"):
                kind = "PUT folder marker"
            else:
                kind = method
        else:  # GCS JSON API: /storage/v1/b/BUCKET/o[/OBJECT], /upload/storage/v1/...
            if path.startswith("/upload/"):
                kind = f"{method} upload"
            elif method == "GET" and path.rstrip("/").endswith("/o"):
                kind = "LIST"
            elif method == "GET" and "alt=media" in query:
                kind = "GET data"
            elif method == "GET":
                kind = "GET metadata"
            elif "copyTo" in path or "rewriteTo" in path:
                kind = "POST copy"
            else:
                kind = method
        counts[kind] += 1
    return dict(sorted(counts.items()))


def files_of(fs, base: str) -> dict[str, bytes]:
    import pyarrow.fs as pafs

    out = {}
    for info in fs.get_file_info(pafs.FileSelector(base, recursive=True, allow_not_found=True)):
        if info.type == pafs.FileType.File:
            with fs.open_input_stream(info.path) as f:
                out[info.path[len(base) + 1:]] = f.read()
    return out


def same_bytes(local: dict[str, bytes], remote: dict[str, bytes]) -> tuple[bool, list[str]]:
    """Whether the two runs hold the same files with the same bytes (JSON records and the per-run lock and logs
    aside); the first differences."""
    per_run = ("_lock/", "_logs/")
    a = {k for k in local if not k.startswith(per_run)}
    b = {k for k in remote if not k.startswith(per_run)}
    diff = sorted(a ^ b)[:5] + [k for k in sorted(a & b) if not k.endswith(".json") and local[k] != remote[k]][:5]
    return not diff, diff


def run_store(name: str, server, corpus: Path, data: dict, workdir: Path, local_files: dict[str, bytes],
              workers: int) -> dict:
    from tokenmill.pipeline.config import load_config
    from tokenmill.pipeline.runner import run_pipeline
    from tokenmill.sources.uris import from_uri

    scheme = "s3" if name == "s3" else "gs"
    saved = {k: os.environ.get(k) for k in server.env()}
    os.environ.update(server.env())
    try:
        server.create_bucket("corpus")
        server.create_bucket("runs")
        server.upload_tree(corpus, "corpus", "demo")
        prefix = f"{scheme}://corpus/demo/"
        remote = {**data, "output": f"{scheme}://runs/demo",
                  "sources": [{**s, "paths": [prefix + p for p in s["paths"]]} for s in data["sources"]]}
        config_path = corpus / f"{name}.yaml"  # relative paths (evalsets) resolve beside it
        config_path.write_text(yaml.safe_dump(remote))
        before = len(_LINE.findall(server.log.read_text(errors="replace")))
        started = time.perf_counter()
        run_pipeline(load_config(config_path), workers=workers)
        seconds = time.perf_counter() - started
        lines = server.log.read_text(errors="replace").splitlines()
        run_log = workdir / f"{name}-run.log"
        # Only the run's requests: those after the uploads.
        kept = [line for line in lines if _LINE.search(line)][before:]
        run_log.write_text("\n".join(kept) + "\n")
        fs, base = from_uri(f"{scheme}://runs/demo")
        remote_files = files_of(fs, base)
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    kinds = request_kinds(run_log, scheme)
    same, diff = same_bytes(local_files, remote_files)
    outputs = sum(1 for k in remote_files if not k.startswith(("_lock/", "_logs/")))
    return {"seconds": round(seconds, 2), "requests": kinds, "requests_total": sum(kinds.values()),
            "output_files": outputs, "requests_per_output_file": round(sum(kinds.values()) / max(outputs, 1), 2),
            "same_bytes": same, "differences": diff}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs-per-source", type=int, default=40)
    parser.add_argument("--sources", default="web_en,books_en,news_zh,cc_wet",
                        help="demo sources to run (comma-separated; 'all' for every one)")
    parser.add_argument("--stores", default="s3,gs")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--dir", default="bench")
    args = parser.parse_args()

    import ray

    from tokenmill.pipeline.config import load_config
    from tokenmill.pipeline.ray_cluster import ray_session
    from tokenmill.pipeline.runner import run_pipeline

    workdir = Path(args.dir).resolve() / "object_store"
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    keep = None if args.sources == "all" else args.sources.split(",")
    data = demo_config(workdir / "corpus", args.docs_per_source, keep)
    (workdir / "corpus" / "local.yaml").write_text(yaml.safe_dump({**data, "output": str(workdir / "local")}))
    result: dict = {"docs_per_source": args.docs_per_source, "sources": keep or "all", "workers": args.workers,
                    "stores": {}, "skipped": {}}
    with ray_session(num_cpus=args.workers):
        import pyarrow.fs as pafs

        started = time.perf_counter()
        run_pipeline(load_config(workdir / "corpus" / "local.yaml"), workers=args.workers)
        result["local_seconds"] = round(time.perf_counter() - started, 2)
        local_files = files_of(pafs.LocalFileSystem(), str(workdir / "local"))
        for name in args.stores.split(","):
            server = (S3Server if name == "s3" else GcsServer)(log=workdir / f"{name}-server.log")
            try:
                server.start()
            except (GcsUnavailable, RuntimeError) as err:
                result["skipped"][name] = str(err)
                continue
            try:
                result["stores"][name] = run_store(name, server, workdir / "corpus", data, workdir, local_files,
                                                   args.workers)
            finally:
                server.stop()
        ray.shutdown()
    result["ratios"] = {f"{name}_seconds_vs_local": round(r["seconds"] / result["local_seconds"], 2)
                        for name, r in result["stores"].items()}
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
