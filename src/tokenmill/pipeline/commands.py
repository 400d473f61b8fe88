"""The pipeline's commands in the terminal: `run` (progress bars, summary and drop tables), `validate`, `runs du`,
`runs gc`.

The pipeline computes and returns plain values (`run_pipeline`'s reports, `disk_usage`, `collect`); this module
only prints them. Every text that comes from a file name, a source or a document is escaped for rich.
"""

from __future__ import annotations

import argparse
import json

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table


class RichReporter:
    """Progress bars over tasks, one per phase, and notes printed above them."""

    def __init__(self, progress: Progress):
        self.progress = progress
        self.bars: dict[tuple[str, str], int] = {}

    def note(self, text: str) -> None:
        self.progress.console.print(f"[yellow]{escape(text)}[/]")  # file names such as `[x].jsonl` are not markup

    def phase_started(self, stage: str, phase: str, total: int, committed: int) -> None:
        label = f"{stage}/{phase}" + (f" ({committed} committed earlier)" if committed else "")
        self.bars[(stage, phase)] = self.progress.add_task(escape(label), total=total, completed=committed)

    def task_done(self, stage: str, phase: str) -> None:
        self.progress.advance(self.bars[(stage, phase)])

    def phase_ended(self, stage: str, phase: str) -> None:
        pass


def run(args: argparse.Namespace) -> int:
    """`tokenmill run CONFIG`: every configured stage (or `--stage`), progress on stderr, then the summary."""
    from tokenmill.pipeline import storage
    from tokenmill.pipeline.config import load_config
    from tokenmill.pipeline.runner import run_pipeline

    config = load_config(args.config)
    columns = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()]
    with Progress(*columns, console=Console(stderr=True), transient=False) as progress:
        reports = run_pipeline(config, only=args.stage, workers=args.workers, ray_address=args.ray_address,
                               reporter=RichReporter(progress))
    print_summary(reports, storage.filesystem_for(config.output_location)[0])
    return 0


def summary_table(reports) -> Table:
    table = Table(title="tokenmill run", title_justify="left")
    for col in ("stage", "status", "tasks run", "skipped", "docs in", "kept", "dropped", "MB kept", "seconds"):
        table.add_column(col, justify="left" if col in ("stage", "status") else "right", no_wrap=True)
    for r in reports:
        t = r.totals
        table.add_row(escape(r.stage), r.status, str(r.tasks_run), str(r.tasks_skipped), f"{t['docs_in']:,}",
                      f"{t['docs_out']:,}", f"{t['docs_in'] - t['docs_out']:,}", f"{t['bytes_out'] / 1e6:.2f}",
                      f"{r.seconds:.1f}")
    return table


def print_summary(reports, fs=None) -> None:
    """The summary table, then per stage its drop table, first bad records and report lines, from the manifest each
    report names on `fs` (the run folder's filesystem: an object store's manifests too; local disk when None)."""
    import pyarrow.fs as pafs

    from tokenmill.pipeline import storage

    out = Console(width=max(Console().width, 100))
    out.print(summary_table(reports))
    for r in reports:
        manifest = storage.read_json(fs or pafs.LocalFileSystem(), r.manifest)
        content = manifest.get("content", {}) if isinstance(manifest, dict) else {}
        out.print(f"  {escape(r.stage)}: manifest {escape(r.manifest)}")
        if content.get("drop_table"):
            out.print(drop_table(r.stage, content["drop_table"], content["by_source"]))
        for message in _first_errors(content):
            out.print(f"    [dim]{escape(message)}[/]")
        for line in content.get("report", {}).get("summary", []):
            out.print(f"    [bold yellow]{escape(line)}[/]")


def drop_table(stage: str, drops: dict, by_source: dict) -> Table:
    """Reason x source, as in the manifest: what each source lost, and why."""
    table = Table(title=f"{escape(stage)}: dropped documents", title_justify="left", show_edge=False)
    for col in ("source", "reason", "docs", "% of source"):
        table.add_column(col, justify="right" if col in ("docs", "% of source") else "left", no_wrap=True)
    rows = sorted((source, reason, cell) for reason, cells in drops.items() for source, cell in cells.items())
    for source, reason, cell in rows:
        table.add_row(escape(source), escape(reason), f"{cell['docs']:,}", f"{cell['percent']:.2f}")
    return table


def _first_errors(content: dict, limit: int = 5) -> list[str]:
    """The first bad records a stage named (file and line), so a person sees them without opening the manifest."""
    errors = [e for s in content.get("shards", []) for e in s.get("errors", [])]
    more = len(errors) - limit
    return errors[:limit] + ([f"... {more} more in the manifest and under dropped/"] if more > 0 else [])


def validate(args: argparse.Namespace) -> int:
    """`tokenmill validate CONFIG`: the config and the stage chain checked, nothing run."""
    from tokenmill.pipeline.columns import check_chain
    from tokenmill.pipeline.config import load_config
    from tokenmill.pipeline.config import build_stages

    config = load_config(args.config)
    stages = build_stages(config)
    check_chain(stages)
    files = stages[0].files
    print(f"config OK: {len(config.sources)} sources, {len(files)} files, stages: {' -> '.join(s.name for s in stages)}")
    print(f"output: {config.output_location}")
    return 0


def _mb(n: int) -> str:
    return f"{n / 1e6:,.2f}"


def runs_du(args: argparse.Namespace) -> int:
    """`tokenmill runs du RUN`: bytes of each live stage and of each superseded generation, stage by stage."""
    import dataclasses

    from tokenmill.pipeline import storage
    from tokenmill.pipeline.generations import disk_usage

    fs, root = storage.filesystem_for(args.run)
    usage = disk_usage(fs, root)
    if args.json:
        value = dataclasses.asdict(usage)
        for gen, entry in zip([usage.live, *usage.superseded], [value["live"], *value["superseded"]]):
            entry["bytes"] = gen.bytes
        print(json.dumps({**value, "total": usage.total}, indent=1))
        return 0
    table = Table(title=f"disk use of {escape(args.run)}", title_justify="left")
    for col in ("generation", "stage", "MB", "files", "config", "state"):
        table.add_column(col, justify="right" if col in ("MB", "files") else "left", no_wrap=True)
    for gen in [usage.live, *reversed(usage.superseded)]:
        for s in gen.stages:
            state = "complete" if s.complete else "incomplete"
            table.add_row(escape(gen.name), escape(s.stage), _mb(s.bytes), f"{s.files:,}", (s.config_hash or "-")[:12],
                          state + (", being deleted" if gen.deleting else ""))
        for name in gen.other:
            table.add_row(escape(gen.name), escape(name), "", "", "", "not tokenmill's: gc leaves it")
        if len(gen.stages) + len(gen.other) > 1:
            table.add_row(escape(gen.name), "[bold]all[/]", f"[bold]{_mb(gen.bytes)}[/]", "", "", "", end_section=True)
    out = Console(width=max(Console().width, 100))
    out.print(table)
    old = sum(g.bytes for g in usage.superseded)
    out.print(f"live {_mb(usage.live.bytes)} MB, superseded {_mb(old)} MB in {len(usage.superseded)} generation(s), "
              f"other {_mb(usage.other_bytes)} MB; total {_mb(usage.total)} MB. "
              f"`tokenmill runs gc {escape(args.run)} --keep N` deletes all but the newest N generations")
    return 0


def runs_gc(args: argparse.Namespace) -> int:
    """`tokenmill runs gc RUN --keep N`: delete all but the newest N superseded generations, holding the run lock."""
    from tokenmill.pipeline import storage
    from tokenmill.pipeline.generations import collect

    fs, root = storage.filesystem_for(args.run)
    result = collect(fs, root, args.keep, dry_run=args.dry_run)
    verb = "would delete" if result.dry_run else "deleted"
    table = Table(title=f"superseded generations of {escape(args.run)}", title_justify="left")
    for col in ("generation", "stages", "MB", "action"):
        table.add_column(col, justify="right" if col == "MB" else "left", no_wrap=True)
    rows = [(g, verb) for g in result.deleted] + [(g, "kept") for g in result.kept] + [
        (g, f"left: not tokenmill's ({escape(', '.join(g.other))})") for g in result.left]
    for g, action in sorted(rows, key=lambda r: r[0].name, reverse=True):
        table.add_row(escape(g.name), escape(", ".join(s.stage for s in g.stages)) or "-", _mb(g.bytes), action)
    out = Console(width=max(Console().width, 100))
    out.print(table)
    out.print(f"{verb} {len(result.deleted)} generation(s), {_mb(result.freed)} MB; kept {len(result.kept)}; "
              f"the live output is never touched")
    return 0
