"""A run's lineage from source files to tokens, with a check that every stage read the manifest that is there now.

`show_run(run)` returns a JSON-ready dict (the shape is in docs/manifests.md); the CLI renders it. The input check
recomputes the hash a stage records for its input exactly as the runner does (`manifest.content_hash` of the input
stage's manifest content, see `pipeline/runner._input_of`), from the input stage's manifest as it is on disk now.
"""

from __future__ import annotations

import logging
from typing import Any, Iterable

import pyarrow.fs as pafs

from tokenmill.errors import TokenmillError
from tokenmill.manifests.diff import token_counts
from tokenmill.pipeline.manifest import MANIFEST, content_hash, read_manifest
from tokenmill.pipeline import storage
from tokenmill.documents import digest
from tokenmill.pipeline.commit import damaged_files
from tokenmill.pipeline.resume import diff_values
from tokenmill.pipeline.runfolder import KEY_FILE, SUPERSEDED

log = logging.getLogger(__name__)

OK = "ok"
STALE = "stale"
"""The stage's recorded input hash differs from its input stage's manifest now: that stage was rerun since."""
INPUT_MISSING = "input missing"
"""The stage's input stage has no manifest now (moved aside, deleted, or its rerun did not complete)."""
STALE_UPSTREAM = "stale upstream"
"""The stage matches its input, but an earlier stage in its lineage is stale or lost its input."""
INCOMPLETE = "incomplete"
"""The stage folder has no manifest: its run has not completed."""
MISSING = "missing"
"""No folder now, but the runner moved one aside (`_superseded/`) when an earlier stage was recomputed."""
INCONSISTENT = "inconsistent"
"""The manifest disagrees with itself (config hash, input hash in the key) or with the stage's key file."""
CONFIG_CHANGED = "config changed"
"""With `--config`: the stage's committed config differs from what the config file gives it now."""
FILES_MISSING = "files missing"
"""A file its completion records name is gone or has another size than committed (`tokenmill run` recomputes it)."""


def stage_order(names: Iterable[str]) -> list[str]:
    """Stages in pipeline order (the registered stages'); unknown (custom) stages after the known ones, by name.

    By the registry, not the manifests' lineage: an incomplete stage or a superseded one may have no manifest."""
    from tokenmill.pipeline.registry import stage_order as registered  # imports every stage: only when show runs

    order, names = registered(), list(names)
    return [s for s in order if s in names] + sorted(s for s in names if s not in order)


def _stage_folders(fs, root: str) -> dict[str, str]:
    if fs.get_file_info(root).type != pafs.FileType.Directory:
        raise TokenmillError(f"{root}: not a folder; give a run folder (the config's `output`)")
    out = {}
    for sub in fs.get_file_info(pafs.FileSelector(root, recursive=False)):
        if sub.type == pafs.FileType.Directory and not sub.base_name.startswith("_") and (
                storage.exists(fs, storage.join(sub.path, MANIFEST)) or storage.exists(fs, storage.join(sub.path, KEY_FILE))):
            out[sub.base_name] = sub.path
    if not out:
        raise TokenmillError(f"{root}: no stage folders with a manifest or a key in it; is it the config's `output` "
                             f"folder, and has a stage run?")
    return out


def _superseded(fs, root: str) -> list[dict[str, Any]]:
    """Output the runner moved aside when a config or input change forced a recompute, oldest first."""
    base = storage.join(root, SUPERSEDED)
    if not storage.exists(fs, base):
        return []
    out = []
    for when in sorted(fs.get_file_info(pafs.FileSelector(base, recursive=False)), key=lambda i: i.base_name):
        if when.type == pafs.FileType.Directory:
            stages = [i.base_name for i in fs.get_file_info(pafs.FileSelector(when.path, recursive=False))
                      if i.type == pafs.FileType.Directory]
            out.append({"time": when.base_name, "stages": stage_order(stages)})
    return out


def _source_files(listing: list[dict[str, Any]]) -> dict[str, Any]:
    return {"files": len(listing), "bytes": sum(f.get("bytes", 0) for f in listing)}


def check_stage(fs, root: str, stage: str, stage_dir: str, current: dict[str, str | None],
                expected_files: list[dict[str, Any]] | None = None,
                expected_config: dict[str, Any] | None = None) -> dict[str, Any]:
    """One stage's row: counts, tokens, hashes, time, and whether its recorded input is what is on disk now.

    `current` maps each stage name to its manifest's content hash now (None: no manifest). `expected_files`,
    when given, is ingest's input listing as the config's sources give it now; `expected_config` the stage's
    identity as the config file gives it now. Every file the stage's completion records name must be there with
    its committed size.
    """
    manifest = read_manifest(fs, stage_dir, required=True) if storage.exists(fs, storage.join(stage_dir, MANIFEST)) \
        else None
    key_file = storage.read_json(fs, storage.join(stage_dir, KEY_FILE))
    if manifest is None:
        return {"stage": stage, "status": INCOMPLETE, "problems": ["no manifest: the stage's run has not completed"],
                "input": {"stage": (key_file or {}).get("input", {}).get("stage")}}
    content, info = manifest["content"], manifest["run_info"]
    recorded_input = content["input"]
    problems: list[str] = []
    status = OK
    if "stage" in recorded_input:
        upstream = recorded_input["stage"]
        recorded = recorded_input.get("manifest_hash")
        now = current.get(upstream)
        if now is None:
            status = INPUT_MISSING
            problems.append(f"its input stage {upstream!r} has no manifest now")
        elif now != recorded:
            status = STALE
            problems.append(f"it read {upstream!r} with manifest hash {recorded[:12]}, but {upstream!r} now has "
                            f"{now[:12]}: {upstream!r} was rerun after it; rerun {stage!r} and the stages after it")
        input_row = {"stage": upstream, "recorded_hash": recorded, "current_hash": now, "matches": now == recorded}
    else:
        files = recorded_input.get("files", [])
        input_row = {"stage": None, "source_files": _source_files(files), "recorded_hash": recorded_input.get("hash"),
                     "current_hash": digest(expected_files) if expected_files is not None else None}
        if digest(files) != recorded_input.get("hash"):
            status = INCONSISTENT
            problems.append("the recorded source file list does not match its recorded hash")
        if expected_files is not None:
            input_row["matches"] = input_row["current_hash"] == input_row["recorded_hash"]
            if not input_row["matches"]:
                status = STALE
                problems.append(_listing_change(files, expected_files))
        else:
            input_row["matches"] = None
    key = info.get("key", {})
    if digest(content["config"]) != content["config_hash"]:
        problems.append("the recorded config does not match the recorded config hash")
    if key.get("config_hash") not in (None, content["config_hash"]):
        problems.append("run_info.key.config_hash differs from content.config_hash")
    if key.get("input_hash") not in (None, recorded_input.get("manifest_hash", recorded_input.get("hash"))):
        problems.append("run_info.key.input_hash differs from the input recorded in content")
    if key_file is not None and key_file.get("key") not in (None, key):
        problems.append(f"{KEY_FILE} holds another key than the manifest's: a rerun of this stage started and "
                        f"has not completed")
    if problems and status == OK:
        status = INCONSISTENT
    if expected_config is not None and digest(expected_config) != content["config_hash"]:
        changes = diff_values(content["config"], expected_config)
        problems.append(f"its committed config differs from the config file's ({'; '.join(changes[:5])}"
                        f"{'; ...' if len(changes) > 5 else ''}): rerun it, `tokenmill run CONFIG --stage {stage}`, "
                        f"and the stages after it (or `tokenmill run CONFIG`)")
        status = CONFIG_CHANGED if status == OK else status
    damaged = damaged_files(fs, stage_dir, key) if key else []
    if damaged:
        problems.append(f"{len(damaged)} committed file(s) missing or changed in size ({', '.join(damaged[:3])}"
                        f"{', ...' if len(damaged) > 3 else ''}): `tokenmill run CONFIG` recomputes them")
        status = FILES_MISSING if status == OK else status
    totals = content["totals"]
    tokens = token_counts(fs, stage_dir, content) if stage == "tokenize" else None
    return {
        "stage": stage,
        "status": status,
        "problems": problems,
        "input": input_row,
        "config_hash": content["config_hash"],
        "content_hash": current.get(stage),
        "docs_in": totals["docs_in"],
        "docs_out": totals["docs_out"],
        "dropped": totals["docs_in"] - totals["docs_out"],
        "drops": totals["drops"],
        "bytes_in": totals["bytes_in"],
        "bytes_out": totals["bytes_out"],
        "tokens": tokens["splits"] if tokens else None,
        "by_source": {name: {"docs_in": s["docs_in"], "docs_out": s["docs_out"]} for name, s in content["by_source"].items()},
        "tokens_by_source": ({src: v["tokens"] for (src, sub), v in tokens["by_source"].items() if sub is None}
                             if tokens else None),
        "seconds": info.get("seconds"),
        "started": info.get("started"),
        "ended": info.get("ended"),
        "tasks_run": info.get("tasks_run"),
        "tasks_skipped": info.get("tasks_skipped"),
    }


def _listing_change(recorded: list[dict[str, Any]], now: list[dict[str, Any]]) -> str:
    a = {(f["source"], f["path"]): f.get("bytes") for f in recorded}
    b = {(f["source"], f["path"]): f.get("bytes") for f in now}
    gone, new = sorted(set(a) - set(b)), sorted(set(b) - set(a))
    resized = sorted(k for k in set(a) & set(b) if a[k] != b[k])
    parts = [f"{len(x)} {what}" + (f" (e.g. {x[0][0]}/{x[0][1]})" if x else "")
             for x, what in ((gone, "gone"), (new, "new"), (resized, "resized")) if x]
    return "the source files differ from those it read: " + ", ".join(parts)


def show_run(run: str, config_path: str | None = None) -> dict[str, Any]:
    """Every stage of a run in pipeline order, its lineage check, and documents per source after each stage.

    With `config_path`, ingest's recorded source files are also checked against what the config's sources list now,
    and every stage's committed config against what the config file gives it (status `config changed`)."""
    fs, root = storage.filesystem_for(str(run))
    root = root.rstrip("/") or "/"
    folders = _stage_folders(fs, root)
    current = {}
    for stage, folder in folders.items():
        if storage.exists(fs, storage.join(folder, MANIFEST)):
            current[stage] = content_hash(read_manifest(fs, folder, required=True)["content"])
    expected_files = None
    expected_configs: dict[str, Any] = {}
    if config_path is not None:
        from tokenmill.pipeline.config import load_config
        from tokenmill.pipeline.config import build_stages

        built = build_stages(load_config(config_path))
        expected_files = built[0].input_listing()
        expected_configs = {s.name: s.identity() for s in built}
    superseded = _superseded(fs, root)
    moved = {stage: entry["time"] for entry in superseded for stage in entry["stages"] if stage not in folders}
    rows = []
    for stage in stage_order(set(folders) | set(moved)):
        if stage not in folders:
            rows.append({"stage": stage, "status": MISSING, "input": {"stage": None},
                         "problems": [f"moved to {SUPERSEDED}/{moved[stage]} when an earlier stage was recomputed, "
                                      f"and not run since"]})
            continue
        rows.append(check_stage(fs, root, stage, folders[stage], current, expected_files if stage == "ingest" else None,
                                expected_configs.get(stage)))
    # A stage downstream of a broken link inherits it: its own input matches, but that input is built on stale data.
    broken = {r["stage"] for r in rows if r["status"] in (STALE, INPUT_MISSING, INCOMPLETE)}
    for row in rows:
        upstream = row.get("input", {}).get("stage")
        if row["status"] == OK and upstream in broken:
            row["status"] = STALE_UPSTREAM
            row["problems"].append(f"its input {upstream!r} is {next(r['status'] for r in rows if r['stage'] == upstream)}")
        if row["status"] != OK:
            broken.add(row["stage"])
    lineage: dict[str, dict[str, int]] = {}
    for row in rows:
        for source, counts in row.get("by_source", {}).items():
            cell = lineage.setdefault(source, {})
            if row["stage"] == "ingest" or not cell:
                cell.setdefault("read", counts["docs_in"])
            cell[row["stage"]] = counts["docs_out"]
        for source, tokens in (row.get("tokens_by_source") or {}).items():
            lineage.setdefault(source, {})["tokens"] = tokens
    return {
        "run": str(run),
        "consistent": all(r["status"] == OK for r in rows),
        "stages": rows,
        "by_source": dict(sorted(lineage.items())),
        "superseded": superseded,
    }
