"""`tokenmill demo-data DIR`: write the generated demo corpus and DIR/demo.yaml, and say how to run it."""

from __future__ import annotations

import argparse

from rich.console import Console
from rich.markup import escape


def demo_data(args: argparse.Namespace) -> int:
    from tokenmill.demo import write_demo_corpus

    kwargs = {"seed": args.seed}
    if args.docs_per_source is not None:
        kwargs["docs_per_source"] = args.docs_per_source
    if args.target_mb is not None:
        kwargs["target_bytes"] = int(args.target_mb * 1e6)
    summary = write_demo_corpus(args.dir, **kwargs)
    console = Console(stderr=True)
    console.print(f"demo corpus written to {escape(args.dir)}")
    console.print_json(data=summary)
    console.print(f"run it with: tokenmill run {escape(args.dir)}/demo.yaml")
    console.print(f"ablate its recipe (proxy models, CPU-sized): tokenmill ablate {escape(args.dir)}/ablate.yaml")
    return 0
