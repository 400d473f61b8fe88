"""Run every benchmark in benchmarks/ as its docstring documents it, one subprocess each, at full or quick size;
write one summary JSON and print a table of every ratio.

    python benchmarks/run_all.py [--size full|quick] [--dir bench] [--only NAME,...] [--skip NAME,...] [--timeout S]

`make bench` runs it at full size (each benchmark at its documented default size: scale.py at 10 GB takes over an
hour on 2 cores, `--skip scale` leaves it out) and writes bench/summary.json; `make bench-quick` runs it at quick
size (each benchmark in seconds, data and summary under bench/quick/), as the smoke test tests/test_benchmarks.py
does. Quick figures only show that a benchmark runs and what it reports; quote full-size ratios.

Per benchmark the summary holds the command, its exit code, seconds, the JSON it printed (JSON lines: a list) and
the ratios found in it: every number whose key, or a key above it, is `ratios`, contains `ratio` or `_vs_`. A
benchmark fails when it exits non-zero, runs past the timeout, prints no JSON on stdout, or prints JSON without a
ratio; the runner then exits 1 naming every failed one. A benchmark that prints `{"skipped": reason}` (its
../shared/data is absent) or needs a package that is not installed is a skipped row with its reason, not a failure.
Each benchmark's stderr is kept in <dir>/logs/NAME.stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import platform
import re
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


@dataclass(frozen=True)
class Benchmark:
    name: str
    script: str  # a file in benchmarks/, or an absolute path
    full: tuple[str, ...] = ()  # arguments at full size (the documented defaults)
    quick: tuple[str, ...] = ()  # arguments at quick size: seconds on 2 cores
    takes_dir: bool = True  # pass --dir (where the script writes its generated data)
    needs: tuple[str, ...] = ()  # modules without which it cannot run: a skipped row, reason given
    per_source: bool = False  # reader_memory: CONFIG SOURCE, one process per source of the demo corpus
    corpus_mb: dict = field(default_factory=lambda: {"full": 200, "quick": 2})  # per_source: the corpus size
    quick_sources: tuple[str, ...] = ()  # per_source at quick size: only these sources (all when empty)

    @property
    def path(self) -> Path:
        p = Path(self.script)
        return p if p.is_absolute() else HERE / p


# In the order they run. ingest_sample comes before reader_memory: both use <dir>/corpus-<MB>mb.
BENCHMARKS: list[Benchmark] = [
    Benchmark("ingest_sample", "ingest_sample.py", quick=("--target-mb", "2")),
    # Quick: the zstd source with a 2 GiB window (reddit) and the WARC one; full: every source of the demo corpus.
    Benchmark("reader_memory", "reader_memory.py", takes_dir=False, per_source=True, quick_sources=("reddit", "cc_html")),
    Benchmark("readers", "readers.py", quick=("--target-mb", "1")),
    Benchmark("html_extraction", "html_extraction.py", takes_dir=False),
    Benchmark("clean_filters", "clean_filters.py", quick=("--target-mb", "2")),
    Benchmark("clean", "clean.py", quick=("--target-mb", "2")),
    Benchmark("classifier", "classifier.py", quick=("--target-mb", "1", "--train-mb", "0.5", "--repeats", "1")),
    Benchmark("dedup_speed", "dedup_speed.py", quick=("--docs", "200", "--repeats", "1"), takes_dir=False),
    Benchmark("dedup_giant_bucket", "dedup_giant_bucket.py",
              quick=("--docs", "400", "--check", "400", "--max-cluster", "100"), takes_dir=False),
    Benchmark("dedup_quality", "dedup_quality.py", quick=("--docs", "1000"), needs=("scipy",)),
    Benchmark("dedup_scale", "dedup_scale.py", quick=("--docs", "5000")),
    Benchmark("dedup_web", "dedup_web.py", quick=("--gb", "0.005", "--partitions", "8")),
    Benchmark("manifest_diff", "manifest_diff.py", quick=("--docs", "50000", "--common", "20000", "--repeats", "1"),
              needs=("polars",)),
    Benchmark("decontaminate", "decontaminate.py", quick=("--target-mb", "2")),
    Benchmark("tokenize_speed", "tokenize_speed.py", quick=("--target-mb", "2")),
    Benchmark("loader", "loader.py", quick=("--tokens", "2000000", "--batches", "50")),
    # Quick: tokenmill only (cold, warm, local) unless <dir>/streaming/streaming-venv exists; full builds that venv.
    Benchmark("streaming", "streaming.py", quick=("--tokens", "2000000", "--file-tokens", "100000", "--seq-len", "512",
                                                  "--batch", "2", "--cache-fraction", "0.5", "--samples", "1000",
                                                  "--rounds", "1", "--no-venv-build")),
    # --fingerprints: the trainer without them runs in the same rounds (issue 22: their overhead, side by side)
    Benchmark("train_throughput", "train_throughput.py", full=("--fingerprints",),
              quick=("--steps", "12", "--rounds", "1", "--batch", "4", "--micro", "2", "--seq-len", "64",
                     "--fingerprints"),
              takes_dir=False),
    Benchmark("scale", "scale.py", full=("--gb", "10"), quick=("--gb", "0.005")),
    Benchmark("ablate_early", "ablate_early.py", quick=("--clean-docs", "100", "--steps", "20", "--patience", "1")),
    Benchmark("ablate_false_positives", "ablate_false_positives.py",
              quick=("--trials", "1", "--clean-docs", "100", "--steps", "10", "--fresh")),
    Benchmark("object_store", "object_store.py", quick=("--docs-per-source", "20", "--sources", "web_en,books_en")),
]

_RATIO_KEY = re.compile(r"ratio|_vs_")
_JSON_START = re.compile(r"^[ \t]*[{\[]", re.MULTILINE)


def parse_json(stdout: str):
    """The JSON values printed on stdout, other lines ignored: one value, a list for JSON lines, None for none."""
    decoder, values, pos = json.JSONDecoder(), [], 0
    while (m := _JSON_START.search(stdout, pos)) is not None:
        start = m.end() - 1
        try:
            value, end = decoder.raw_decode(stdout, start)
        except json.JSONDecodeError:
            pos = m.end()
            continue
        values.append(value)
        pos = end
    return None if not values else values[0] if len(values) == 1 else values


def find_ratios(value, path: tuple[str, ...] = ()) -> dict[str, float]:
    """Every number under a key that is `ratios` or contains `ratio` or `_vs_` (that key or one above it)."""
    out: dict[str, float] = {}
    if isinstance(value, dict):
        for k, v in value.items():
            out.update(find_ratios(v, (*path, str(k))))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            label = str(v.get("scenario") or v.get("benchmark") or i) if isinstance(v, dict) else str(i)
            out.update(find_ratios(v, (*path, label)))
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        if any(_RATIO_KEY.search(k) for k in path):
            out[".".join(path)] = value
    return out


def _display(cmd: list[str]) -> str:
    """The command as documented: `python benchmarks/X.py ...`, paths relative to the repository where they can be."""
    shown = []
    for a in cmd:
        p = Path(a)
        if p.is_absolute():
            try:
                a = str(p.relative_to(ROOT))
            except ValueError:
                pass
        shown.append(a)
    return shlex.join(["python", *shown])


def demo_sources(config: Path) -> list[str]:
    import yaml

    return [s["name"] for s in yaml.safe_load(config.read_text())["sources"]]


def ensure_corpus(folder: Path) -> Path:
    """The demo corpus reader_memory reads (the same folder benchmarks/ingest_sample.py generates and reuses)."""
    config = folder / "demo.yaml"
    if not config.exists():
        mb = int(folder.name.removeprefix("corpus-").removesuffix("mb"))
        subprocess.run([sys.executable, "-c", "import sys; from tokenmill.demo import write_demo_corpus; "
                        "write_demo_corpus(sys.argv[1], target_bytes=int(float(sys.argv[2])), classifier=False)",
                        str(folder), str(mb * 1e6)], check=True, cwd=ROOT)
    return config


def commands(bench: Benchmark, size: str, data_dir: Path) -> list[tuple[str, list[str]]]:
    """(row name, argv after the interpreter) for each process the benchmark runs."""
    args = list(bench.quick if size == "quick" else bench.full)
    if bench.takes_dir:
        args += ["--dir", str(data_dir)]
    script = str(bench.path)
    if not bench.per_source:
        return [(bench.name, [script, *args])]
    config = ensure_corpus(data_dir / f"corpus-{bench.corpus_mb[size]}mb")
    sources = demo_sources(config)
    if size == "quick" and bench.quick_sources:
        sources = [s for s in sources if s in bench.quick_sources] or sources
    return [(f"{bench.name}[{s}]", [script, str(config), s, *args]) for s in sources]


def run_one(name: str, argv: list[str], logs: Path, timeout: float | None) -> dict:
    """Run one benchmark process; its row of the summary."""
    cmd = [sys.executable, *argv]
    # Each benchmark starts its own private Ray instance; never one that this process's caller may have running.
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    logs.mkdir(parents=True, exist_ok=True)
    log = logs / f"{name}.stderr"
    row: dict = {"command": _display(argv), "stderr_log": str(log)}
    start = time.perf_counter()
    with open(log, "w", encoding="utf-8") as err:
        # Its own session: past the timeout the benchmark goes with every process it started (a side process
        # and its DataLoader workers, a Ray node), none left running or holding a port.
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=err, text=True, env=env,
                                start_new_session=True)
        try:
            stdout, _ = proc.communicate(timeout=timeout)
            row["exit_code"] = proc.returncode
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            stdout, _ = proc.communicate()
            row["exit_code"] = None
    row["seconds"] = round(time.perf_counter() - start, 2)
    result = parse_json(stdout)
    row["json"] = result
    row["ratios"] = find_ratios(result) if result is not None else {}
    if row["exit_code"] is None:
        row["status"], row["reason"] = "failed", f"timed out after {timeout:g} s"
    elif row["exit_code"] != 0:
        row["status"], row["reason"] = "failed", f"exit code {row['exit_code']}"
    elif result is None:
        row["status"], row["reason"] = "failed", "printed no JSON on stdout"
    elif isinstance(result, dict) and "skipped" in result:
        row["status"], row["reason"] = "skipped", str(result["skipped"])
    elif not row["ratios"]:
        row["status"], row["reason"] = "failed", "no ratio in its JSON"
    else:
        row["status"] = "ok"
    if row["status"] == "failed":
        text = log.read_text(encoding="utf-8", errors="replace")
        row["stderr_tail"] = text[-3000:]
        if not stdout.strip() or result is None:
            row["stdout_tail"] = stdout[-1000:]
    return row


def print_table(summary: dict) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=f"benchmarks at {summary['size']} size ({summary['summary']})")
    for col, justify in (("benchmark", "left"), ("status", "left"), ("seconds", "right"), ("ratio", "left"),
                         ("value", "right")):
        table.add_column(col, justify=justify, overflow="fold")
    for name, row in summary["benchmarks"].items():
        status = {"ok": "[green]ok[/]", "skipped": "[yellow]skipped[/]", "failed": "[bold red]FAILED[/]"}[row["status"]]
        ratios = list(row["ratios"].items())
        if row["status"] != "ok" or not ratios:
            table.add_row(escape(name), status, f"{row['seconds']:g}", escape(row.get("reason", "")), "",
                          end_section=True)
            continue
        for i, (key, value) in enumerate(ratios):
            table.add_row(escape(name) if i == 0 else "", status if i == 0 else "",
                          f"{row['seconds']:g}" if i == 0 else "", escape(key), f"{value:g}",
                          end_section=i == len(ratios) - 1)
    longest = max((len(n) + max((len(k) for k in r["ratios"]), default=len(r.get("reason", "")))
                   for n, r in summary["benchmarks"].items()), default=0)
    Console(width=max(Console().width, longest + 50)).print(table)  # a ratio's name on one line, never wrapped


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=("full", "quick"), default="full")
    parser.add_argument("--dir", default="bench", help="full: data and summary.json here; quick: under DIR/quick")
    parser.add_argument("--only", default="", help="comma-separated benchmark names")
    parser.add_argument("--skip", default="", help="comma-separated benchmark names")
    parser.add_argument("--timeout", type=float, default=None,
                        help="seconds per benchmark process (default: none at full size, 600 at quick)")
    args = parser.parse_args(argv)
    timeout = args.timeout if args.timeout is not None else (600.0 if args.size == "quick" else None)
    only = {n for n in args.only.split(",") if n}
    skip = {n for n in args.skip.split(",") if n}
    known = {b.name for b in BENCHMARKS}
    unknown = (only | skip) - known
    if unknown:
        parser.error(f"unknown benchmark(s) {', '.join(sorted(unknown))}; known: {', '.join(sorted(known))}")
    chosen = [b for b in BENCHMARKS if (not only or b.name in only) and b.name not in skip]

    data_dir = Path(args.dir).resolve() / ("quick" if args.size == "quick" else "")
    data_dir.mkdir(parents=True, exist_ok=True)
    summary_path = data_dir / "summary.json"
    summary: dict = {"size": args.size, "dir": str(data_dir), "summary": str(summary_path),
                     "python": platform.python_version(), "cpus": os.cpu_count(),
                     "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "benchmarks": {}}
    started = time.perf_counter()
    for bench in chosen:
        missing = [m for m in bench.needs if importlib.util.find_spec(m) is None]
        if missing:
            summary["benchmarks"][bench.name] = {
                "status": "skipped", "seconds": 0, "ratios": {}, "command": None,
                "reason": f"needs {', '.join(missing)}: `make bench` installs the bench extra"}
            continue
        try:
            runs = commands(bench, args.size, data_dir)
        except (OSError, ValueError, KeyError, subprocess.CalledProcessError) as e:  # its setup failed: a failed row
            summary["benchmarks"][bench.name] = {"status": "failed", "seconds": 0, "ratios": {}, "command": None,
                                                 "reason": f"setup failed: {type(e).__name__}: {e}"}
            continue
        for name, run_argv in runs:
            print(f"[{len(summary['benchmarks']) + 1}] {_display(run_argv)}", file=sys.stderr, flush=True)
            row = run_one(name, run_argv, data_dir / "logs", timeout)
            summary["benchmarks"][name] = row
            print(f"    {row['status']} in {row['seconds']:g} s" + (f": {row['reason']}" if "reason" in row else ""),
                  file=sys.stderr, flush=True)
            summary["seconds"] = round(time.perf_counter() - started, 1)
            summary_path.write_text(json.dumps(summary, indent=1, ensure_ascii=False) + "\n")
    failed = [n for n, r in summary["benchmarks"].items() if r["status"] == "failed"]
    summary["seconds"] = round(time.perf_counter() - started, 1)
    summary["failed"] = failed
    summary["skipped"] = {n: r["reason"] for n, r in summary["benchmarks"].items() if r["status"] == "skipped"}
    summary_path.write_text(json.dumps(summary, indent=1, ensure_ascii=False) + "\n")
    print_table(summary)
    print(f"wrote {summary_path}", file=sys.stderr)
    if failed:
        print(f"FAILED: {', '.join(failed)} (see each one's stderr_tail in {summary_path})", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
