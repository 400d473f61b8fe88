"""Task commits: a task's files, then a completion record naming them; the record is the commit.

A record names every file of its task with size and sha256, so a rerun can check that what it skips is really there;
readers go by records (the runner skips a task only with one, takes shard lists from them, and deletes the files in
`shards/` and `dropped/` that no record names).

- Local disk: each file under a unique attempt folder (`_work/tmp/<phase>/<task>/<attempt>/`), renamed into place at
  commit (atomic), then the record (a temporary name renamed). A kill leaves either nothing under the final names
  or, midway through the renames, files the next attempt writes again.
- Object store (S3, GCS): each file written once, under its final name, one PUT each; the record one more PUT, the
  one atomic step. No temporary names, no copies, no deletes, no folder markers: on S3 a rename is a copy and a
  delete (plus pyarrow's parent markers), about 5 requests per file for nothing a reader needs. An object under its
  final name without a record is invisible to everything that goes by records, and the next attempt of its task
  writes it again: tasks are deterministic (same name, same bytes), and a single-object PUT is atomic, so a reader
  of a phase's folder never sees half an object (S3 and GCS are strongly consistent for reads and listings after a
  PUT). This is how datatrove writes through fsspec to a bucket (each output file once, under its name, then the
  rank's empty `completions/<rank>` file, `executor/base.py`) and how MosaicML Streaming uploads its shards (each
  shard once, then `index.json`, which readers trust).

Which tasks of a phase are committed comes from listings (`committed_records`: the records folder once, the stage
folder's sizes once), not a lookup per task and file.
"""

from __future__ import annotations

import errno
import hashlib
import os
import uuid
from dataclasses import dataclass, field
from typing import Any

import pyarrow.fs as pafs

from tokenmill.errors import ManifestError
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

    @property
    def direct(self) -> bool:
        """Files go straight to their final names (an object store), not under this attempt's folder first."""
        return storage.is_object_store(self.fs)

    def _path(self, relpath: str) -> str:
        """Where this attempt writes `relpath`: its final name on an object store, under the attempt folder locally."""
        return storage.join(self.stage_dir if self.direct else self.tmp_dir, relpath)

    def write(self, relpath: str, data: bytes) -> None:
        """Write one output file (path relative to the stage folder): under this attempt's name on local disk, under
        its final name (one PUT) on an object store."""
        path = self._path(relpath)
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
        On an object store the copy goes to the final name (one server-side copy, no bytes through the worker).
        """
        path = self._path(relpath)
        try:
            faults.before_write(self.stage_dir, self.phase, self.task_key, relpath, path)  # tests only; inert when off
            if not self.direct:
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
            if self.direct:
                continue  # already under its final name
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
        if not self.direct:
            # Leftovers of this task's killed attempts go with the commit (an object store's attempts write none).
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


def committed_record(fs: pafs.FileSystem, stage_dir: str, phase: str, task_key: str, stage_key: dict,
                     sizes: dict[str, int] | None = None) -> dict | None:
    """The task's completion record if it is committed under this key and its files are all there (their sizes from
    `sizes`, a listing of the stage folder, when given; else one lookup per file). A record naming a file outside
    the stage folder (edited: records come from disk) raises `ManifestError` before any path is built from it."""
    from tokenmill.pipeline.manifest import unsafe_path

    where = record_path(stage_dir, phase, task_key)
    record = storage.read_json(fs, where)
    if not record or record.get("key") != stage_key:
        return None
    for f in record["files"]:
        name = f.get("path") if isinstance(f, dict) else None
        why = unsafe_path(name)
        if why is not None:
            raise ManifestError(f"{where}: file {name!r:.200} is {why}; refusing to read or write outside the run "
                                f"folder (was the record edited? delete it to recompute the task)")
        path = storage.join(stage_dir, f["path"])
        size = storage.file_size(fs, path) if sizes is None else sizes.get(path)
        if size != f["bytes"]:
            return None
    return record


def committed_records(fs: pafs.FileSystem, stage_dir: str, phase: str, task_keys: list[str], stage_key: dict
                      ) -> dict[str, dict]:
    """{task key: record} of the tasks of a phase committed under this key with their files all there.

    Two listings, not a request per task and file: the phase's records folder (a task without a record is not
    read at all: on a fresh phase nothing is), then, only if some record is there, the stage folder's file sizes."""
    present = {path.rsplit("/", 1)[-1] for path in storage.list_files(fs, records_dir(stage_dir, phase), ".json")}
    wanted = [k for k in task_keys if f"{k}.json" in present]
    if not wanted:
        return {}
    sizes = storage.file_sizes(fs, stage_dir)
    found = {k: committed_record(fs, stage_dir, phase, k, stage_key, sizes) for k in wanted}
    return {k: r for k, r in found.items() if r is not None}


def key_records(fs: pafs.FileSystem, stage_dir: str, phase: str, stage_key: dict) -> list[dict]:
    """Every record of a phase made under this key, in task-key order, from one listing of its records folder;
    neither their files nor their paths are checked (`committed_record` and `damaged_files` do that)."""
    records = [storage.read_json(fs, path) for path in storage.list_files(fs, records_dir(stage_dir, phase), ".json")]
    found = [r for r in records if isinstance(r, dict) and r.get("key") == stage_key]
    return sorted(found, key=lambda r: str(r.get("task")))


def damaged_files(fs: pafs.FileSystem, stage_dir: str, stage_key: dict) -> list[str]:
    """Files that committed records of this key name but that are gone or of another size, as `path (why)`.

    "Up to date" means these all exist with their recorded sizes; a task whose file is damaged is run again.
    (Sizes, not sha256: hashing every committed byte on every rerun would cost as much as reading the run.)
    """
    from tokenmill.pipeline.manifest import unsafe_path

    damaged: list[str] = []
    sizes: dict[str, int] | None = None  # the stage folder listed once, when the first record is read
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
                if sizes is None:
                    sizes = storage.file_sizes(fs, stage_dir)
                size = sizes.get(storage.join(stage_dir, f["path"]))
                if size != f["bytes"]:
                    why = "missing" if size is None else f"{size} bytes, committed {f['bytes']}"
                    damaged.append(f"{f['path']} ({why})")
    return sorted(damaged)
