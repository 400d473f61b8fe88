"""Benchmark every reader on generated files of >= 200 MB of text per format: MB/s per core, as JSON.

Each reader runs in this one process (one core) over files written by `tokenmill.demo.write_format_files`,
side by side with a baseline on the same files: plain decompression of every byte, nothing parsed. For WARC the
two HTML extraction libraries are also compared on the same records (benchmarks/html_extraction.py).

    python benchmarks/readers.py [--target-mb 200] [--formats jsonl,csv,...] [--dir bench]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

FORMATS = ["jsonl", "json", "csv", "text", "parquet", "pile", "reddit", "cc_wet", "cc_warc"]
SOURCE_OPTIONS = {
    "reddit": {"max_window_log": 31},
}


def decompress_only(files: list[Path]) -> float:
    """Seconds to decompress every file and touch every byte: the floor under any reader."""
    from tokenmill.readers.compression import open_binary

    start = time.perf_counter()
    for f in files:
        if f.suffix == ".parquet":
            import pyarrow.parquet as pq

            pq.read_table(f)
            continue
        with open_binary(str(f), 31) as stream:
            while stream.read(1 << 20):
                pass
    return time.perf_counter() - start


def run_reader(fmt: str, files: list[Path], options: dict) -> dict:
    from tokenmill.sources.config import SourceConfig
    from tokenmill.sources.formats import READERS

    source = SourceConfig(name="bench", format=fmt, paths=["x"], **options)
    docs = dropped = nbytes = 0
    start = time.perf_counter()
    for f in files:
        for record in READERS[fmt].read(str(f), source, f"bench:{f.name}"):
            if record.drop is None:
                docs += 1
                nbytes += len(record.text.encode("utf-8"))
            else:
                dropped += 1
    seconds = time.perf_counter() - start
    return {"seconds": round(seconds, 3), "docs": docs, "dropped": dropped, "text_mb": round(nbytes / 1e6, 1),
            "text_mb_per_s_per_core": round(nbytes / 1e6 / seconds, 2), "docs_per_s": round(docs / seconds)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target-mb", type=float, default=200)
    parser.add_argument("--formats", default=",".join(FORMATS))
    parser.add_argument("--dir", default="bench")
    args = parser.parse_args()

    from tokenmill.demo import write_format_files

    results = {}
    for fmt in args.formats.split(","):
        folder = Path(args.dir) / f"readers-{int(args.target_mb)}mb" / fmt
        done = folder / ".complete"
        if not done.exists():
            t = time.perf_counter()
            write_format_files(folder, fmt, int(args.target_mb * 1e6))
            done.write_text("")
            print(f"generated {fmt} in {time.perf_counter() - t:.1f}s", file=sys.stderr)
        files = sorted(p for p in folder.rglob("*") if p.is_file() and p.name != ".complete")
        file_mb = sum(p.stat().st_size for p in files) / 1e6
        baseline = decompress_only(files)
        reader = run_reader(fmt, files, SOURCE_OPTIONS.get(fmt, {}))
        results[fmt] = {
            "files": len(files),
            "file_mb": round(file_mb, 1),
            "reader": reader,
            "baseline_decompress_s": round(baseline, 3),
            "reader_vs_decompress_time": round(reader["seconds"] / baseline, 2),
        }
        if fmt == "cc_warc":
            from html_extraction import compare_extractors

            # One file of pages, one pass: trafilatura runs near 3 MB/s, so all 200 MB would take minutes.
            results[fmt]["extractors"] = compare_extractors([str(files[0])], repeats=1)
        print(f"{fmt}: {reader['text_mb_per_s_per_core']} MB/s per core", file=sys.stderr)
    print(json.dumps({"benchmark": "readers", "target_mb": args.target_mb, "formats": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
