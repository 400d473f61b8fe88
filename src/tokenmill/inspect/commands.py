"""`tokenmill inspect RUN --stage clean --source reddit -n 5 [--dropped [REASON]]`: random documents of a stage in
the terminal, one panel each (id, source, subset, drop reason, a few annotations, the text cut to --chars).

``register(sub)`` adds the command to the top-level subparsers; the function it sets returns an exit code and raises
``TokenmillError`` on what the user can fix (no such run, stage, source or reason).
"""

from __future__ import annotations

import argparse

from tokenmill.inspect.samples import ANY, samples

SHOWN = ("lang", "escape_score", "escape_counts", "clean_steps")  # annotations printed under the title when present


def cmd_inspect(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.panel import Panel
    from rich.text import Text

    rows = samples(args.run, stage=args.stage, source=args.source, n=args.n, seed=args.seed, dropped=args.dropped)
    out = Console(width=max(Console().width, 100))
    what = "kept" if args.dropped is None else ("dropped" if args.dropped == ANY else f"dropped ({args.dropped})")
    out.print(Text(f"{len(rows)} random {what} documents of {args.stage}"
                   + (f", source {args.source}" if args.source else "") + f" (seed {args.seed})", style="bold"))
    for r in rows:
        title = Text(f"{r['id']}  {r['source']}" + (f"/{r['subset']}" if r.get("subset") else ""))
        if r.get("drop_reason"):
            title.append(f"  {r['drop_reason']}", style="red")
        text = r.get("text") or ""
        notes = [f"{k}={r[k]:.4g}" if isinstance(r[k], float) else f"{k}={r[k]}"
                 for k in SHOWN if r.get(k) not in (None, "", "{}")]
        body = Text((" ".join(notes) + "\n") if notes else "", style="dim")
        body.append(text[:args.chars] + (f"... ({len(text):,} characters)" if len(text) > args.chars else ""))
        out.print(Panel(body, title=title, title_align="left"))  # Text, not markup: documents hold brackets
    return 0


def register(sub) -> argparse.ArgumentParser:
    """Add ``inspect`` to the top-level ``add_subparsers()`` object; returns its parser."""
    p = sub.add_parser("inspect", help="print random kept or dropped documents of a stage")
    p.add_argument("run", nargs="?", default=None,
                   help="the run folder (the config's `output`; default $TOKENMILL_RUN, else build/demo/run)")
    p.add_argument("--stage", default="clean", help="the stage whose output to sample (default: clean)")
    p.add_argument("--source", help="only documents of this source")
    p.add_argument("-n", type=int, default=5, help="how many documents (default: 5)")
    p.add_argument("--seed", type=int, default=0, help="the same seed gives the same documents")
    p.add_argument("--dropped", nargs="?", const=ANY, metavar="REASON",
                   help="dropped documents instead of kept ones: of this drop reason, or of any without one")
    p.add_argument("--chars", type=int, default=800, help="characters of each text to print (default: 800)")
    p.set_defaults(func=cmd_inspect)
    return p
