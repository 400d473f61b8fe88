"""Command line: `python -m tokenmill.demo OUT_DIR [--seed N] [--docs-per-source N] [--target-mb MB]`."""

from __future__ import annotations

import argparse
import json
import time

from .corpus import write_demo_corpus


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tokenmill.demo", description=__doc__)
    parser.add_argument("out_dir")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--docs-per-source", type=int, default=600)
    parser.add_argument("--target-mb", type=float, default=None, help="write at least this many MB (1e6 bytes) of text")
    args = parser.parse_args(argv)
    target = None if args.target_mb is None else int(args.target_mb * 1_000_000)
    start = time.perf_counter()
    summary = write_demo_corpus(args.out_dir, seed=args.seed, docs_per_source=args.docs_per_source, target_bytes=target)
    seconds = time.perf_counter() - start
    per_source = {name: {k: s[k] for k in ("documents", "records", "text_bytes", "file_bytes")}
                  for name, s in summary["sources"].items()}
    print(json.dumps({"out_dir": summary["out_dir"], "documents": summary["documents"],
                      "text_bytes": summary["text_bytes"], "planted": summary["planted"], "sources": per_source,
                      "seconds": round(seconds, 3), "text_mb_per_s": round(summary["text_bytes"] / seconds / 1e6, 1)},
                     indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
