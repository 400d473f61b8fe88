"""Peak RSS of one source's reader on one file, alone (no shard writing): which reader holds the memory.

    python benchmarks/reader_memory.py CONFIG SOURCE [--file N]

Prints JSON: the file, documents read, the longest document, peak RSS (and, as its baseline, the peak before the
reader opens the file: `ratios`) and seconds. Run it in a fresh process per
source: the peak (``ru_maxrss``) is the process's high-water mark.
"""

from __future__ import annotations

import sys


import argparse  # noqa: E402
import json  # noqa: E402
import resource  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config")
    parser.add_argument("source")
    parser.add_argument("--file", type=int, default=0, help="which of the source's files, in sorted order")
    args = parser.parse_args()

    from tokenmill.pipeline.config import load_config
    from tokenmill.sources.formats import READERS

    config = load_config(args.config)
    source = next((s for s in config.sources if s.name == args.source), None)
    if source is None:
        parser.error(f"no source {args.source!r} in {args.config}")
    base = Path(config.base_dir)
    path = sorted(p for pattern in source.paths for p in base.glob(pattern))[args.file]
    # Baseline: this process's peak before the reader opens the file (interpreter, imports, config).
    before_mb = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    started, docs, longest = time.perf_counter(), 0, 0
    for record in READERS[source.format].read(str(path), source, f"{source.name}:{path.name}"):
        docs += 1
        longest = max(longest, len(record.text))
    peak_mb = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    print(json.dumps({"source": source.name, "format": source.format, "file": str(path), "file_bytes": path.stat().st_size,
                      "documents": docs, "longest_document_chars": longest,
                      "peak_rss_mb": peak_mb, "peak_rss_before_reading_mb": before_mb,
                      "seconds": round(time.perf_counter() - started, 1),
                      "ratios": {"peak_rss_vs_before_reading": round(peak_mb / before_mb, 3)}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
