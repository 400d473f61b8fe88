"""The spans the subdoc stage removed (``subdoc/removed/`` and ``subdoc/kept/``, docs/subdoc.md): per source, each
span with the document that lost it, how many documents held it, and the document that kept it.

The stage writes, per shard, one row per (document, span) removed and one per span a document of the shard kept
for every other holder (its first document); a span's hash joins the two. The files are checked before use: the
stage must have completed (its manifest), every file must have the columns read, and the rows must add up to the
manifest's counts (one removed row per removal, one kept row per repeated span). Dolma keeps removed paragraphs as
attribute spans (offsets into the original text) for its mixer; here the text itself (cut to the stage's
``SPAN_CHARS``) is kept, since the output text no longer holds it.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from tokenmill.errors import TokenmillError
from tokenmill.inspect.runs import manifest, stage_dir

STAGE = "subdoc"
REMOVED = ("id", "source", "hash", "docs", "chars", "span")
KEPT = REMOVED + ("dropped",)


def _read(run, folder: str, columns: tuple[str, ...], expected: int, source: str | None = None) -> pa.Table:
    """The rows (of ``source``, else all) of every file of ``subdoc/<folder>/`` (sorted), after checking each file's
    columns and that the files hold ``expected`` rows in all."""
    where = stage_dir(run, STAGE) / folder
    if expected and not where.is_dir():
        raise TokenmillError(f"{where} does not exist, and the stage's manifest counts {expected:,} rows for it: "
                             "written by an earlier version of the subdoc stage; rerun it")
    files = sorted(where.glob("*.parquet"))
    rows = 0
    for path in files:
        missing = set(columns) - set(pq.read_schema(path).names)
        if missing:
            raise TokenmillError(f"{path} lacks the column(s) {', '.join(sorted(missing))}: written by another "
                                 "version of the subdoc stage; rerun it")
        rows += pq.read_metadata(path).num_rows
    if rows != expected:
        raise TokenmillError(f"{where} holds {rows:,} rows, the stage's manifest counts "
                             f"{expected:,}: the folder does not belong to this run's subdoc output")
    filters = [("source", "=", source)] if source is not None else None
    tables = [pq.read_table(path, columns=list(columns), filters=filters) for path in files]
    if not tables:
        return pa.table({c: pa.array([], t) for c, t in zip(columns, _TYPES[:len(columns)])})
    return pa.concat_tables(tables)


_TYPES = (pa.string(), pa.string(), pa.uint64(), pa.int64(), pa.int64(), pa.string(), pa.bool_())


def removed_spans(run: str | os.PathLike | None = None, source: str | None = None) -> pa.Table:
    """One row per span a document lost: source, id, span (cut), chars (its length), docs (documents holding it),
    hash, kept_by, kept_by_source and kept_by_dropped (the first document, which kept it, and whether it was dropped
    itself as too short: then the span is nowhere in the output). Ordered by source, id, hash."""
    import polars as pl

    count = manifest(run, STAGE).get("report", {}).get("count", {})
    removed = pl.from_arrow(_read(run, "removed", REMOVED, int(count.get("removals", 0)), source))
    kept = pl.from_arrow(_read(run, "kept", KEPT, int(count.get("repeated_spans", 0))))
    if kept["hash"].n_unique() != kept.height:
        raise TokenmillError(f"{stage_dir(run, STAGE) / 'kept'} names two first documents for one span")
    kept = kept.select("hash", pl.col("id").alias("kept_by"), pl.col("source").alias("kept_by_source"),
                       pl.col("dropped").alias("kept_by_dropped"))
    out = removed.join(kept, on="hash", how="left").sort("source", "id", "hash")
    if out["kept_by"].null_count():
        raise TokenmillError(f"{out['kept_by'].null_count():,} removed spans have no first document in "
                             f"{stage_dir(run, STAGE) / 'kept'}")
    return out.select("source", "id", "span", "chars", "docs", "hash", "kept_by", "kept_by_source",
                      "kept_by_dropped").to_arrow()


def removed_span_summary(run: str | os.PathLike | None = None, source: str | None = None,
                         n: int | None = None) -> dict[str, list[dict]]:
    """Per source (sorted), its removed spans, the most widely removed first (ties by hash): span, removed_from (the
    source's documents that lost it), docs (documents holding it, corpus-wide), kept_by, kept_by_source,
    kept_by_dropped, chars, an example document that lost it (the smallest id); ``n`` spans per source at most."""
    import polars as pl

    rows = pl.from_arrow(removed_spans(run, source))
    grouped = (rows.group_by("source", "hash")
               .agg(pl.len().alias("removed_from"), pl.col("id").min().alias("example"),
                    *(pl.col(c).first() for c in ("span", "chars", "docs", "kept_by", "kept_by_source",
                                                  "kept_by_dropped")))
               .sort("source", "removed_from", "hash", descending=[False, True, False]))
    out: dict[str, list[dict]] = {}
    for r in grouped.iter_rows(named=True):
        spans = out.setdefault(r["source"], [])
        if n is None or len(spans) < n:
            spans.append({k: r[k] for k in ("span", "removed_from", "docs", "kept_by", "kept_by_source",
                                            "kept_by_dropped", "chars", "example", "hash")})
    return out


def print_removed(args: argparse.Namespace) -> int:
    """`tokenmill inspect RUN --removed [-n 5] [--source S] [--chars 800]`: per source, the spans the subdoc stage
    removed, most widely removed first, with the document that kept each."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    if args.dropped is not None or getattr(args, "sort", None):
        raise TokenmillError("--removed lists the subdoc stage's removed spans: leave out --dropped and --sort")
    summary = removed_span_summary(args.run, args.source, args.n)
    report = manifest(args.run, STAGE).get("report", {})
    out = Console(width=max(Console().width, 120))
    for line in report.get("summary", []):
        out.print(Text(line, style="bold"))
    if not summary:
        out.print(Text("no span was removed" + (f" from source {args.source}" if args.source else "")))
    for source, spans in summary.items():
        by_source = report.get("by_source", {}).get(source, {})
        table = Table(title=Text(f"{source}: {by_source.get('spans_removed', 0):,} spans removed from "
                                 f"{by_source.get('docs_changed', 0):,} documents; the {len(spans)} most removed"),
                      title_justify="left")
        for col in ("removed from", "held by", "kept by", "e.g. lost by", "span"):
            table.add_column(col, justify="right" if col in ("removed from", "held by") else "left")
        for s in spans:
            kept = f"{s['kept_by']} ({s['kept_by_source']})" + (", dropped" if s["kept_by_dropped"] else "")
            span = s["span"][:args.chars] + (f"... ({s['chars']:,} characters)" if s["chars"] > args.chars else "")
            # Text, not markup: spans and ids come from documents and hold brackets
            table.add_row(f"{s['removed_from']:,}", f"{s['docs']:,}", Text(kept), Text(s["example"]), Text(span))
        out.print(table)
    out.print(Text(f"every removed span: {Path(stage_dir(args.run, STAGE)) / 'removed'} (tokenmill.inspect."
                   "removed_spans)", style="dim"))
    return 0
