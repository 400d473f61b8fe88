"""`tokenmill tokenizer train`, `tokenmill tokens stats` and `tokenmill tokens verify`: the tokenize stage's tokenizer
and token files from the command line. Each takes the parsed arguments, prints, returns an exit code and raises
``TokenmillError`` on what the user can fix; `tokenmill.cli` declares their arguments."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tokenmill.errors import TokenmillError
from tokenmill.tokenize import tokens_json


def _console(width: int | None = None, stderr: bool = False):
    from rich.console import Console

    return Console(stderr=True) if stderr else Console(width=max(Console().width, width or 0))


def tokenizer_train(args: argparse.Namespace) -> int:
    """`tokenmill tokenizer train CONFIG`: only the tokenizer, from the tokenize stage's input, saved as a file."""
    from tokenmill.pipeline import storage
    from tokenmill.pipeline.config import load_config
    from tokenmill.pipeline.manifest import read_manifest
    from tokenmill.pipeline.config import build_stages

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
    tok = stage.make_tokenizer([storage.join(root, previous, s["path"]) for s in manifest["content"]["shards"]], fs)
    out = Path(args.out) if args.out else config.output_dir / tokens_json.TOKENIZER_FILE
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(tok.tokenizer.to_str(), encoding="utf-8")  # the bytes the stage writes
    _console(stderr=True).print(f"tokenizer: vocab {tok.vocab_size:,}, end-of-text id {tok.eos_id}, sha256 "
                                f"{tok.sha256[:12]}; saved to {out}")
    return 0


def tokens_stats(args: argparse.Namespace) -> int:
    """`tokenmill tokens stats RUN`: tokens per source and split, document length percentiles, a few decoded
    documents."""
    import random

    from rich.markup import escape
    from rich.table import Table

    from tokenmill.inspect.tokens import length_percentiles, tokenizer
    from tokenmill.tokenize.indexed import IndexedReader

    path = Path(args.run) / "tokenize" / tokens_json.FILE
    if not path.is_file():
        raise TokenmillError(f"{path} does not exist: run the tokenize stage first")
    index = tokens_json.read(path)
    tok = tokenizer(index)  # only the one whose sha256 tokens.json records
    out = _console(100)
    quantiles = ("p10", "p50", "p90", "p99")
    table = Table(title=f"tokens in {args.run}", title_justify="left")
    for col in ("split", "source", "documents", "tokens", *quantiles):
        table.add_column(col, justify="left" if col in ("split", "source") else "right")
    for split in index.splits:
        for row in length_percentiles(index, split):
            table.add_row(escape(split), escape(row["source"]), f"{row['documents']:,}", f"{row['tokens']:,}",
                          *(f"{row[q]:,}" for q in quantiles))
    out.print(table)
    samples = [f["prefix"] for entry in index.splits.values() for f in entry["files"]]
    out.print(f"tokenizer: vocab {index.tokenizer['vocab_size']:,}, end-of-text id {index.tokenizer['eos_id']}, "
              f"dtype {index.dtype}")
    rng = random.Random(args.seed)
    for prefix in rng.sample(samples, min(args.decode, len(samples))):
        reader = IndexedReader(str(index.folder / prefix))
        if len(reader):
            seq = reader[rng.randrange(len(reader))]
            out.print(f"[bold]{escape(prefix)}[/] ({len(seq)} tokens): [dim]{escape(repr(tok.decode(seq[:80])))}...[/]")
    return 0


def tokens_verify(args: argparse.Namespace) -> int:
    """`tokenmill tokens verify RUN`: every file tokens.json records, hashed again and compared."""
    from tokenmill.inspect.tokens import verify_token_files

    def show(row: dict) -> None:
        if not row["ok"] or args.verbose:
            label = "ok" if row["ok"] else "MISMATCH" if row["recorded"] else "UNHASHED"
            print(f"{label:8} {row['file']}" + ("" if row["ok"] else f": {row['error']}"), file=sys.stderr)

    rows = verify_token_files(args.run, on_file=show)
    bad = [r["file"] for r in rows if not r["ok"] and r["recorded"]]
    unhashed = [r["file"] for r in rows if not r["recorded"]]
    size = sum(r["bytes"] or 0 for r in rows)
    seconds = sum(r["seconds"] for r in rows)
    print(f"{len(rows) - len(bad) - len(unhashed)} of {len(rows)} files match tokens.json "
          f"({size / 1e6:,.1f} MB in {seconds:.1f} s)")
    problems = [f"{len(names)} files {what}: {', '.join(names[:10])}{' ...' if len(names) > 10 else ''}"
                for names, what in ((bad, "differ from the sha256 tokens.json records"),
                                    (unhashed, "have no sha256 in tokens.json, so nothing can check them"))
                if names]
    if problems:
        raise TokenmillError(f"{'; '.join(problems)}; restore them or rerun the tokenize stage")
    return 0
