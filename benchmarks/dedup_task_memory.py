"""Peak RSS and seconds of each task of dedup's later phases, every task alone in a fresh process, over the phase
files of a finished run (e.g. `benchmarks/dedup_web.py`'s `out/`): what a Ray worker's own high-water mark cannot
say, since a worker that ran a verify task first reports that task's peak for every later task too.

    python benchmarks/dedup_task_memory.py RUN_OUTPUT [--config RUN.yaml] [--top 3] [--fill]
        [--phases components by_component clusters cluster_table]

`--fill` runs first, in this process and committed into RUN_OUTPUT, the tasks of the named phases that the run has
no completion record for (phases its code did not have, e.g. `group_components groups` over a run from before
them): on a hard-linked copy of the run (`cp -al OUT COPY`; a commit moves new files in, never writes into a
linked one).

Probed: the `--top` tasks of each phase (of each round of `components`) that wrote the most bytes, by their
completion records. Each task runs `Phase.run` as a worker would, with its files written under a temporary attempt folder and never
committed (the run folder is left as it was). Prints JSON: per phase, the tasks' count, the largest peak RSS and
seconds, and the task that reached them. The peak is reset as the task starts (Linux's `/proc/self/clear_refs`), so it
is the task's own over what the process then holds (`baseline_mb`: tokenmill and the replay of the earlier plans;
`task_mb` the difference); where the reset is refused, the process's high-water mark, that replay's peak included.
Works with the code of any commit whose dedup stage has the phases named (the one `clusters` task before issue 35).
"""

from __future__ import annotations

import argparse
import gc
import json
import resource
import subprocess
import sys
import time
from pathlib import Path


def _stage_and_plan(output: Path, phase_name: str, config_path: Path | None = None, fill: bool = False):
    import pyarrow.fs

    from tokenmill.pipeline.config import build_stages, load_config
    from tokenmill.pipeline.contract import DriverPhase, PlanContext

    config = load_config(config_path or output.parent / "run.yaml")
    config = config.model_copy(update={"output": str(output)})
    ordered = build_stages(config)
    at = [s.name for s in ordered].index("dedup")
    stage, upstream_name = ordered[at], ordered[at - 1].name
    phases = stage.phases()
    index = next(i for i, p in enumerate(phases) if p.name == phase_name)
    fs = pyarrow.fs.LocalFileSystem()
    upstream = json.loads((output / upstream_name / "manifest.json").read_text())["content"]["shards"]
    stage_dir, input_dir = str(output / "dedup"), str(output / upstream_name)
    # Replay the driver: every phase up to this one planned, round after round, its results reduced from the
    # completion records, so that each plan sees what it saw in the run.
    shared: dict = {}
    ctx = PlanContext(stage_dir, input_dir, upstream, shared, fs)
    tasks = []
    for phase in phases[:index + 1]:
        if isinstance(phase, DriverPhase):  # `partitions` (and `against`): built on the driver, as the run did
            shared[phase.name] = phase.build(stage, ctx)
            continue
        while True:
            planned = phase.plan(stage, ctx)
            if phase is phases[index]:
                tasks += planned
            folder = output / "dedup" / "_work" / "commits" / phase.name
            if fill:  # a phase the run did not have (newer code): its missing tasks run here first, committed
                for t in planned:
                    if not (folder / f"{t.key}.json").exists():
                        _run_and_commit(stage, phase, t, fs, stage_dir, input_dir, shared)
            results = {t.key: json.loads((folder / f"{t.key}.json").read_text())["result"] for t in planned}
            shared[phase.name] = phase.reduce(stage, results, ctx)
            if not (hasattr(phase, "again") and phase.again(stage, ctx)):
                break
    return stage, index, tasks, fs, stage_dir, input_dir, shared


def _run_and_commit(stage, phase, task, fs, stage_dir: str, input_dir: str, shared: dict) -> None:
    """`task` run in this process as a worker would, its files and completion record committed (`--fill`)."""
    from tokenmill.pipeline.commit import TaskWriter
    from tokenmill.pipeline.contract import TaskContext

    writer = TaskWriter(fs, stage_dir, phase.name, task.key)
    result = phase.run(stage, task, TaskContext(stage_dir, input_dir, shared, writer))
    writer.commit(json.loads((Path(stage_dir) / "_work" / "key.json").read_text()), result)


def run_one(output: Path, phase_name: str, key: str, config_path: Path | None) -> dict:
    from tokenmill.pipeline import storage
    from tokenmill.pipeline.commit import TaskWriter, tmp_root
    from tokenmill.pipeline.contract import TaskContext

    stage, index, tasks, fs, stage_dir, input_dir, shared = _stage_and_plan(output, phase_name, config_path)
    task = next(t for t in tasks if t.key == key)
    phase = stage.phases()[index]
    writer = TaskWriter(fs, stage_dir, f"memory-probe-{phase_name}", task.key)
    # The replay of the plans above can peak higher than a small task: the high-water mark is reset here (Linux's
    # clear_refs), so that the peak is the task's, over what the process holds when it starts.
    gc.collect()
    reset = _reset_peak()
    before = _status_mb("VmRSS") if reset else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    t = time.perf_counter()
    try:
        phase.run(stage, task, TaskContext(stage_dir, input_dir, shared, writer))
    finally:
        storage.remove_tree(fs, tmp_root(stage_dir, writer.phase, task.key))
    peak = _status_mb("VmHWM") if reset else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"seconds": round(time.perf_counter() - t, 2), "baseline_mb": round(before, 1),
            "peak_rss_mb": round(peak, 1), "task_mb": round(peak - before, 1)}


def _reset_peak() -> bool:
    """Reset this process's peak RSS (VmHWM); False where the system does not allow it (then ru_maxrss is read,
    which the plans' replay may have set)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _status_mb(field: str) -> float:
    """A `/proc/self/status` memory field (VmRSS, VmHWM) in MiB."""
    with open("/proc/self/status") as f:
        line = next(line for line in f if line.startswith(field + ":"))
    return int(line.split()[1]) / 1024


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("output", type=Path, help="a finished run's output folder (holding ingest/ and dedup/)")
    parser.add_argument("--config", type=Path, help="the run's config (default: run.yaml beside the output folder)")
    parser.add_argument("--phases", nargs="+", default=["components", "by_component", "clusters", "cluster_table"])
    parser.add_argument("--top", type=int, default=3, help="tasks probed per phase (per round): those that wrote most")
    parser.add_argument("--fill", action="store_true",
                        help="first run (in this process, committed into OUTPUT) the tasks of the probed phases that "
                             "the run lacks: phases newer than its code; use on a copy (`cp -al`), not the original")
    parser.add_argument("--one", nargs=2, metavar=("PHASE", "KEY"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    output = args.output.resolve()
    if args.one:
        print(json.dumps(run_one(output, *args.one, args.config)))
        return 0
    result = {}
    for name in args.phases:
        _, _, tasks, *_ = _stage_and_plan(output, name, args.config, fill=args.fill)
        commits = output / "dedup" / "_work" / "commits" / name

        def written(key: str) -> int:
            return sum(f["bytes"] for f in json.loads((commits / f"{key}.json").read_text())["files"])

        runs = {}
        # The tasks that wrote the most (per round of `components`): the ones with the most rows to hold.
        rounds: dict[str, list] = {}
        for task in tasks:
            rounds.setdefault(task.key.split("-")[0] if "-" in task.key else "", []).append(task)
        chosen = [t for group in rounds.values() for t in sorted(group, key=lambda t: -written(t.key))[:args.top]]
        for task in chosen:
            done = subprocess.run([sys.executable, __file__, str(output), "--one", name, task.key,
                                   *(["--config", str(args.config)] if args.config else [])],
                                  check=True, capture_output=True, text=True)
            runs[task.key] = json.loads(done.stdout.strip().splitlines()[-1])
        top = max(runs, key=lambda k: runs[k]["peak_rss_mb"])
        slow = max(runs, key=lambda k: runs[k]["seconds"])
        result[name] = {"tasks": len(tasks), "probed": len(runs), "max_peak_rss_mb": runs[top]["peak_rss_mb"], "at": top,
                        "baseline_mb": runs[top]["baseline_mb"], "task_mb": runs[top].get("task_mb"),
                        "max_seconds": runs[slow]["seconds"],
                        "slowest": slow, "seconds": round(sum(r["seconds"] for r in runs.values()), 2)}
        print(json.dumps({name: result[name]}), file=sys.stderr)
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
