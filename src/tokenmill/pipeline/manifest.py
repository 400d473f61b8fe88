"""Build, check and write a stage manifest: deterministic `content` and a `run_info` about where and when."""

from __future__ import annotations

import platform
import socket
from collections import defaultdict
from typing import Any, Callable, Iterable

from tokenmill.errors import ManifestError
from tokenmill.pipeline.stats import SourceTally, Tally, drop_table, merge_stats
from tokenmill.pipeline import storage
from tokenmill.documents import SCHEMA_VERSION, digest

MANIFEST = "manifest.json"
"""A stage's manifest, in its folder: written when the stage completes (`write_manifest`), read by `read_manifest`."""


def build_content(
    stage: str,
    identity: dict[str, Any],
    input_descriptor: dict[str, Any],
    shard_entries: Iterable[dict[str, Any]],
    report: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The deterministic part of a manifest: identical for identical inputs, config and seed, wherever the run lives.

    `report` shapes the stage's summed per-shard stats (None when no shard had any; see `Stage.report`) into
    `content["report"]`, left out when it returns None; without `report`, the summed stats themselves.
    """
    shards = sorted(shard_entries, key=lambda e: e["path"])
    by_source: dict[str, SourceTally] = defaultdict(SourceTally)
    for entry in shards:
        by_source[entry["source"]] = by_source[entry["source"]] + SourceTally.from_json(entry)
    totals = sum((t.total for t in by_source.values()), Tally())
    stats = None
    for entry in shards:
        stats = merge_stats(stats, entry.get("stats"))
    sources_json = {name: t.to_json() for name, t in sorted(by_source.items())}
    content = {
        "stage": stage,
        "schema_version": SCHEMA_VERSION,
        "config": identity,
        "config_hash": digest(identity),
        "input": input_descriptor,
        "totals": totals.to_json(),
        "by_source": sources_json,
        "drop_table": drop_table(sources_json),
        "shards": shards,
    }
    shaped = report(stats) if report else stats
    if shaped is not None:
        content["report"] = shaped
    return content


def content_hash(content: dict[str, Any]) -> str:
    """The hash a later stage records as its input: it changes exactly when the content does."""
    return digest(content)


def check_conservation(content: dict[str, Any], allowed_reasons: Iterable[str], upstream: dict | None = None) -> None:
    """in = kept + every drop, per shard, per source and subset, and in total; raise ManifestError otherwise.

    With the input manifest's content as `upstream`, also check that the stage read every document
    its input stage kept, per source.
    """
    problems = []

    def check(where: str, tally: dict[str, Any]) -> None:
        t = Tally.from_json(tally)
        if not t.conserved():
            problems.append(f"{where}: {t.docs_in} in != {t.docs_out} kept + {t.dropped} dropped")

    allowed = set(allowed_reasons)
    for entry in content["shards"]:
        check(f"shard {entry['path']}", entry)
        unknown = set(entry["drops"]) - allowed
        if unknown:
            problems.append(f"shard {entry['path']}: undeclared drop reasons {sorted(unknown)}")
    for name, source in content["by_source"].items():
        check(f"source {name}", source)
        for subset, tally in source["subsets"].items():
            check(f"source {name} subset {subset}", tally)
    check("totals", content["totals"])
    if upstream is not None:
        for name, source in upstream["by_source"].items():
            got = content["by_source"].get(name, {"docs_in": 0})["docs_in"]
            if got != source["docs_out"]:
                problems.append(f"source {name}: read {got} documents, input stage kept {source['docs_out']}")
    if problems:
        raise ManifestError(f"conservation broken in stage {content['stage']!r}:\n  " + "\n  ".join(problems))


def build_run_info(started: float, ended: float, key: dict[str, Any], tasks_run: int, tasks_skipped: int, workers: int | None) -> dict[str, Any]:
    """Where, when and with what the stage ran: never part of the content hash."""
    import datetime as dt

    import pyarrow
    import ray

    import tokenmill

    def iso(t: float) -> str:
        return dt.datetime.fromtimestamp(t, dt.timezone.utc).isoformat(timespec="seconds")

    return {
        "versions": {"tokenmill": tokenmill.__version__, "python": platform.python_version(),
                     "pyarrow": pyarrow.__version__, "ray": ray.__version__},
        "host": socket.gethostname(),
        "started": iso(started),
        "ended": iso(ended),
        "seconds": round(ended - started, 3),
        "key": key,
        "tasks_run": tasks_run,
        "tasks_skipped": tasks_skipped,
        "workers": workers,
    }


def write_manifest(fs, stage_dir: str, content: dict[str, Any], run_info: dict[str, Any], tmp_suffix: str) -> str:
    path = storage.join(stage_dir, MANIFEST)
    storage.write_json_atomic(fs, path, {"content": content, "run_info": run_info}, tmp_suffix)
    return path


def read_manifest(fs, stage_dir: str, required: bool = False) -> dict[str, Any] | None:
    """A stage's manifest (`stage_dir` on `fs`), or None when the stage has not completed (no manifest, or one cut
    short); with `required`, a ManifestError naming the file instead of None. The one reader of manifests.

    Raises ManifestError for a file that is not a manifest, or whose shards name a path outside the stage's
    `shards/` and `dropped/` folders (an edited manifest must not make a later stage read elsewhere).
    """
    where = storage.join(stage_dir, MANIFEST)
    manifest = storage.read_json(fs, where)
    if manifest is None:
        if required:
            raise ManifestError(f"{where} is missing or cut short")
        return None
    if not isinstance(manifest, dict) or "content" not in manifest or "run_info" not in manifest:
        raise ManifestError(f"{where} is not a tokenmill manifest")
    shards = manifest["content"].get("shards") if isinstance(manifest["content"], dict) else None
    if not isinstance(shards, list):
        raise ManifestError(f"{where} is not a tokenmill manifest: content.shards is not a list")
    check_entry_paths(shards, where)
    return manifest


SHARDS = "shards"
"""A stage's folder of kept rows, one Parquet file per shard (`map_phase.shard_path`)."""
DROPPED = "dropped"
"""A stage's folder of dropped rows with their reason, one Parquet file per shard that dropped any."""
SHARD_FOLDERS = {"path": SHARDS, "dropped_path": DROPPED}
"""The folder, inside the stage folder, each path field of a shard entry must lie in."""


def unsafe_path(path: Any, folder: str | None = None) -> str | None:
    """Why `path` may not be used as a file inside a stage folder (under `folder/` when given), else None."""
    if not isinstance(path, str) or not path:
        return "not a path"
    if path.startswith(("/", "\\")) or "\\" in path or ":" in path.split("/", 1)[0] or "\x00" in path:
        return "not a relative path"
    parts = path.split("/")
    if any(p in ("", ".", "..") for p in parts):
        return "not a plain relative path (empty, '.' or '..' parts)"
    if folder is not None and (len(parts) != 2 or parts[0] != folder):
        return f"not a file directly in {folder}/"
    return None


def check_entry_paths(entries: Iterable[Any], where: str) -> None:
    """Every shard entry's `path` and `dropped_path` lie in the stage folder's `shards/` and `dropped/`."""
    for entry in entries:
        if not isinstance(entry, dict):
            raise ManifestError(f"{where}: a shard entry is not an object: {entry!r:.100}")
        for field, folder in SHARD_FOLDERS.items():
            value = entry.get(field)
            if value is None and field == "dropped_path":
                continue
            why = unsafe_path(value, folder)
            if why is not None:
                raise ManifestError(f"{where}: shard {field} {value!r:.200} is {why}; refusing to read or write "
                                    f"outside the run folder (was the file edited? rerun the stage that wrote it)")
