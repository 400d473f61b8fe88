"""The inspection commands in the terminal: `tokenmill inspect` (random documents of a stage, one panel each: id,
source, subset, drop reason, a few annotations, the text cut to --chars; with --sort COLUMN the best and worst by a
score) and `tokenmill report contamination`.

The parser is `tokenmill.cli`'s; each function here returns an exit code and raises ``TokenmillError`` on what the
user can fix (no such run, stage, source or reason). Texts from documents and names from files are printed as text,
never as rich markup.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pyarrow.fs as pafs

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from tokenmill.errors import TokenmillError
from tokenmill.inspect.samples import ANY, samples
from tokenmill.pipeline.manifest import MANIFEST, read_manifest

SHOWN = ("lang", "escape_score", "escape_counts", "clean_steps")  # annotations printed under the title when present


def print_samples(args: argparse.Namespace) -> int:
    """`tokenmill inspect RUN --stage clean --source reddit -n 5 [--dropped [REASON]] [--sort COLUMN]`."""
    from rich.panel import Panel
    from rich.text import Text

    if getattr(args, "removed", False):
        from tokenmill.inspect.subdoc import print_removed

        return print_removed(args)
    if getattr(args, "sort", None):
        return print_ranked(args)
    rows = samples(args.run, stage=args.stage, source=args.source, n=args.n, seed=args.seed, dropped=args.dropped)
    out = Console(width=max(Console().width, 100))
    what = "kept" if args.dropped is None else ("dropped" if args.dropped in (True, ANY) else f"dropped ({args.dropped})")
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


def print_ranked(args: argparse.Namespace) -> int:
    """`tokenmill inspect RUN --stage clean --sort hq_score [-n 5] [--source S]`: the best and worst documents by a
    score column, kept and dropped together, each marked kept or dropped (with its reason)."""
    from rich.panel import Panel
    from rich.text import Text

    from tokenmill.inspect.scores import ranked

    if args.dropped is not None:
        raise TokenmillError("--sort ranks kept and dropped documents together: leave out --dropped")
    column = args.sort
    found = ranked(args.run, stage=args.stage, column=column, n=args.n, source=args.source)
    out = Console(width=max(Console().width, 100))
    for side, what in (("best", "highest"), ("worst", "lowest")):
        rows = found[side]
        out.print(Text(f"{len(rows)} {side} documents of {args.stage} by {column} ({what} first, kept and dropped)"
                       + (f", source {args.source}" if args.source else ""), style="bold"))
        for r in rows:
            title = Text(f"{column}={r[column]:.6g}  {r['id']}  {r['source']}"
                         + (f"/{r['subset']}" if r.get("subset") else "") + "  ")
            title.append(r["status"], style="green" if r["status"] == "kept" else "red")
            if r.get("drop_reason"):
                title.append(f" ({r['drop_reason']})", style="red")
            text = r.get("text") or ""
            body = Text(text[:args.chars] + (f"... ({len(text):,} characters)" if len(text) > args.chars else ""))
            out.print(Panel(body, title=title, title_align="left"))  # Text, not markup: documents hold brackets
    return 0


def report_contamination(args: argparse.Namespace) -> int:
    """`tokenmill report contamination RUN`: which evaluation items the corpus held, per set and source."""
    path = Path(args.run) / "decontaminate" / MANIFEST
    if not path.is_file():
        raise TokenmillError(f"{path} does not exist: run the decontaminate stage first")
    report = read_manifest(pafs.LocalFileSystem(), str(path.parent), required=True)["content"].get("report", {})
    table = Table(title=f"contamination in {escape(args.run)}", title_justify="left")
    for col in ("evaluation set", "items", "n", "by n-gram", "whole", "too short", "no text", "segments",
                "seg. n-gram / whole", "found", "% found", "by source (items)"):
        table.add_column(col, justify="left" if col in ("evaluation set", "by source (items)") else "right",
                         no_wrap=col == "evaluation set")  # a set's name whole: the by-source column wraps instead
    for name, entry in report.get("evalsets", {}).items():
        sources = ", ".join(f"{src} {sum(s['items'] for s in subs.values())}" for src, subs in entry["by_source"].items())
        unchecked = entry.get("not_checkable", {})
        n = "?" if entry.get("n") is None else f"{entry['n']}{' chars' if entry.get('unit') == 'characters' else ''}"
        segments = entry.get("segments") or {}
        table.add_row(escape(name), f"{entry['items']:,}", n, f"{entry.get('checked_ngram', 0):,}",
                      f"{entry.get('checked_whole', 0):,}", f"{unchecked.get('too_short', 0):,}",
                      f"{unchecked.get('no_text', 0):,}", f"{segments.get('total', 0):,}",
                      f"{segments.get('ngram', 0):,} / {segments.get('whole', 0):,}", f"{entry['found']:,}",
                      f"{100 * entry['fraction']:.2f}", escape(sources) or "-")
    out = Console(width=max(Console().width, 160))
    out.print(table)
    out.print("items checked by n-gram: a segment has n words or more (n per set: GPT-3's rule, the 5th-percentile "
              "segment length clamped to [8, 13]); whole: only shorter segments, matched as a whole; too short: "
              "every segment under the whole-match minimum (docs/decontaminate.md); no text: no letters or digits. "
              "A segment is a field, or a line of a multiple-choice prompt (its stem, each choice); segments: how "
              "many, and how many checked by n-gram and as a whole")
    index = report.get("index", {})
    out.print(f"hits: {report.get('hits', 0):,} in {report.get('documents_with_hits', 0):,} documents; "
              f"{report.get('excised_chars', 0):,} characters excised; index: {index.get('ngrams', 0):,} n-grams, "
              f"{index.get('bytes', 0) / 1e6:.1f} MB, built in {index.get('seconds', 0)} s")
    common = report.get("common_ngrams_ignored", [])
    if common:
        out.print(f"{len(common)} common n-grams ignored (in more documents than the cap), e.g.:")
        for entry in common[:5]:
            out.print(f"  [dim]{entry['documents']} docs: {escape(repr(entry['text'][:100]))}[/]")
    out.print(f"every hit: {escape(str(Path(args.run) / 'decontaminate' / 'hits.parquet'))}")
    return 0
