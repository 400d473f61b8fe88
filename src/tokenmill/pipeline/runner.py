"""Run ingest and the configured stages in order: plan, skip what is committed, run the rest on Ray, write manifests."""

from __future__ import annotations

import logging
import resource
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Mapping, Protocol

import pyarrow.fs as pafs

from tokenmill.errors import ConfigError, TokenmillError
from tokenmill.pipeline.manifest import (
    DROPPED,
    MANIFEST,
    SHARDS,
    build_content,
    build_run_info,
    check_conservation,
    check_entry_paths,
    content_hash,
    read_manifest,
    write_manifest,
)
from tokenmill.pipeline import runfolder, storage
from tokenmill.pipeline.columns import check_chain
from tokenmill.pipeline.commit import committed_records, damaged_files, record_path
from tokenmill.pipeline.config import RunConfig, build_stages
from tokenmill.pipeline.contract import DriverPhase, PlanContext, ShardsResult, SourceStage, Stage
from tokenmill.documents import canonical_json, digest
from tokenmill.pipeline.executor import run_tasks
from tokenmill.pipeline.generations import find_restorable, restore
from tokenmill.pipeline.ray_cluster import cluster_cpus, ray_session
from tokenmill.pipeline.registry import stage_order
from tokenmill.pipeline.resume import explain_change, stage_key, supersede
from tokenmill.pipeline.runfolder import KEY_FILE
from tokenmill.pipeline.tasks import TaskEnv
from tokenmill.errors import StageFailed

log = logging.getLogger(__name__)


class Reporter(Protocol):
    """How the runner tells a person what it does; the CLI draws progress bars, tests stay quiet."""

    def note(self, text: str) -> None: ...
    def phase_started(self, stage: str, phase: str, total: int, committed: int) -> None: ...
    def task_done(self, stage: str, phase: str) -> None: ...
    def phase_ended(self, stage: str, phase: str) -> None: ...


class LogReporter:
    """A reporter that only logs."""

    def note(self, text: str) -> None:
        log.info(text)

    def phase_started(self, stage: str, phase: str, total: int, committed: int) -> None:
        log.info("%s/%s: %d tasks, %d already committed", stage, phase, total, committed)

    def task_done(self, stage: str, phase: str) -> None:
        pass

    def phase_ended(self, stage: str, phase: str) -> None:
        pass


@dataclass
class StageReport:
    """What one stage run did, for the summary table and the structured log."""

    stage: str
    status: str
    """`ran`, `resumed` (some tasks were already committed), `up to date`, or `restored` (a superseded output made
    under the same key moved back from `_superseded/`, nothing recomputed)."""
    tasks_run: int
    tasks_skipped: int
    totals: dict[str, Any]
    seconds: float
    manifest: str
    notes: list[str] = field(default_factory=list)


def run_pipeline(
    config: RunConfig,
    *,
    only: str | None = None,
    workers: int | None = None,
    ray_address: str | None = None,
    reporter: Reporter | None = None,
    stages: list[Stage] | None = None,
) -> list[StageReport]:
    """Run ingest and every configured stage (or only `only`); returns one report per stage.

    `stages` replaces the chain built from the config (a source stage such as ingest first), for embedding custom
    stages.
    """
    reporter = reporter or LogReporter()
    stages = stages if stages is not None else build_stages(config)
    check_chain(stages)
    names = [s.name for s in stages]
    if only is not None and only not in names:
        raise ConfigError(f"--stage {only}: not a configured stage; configured: {', '.join(names)}")
    # Again, for a config built in code (it skipped validation); a validated one's listing is reused.
    problems = runfolder.output_problems(config, config.validated_listing() or None)
    if problems:
        raise runfolder.RunFolderError("invalid output:\n" + "\n".join(problems))
    fs, root = storage.filesystem_for(config.output_location)
    selected = [i for i, s in enumerate(stages) if only is None or s.name == only]
    workers = workers or config.execution.workers
    reports = []
    # One driver per run folder: the lock is taken before anything is read to decide what to do, and held to the end.
    with runfolder.hold(fs, root) as lock:
        for name in names:
            # A folder tokenmill did not make, or a symlink at or below a stage folder, stops the run here: before
            # anything is read, written, moved or deleted through it.
            problem = runfolder.stage_problem(fs, storage.join(root, name))
            if problem:
                raise runfolder.RunFolderError(problem)
        if selected[0] > 0:
            _check_earlier(fs, root, stages, selected[0])
        with ray_session(ray_address or config.execution.ray_address):
            max_in_flight = workers or cluster_cpus()
            for i in selected:
                lock.check()
                report = _run_stage(fs, root, stages, i, config, reporter, max_in_flight, workers, lock)
                _log_record(fs, root, report)
                reports.append(report)
    return reports


def _check_earlier(fs, root: str, stages: list[Stage], upto: int) -> None:
    """Before a stage runs alone: every earlier stage is committed under the config's key, with its files intact.

    Else the stage would read output made with another config (or read a file that is gone) and call it up to date.
    """
    only = stages[upto].name
    for index in range(upto):
        stage = stages[index]
        stage_dir = storage.join(root, stage.name)
        rerun = (f"rerun it first: `tokenmill run CONFIG --stage {stage.name}`, then each later stage up to {only!r}, "
                 f"or `tokenmill run CONFIG` for all")
        if read_manifest(fs, stage_dir) is None:
            raise TokenmillError(f"stage {only!r} reads the output of {stage.name!r}, which has not completed in "
                                 f"{root}: run `tokenmill run CONFIG --stage {stage.name}` (or without --stage) first")
        identity = stage.identity()
        _, input_hash, stamp, _, _ = _input_of(fs, root, stages, index)
        key = stage_key(stage.name, identity, input_hash, stamp)
        previous = storage.read_json(fs, storage.join(stage_dir, KEY_FILE))
        if not isinstance(previous, dict) or previous.get("key") != key:
            why = explain_change(previous, identity, key) if isinstance(previous, dict) else ["it has no key record"]
            raise TokenmillError(f"--stage {only}: the committed output of earlier stage {stage.name!r} was made from "
                                 f"another config or input than this one ({'; '.join(why)}); {rerun}")
        damaged = damaged_files(fs, stage_dir, key)
        if damaged:
            raise TokenmillError(f"--stage {only}: earlier stage {stage.name!r} lost committed files "
                                 f"({', '.join(damaged[:3])}{', ...' if len(damaged) > 3 else ''}); {rerun} "
                                 f"(it recomputes only the tasks whose files are gone)")


def _input_of(fs, root: str, stages: list[Stage], index: int):
    """(descriptor for the manifest, input hash, resume stamp, upstream content, input folder)."""
    stage = stages[index]
    if isinstance(stage, SourceStage):
        listing = stage.input_listing()
        return {"files": listing, "hash": digest(listing)}, digest(listing), stage.input_stamp(), None, None
    prev = stages[index - 1].name
    manifest = read_manifest(fs, storage.join(root, prev))
    if manifest is None:
        raise TokenmillError(f"stage {stage.name!r}: input stage {prev!r} has no manifest; run it first")
    upstream = manifest["content"]
    h = content_hash(upstream)
    return {"stage": prev, "manifest_hash": h}, h, None, upstream, storage.join(root, prev)


def _run_stage(fs, root, stages, index, config, reporter: Reporter, max_in_flight: int, workers,
               lock: runfolder.RunLock) -> StageReport:
    stage = stages[index]
    stage_dir = storage.join(root, stage.name)
    started = time.time()
    identity = stage.identity()
    descriptor, input_hash, stamp, upstream, input_dir = _input_of(fs, root, stages, index)
    key = stage_key(stage.name, identity, input_hash, stamp)
    previous = storage.read_json(fs, storage.join(stage_dir, KEY_FILE))
    notes: list[str] = []
    source: str | None = None
    """Where this stage's output was restored from, when a superseded one of this key came back."""
    if (previous is not None and previous.get("key") != key) or (previous is None and storage.exists(fs, stage_dir)):
        why = explain_change(previous, identity, key) if previous else ["its folder has no key record"]
        registered = stage_order()
        order = registered + [s.name for s in stages if s.name not in registered]
        later = order[order.index(stage.name):]
        lock.check()
        dest = supersede(fs, root, later)
        previous = None
        source = _restore_if_superseded(fs, root, stage.name, stage_dir, key, lock)
        if source is None:
            notes.append(f"{stage.name}: recomputing it and every later stage, because {'; '.join(why)}; "
                         f"old output moved to {dest}")
        else:
            notes.append(f"{stage.name}: {'; '.join(why)}; old output moved to {dest}, and the output made earlier "
                         f"under this config and input restored from {source}: nothing recomputed")
            previous = storage.read_json(fs, storage.join(stage_dir, KEY_FILE))
        reporter.note(notes[-1])
    elif previous is None and not storage.exists(fs, stage_dir):
        # Absent (an earlier stage's change moved it aside, or never run): a superseded output of this key comes back.
        source = _restore_if_superseded(fs, root, stage.name, stage_dir, key, lock)
        if source is not None:
            notes.append(f"{stage.name}: restored from {source} (made earlier under this config and input): "
                         f"nothing recomputed")
            reporter.note(notes[-1])
            previous = storage.read_json(fs, storage.join(stage_dir, KEY_FILE))
    manifest = read_manifest(fs, stage_dir)
    if previous is not None and manifest is not None:
        # Up to date means: same key, and every committed file still there with its recorded size.
        damaged = damaged_files(fs, stage_dir, key)
        if not damaged:
            status = "restored" if source is not None else "up to date"
            if source is None:
                reporter.note(f"{stage.name}: up to date")
            content, info = manifest["content"], manifest["run_info"]
            return StageReport(stage.name, status, 0, info["tasks_run"] + info["tasks_skipped"], content["totals"],
                               0.0, storage.join(stage_dir, MANIFEST), notes)
        notes.append(f"{stage.name}: {len(damaged)} committed file(s) are missing or changed in size "
                     f"({', '.join(damaged[:3])}{', ...' if len(damaged) > 3 else ''}); recomputing the tasks that "
                     f"wrote them")
        reporter.note(notes[-1])
    runfolder.claim_stage(fs, stage_dir)
    if previous is None:
        storage.write_json_atomic(fs, storage.join(stage_dir, KEY_FILE),
                                  {"key": key, "identity": identity, "input": descriptor}, uuid.uuid4().hex)

    shared: dict[str, Any] = {}
    run_count = skip_count = 0
    phase_stats: dict[str, dict[str, float]] = {}
    shard_records: dict[str, dict] = {}
    for phase_index, phase in enumerate(stage.phases()):
        phase_started = time.time()
        ctx = PlanContext(stage_dir, input_dir, upstream["shards"] if upstream else [], shared, fs)
        if isinstance(phase, DriverPhase):
            reporter.phase_started(stage.name, phase.name, 0, 0)
            shared[phase.name] = phase.build(stage, ctx)
            reporter.phase_ended(stage.name, phase.name)
            phase_stats[phase.name] = {"wall_seconds": round(time.time() - phase_started, 3), "tasks_run": 0,
                                       "max_task_seconds": 0.0, "task_seconds": 0.0, "max_worker_peak_rss_mb": 0.0}
            continue
        rounds = 0
        while True:  # one round, unless the phase asks for another (`Phase.again`)
            tasks = _planned(stage, phase, ctx)
            records, todo = _split_committed(fs, stage_dir, phase.name, tasks, key)
            label = phase.name if not rounds else f"{phase.name} (round {rounds + 1})"
            reporter.phase_started(stage.name, label, len(tasks), len(records))
            env = TaskEnv(config.output_location, stage.name, None if input_dir is None else stages[index - 1].name,
                          key, phase_index)
            done, failures = run_tasks(
                stage, env, todo, shared,
                resources=phase.resources,
                max_in_flight=max_in_flight,
                max_retries=config.execution.max_retries,
                on_done=lambda task, label=label: reporter.task_done(stage.name, label),
            )
            reporter.phase_ended(stage.name, label)
            phase_stats[phase.name] = _round_stats(phase_stats.get(phase.name), phase_started, done, rounds)
            records.update(done)
            run_count += len(done)
            skip_count += len(tasks) - len(todo)
            lock.check()
            if failures:
                raise StageFailed(stage.name, failures)
            results = {k: ShardsResult.from_json(r["result"]) if phase.writes_shards else r["result"]
                       for k, r in records.items()}
            shared[phase.name] = phase.reduce(stage, results, ctx)
            rounds += 1
            if not phase.again(stage, ctx):
                break
        if phase.writes_shards:
            shard_records = records

    entries = [entry for k in sorted(shard_records) for entry in shard_records[k]["result"]["shards"]]
    reduced = {name: value for name, value in shared.items() if value is not None}
    content = build_content(stage.name, identity, descriptor, entries, lambda stats: _report(stage, stats, reduced))
    check_conservation(content, stage.drop_reasons, upstream)
    lock.check()
    _remove_leftovers(fs, stage_dir, shard_records)
    run_info = build_run_info(started, time.time(), key, run_count, skip_count, workers)
    run_info["phases"] = phase_stats
    run_info["driver_peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    path = write_manifest(fs, stage_dir, content, run_info, uuid.uuid4().hex)
    status = "resumed" if skip_count else "ran"
    return StageReport(stage.name, status, run_count, skip_count, content["totals"], run_info["seconds"], path, notes)


def _planned(stage: Stage, phase, ctx: PlanContext) -> list:
    """The phase's tasks (for its next round), each key once."""
    tasks = phase.plan(stage, ctx)
    if len({t.key for t in tasks}) != len(tasks):
        raise RuntimeError(f"stage {stage.name!r} phase {phase.name!r} planned two tasks with one key")
    return tasks


def _round_stats(earlier: dict[str, float] | None, phase_started: float, done: dict[str, dict], rounds: int
                 ) -> dict[str, float]:
    """A phase's stats once its round `rounds` (from 0) is done, its tasks' `task_stats` taken out of their records:
    over the rounds (`Phase.again`), tasks and task seconds summed, maxima kept, the wall time since the phase
    began, and, after more than one, how many rounds."""
    task_stats = [r.pop("task_stats") for r in done.values() if "task_stats" in r]
    stats = {
        "wall_seconds": round(time.time() - phase_started, 3),
        "tasks_run": len(done),
        "max_task_seconds": round(max((t["seconds"] for t in task_stats), default=0.0), 3),
        # Against wall x workers, what the phase lost outside its tasks: Ray's per-task cost and idle workers.
        "task_seconds": round(sum(t["seconds"] for t in task_stats), 3),
        "max_worker_peak_rss_mb": round(max((t["peak_rss_mb"] for t in task_stats), default=0.0), 1),
    }
    if not rounds or earlier is None:
        return stats
    return {"wall_seconds": stats["wall_seconds"], "tasks_run": earlier["tasks_run"] + stats["tasks_run"],
            "max_task_seconds": max(earlier["max_task_seconds"], stats["max_task_seconds"]),
            "task_seconds": round(earlier["task_seconds"] + stats["task_seconds"], 3),
            "max_worker_peak_rss_mb": max(earlier["max_worker_peak_rss_mb"], stats["max_worker_peak_rss_mb"]),
            "rounds": rounds + 1}


def _split_committed(fs, stage_dir: str, phase: str, tasks: list, key: dict) -> tuple[dict[str, dict], list]:
    """({task key: completion record} of the tasks committed under `key`, their paths checked; the tasks to run)."""
    records = committed_records(fs, stage_dir, phase, [t.key for t in tasks], key)
    for task_key, record in records.items():
        _check_record_paths(record, record_path(stage_dir, phase, task_key))
    return records, [t for t in tasks if t.key not in records]


def _report(stage: Stage, stats: dict[str, Any] | None, reduced: Mapping[str, Any]) -> dict[str, Any] | None:
    """The stage's report: its summed shard stats and, when any phase reduced something, those results (global
    facts such as the cluster summary or the index reach the report directly, not through a shard's stats)."""
    if stats is None and not reduced:
        return None
    return stage.report(stats or {}, reduced or None)


def _restore_if_superseded(fs, root: str, name: str, stage_dir: str, key: dict, lock: runfolder.RunLock) -> str | None:
    """Move back the newest complete, intact superseded output of this stage made under `key`; where it was."""
    source = find_restorable(fs, root, name, key)
    if source is None:
        return None
    lock.check()
    restore(fs, root, name, source)
    return source


def _check_record_paths(record: dict, where: str) -> None:
    """A completion record reused on resume must name shards inside the stage folder only (it may have been edited;
    its `files` were checked when it was read, `commit.committed_record`)."""
    result = record.get("result")
    if isinstance(result, dict) and "shards" in result:
        check_entry_paths(result["shards"] or [], where)


def _remove_leftovers(fs, stage_dir: str, records: dict[str, dict]) -> None:
    """Delete what killed attempts left: temporary folders, temporary files, and shard files no record names.

    One listing from the stage folder down, which never enters a symlink (`storage.list_tree`): a link in the stage
    folder (refused before the stage ran) leads to files that are not the run's to delete."""
    storage.remove_tree(fs, storage.join(stage_dir, "_work", "tmp"))  # a link there goes, never what it leads to
    committed = {storage.join(stage_dir, f["path"]) for r in records.values() for f in r["files"]}
    shard_folders = {storage.join(stage_dir, SHARDS), storage.join(stage_dir, DROPPED)}
    for info in storage.list_tree(fs, stage_dir, recursive=True):
        if info.type != pafs.FileType.File:
            continue
        # A kill between writing a record (or key.json, or the manifest) under its temporary name and moving it;
        # or a shard file written by an attempt that never committed.
        if info.path.endswith(".tmp") or (info.path.rsplit("/", 1)[0] in shard_folders and info.path not in committed):
            fs.delete_file(info.path)


def _log_record(fs, root: str, report: StageReport) -> None:
    """One structured JSON record per stage run under `<output>/_logs/`, for machines and later audits."""
    record = {"event": "stage_run", "time": time.time(), **report.__dict__}
    log.info(canonical_json(record))
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    storage.write_bytes(fs, storage.join(root, runfolder.LOGS_DIR, f"{stamp}-{report.stage}-{uuid.uuid4().hex[:6]}.json"),
                        (canonical_json(record) + "\n").encode())
