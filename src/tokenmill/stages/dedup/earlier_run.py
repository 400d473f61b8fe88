"""An `against` run of incremental dedup, checked before use: a finished dedup stage, its committed files intact,
its index made by this code with the same signature settings (`tokenmill.dedup.incremental` holds the pure parts).

A run folder handed over may come from anyone: nothing recorded in it becomes a path unless it names a shard its
own manifest lists inside `shards/`, and its manifest must have been made under its key record.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Mapping

import pyarrow.parquet as pq

from tokenmill.dedup.incremental import (INDEX_META, SCHEME, EarlierRun, IncrementalError, index_file,
                                         setting_differences, settings_of)
from tokenmill.errors import TokenmillError
from tokenmill.pipeline import runfolder, storage
from tokenmill.pipeline.commit import committed_record, damaged_files
from tokenmill.pipeline.manifest import content_hash, read_manifest, unsafe_path
from tokenmill.pipeline.map_phase import shard_name

__all__ = ["open_run"]


def open_run(label: str, location: str, settings: Mapping[str, Any], *, filesystem_for: Callable,
             check_files: bool = True) -> EarlierRun:
    """Check that `location` holds a finished dedup stage usable as an earlier run, and describe it; raises
    `IncrementalError` naming the run and what is wrong (missing, unfinished, damaged, other settings, no index)."""
    where = f"stages.dedup.against: {label!r}"
    fs, root = filesystem_for(location)
    stage_dir = storage.join(root, "dedup")
    if not storage.exists(fs, root):
        raise IncrementalError(f"{where}: no such run folder ({location})")
    problem = runfolder.stage_problem(fs, stage_dir)
    if problem:
        raise IncrementalError(f"{where}: {problem}")
    try:
        manifest = read_manifest(fs, stage_dir)
    except (TokenmillError, OSError, ValueError) as err:  # not a manifest, or one naming paths outside the stage
        raise IncrementalError(f"{where}: its dedup manifest cannot be used: {err}") from err
    if manifest is None:
        raise IncrementalError(f"{where}: {location} holds no finished dedup stage (no dedup/manifest.json); run it "
                               f"to the end first")
    content = manifest.get("content") or {}
    identity = content.get("config") or {}
    differ = setting_differences(settings_of(identity), settings)
    if differ:
        raise IncrementalError(f"{where}: made with other dedup settings, so its band keys and shingles do not "
                               f"compare with this run's ({'; '.join(differ)}); set them as the earlier run did")
    key_record = storage.read_json(fs, storage.join(stage_dir, runfolder.KEY_FILE))
    key = key_record.get("key") if isinstance(key_record, dict) else None
    if key is None or (manifest.get("run_info") or {}).get("key") != key:
        raise IncrementalError(f"{where}: its dedup manifest was not made under its key record (_work/key.json): "
                               f"the stage was changed after it finished; rerun it")
    partitions = int((identity.get("config") or {}).get("partitions") or 0)
    if check_files:
        damaged = damaged_files(fs, stage_dir, key)
        if damaged:
            raise IncrementalError(f"{where}: committed files are missing or changed ({', '.join(damaged[:3])}); "
                                   f"rerun that run to restore them")
    meta = {}
    for p in range(partitions):
        if committed_record(fs, stage_dir, "index", f"p{p:04d}", key) is None:
            raise IncrementalError(f"{where}: it has no committed dedup index ({index_file(p)}; made by tokenmill "
                                   f"before incremental dedup, or lost): rerun it with this version")
        meta = _index_meta(fs, storage.join(stage_dir, index_file(p)), settings, f"{where}: {index_file(p)}")
    shards = {}
    for entry in content.get("shards") or []:
        path = entry.get("path") if isinstance(entry, dict) else None
        why = unsafe_path(path, "shards")
        if why is not None:
            raise IncrementalError(f"{where}: its manifest names shard {path!r:.200}, {why}")
        shards[shard_name(path)] = path
    return EarlierRun(label, location, stage_dir, partitions, shards, content_hash(content),
                      dict((meta or {}).get("languages") or {}))


def _index_meta(fs, path: str, settings: Mapping[str, Any], where: str) -> dict[str, Any]:
    """What an earlier run's index file states (its Parquet metadata), checked against this code and these settings."""
    stated = pq.read_schema(path, filesystem=fs).metadata or {}
    try:
        meta = json.loads(stated.get(INDEX_META, b"null"))
    except ValueError:
        meta = None
    if not isinstance(meta, dict) or {k: meta.get(k) for k in SCHEME} != SCHEME:
        found = {k: (meta or {}).get(k) for k in SCHEME} if isinstance(meta, dict) else None
        raise IncrementalError(f"{where} was made with another text normalisation or hashing ({found}; this "
                               f"version {SCHEME}); rerun that run with this version")
    differ = setting_differences(meta.get("settings") or {}, settings)
    if differ:
        raise IncrementalError(f"{where} states other settings ({'; '.join(differ)})")
    return meta
