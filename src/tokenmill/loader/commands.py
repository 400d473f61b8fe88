"""`tokenmill loader explain STATE --step N`: the documents that fed one global batch, as a table or JSON. Takes the
parsed arguments (declared in `tokenmill.cli`), prints, returns an exit code; what the user can fix is a
``TokenmillError``."""

from __future__ import annotations

import argparse
import json

from tokenmill.errors import TokenmillError


def loader_explain(args: argparse.Namespace) -> int:
    """`tokenmill loader explain STATE --step N`: the documents that fed one global batch."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from tokenmill.loader import DataError, ResumeError
    from tokenmill.loader.explain import explain, state_from

    try:
        state = state_from(args.state)
        batch, rows = explain(state, step=args.step, batch=args.batch, paths=args.paths,
                              allow_unhashed=args.allow_unhashed)
    except (OSError, ValueError, DataError, ResumeError) as err:
        raise TokenmillError(str(err)) from None
    if args.json:
        print(json.dumps({"batch": batch, "rows": rows}, ensure_ascii=False, indent=1))
        return 0
    out = Console(width=max(Console().width, 140))
    how = f"step {args.step} = global batch {batch}" if args.step is not None else f"global batch {batch}"
    table = Table(title=f"{how}: {state['global_batch_size']} samples of {state['seq_len']} tokens",
                  title_justify="left")
    for col in ("sample", "rank", "source", "id", "tokens of doc", "in sample", "preview"):
        table.add_column(col, justify="right" if col in ("sample", "rank", "in sample") else "left",
                         overflow="fold" if col == "preview" else "ellipsis")
    for r in rows:
        table.add_row(str(r["sample_in_batch"]), str(r["rank"]), escape(r["source"]), escape(str(r["id"])),
                      f"{r['tokens'][0]}-{r['tokens'][1]} of {r['document_tokens']}", str(r["tokens_in_sample"]),
                      escape(r["preview"]))
    out.print(table)
    docs = {(r["stream"], r["id"]) for r in rows}
    out.print(f"{len(docs)} documents from {len({r['source'] for r in rows})} sources; skipped batches in the state: "
              f"{state.get('skip') or 'none'}")
    return 0
