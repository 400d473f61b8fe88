"""Task commits: data under a unique attempt name, moved into place, then a completion record.

The record is the commit. A file in `shards/` without a record is an uncommitted leftover that
the next attempt overwrites; a record names every file of its task with size and sha256, so a
rerun can check that what it skips is really there.
"""

from __future__ import annotations

import errno
import hashlib
import os
import uuid
from dataclasses import dataclass, field
from typing import Any

import pyarrow.fs as pafs

from tokenmill.pipeline import faults, storage


def records_dir(stage_dir: str, phase: str) -> str:
    return storage.join(stage_dir, "_work", "commits", phase)


def record_path(stage_dir: str, phase: str, task_key: str) -> str:
    return storage.join(records_dir(stage_dir, phase), f"{task_key}.json")


def tmp_root(stage_dir: str, phase: str, task_key: str) -> str:
    return storage.join(stage_dir, "_work", "tmp", phase, task_key)


@dataclass
class TaskWriter:
    """Collects a task's files under its attempt folder; `commit` publishes them and writes the record."""

    fs: pafs.FileSystem
    stage_dir: str
    phase: str
    task_key: str
    attempt: str = field(default_factory=lambda: uuid.uuid4().hex)
    written: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def tmp_dir(self) -> str:
        return storage.join(tmp_root(self.stage_dir, self.phase, self.task_key), self.attempt)

    def write(self, relpath: str, data: bytes) -> None:
        """Write one output file (path relative to the stage folder) under this attempt's name."""
        path = storage.join(self.tmp_dir, relpath)
        try:
            faults.before_write(self.stage_dir, self.phase, self.task_key, relpath, path)  # tests only; inert when off
            storage.write_bytes(self.fs, path, data)
        except OSError as err:
            # Name the file and the task: pyarrow's message for a full disk names neither.
            raise _write_error(err, f"cannot write {relpath} of task {self.phase}/{self.task_key} (at {path})") from err
        self.written[relpath] = {"path": relpath, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
        if len(self.written) == 1:
            faults.point("written", self.stage_dir, self.phase, self.task_key)

    def link(self, relpath: str, source: str) -> bool:
        """Publish an existing file as `relpath` (an input shard whose table the task would write unchanged): a
        hard link on local disk, a server-side copy elsewhere; False when it cannot (then write the bytes).

        The link goes under this attempt's name and moves into place at commit, as a written file does; committed
        files are never rewritten in place (writes go to new names, then move), so the two names keep their bytes.
        """
        path = storage.join(self.tmp_dir, relpath)
        try:
            faults.before_write(self.stage_dir, self.phase, self.task_key, relpath, path)  # tests only; inert when off
            self.fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
            try:
                if isinstance(self.fs, pafs.LocalFileSystem):
                    os.link(source, path)
                else:
                    self.fs.copy_file(source, path)
            except OSError as err:
                if err.errno in _NO_LINK:
                    return False
                raise
            digest, size = _file_sha256(self.fs, path)
        except OSError as err:
            raise _write_error(err, f"cannot write {relpath} of task {self.phase}/{self.task_key} (as a link to "
                                    f"{source}, at {path})") from err
        self.written[relpath] = {"path": relpath, "bytes": size, "sha256": digest}
        if len(self.written) == 1:
            faults.point("written", self.stage_dir, self.phase, self.task_key)
        return True

    def commit(self, stage_key: dict[str, Any], result: Any) -> dict[str, Any]:
        for i, relpath in enumerate(sorted(self.written)):
            if i == 1:
                faults.point("mid_commit", self.stage_dir, self.phase, self.task_key)
            final = storage.join(self.stage_dir, relpath)
            self.fs.create_dir(final.rsplit("/", 1)[0], recursive=True)
            self.fs.move(storage.join(self.tmp_dir, relpath), final)
        if len(self.written) <= 1:
            faults.point("mid_commit", self.stage_dir, self.phase, self.task_key)
        faults.point("before_record", self.stage_dir, self.phase, self.task_key)
        record = {
            "task": self.task_key,
            "phase": self.phase,
            "key": stage_key,
            "files": [self.written[p] for p in sorted(self.written)],
            "result": result,
        }
        path = record_path(self.stage_dir, self.phase, self.task_key)
        storage.write_json_atomic(self.fs, path, record, self.attempt)
        faults.point("after_record", self.stage_dir, self.phase, self.task_key)
        # Leftovers of this task's killed attempts go with the commit.
        storage.remove_tree(self.fs, tmp_root(self.stage_dir, self.phase, self.task_key))
        return record


_NO_LINK = {errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP, errno.EOPNOTSUPP}
"""Why a hard link can fail where a write would not: another device, a filesystem without links, too many links."""


def _file_sha256(fs: pafs.FileSystem, path: str) -> tuple[str, int]:
    """(sha256, size) of a file, read in 8 MiB pieces: what the record states of a linked file."""
    h, size = hashlib.sha256(), 0
    with fs.open_input_stream(path) as f:
        while piece := f.read(8 << 20):
            h.update(piece)
            size += len(piece)
    return h.hexdigest(), size


def _write_error(err: OSError, what: str) -> OSError:
    """The same kind of OSError (ENOSPC, EACCES gives PermissionError), its message naming what failed."""
    reason = err.strerror or str(err)
    return OSError(err.errno, f"{what}: {reason}") if err.errno is not None else OSError(f"{what}: {reason}")


def committed_record(fs: pafs.FileSystem, stage_dir: str, phase: str, task_key: str, stage_key: dict) -> dict | None:
    """The task's completion record if it is committed under this key and its files are all there."""
    record = storage.read_json(fs, record_path(stage_dir, phase, task_key))
    if not record or record.get("key") != stage_key:
        return None
    for f in record["files"]:
        if storage.file_size(fs, storage.join(stage_dir, f["path"])) != f["bytes"]:
            return None
    return record


def damaged_files(fs: pafs.FileSystem, stage_dir: str, stage_key: dict) -> list[str]:
    """Files that committed records of this key name but that are gone or of another size, as `path (why)`.

    "Up to date" means these all exist with their recorded sizes; a task whose file is damaged is run again.
    (Sizes, not sha256: hashing every committed byte on every rerun would cost as much as reading the run.)
    """
    from tokenmill.pipeline.manifest import unsafe_path

    damaged = []
    for phase_dir in storage.list_tree(fs, storage.join(stage_dir, "_work", "commits")):
        if phase_dir.type != pafs.FileType.Directory:
            continue
        for path in storage.list_files(fs, phase_dir.path, ".json"):
            record = storage.read_json(fs, path)
            if not isinstance(record, dict) or record.get("key") != stage_key:
                continue
            for f in record.get("files") or []:
                if unsafe_path(f.get("path")) is not None:
                    damaged.append(f"{f.get('path')!r:.200} ({unsafe_path(f.get('path'))}; the record was edited)")
                    continue
                size = storage.file_size(fs, storage.join(stage_dir, f["path"]))
                if size != f["bytes"]:
                    why = "missing" if size is None else f"{size} bytes, committed {f['bytes']}"
                    damaged.append(f"{f['path']} ({why})")
    return sorted(damaged)
