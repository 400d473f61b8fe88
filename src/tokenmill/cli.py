"""The `tokenmill` command: run stages, write the demo corpus, check a config.

This module is the parser and the dispatch: exit codes, one-line errors, Ctrl-C and SIGTERM, a closed pipe. Each
`cmd_*` imports its body from the package it belongs to (`pipeline.commands`, `manifests.commands`,
`inspect.commands`, `tokenize.commands`, ...) when the command runs, so `--help` and argument errors load no
pipeline, stage, Arrow or torch module, nor any module of an extra (`rich` included): `--help` works after a
core-only install, and a command whose extra is missing says which to install.

Exit codes: 0 done; 1 a stage failed (or `manifest diff`/`show` found a difference); 2 bad input, or an extra not
installed; 74 a full disk in training (`tokenmill train`); 130 Ctrl-C (SIGINT) and 143 SIGTERM, after one
line (what a `run` committed stays, and the same command resumes it); 141 stdout closed early (`tokenmill ... |
head`), silently, as a command killed by SIGPIPE (a table printed by rich ends as quietly, with rich's own exit
code 1).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import re
import signal
import sys
from typing import Sequence

from tokenmill.errors import StageFailed, TokenmillError

EXTRA = "pipeline"
"""The extra most commands need (Ray, Arrow, pydantic, rich, ...): `pip install 'tokenmill[pipeline]'`."""


def _say(label: str, text: str, style: str, *, whole: bool = False) -> None:
    """One line on stderr: `label` (`error:`, `interrupted`) in `style`, then `text` (in `style` too when `whole`),
    printed as it is (never read as rich markup), with any credentials in a URI redacted. Plain text when rich is
    not installed."""
    from tokenmill.sources.uris import display_uri

    text = display_uri(text)
    try:
        from rich.console import Console
        from rich.text import Text
    except ImportError:
        print(f"{label} {text}" if label else text, file=sys.stderr, flush=True)
        return
    shown = Text(text, style=style) if whole else Text.assemble((label, style), f" {text}" if label else text)
    Console(stderr=True, soft_wrap=True).print(shown)  # not cut into lines: a path stays whole to copy


def cmd_run(args: argparse.Namespace) -> int:
    """`tokenmill run CONFIG`: the configured stages, resumed where a run stopped."""
    from tokenmill.pipeline.commands import run

    return run(args)


def cmd_validate(args: argparse.Namespace) -> int:
    """`tokenmill validate CONFIG`: the config and the stage chain checked, nothing run."""
    from tokenmill.pipeline.commands import validate

    return validate(args)


def cmd_demo_data(args: argparse.Namespace) -> int:
    """`tokenmill demo-data DIR`: the generated demo corpus and DIR/demo.yaml."""
    from tokenmill.demo.commands import demo_data

    return demo_data(args)


def cmd_report(args: argparse.Namespace) -> int:
    """`tokenmill report contamination RUN`: which evaluation items the corpus held, per set and source."""
    from tokenmill.inspect.commands import report_contamination

    return report_contamination(args)


def cmd_inspect(args: argparse.Namespace) -> int:
    """`tokenmill inspect RUN`: random kept or dropped documents of a stage."""
    from tokenmill.inspect.commands import print_samples

    return print_samples(args)


def cmd_manifest_diff(args: argparse.Namespace) -> int:
    """`tokenmill manifest diff A B`: what changed between two runs."""
    from tokenmill.manifests.commands import manifest_diff

    return manifest_diff(args)


def cmd_manifest_show(args: argparse.Namespace) -> int:
    """`tokenmill manifest show RUN`: lineage, and which stages are stale."""
    from tokenmill.manifests.commands import manifest_show

    return manifest_show(args)


def cmd_tokenizer_train(args: argparse.Namespace) -> int:
    """`tokenmill tokenizer train CONFIG`: only the tokenizer, from the tokenize stage's input, saved as a file."""
    from tokenmill.tokenize.commands import tokenizer_train

    return tokenizer_train(args)


def cmd_quality_train(args: argparse.Namespace) -> int:
    """`tokenmill quality train CONFIG`: a fastText quality classifier from positives and negatives, with its sidecar."""
    from tokenmill.classifier.commands import quality_train

    return quality_train(args)


def cmd_tokens_stats(args: argparse.Namespace) -> int:
    """`tokenmill tokens stats RUN`: tokens per source and split, document length percentiles, a few decoded documents."""
    from tokenmill.tokenize.commands import tokens_stats

    return tokens_stats(args)


def cmd_tokens_verify(args: argparse.Namespace) -> int:
    """`tokenmill tokens verify RUN`: every file tokens.json records, hashed again and compared."""
    from tokenmill.tokenize.commands import tokens_verify

    return tokens_verify(args)


def cmd_loader_explain(args: argparse.Namespace) -> int:
    """`tokenmill loader explain STATE --step N`: the documents that fed one global batch."""
    from tokenmill.loader.commands import loader_explain

    return loader_explain(args)


def cmd_train(args: argparse.Namespace) -> int:
    """`tokenmill train CONFIG`: train (or resume) an OPT-style decoder on token files; `--nproc N` or torchrun for
    several ranks."""
    from tokenmill.train.commands import train

    return train(args)


def cmd_runs_du(args: argparse.Namespace) -> int:
    """`tokenmill runs du RUN`: bytes of each live stage and of each superseded generation."""
    from tokenmill.pipeline.commands import runs_du

    return runs_du(args)


def cmd_runs_gc(args: argparse.Namespace) -> int:
    """`tokenmill runs gc RUN --keep N`: delete all but the newest N superseded generations."""
    from tokenmill.pipeline.commands import runs_gc

    return runs_gc(args)


def cmd_ablate(args: argparse.Namespace) -> int:
    """`tokenmill ablate CONFIG`, `ablate validate CONFIG`, `ablate report DIR`: proxy-model ablations of recipes."""
    from tokenmill.ablate.commands import ablate

    return ablate(args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tokenmill", description=__doc__.split("\n\n")[0])  # the first line
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run ingest and the configured stages (resumes where a run stopped)")
    run.add_argument("config", help="run config (YAML)")
    run.add_argument("--stage", help="run only this stage (ingest, sample, ...); it reads the previous stage's output")
    run.add_argument("--workers", type=int, help="most tasks at once (default: the cluster's CPUs)")
    run.add_argument("--ray-address", help="join this Ray cluster instead of starting a local one on 127.0.0.1 "
                     "(default: execution.ray_address, else $RAY_ADDRESS)")
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

    quality = sub.add_parser("quality", help="model-based quality: fastText classifiers")
    quality_sub = quality.add_subparsers(dest="quality_command", required=True)
    qtrain = quality_sub.add_parser("train", help="train a fastText classifier on positives and negatives; writes "
                                                  "model.bin and model.json (options, data hashes, valid measures)")
    qtrain.add_argument("config", help="classifier config (YAML, see docs/classifier.md)")
    qtrain.set_defaults(func=cmd_quality_train)

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

    trainer = sub.add_parser("train", help="train an OPT-style decoder on token files (torchrun for several "
                             "ranks); `train doctor RUN`: a run's history of faults")
    trainer.add_argument("config", help="train config (YAML); or `doctor RUN`: the history of a run's faults")
    trainer.add_argument("run", nargs="?", help="with `doctor`: the train run's output folder")
    trainer.add_argument("--json", action="store_true", help="with `doctor`: print JSON only")
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
    explain.add_argument("--allow-unhashed", action="store_true",
                         help="read token files and sidecars with no sha256 in tokens.json unchecked (default: refused)")
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

    manifest = sub.add_parser("manifest", help="compare two runs, or check a run's lineage, from their manifests")
    manifest_sub = manifest.add_subparsers(dest="manifest_command", required=True)
    diff = manifest_sub.add_parser("diff", help="what changed between two runs (or two manifests of one stage); "
                                                "exit 0 when identical, 1 when different")
    diff.add_argument("a", help="a run folder (the config's `output`), a stage folder, or a stage's manifest.json")
    diff.add_argument("b", help="the same kind of path, for the other run")
    diff.add_argument("--examples", type=int, default=3,
                      help="documents added, removed, and with changed text, to show per source")
    diff.add_argument("--json", action="store_true", help="print JSON only")
    diff.set_defaults(func=cmd_manifest_diff)
    show = manifest_sub.add_parser("show", help="lineage from sources to tokens, and which stages are stale; "
                                                "exit 0 when every stage read what is there now, 1 otherwise")
    show.add_argument("run", help="the run folder (the config's `output`)")
    show.add_argument("--config", help="also check ingest's source files against what this config lists now")
    show.add_argument("--json", action="store_true", help="print JSON only")
    show.set_defaults(func=cmd_manifest_show)

    inspect = sub.add_parser("inspect", help="print random kept or dropped documents of a stage")
    inspect.add_argument("run", nargs="?", default=None,
                         help="the run folder (the config's `output`; default $TOKENMILL_RUN, else build/demo/run)")
    inspect.add_argument("--stage", default="clean", help="the stage whose output to sample (default: clean)")
    inspect.add_argument("--source", help="only documents of this source")
    inspect.add_argument("-n", type=int, default=5, help="how many documents (default: 5)")
    inspect.add_argument("--seed", type=int, default=0, help="the same seed gives the same documents")
    inspect.add_argument("--dropped", nargs="?", const=True, metavar="REASON",
                         help="dropped documents instead of kept ones: of this drop reason, or of any without one")
    inspect.add_argument("--chars", type=int, default=800, help="characters of each text to print (default: 800)")
    inspect.add_argument("--sort", metavar="COLUMN",
                         help="the n best and n worst documents by this score column (e.g. hq_score), kept and "
                              "dropped together, instead of random ones")
    inspect.add_argument("--removed", action="store_true",
                         help="the spans the subdoc stage removed, per source: the n most removed, each with the "
                              "documents that held it and the one that kept it (--stage is not read)")
    inspect.set_defaults(func=cmd_inspect)

    ablate = sub.add_parser("ablate", help="train proxy models on variants of a run config and compare them, with "
                            "intervals: `ablate CONFIG`, `ablate validate CONFIG`, `ablate report DIR`")
    ablate.add_argument("args", nargs="+", metavar="CONFIG | validate CONFIG | report DIR")
    ablate.add_argument("--ray-address", help="join this Ray cluster for the variants' pipelines")
    ablate.set_defaults(func=cmd_ablate)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    _log_to_stderr(logging.INFO if args.verbose else logging.WARNING)
    if getattr(args, "workers", None) is not None and args.workers < 1:
        _say("error:", "--workers: must be at least 1", "red")
        return 2
    signals = (signal.SIGINT,) if args.command == "train" else (signal.SIGINT, signal.SIGTERM)  # train's launcher
    # forwards its own SIGTERM to the ranks. Both are put back at the end: `_interrupted` ignores both while it
    # cleans up, and a caller embedding main() (a test, a notebook) keeps its own handling afterwards.
    previous = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    interrupted = _count_interrupts(signals)
    try:
        code = _run_command(args, interrupted)
        sys.stdout.flush()  # here, so a closed pipe is met while it can still be handled
        return code
    except BrokenPipeError:
        return _stdout_closed()
    finally:
        for signum, handler in previous.items():
            if handler is not None:
                with contextlib.suppress(ValueError):  # ValueError: not the main thread, nothing was installed
                    signal.signal(signum, handler)


class _Redacting(logging.Formatter):
    """Log records with any credentials in a URI redacted (`uris.display_uri`)."""

    def format(self, record: logging.LogRecord) -> str:
        from tokenmill.sources.uris import display_uri

        return display_uri(super().format(record))


def _log_to_stderr(level: int) -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(_Redacting("%(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=level, handlers=[handler])


def _stdout_closed() -> int:
    """The reader of stdout went away (`| head`): no traceback, exit 141 as a command ended by SIGPIPE would.

    As Python's documentation of SIGPIPE recommends: stdout is pointed at /dev/null, so the interpreter's own
    flush at exit finds no pipe to fail on again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    with contextlib.suppress(OSError, ValueError):
        os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return EXIT_PIPE_CLOSED


def _missing_extra(err: ModuleNotFoundError) -> str | None:
    """The line for a module of an extra that is not installed (a core-only install has numpy and torch only), or
    None for any other missing module (a bug, shown in full).

    Which extra, from the installed package's own metadata rather than a list kept here: the one that requires a
    distribution of the module's name (or the installed distribution that provides it), else the pipeline extra
    when any of its distributions is missing."""
    from importlib import metadata

    module = (err.name or "").split(".")[0]
    if not module or module == "tokenmill":
        return None

    def norm(name: str) -> str:
        return re.sub(r"[-_.]+", "-", name).lower()

    def absent(distribution: str) -> bool:
        try:
            metadata.version(distribution)
            return False
        except metadata.PackageNotFoundError:
            return True

    try:
        requires = metadata.requires("tokenmill") or []
    except metadata.PackageNotFoundError:  # run from a source tree: no metadata to consult
        requires = []
    wanted: dict[str, list[str]] = {}
    for requirement in requires:
        extra = re.search(r"""extra\s*==\s*['"]([^'"]+)['"]""", requirement)
        name = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement)
        if extra and name:
            wanted.setdefault(extra.group(1), []).append(name.group(0))
    provides = {norm(d) for d in (module, *metadata.packages_distributions().get(module, []))}
    extra = next((e for e, names in wanted.items() if provides & {norm(n) for n in names}), None)
    if extra is None and (not wanted or any(absent(d) for d in wanted.get(EXTRA, []))):
        extra = EXTRA
    if extra is None:
        return None
    missing = [d for d in wanted.get(extra, []) if absent(d)]
    shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
    return (f"needs tokenmill's {extra!r} extra, which is not installed (no module named {module!r}"
            f"{f'; missing: {shown}' if shown else ''}): pip install 'tokenmill[{extra}]'")


def _run_command(args: argparse.Namespace, interrupted: list[int]) -> int:
    """The command, its errors as one line each and an exit code: 1 a stage failed, 2 bad input, 130 Ctrl-C, 143
    SIGTERM."""
    try:
        code = args.func(args)
        # A signal whose KeyboardInterrupt was swallowed on its way (a hook that ignores exceptions) was still asked
        # for: the command stops as interrupted rather than claiming a clean finish.
        return _interrupted(args, interrupted) if interrupted else code
    except KeyboardInterrupt:
        return _interrupted(args, interrupted)
    except StageFailed as err:
        if interrupted:
            return _interrupted(args, interrupted)
        _say("", str(err), "red", whole=True)
        return 1
    except TokenmillError as err:
        if interrupted:
            return _interrupted(args, interrupted)
        if not getattr(err, "quiet", False):  # another process says it: rank 0 of `tokenmill train --nproc`
            _say("error:", str(err), "red")
        return getattr(err, "exit_code", 2)  # 2 unless the error has its own (a full disk in training: 74)
    except ModuleNotFoundError as err:
        if interrupted:
            return _interrupted(args, interrupted)
        line = _missing_extra(err)
        if line is None:
            raise
        _say("error:", f"tokenmill {args.command} {line}", "red")
        return 2
    except BrokenPipeError:
        raise  # main() ends quietly
    except Exception:
        # Ray turns a Ctrl-C inside its start-up into other errors (a failed connection, a dead node): an
        # interrupt is still an interrupt, whatever the exception it left behind.
        if interrupted:
            return _interrupted(args, interrupted)
        raise


EXIT_INTERRUPTED = 130
"""128 + SIGINT, what a shell reports for a command stopped by Ctrl-C."""
EXIT_TERMINATED = 143
"""128 + SIGTERM, what a shell reports for a command ended by `kill`."""
EXIT_PIPE_CLOSED = 141
"""128 + SIGPIPE, what a shell reports for a command whose output pipe closed."""


def _count_interrupts(signals: tuple[int, ...] = (signal.SIGINT,)) -> list[int]:
    """Note every SIGINT and SIGTERM (the list holds each one that arrived), then raise KeyboardInterrupt as Python
    does for a SIGINT: the command unwinds (Ray shut down, the run folder's lock released) and exits with one line."""
    import threading

    seen: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        return seen  # embedded (a test, a notebook with its own handler): leave it alone

    def on_signal(signum, frame):
        if _swallows_exceptions(frame):
            # Raised here, the interrupt would be printed as "Exception ignored" and lost, the command running on
            # to the end: delivered again a moment later, once the hook has returned.
            threading.Timer(0.05, os.kill, (os.getpid(), signum)).start()
            return
        seen.append(signum)
        raise KeyboardInterrupt

    defaults = {signal.SIGINT: signal.default_int_handler, signal.SIGTERM: signal.SIG_DFL}
    for signum in signals:
        if signal.getsignal(signum) is defaults[signum]:  # else someone else's handler: leave it alone
            signal.signal(signum, on_signal)
    return seen


_HOOKS_THAT_SWALLOW = {("logging", name) for name in ("_acquireLock", "_releaseLock", "_prepareFork", "_afterFork",
                                                         "_after_at_fork_child_reinit_locks")}
"""Functions Python calls where an exception is printed and dropped: logging's fork hooks, which run whenever Ray
starts a process with a `preexec_fn` (a Ctrl-C landing in one during `ray.init` was lost: the run went on, exit 0)."""


def _swallows_exceptions(frame) -> bool:
    """Whether a signal handler called in `frame` would raise into a place that ignores exceptions."""
    if frame is None:
        return False
    code = frame.f_code
    return code.co_name == "__del__" or (frame.f_globals.get("__name__"), code.co_name) in _HOOKS_THAT_SWALLOW


def _interrupted(args: argparse.Namespace, seen: list[int] | None = None) -> int:
    """One line on Ctrl-C or SIGTERM, never a traceback; exit 130 or 143. What a `run` committed stays and a rerun
    resumes it."""
    for signum in (signal.SIGINT, signal.SIGTERM):  # a second signal must not interrupt the clean-up that follows
        with contextlib.suppress(ValueError):
            signal.signal(signum, signal.SIG_IGN)
    terminated = bool(seen) and seen[-1] == signal.SIGTERM
    what = f"tokenmill {args.command}"
    resume = ": committed tasks are kept; the same command resumes" if args.command == "run" else ""
    _say("stopped by SIGTERM" if terminated else "interrupted", f"({what}){resume}", "yellow")
    return EXIT_TERMINATED if terminated else EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
