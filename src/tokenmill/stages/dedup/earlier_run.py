"""An `against` run of incremental dedup, checked before use: a finished dedup stage, its committed files intact,
its index made by this code with the same signature settings (`tokenmill.dedup.incremental` holds the pure parts).

A run folder handed over may come from anyone, and everything is checked before any work: not a symlink, none
below its dedup folder; its manifest made under its key record (the config it states is the one the key was made
from; its shard list is what the committed `filter` tasks wrote); every committed file at its committed size;
every index partition committed by the `index` phase at its size, stating this code's scheme and these settings,
naming only shards the manifest lists. Nothing recorded in it becomes a path unless it names a shard its own
manifest lists inside `shards/`.
"""

from __future__ import annotations

import json
import os
from typing import Any, Callable, Mapping

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from tokenmill.dedup.incremental import (INDEX_DIR, INDEX_META, SCHEME, EarlierRun, IncrementalError, index_file,
                                         setting_differences, settings_of)
from tokenmill.errors import TokenmillError
from tokenmill.pipeline import runfolder, storage
from tokenmill.pipeline.commit import damaged_files, key_records
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
    if isinstance(fs, pafs.LocalFileSystem) and os.path.islink(root.rstrip("/")):
        # Its files are read (and its index and shard paths trusted) as a run's own: not through a link, whose target
        # may change or be another run's folder, unlocked.
        raise IncrementalError(f"{where}: {runfolder.link_message(root.rstrip('/'))}")
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
    if content_hash(identity) != key.get("config_hash"):
        raise IncrementalError(f"{where}: its dedup manifest's config is not the one its key record was made from "
                               f"(the manifest was edited after the stage finished); rerun that run")
    if check_files:
        damaged = damaged_files(fs, stage_dir, key)
        if damaged:
            raise IncrementalError(f"{where}: committed files are missing or changed ({', '.join(damaged[:3])}); "
                                   f"rerun that run to restore them")
    shards = _listed_shards(fs, stage_dir, content, key, where)
    committed = _committed_index(fs, stage_dir, key)
    partitions = _index_partitions(committed, (identity.get("config") or {}).get("partitions"), where)
    meta = {}
    for p in range(partitions):
        path = storage.join(stage_dir, index_file(p))  # committed: `_index_partitions` checked p0000..p{P-1}
        size = storage.file_size(fs, path)
        if size != committed[index_file(p)]:
            raise IncrementalError(f"{where}: {index_file(p)} is {size} bytes, committed {committed[index_file(p)]} "
                                   f"(cut short or changed after the run); rerun that run to restore it")
        meta = _index_meta(fs, path, settings, f"{where}: {index_file(p)}")
        unknown = _index_shards(fs, path, f"{where}: {index_file(p)}") - set(shards)
        if unknown:
            raise IncrementalError(f"{where}: {index_file(p)} names shard(s) its manifest does not list "
                                   f"({sorted(unknown)[:3]}); refusing to read them")
    return EarlierRun(label, location, stage_dir, partitions, shards, content_hash(content),
                      dict((meta or {}).get("languages") or {}))


def _listed_shards(fs, stage_dir: str, content: Mapping[str, Any], key: Mapping[str, Any], where: str
                   ) -> dict[str, str]:
    """{output shard name: path} of the manifest's shards, each a path inside `shards/`, and the list exactly what
    the `filter` phase's commit records state (as the runner built it: by task key), so that a manifest edited after
    the run cannot name other files."""
    shards: dict[str, str] = {}
    for entry in content.get("shards") or []:
        path = entry.get("path") if isinstance(entry, dict) else None
        why = unsafe_path(path, "shards")
        if why is not None:
            raise IncrementalError(f"{where}: its manifest names shard {path!r:.200}, {why}")
        shards[shard_name(path)] = path
    entries = [e for record in key_records(fs, stage_dir, "filter", key)
               for e in (record.get("result") or {}).get("shards") or []]
    if entries != list(content.get("shards") or []):
        raise IncrementalError(f"{where}: its dedup manifest's shard list is not what its committed tasks wrote "
                               f"(the manifest was edited after the stage finished, or records were lost); rerun "
                               f"that run")
    return shards


def _index_partitions(committed: Mapping[str, int], setting: Any, where: str) -> int:
    """The earlier run's partition count: its committed index files, which must be exactly `index/p0000` to
    `index/p{P-1}` (with `partitions: auto` the count was sized from that run's input; only its committed records
    say what it was), and P the config's count where it names one."""
    found = sorted(path for path in committed if path.startswith(INDEX_DIR + "/"))
    count = len(found)
    if not count:
        raise IncrementalError(f"{where}: it has no committed dedup index ({index_file(0)}; made by tokenmill "
                               f"before incremental dedup, or lost): rerun it with this version")
    if found != [index_file(p) for p in range(count)] or (isinstance(setting, int) and setting != count):
        raise IncrementalError(f"{where}: its committed dedup index files ({', '.join(found[:3])}"
                               f"{', ...' if count > 3 else ''}; {count} of them) are not one per partition"
                               f"{f' of its {setting}' if isinstance(setting, int) else ''}: rerun that run")
    return count


def _committed_index(fs, stage_dir: str, key: Mapping[str, Any]) -> dict[str, int]:
    """{index file (relative to the stage folder): committed bytes} from the `index` phase's records of this key
    (any task grouping: a record names the files it committed)."""
    found: dict[str, int] = {}
    for record in key_records(fs, stage_dir, "index", key):
        for f in record.get("files") or []:
            if isinstance(f, dict) and isinstance(f.get("path"), str) and isinstance(f.get("bytes"), int):
                found[f["path"]] = f["bytes"]
    return found


def _index_shards(fs, path: str, where: str) -> set[str]:
    """The output shard names an index file's rows name (its `shard` column, dictionary-encoded: only the codes are
    decoded, a few bytes per row)."""
    try:
        column = pq.read_table(path, columns=["shard"], filesystem=fs, read_dictionary=["shard"]).column("shard")
    except (OSError, ValueError, KeyError, pa.ArrowException) as err:
        raise IncrementalError(f"{where} cannot be read as an index ({err})") from err
    names: set[str] = set()
    for chunk in column.chunks:
        if pa.types.is_dictionary(chunk.type):
            used = pc.unique(chunk.indices.drop_null())
            names.update(str(v) for v in chunk.dictionary.take(used).to_pylist())
        else:
            names.update(str(v) for v in pc.unique(chunk.drop_null()).to_pylist())
    return names


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
