"""Superseded generations: what `_superseded/` holds, restoring a stage output whose key comes back, and gc.

When a stage's key changes, `resume.supersede` moves its folder and every later stage's to
`<output>/_superseded/<generation>/`, a generation being one UTC time stamp (`20260101T000000000000Z`), so names
sort by time. This module:

- `find_restorable` / `restore`: when the key a stage needs now is the key of a complete superseded output of it
  (its manifest there, every committed file with its recorded size), the runner moves that folder back instead of
  recomputing. Output is a deterministic function of the key, so the bytes are those a recompute would write.
- `disk_usage`: bytes and files of each live stage and of each stage of each superseded generation.
- `collect`: delete all but the newest `keep` generations, under the run folder's lock. Only a generation whose
  every entry is a stage folder tokenmill marked is deleted; anything else in `_superseded/` is left and reported.
  A generation is first renamed to `<generation>.deleting` (one atomic rename on local disk), then deleted, so a
  gc killed midway leaves a name no restore will use, and the next gc finishes it.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from typing import Any

import pyarrow.fs as pafs

from tokenmill.errors import ManifestError, TokenmillError
from tokenmill.pipeline import runfolder, storage
from tokenmill.pipeline.commit import damaged_files
from tokenmill.pipeline.manifest import MANIFEST, read_manifest
from tokenmill.pipeline.runfolder import KEY_FILE, SUPERSEDED

log = logging.getLogger(__name__)

GENERATION = re.compile(r"^\d{8}T\d{12}Z$")
"""A generation's name, as `resume.supersede` writes it."""
DELETING = ".deleting"
"""Suffix of a generation that a gc has started to delete."""


class GcError(TokenmillError):
    """`tokenmill runs gc` / `du` cannot work on this folder (not a tokenmill run, a bad `--keep`)."""


@dataclass
class StageUsage:
    stage: str
    bytes: int
    files: int
    ours: bool
    """The folder carries tokenmill's marker (or `_work/key.json`)."""
    config_hash: str | None = None
    complete: bool = False
    """It has a manifest: a finished stage output (only such an output is restored)."""


@dataclass
class GenerationUsage:
    name: str
    """`<stage>` folders' generation, `live` for the current output."""
    stages: list[StageUsage] = field(default_factory=list)
    other: list[str] = field(default_factory=list)
    """Entries that are not marked stage folders: never deleted by gc."""
    other_bytes: int = 0
    deleting: bool = False

    @property
    def bytes(self) -> int:
        return sum(s.bytes for s in self.stages) + self.other_bytes

    @property
    def collectable(self) -> bool:
        return not self.other and all(s.ours for s in self.stages)


@dataclass
class Usage:
    root: str
    live: GenerationUsage
    superseded: list[GenerationUsage]
    """Oldest first."""
    other_bytes: int
    """Everything else at the root: `_logs`, `_lock`, markers, folders tokenmill did not make."""

    @property
    def total(self) -> int:
        return self.live.bytes + sum(g.bytes for g in self.superseded) + self.other_bytes


def _size(fs: pafs.FileSystem, path: str) -> tuple[int, int]:
    """(bytes, files) under a folder, or of one file; what a symlink below it leads to is not counted."""
    info = fs.get_file_info(path)
    if info.type == pafs.FileType.File:
        return info.size or 0, 1
    files = [i for i in storage.list_tree(fs, path, recursive=True) if i.type == pafs.FileType.File]
    return sum(i.size or 0 for i in files), len(files)


def _entries(fs: pafs.FileSystem, folder: str) -> list[pafs.FileInfo]:
    return sorted(storage.list_tree(fs, folder), key=lambda i: i.base_name)


def _stage_usage(fs: pafs.FileSystem, folder: str, name: str) -> StageUsage:
    size, files = _size(fs, folder)
    key = storage.read_json(fs, storage.join(folder, KEY_FILE))
    config_hash = key.get("key", {}).get("config_hash") if isinstance(key, dict) else None
    return StageUsage(name, size, files, runfolder.stage_is_ours(fs, folder), config_hash,
                      storage.exists(fs, storage.join(folder, MANIFEST)))


def _generation_usage(fs: pafs.FileSystem, folder: str, name: str, deleting: bool = False) -> GenerationUsage:
    gen = GenerationUsage(name, deleting=deleting)
    for entry in _entries(fs, folder):
        if entry.type == pafs.FileType.Directory and runfolder.stage_is_ours(fs, entry.path):
            gen.stages.append(_stage_usage(fs, entry.path, entry.base_name))
        else:
            gen.other.append(entry.base_name)
            gen.other_bytes += 0 if runfolder.is_link(fs, entry.path) else _size(fs, entry.path)[0]
    return gen


def require_run_folder(fs: pafs.FileSystem, root: str) -> None:
    """Raise GcError unless `root` is a folder tokenmill made (its marker, or a marked stage folder)."""
    info = fs.get_file_info(root)
    if info.type != pafs.FileType.Directory:
        raise GcError(f"{root} is not a folder: give a run folder (the config's `output`)")
    if storage.exists(fs, storage.join(root, runfolder.ROOT_MARKER)):
        return
    if any(e.type == pafs.FileType.Directory and runfolder.stage_is_ours(fs, e.path) for e in _entries(fs, root)):
        return
    raise GcError(f"{root} is not a tokenmill run folder (no {runfolder.ROOT_MARKER} and no stage folder tokenmill "
                  f"made): give the config's `output`")


def disk_usage(fs: pafs.FileSystem, root: str) -> Usage:
    """Sizes of the live stage folders and of each superseded generation, stage by stage; reads only."""
    require_run_folder(fs, root)
    live = GenerationUsage("live")
    other = 0
    for entry in _entries(fs, root):
        if entry.base_name == SUPERSEDED:
            continue
        if entry.type == pafs.FileType.Directory and runfolder.stage_is_ours(fs, entry.path):
            live.stages.append(_stage_usage(fs, entry.path, entry.base_name))
        elif not runfolder.is_link(fs, entry.path):  # a link's target is not this run's disk use
            other += _size(fs, entry.path)[0]
    superseded = []
    base = storage.join(root, SUPERSEDED)
    for entry in _entries(fs, base):
        name = entry.base_name
        if runfolder.is_link(fs, entry.path):  # leads elsewhere: neither counted through nor deleted by gc
            superseded.append(GenerationUsage(name, other=[name]))
        elif entry.type == pafs.FileType.Directory and GENERATION.match(name):
            superseded.append(_generation_usage(fs, entry.path, name))
        elif (entry.type == pafs.FileType.Directory and name.endswith(DELETING)
              and GENERATION.match(name.removesuffix(DELETING))):
            superseded.append(_generation_usage(fs, entry.path, name, deleting=True))
        else:
            gen = GenerationUsage(name, other=[name], other_bytes=_size(fs, entry.path)[0])
            superseded.append(gen)
    return Usage(root, live, superseded, other)


# ---------------------------------------------------------------- restore


def generations(fs: pafs.FileSystem, root: str) -> list[str]:
    """Names of the superseded generations, newest first (a generation being deleted is not one)."""
    names = [e.base_name for e in _entries(fs, storage.join(root, SUPERSEDED))
             if e.type == pafs.FileType.Directory and GENERATION.match(e.base_name) and not runfolder.is_link(fs, e.path)]
    return sorted(names, reverse=True)


def find_restorable(fs: pafs.FileSystem, root: str, stage: str, key: dict[str, Any]) -> str | None:
    """The newest superseded output of `stage` made under exactly `key`, complete and intact; its folder or None.

    Complete: its manifest is there and was written under this key. Intact: every file its completion records
    name has its recorded size (what "up to date" means for a live stage).
    """
    for name in generations(fs, root):
        folder = storage.join(root, SUPERSEDED, name, stage)
        if not runfolder.stage_is_ours(fs, folder):
            continue
        link = runfolder.link_below(fs, folder)
        if link is not None:  # its key, manifest and files would be read, and then written, through the link
            raise runfolder.RunFolderError(runfolder.link_message(link))
        previous = storage.read_json(fs, storage.join(folder, KEY_FILE))
        if not isinstance(previous, dict) or previous.get("key") != key:
            continue
        try:
            manifest = read_manifest(fs, folder)
        except ManifestError as err:  # an edited or foreign file: nothing read through it, the stage computed again
            log.warning("%s: same key, but not restored: %s", folder, err)
            continue
        if manifest is None or (manifest.get("run_info") or {}).get("key") != key:
            log.info("%s: same key but no complete manifest; not restored", folder)
            continue
        damaged = damaged_files(fs, folder, key)
        if damaged:
            log.info("%s: same key but %d committed file(s) missing or resized; not restored", folder, len(damaged))
            continue
        return folder
    return None


def restore(fs: pafs.FileSystem, root: str, stage: str, source: str) -> None:
    """Move a superseded stage folder back to `<root>/<stage>` (one rename); drop its generation when empty."""
    target = storage.join(root, stage)
    if storage.exists(fs, target):
        raise TokenmillError(f"cannot restore {source}: {target} exists")  # the runner supersedes first
    storage.move_tree(fs, source, target)
    generation = source.rsplit("/", 1)[0]
    if not _entries(fs, generation):
        fs.delete_dir(generation)
    log.info("%s: restored from %s", target, source)


# ---------------------------------------------------------------- gc


@dataclass
class GcResult:
    deleted: list[GenerationUsage]
    kept: list[GenerationUsage]
    left: list[GenerationUsage]
    """Entries in `_superseded/` holding something tokenmill did not make: never deleted."""
    dry_run: bool

    @property
    def freed(self) -> int:
        return sum(g.bytes for g in self.deleted)


def collect(fs: pafs.FileSystem, root: str, keep: int, *, dry_run: bool = False) -> GcResult:
    """Delete every superseded generation but the newest `keep`, holding the run folder's lock.

    Raises `runfolder.RunFolderLocked` (naming the holder) while a driver runs on the folder. Never deletes a live
    stage folder, nor an entry of `_superseded/` that holds anything tokenmill did not make.
    """
    if keep < 0:
        raise GcError(f"--keep {keep}: must be 0 or more (the number of newest superseded generations to keep)")
    require_run_folder(fs, root)
    with runfolder.hold(fs, root) as lock:
        usage = disk_usage(fs, root)
        ours = [g for g in usage.superseded if g.collectable]
        left = [g for g in usage.superseded if not g.collectable]
        unfinished = [g for g in ours if g.deleting]
        complete = sorted((g for g in ours if not g.deleting), key=lambda g: g.name)
        kept = complete[len(complete) - keep:] if keep else []
        doomed = unfinished + [g for g in complete if g not in kept]
        for g in left:
            log.warning("%s: holds %s, which tokenmill did not make; left where it is", storage.join(
                root, SUPERSEDED, g.name), ", ".join(g.other) or "no stage folder")
        if not dry_run:
            for g in doomed:
                lock.check()
                folder = storage.join(root, SUPERSEDED, g.name)
                if not g.deleting:
                    moved = folder + DELETING
                    storage.move_tree(fs, folder, moved)  # from here no restore can pick it: its name is no generation's
                    folder = moved
                fs.delete_dir(folder)
                log.info("%s: deleted (%d bytes)", folder, g.bytes)
        return GcResult(doomed, kept, left, dry_run)
