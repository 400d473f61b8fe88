"""The `tokenmill` command: run stages, write the demo corpus, check a config."""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
from typing import Sequence

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from tokenmill.errors import StageFailed, TokenmillError
from tokenmill.inspect.commands import register as register_inspect
from tokenmill.manifests.commands import register as register_manifest

console = Console(stderr=True)


class RichReporter:
    """Progress bars over tasks, one per phase, and notes printed above them."""

    def __init__(self, progress: Progress):
        self.progress = progress
        self.bars: dict[tuple[str, str], int] = {}

    def note(self, text: str) -> None:
        self.progress.console.print(f"[yellow]{escape(text)}[/]")  # file names such as `[x].jsonl` are not markup

    def phase_started(self, stage: str, phase: str, total: int, committed: int) -> None:
        label = f"{stage}/{phase}" + (f" ({committed} committed earlier)" if committed else "")
        self.bars[(stage, phase)] = self.progress.add_task(label, total=total, completed=committed)

    def task_done(self, stage: str, phase: str) -> None:
        self.progress.advance(self.bars[(stage, phase)])

    def phase_ended(self, stage: str, phase: str) -> None:
        pass


def _summary(reports) -> Table:
    table = Table(title="tokenmill run", title_justify="left")
    for col in ("stage", "status", "tasks run", "skipped", "docs in", "kept", "dropped", "MB kept", "seconds"):
        table.add_column(col, justify="left" if col in ("stage", "status") else "right", no_wrap=True)
    for r in reports:
        t = r.totals
        table.add_row(r.stage, r.status, str(r.tasks_run), str(r.tasks_skipped), f"{t['docs_in']:,}",
                      f"{t['docs_out']:,}", f"{t['docs_in'] - t['docs_out']:,}", f"{t['bytes_out'] / 1e6:.2f}",
                      f"{r.seconds:.1f}")
    return table


def _print_summary(reports) -> None:
    out = Console(width=max(Console().width, 100))
    out.print(_summary(reports))
    for r in reports:
        content = _content(r.manifest)
        out.print(f"  {r.stage}: manifest {escape(r.manifest)}")
        if content.get("drop_table"):
            out.print(_drop_table(r.stage, content["drop_table"], content["by_source"]))
        for message in _first_errors(content):
            out.print(f"    [dim]{escape(message)}[/]")
        for line in content.get("report", {}).get("summary", []):
            out.print(f"    [bold yellow]{escape(line)}[/]")


def _content(manifest_path: str) -> dict:
    import json

    try:
        with open(manifest_path, encoding="utf-8") as f:
            return json.load(f)["content"]
    except (OSError, ValueError, KeyError):
        return {}


def _drop_table(stage: str, drops: dict, by_source: dict) -> Table:
    """Reason x source, as in the manifest: what each source lost, and why."""
    table = Table(title=f"{stage}: dropped documents", title_justify="left", show_edge=False)
    for col in ("source", "reason", "docs", "% of source"):
        table.add_column(col, justify="right" if col in ("docs", "% of source") else "left", no_wrap=True)
    rows = sorted((source, reason, cell) for reason, cells in drops.items() for source, cell in cells.items())
    for source, reason, cell in rows:
        table.add_row(source, reason, f"{cell['docs']:,}", f"{cell['percent']:.2f}")
    return table


def _first_errors(content: dict, limit: int = 5) -> list[str]:
    """The first bad records a stage named (file and line), so a person sees them without opening the manifest."""
    errors = [e for s in content.get("shards", []) for e in s.get("errors", [])]
    more = len(errors) - limit
    return errors[:limit] + ([f"... {more} more in the manifest and under dropped/"] if more > 0 else [])


def cmd_run(args: argparse.Namespace) -> int:
    from tokenmill.pipeline.config import load_config
    from tokenmill.pipeline.runner import run_pipeline

    config = load_config(args.config)
    columns = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()]
    with Progress(*columns, console=console, transient=False) as progress:
        reports = run_pipeline(config, only=args.stage, workers=args.workers, ray_address=args.ray_address,
                               reporter=RichReporter(progress))
    _print_summary(reports)
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    from tokenmill.pipeline.columns import check_chain
    from tokenmill.pipeline.config import load_config
    from tokenmill.pipeline.registry import build_stages

    config = load_config(args.config)
    stages = build_stages(config)
    check_chain(stages)
    files = stages[0].files
    print(f"config OK: {len(config.sources)} sources, {len(files)} files, stages: {' -> '.join(s.name for s in stages)}")
    print(f"output: {config.output_location}")
    return 0


def cmd_demo_data(args: argparse.Namespace) -> int:
    from tokenmill.demo import write_demo_corpus

    kwargs = {"seed": args.seed}
    if args.docs_per_source is not None:
        kwargs["docs_per_source"] = args.docs_per_source
    if args.target_mb is not None:
        kwargs["target_bytes"] = int(args.target_mb * 1e6)
    summary = write_demo_corpus(args.dir, **kwargs)
    console.print(f"demo corpus written to {args.dir}")
    console.print_json(data=summary)
    console.print(f"run it with: tokenmill run {args.dir}/demo.yaml")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    """`tokenmill report contamination RUN`: which evaluation items the corpus held, per set and source."""
    import json
    from pathlib import Path

    path = Path(args.run) / "decontaminate" / "manifest.json"
    if not path.is_file():
        raise TokenmillError(f"{path} does not exist: run the decontaminate stage first")
    report = json.loads(path.read_text(encoding="utf-8"))["content"].get("report", {})
    table = Table(title=f"contamination in {args.run}", title_justify="left")
    for col in ("evaluation set", "items", "n", "by n-gram", "whole", "too short", "no text", "found", "% found",
                "by source (items)"):
        table.add_column(col, justify="left" if col in ("evaluation set", "by source (items)") else "right")
    for name, entry in report.get("evalsets", {}).items():
        sources = ", ".join(f"{src} {sum(s['items'] for s in subs.values())}" for src, subs in entry["by_source"].items())
        unchecked = entry.get("not_checkable", {})
        n = "?" if entry.get("n") is None else f"{entry['n']}{' chars' if entry.get('unit') == 'characters' else ''}"
        table.add_row(name, f"{entry['items']:,}", n, f"{entry.get('checked_ngram', 0):,}",
                      f"{entry.get('checked_whole', 0):,}", f"{unchecked.get('too_short', 0):,}",
                      f"{unchecked.get('no_text', 0):,}", f"{entry['found']:,}", f"{100 * entry['fraction']:.2f}",
                      sources or "-")
    out = Console(width=max(Console().width, 140))
    out.print(table)
    out.print("items checked by n-gram: a field has n words or more (n per set: GPT-3's rule, the 5th-percentile "
              "field length clamped to [8, 13]); whole: only shorter fields, matched as a whole segment; too short: "
              "every field under the whole-match minimum (docs/decontaminate.md); no text: no letters or digits")
    index = report.get("index", {})
    out.print(f"hits: {report.get('hits', 0):,} in {report.get('documents_with_hits', 0):,} documents; "
              f"{report.get('excised_chars', 0):,} characters excised; index: {index.get('ngrams', 0):,} n-grams, "
              f"{index.get('bytes', 0) / 1e6:.1f} MB, built in {index.get('seconds', 0)} s")
    common = report.get("common_ngrams_ignored", [])
    if common:
        out.print(f"{len(common)} common n-grams ignored (in more documents than the cap), e.g.:")
        for entry in common[:5]:
            out.print(f"  [dim]{entry['documents']} docs: {entry['text'][:100]!r}[/]")
    out.print(f"every hit: {Path(args.run) / 'decontaminate' / 'hits.parquet'}")
    return 0


def cmd_tokenizer_train(args: argparse.Namespace) -> int:
    """`tokenmill tokenizer train CONFIG`: only the tokenizer, from the tokenize stage's input, saved as a file."""
    from pathlib import Path

    from tokenmill.pipeline.manifest import read_manifest
    from tokenmill.pipeline import storage
    from tokenmill.pipeline.config import load_config
    from tokenmill.pipeline.documents import read_shard
    from tokenmill.pipeline.registry import build_stages

    config = load_config(args.config)
    stages = build_stages(config)
    names = [s.name for s in stages]
    if "tokenize" not in names:
        raise TokenmillError("tokenizer train: the config has no stages.tokenize")
    stage = stages[names.index("tokenize")]
    previous = names[names.index("tokenize") - 1]
    fs, root = storage.filesystem_for(config.output_location)
    manifest = read_manifest(fs, storage.join(root, previous))
    if manifest is None:
        raise TokenmillError(f"tokenizer train reads the output of {previous!r}, which has not completed: run it first")
    tables = (read_shard(storage.join(root, previous, s["path"]), fs) for s in manifest["content"]["shards"])
    tok = stage.make_tokenizer(tables)
    out = Path(args.out) if args.out else config.output_dir / "tokenizer.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(tok.tokenizer.to_str(), encoding="utf-8")  # the bytes the stage writes
    console.print(f"tokenizer: vocab {tok.vocab_size:,}, end-of-text id {tok.eos_id}, sha256 {tok.sha256[:12]}; saved to {out}")
    return 0


def cmd_tokens_stats(args: argparse.Namespace) -> int:
    """`tokenmill tokens stats RUN`: tokens per source and split, document length percentiles, a few decoded documents."""
    import json
    import random
    from pathlib import Path

    import numpy as np
    import pyarrow.parquet as pq

    from tokenmill.inspect.tokens import tokenizer
    from tokenmill.tokenize.indexed import IndexedReader

    folder = Path(args.run) / "tokenize"
    if not (folder / "tokens.json").is_file():
        raise TokenmillError(f"{folder / 'tokens.json'} does not exist: run the tokenize stage first")
    index = json.loads((folder / "tokens.json").read_text(encoding="utf-8"))
    tok = tokenizer(args.run)  # only the one whose sha256 tokens.json records
    out = Console(width=max(Console().width, 100))
    table = Table(title=f"tokens in {args.run}", title_justify="left")
    for col in ("split", "source", "documents", "tokens", "p10", "p50", "p90", "p99"):
        table.add_column(col, justify="left" if col in ("split", "source") else "right")
    samples = []
    for split, entry in index["splits"].items():
        lengths: dict[str, list[int]] = {}
        for f in entry["files"]:
            side = pq.read_table(str(folder / f["prefix"]) + ".docs.parquet", columns=["source", "tokens"]).to_pylist()
            for row in side:
                lengths.setdefault(row["source"], []).append(row["tokens"])
            samples.append(f["prefix"])
        for source, values in sorted(lengths.items()):
            p = np.percentile(values, [10, 50, 90, 99]).astype(int)
            table.add_row(split, source, f"{len(values):,}", f"{sum(values):,}", *(f"{x:,}" for x in p))
    out.print(table)
    out.print(f"tokenizer: vocab {index['tokenizer']['vocab_size']:,}, end-of-text id {index['tokenizer']['eos_id']}, "
              f"dtype {index['dtype']}")
    rng = random.Random(args.seed)
    for prefix in rng.sample(samples, min(args.decode, len(samples))):
        reader = IndexedReader(str(folder / prefix))
        if len(reader):
            seq = reader[rng.randrange(len(reader))]
            out.print(f"[bold]{prefix}[/] ({len(seq)} tokens): [dim]{tok.decode(seq[:80])!r}...[/]")
    return 0


def cmd_tokens_verify(args: argparse.Namespace) -> int:
    """`tokenmill tokens verify RUN`: every file tokens.json records, hashed again and compared."""
    from tokenmill.inspect.tokens import verify_token_files

    def show(row: dict) -> None:
        if not row["ok"] or args.verbose:
            print(f"{'ok' if row['ok'] else 'MISMATCH':8} {row['file']}" + ("" if row["ok"] else f": {row['error']}"),
                  file=sys.stderr)

    rows = verify_token_files(args.run, on_file=show)
    bad = [r["file"] for r in rows if not r["ok"]]
    size = sum(r["bytes"] or 0 for r in rows)
    seconds = sum(r["seconds"] for r in rows)
    print(f"{len(rows) - len(bad)} of {len(rows)} files match tokens.json ({size / 1e6:,.1f} MB in {seconds:.1f} s)")
    if bad:
        raise TokenmillError(f"{len(bad)} files differ from the sha256 tokens.json records: {', '.join(bad[:10])}"
                             f"{' ...' if len(bad) > 10 else ''}; restore them or rerun the tokenize stage")
    return 0


def cmd_loader_explain(args: argparse.Namespace) -> int:
    """`tokenmill loader explain STATE --step N`: the documents that fed one global batch."""
    import json

    from tokenmill.loader import DataError, ResumeError
    from tokenmill.loader.explain import explain, state_from

    try:
        state = state_from(args.state)
        batch, rows = explain(state, step=args.step, batch=args.batch, paths=args.paths)
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
        table.add_row(str(r["sample_in_batch"]), str(r["rank"]), r["source"], str(r["id"]),
                      f"{r['tokens'][0]}-{r['tokens'][1]} of {r['document_tokens']}", str(r["tokens_in_sample"]),
                      r["preview"])
    out.print(table)
    docs = {(r["stream"], r["id"]) for r in rows}
    out.print(f"{len(docs)} documents from {len({r['source'] for r in rows})} sources; skipped batches in the state: "
              f"{state.get('skip') or 'none'}")
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    """`tokenmill train CONFIG`: train (or resume) an OPT-style decoder on token files; `--nproc N` or torchrun for
    several ranks."""
    import os

    from tokenmill.train.config import load_train_config
    from tokenmill.train.trainer import Trainer

    overrides = {"steps": args.steps} if args.steps else {}
    if args.allow_data_change:
        overrides["allow_data_change"] = True
    config = load_train_config(args.config, overrides)  # a bad config stops here, before any rank starts
    if args.nproc is not None and "RANK" not in os.environ:
        if args.nproc < 1:
            raise TokenmillError("--nproc: must be at least 1")
        if args.nproc > 1:
            from tokenmill.train.launch import launch

            argv = ["train", args.config] + (["--steps", str(args.steps)] if args.steps else []) + (
                ["--skip-batches", args.skip_batches] if args.skip_batches else []) + (
                ["--allow-data-change"] if args.allow_data_change else [])
            return launch((["-v"] if args.verbose else []) + argv, args.nproc)
    summary = Trainer(config, skip_batches=args.skip_batches).run()
    if int(os.environ.get("RANK", "0")) == 0:
        out = Console(width=max(Console().width, 100))
        table = Table(title=f"tokenmill train: {summary['steps']} steps ({summary['steps_this_run']} in this run)",
                      title_justify="left", show_header=False)

        def num(value, spec):
            return "n/a" if value is None else format(value, spec)

        table.add_row("loss", f"{num(summary['first_loss'], '.4f')} -> {num(summary['loss'], '.4f')} "
                              "(first and last step of this run)")
        table.add_row("valid loss", num(summary["valid_loss"], ".4f"))
        table.add_row("tokens", f"{summary['tokens']:,}")
        table.add_row("tokens/s", num(summary["tokens_per_s"], ",.0f"))
        table.add_row("MFU", num(summary["mfu"], ".1%") + ("" if summary["mfu"] is not None else
                                                          " (no peak TFLOP/s for this device; set peak_tflops)"))
        table.add_row("rollbacks", str(summary["rollbacks"]))
        table.add_row("model", f"{summary['params']:,} parameters on {summary['world_size']} x {summary['device']}")
        table.add_row("time", f"{summary['seconds']:.1f} s")
        for key in ("metrics", "events", "checkpoints"):
            table.add_row(key, summary[key])
        out.print(table)
    return 0


def _mb(n: int) -> str:
    return f"{n / 1e6:,.2f}"


def cmd_runs_du(args: argparse.Namespace) -> int:
    """`tokenmill runs du RUN`: bytes of each live stage and of each superseded generation, stage by stage."""
    import dataclasses
    import json

    from rich.markup import escape as esc

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
    table = Table(title=f"disk use of {esc(args.run)}", title_justify="left")
    for col in ("generation", "stage", "MB", "files", "config", "state"):
        table.add_column(col, justify="right" if col in ("MB", "files") else "left", no_wrap=True)
    for gen in [usage.live, *reversed(usage.superseded)]:
        for s in gen.stages:
            state = "complete" if s.complete else "incomplete"
            table.add_row(esc(gen.name), esc(s.stage), _mb(s.bytes), f"{s.files:,}", (s.config_hash or "-")[:12],
                          state + (", being deleted" if gen.deleting else ""))
        for name in gen.other:
            table.add_row(esc(gen.name), esc(name), "", "", "", "not tokenmill's: gc leaves it")
        if len(gen.stages) + len(gen.other) > 1:
            table.add_row(esc(gen.name), "[bold]all[/]", f"[bold]{_mb(gen.bytes)}[/]", "", "", "", end_section=True)
    out = Console(width=max(Console().width, 100))
    out.print(table)
    old = sum(g.bytes for g in usage.superseded)
    out.print(f"live {_mb(usage.live.bytes)} MB, superseded {_mb(old)} MB in {len(usage.superseded)} generation(s), "
              f"other {_mb(usage.other_bytes)} MB; total {_mb(usage.total)} MB. "
              f"`tokenmill runs gc {esc(args.run)} --keep N` deletes all but the newest N generations")
    return 0


def cmd_runs_gc(args: argparse.Namespace) -> int:
    """`tokenmill runs gc RUN --keep N`: delete all but the newest N superseded generations, holding the run lock."""
    from rich.markup import escape as esc

    from tokenmill.pipeline import storage
    from tokenmill.pipeline.generations import collect

    fs, root = storage.filesystem_for(args.run)
    result = collect(fs, root, args.keep, dry_run=args.dry_run)
    verb = "would delete" if result.dry_run else "deleted"
    table = Table(title=f"superseded generations of {esc(args.run)}", title_justify="left")
    for col in ("generation", "stages", "MB", "action"):
        table.add_column(col, justify="right" if col == "MB" else "left", no_wrap=True)
    rows = [(g, verb) for g in result.deleted] + [(g, "kept") for g in result.kept] + [
        (g, f"left: not tokenmill's ({esc(', '.join(g.other))})") for g in result.left]
    for g, action in sorted(rows, key=lambda r: r[0].name, reverse=True):
        table.add_row(esc(g.name), esc(", ".join(s.stage for s in g.stages)) or "-", _mb(g.bytes), action)
    out = Console(width=max(Console().width, 100))
    out.print(table)
    out.print(f"{verb} {len(result.deleted)} generation(s), {_mb(result.freed)} MB; kept {len(result.kept)}; "
              f"the live output is never touched")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tokenmill", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run ingest and the configured stages (resumes where a run stopped)")
    run.add_argument("config", help="run config (YAML)")
    run.add_argument("--stage", help="run only this stage (ingest, sample, ...); it reads the previous stage's output")
    run.add_argument("--workers", type=int, help="most tasks at once (default: the cluster's CPUs)")
    run.add_argument("--ray-address", help="join this Ray cluster instead of starting a local one on 127.0.0.1")
    run.set_defaults(func=cmd_run)

    validate = sub.add_parser("validate", help="check a config and the stage chain without running anything")
    validate.add_argument("config")
    validate.set_defaults(func=cmd_validate)

    report = sub.add_parser("report", help="print a stage's report from a run folder")
    report.add_argument("kind", choices=["contamination"])
    report.add_argument("run", help="the run folder (the config's `output`)")
    report.set_defaults(func=cmd_report)

    tokenizer = sub.add_parser("tokenizer", help="the tokenize stage's tokenizer on its own")
    tokenizer_sub = tokenizer.add_subparsers(dest="tokenizer_command", required=True)
    train = tokenizer_sub.add_parser("train", help="load or train the configured tokenizer from the stage's input only")
    train.add_argument("config")
    train.add_argument("--out", help="where to save tokenizer.json (default: <output>/tokenizer.json)")
    train.set_defaults(func=cmd_tokenizer_train)

    tokens = sub.add_parser("tokens", help="inspect the tokenize stage's output")
    tokens_sub = tokens.add_subparsers(dest="tokens_command", required=True)
    stats = tokens_sub.add_parser("stats", help="tokens per source, length percentiles, a few decoded documents")
    stats.add_argument("run", help="the run folder (the config's `output`)")
    stats.add_argument("--decode", type=int, default=3, help="how many random documents to decode")
    stats.add_argument("--seed", type=int, default=0)
    stats.set_defaults(func=cmd_tokens_stats)
    check = tokens_sub.add_parser("verify", help="hash every token file and the tokenizer again against tokens.json")
    check.add_argument("run", help="the run folder (the config's `output`)")
    check.set_defaults(func=cmd_tokens_verify)

    trainer = sub.add_parser("train", help="train an OPT-style decoder on token files (torchrun for several ranks)")
    trainer.add_argument("config", help="train config (YAML)")
    trainer.add_argument("--skip-batches", help="never train on these global batches, e.g. 1200-1210,1300")
    trainer.add_argument("--steps", type=int, help="override the config's total steps")
    trainer.add_argument("--allow-data-change", action="store_true", help="resume although the data changed since the "
                         "checkpoint: same position, new data (warned, and a data_change event in events.jsonl)")
    trainer.add_argument("--nproc", type=int, help="ranks on this machine (one per GPU), joined through a file store "
                         "with every socket on 127.0.0.1; torchrun for several machines")
    trainer.set_defaults(func=cmd_train)

    loader = sub.add_parser("loader", help="the token loader's state, for attribution")
    loader_sub = loader.add_subparsers(dest="loader_command", required=True)
    explain = loader_sub.add_parser("explain", help="which documents fed a global batch (from a loader state)")
    explain.add_argument("state", help="a loader state JSON, a checkpoint's meta.json, or a checkpoint folder")
    which = explain.add_mutually_exclusive_group(required=True)
    which.add_argument("--step", type=int, help="the N-th batch served (0-based; skipped batches not counted)")
    which.add_argument("--batch", type=int, help="the global batch index (position in the global order)")
    explain.add_argument("--paths", nargs="+", help="tokens.json files, if they moved since the state was saved")
    explain.add_argument("--json", action="store_true", help="print JSON only")
    explain.set_defaults(func=cmd_loader_explain)

    demo = sub.add_parser("demo-data", help="write the generated demo corpus and DIR/demo.yaml")
    demo.add_argument("dir")
    demo.add_argument("--seed", type=int, default=1234)
    demo.add_argument("--docs-per-source", type=int)
    demo.add_argument("--target-mb", type=float, help="write at least this many MB of text")
    demo.set_defaults(func=cmd_demo_data)
    runs = sub.add_parser("runs", help="a run folder's disk use and its superseded output")
    runs_sub = runs.add_subparsers(dest="runs_command", required=True)
    du = runs_sub.add_parser("du", help="MB per live stage and per superseded generation and stage")
    du.add_argument("run", help="the run folder (the config's `output`)")
    du.add_argument("--json", action="store_true", help="print JSON only")
    du.set_defaults(func=cmd_runs_du)
    gc = runs_sub.add_parser("gc", help="delete all but the newest N superseded generations (refused while a run "
                                        "holds the folder)")
    gc.add_argument("run", help="the run folder (the config's `output`)")
    gc.add_argument("--keep", type=int, required=True, help="how many of the newest superseded generations to keep")
    gc.add_argument("--dry-run", action="store_true", help="only say what would be deleted")
    gc.set_defaults(func=cmd_runs_gc)
    register_manifest(sub)
    register_inspect(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if getattr(args, "workers", None) is not None and args.workers < 1:
        console.print("[red]error:[/] --workers: must be at least 1")
        return 2
    import signal

    previous = signal.getsignal(signal.SIGINT)
    interrupted = _count_interrupts()
    try:
        return _run_command(args, interrupted)
    finally:
        if previous is not None:
            with contextlib.suppress(ValueError):  # ValueError: not the main thread, nothing was installed
                signal.signal(signal.SIGINT, previous)


def _run_command(args: argparse.Namespace, interrupted: list[int]) -> int:
    """The command, its errors as one line each and an exit code: 1 a stage failed, 2 bad input, 130 Ctrl-C."""
    try:
        return args.func(args)
    except KeyboardInterrupt:
        return _interrupted(args)
    except StageFailed as err:
        if interrupted:
            return _interrupted(args)
        console.print(f"[red]{escape(str(err))}[/]")
        return 1
    except TokenmillError as err:
        if interrupted:
            return _interrupted(args)
        console.print(f"[red]error:[/] {escape(str(err))}")
        return 2
    except Exception:
        # Ray turns a Ctrl-C inside its start-up into other errors (a failed connection, a dead node): an
        # interrupt is still an interrupt, whatever the exception it left behind.
        if interrupted:
            return _interrupted(args)
        raise


EXIT_INTERRUPTED = 130
"""128 + SIGINT, what a shell reports for a command stopped by Ctrl-C."""


def _count_interrupts() -> list[int]:
    """Note every SIGINT (the list is non-empty once one arrived), then raise KeyboardInterrupt as Python would."""
    import signal
    import threading

    seen: list[int] = []
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGINT) is not \
            signal.default_int_handler:
        return seen  # embedded (a test, a notebook with its own handler): leave it alone

    def on_sigint(signum, frame):
        seen.append(signum)
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, on_sigint)
    return seen


def _interrupted(args: argparse.Namespace) -> int:
    """One line on Ctrl-C, never a traceback; exit 130. What a `run` committed stays and a rerun resumes it."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not interrupt the clean-up that follows
    what = f"tokenmill {args.command}"
    resume = ": committed tasks are kept; the same command resumes" if args.command == "run" else ""
    console.print(f"[yellow]interrupted[/] ({what}){resume}")
    return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
