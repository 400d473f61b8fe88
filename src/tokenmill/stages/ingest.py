"""Ingest, the implicit first stage: read every source file into Parquet shards of documents."""

from __future__ import annotations

import contextlib
import gc
import hashlib
import os
import re
import threading
from dataclasses import dataclass
from typing import Any, Iterator, Optional

import pyarrow as pa
from pydantic import Field

from tokenmill.errors import ConfigError
from tokenmill.config_base import StageConfig
from tokenmill.pipeline.contract import Phase, PlanContext, RunContext, ShardsResult, SourceStage, Task, TaskContext
from tokenmill.documents import BASE_SCHEMA, canonical_json
from tokenmill.pipeline.map_phase import split_and_write
from tokenmill.readers.base import check_unchanged, file_stamp
from tokenmill.sources import uris
from tokenmill.sources.formats import READERS, reader_drop_reasons
from tokenmill.sources.patterns import source_files
from tokenmill.sources.reader import Record

MAX_ERRORS_LISTED = 20
"""Bad records named per shard in the manifest (all are counted, and all are in `dropped/`)."""
PACK_BYTES = 64 * 2**20
"""Input bytes one task reads from a source's small files when `ingest.pack_bytes` is unset."""
PACK_MIN_FILES = 64
"""A source packs its small files only when it has at least this many (smaller than the pack budget): below it the
per-task cost is a few seconds at most, and its files keep a task, task key and shard names each, as before packing."""


class IngestConfig(StageConfig):
    """Options of the implicit first stage that reads the sources into Parquet shards."""

    docs_per_shard: int = Field(default=10_000, ge=1)
    """Records per ingest shard; a file with more records is split into parts."""
    max_shard_bytes: int = Field(default=128 * 2**20, ge=1)
    """Text bytes (UTF-8) per ingest shard, at most: a part ends early once its records reach this. Every later
    stage reads one shard per task, so this bounds a worker's memory whatever the document sizes (20,000 books of
    12 KB would otherwise make one 247 MB shard). A single larger record still makes a shard of its own."""
    pack_bytes: Optional[int] = Field(default=None, ge=1)
    """Input bytes (file sizes on disk) one ingest task reads when a source has many small files: consecutive files
    of the source, in listing order, share a task and its shards until their sizes reach this, so 2,000 files of
    1 KB make one shard, not 2,000. A file this size or larger is read by a task of its own, as is every file of a
    source with fewer than 64 files smaller than this (`ingest.PACK_MIN_FILES`). Unset: 64 MiB, and left out of the
    stage's identity, so runs that pack nothing keep their keys."""

    later_fields = ("pack_bytes",)


@dataclass(frozen=True)
class SourceFile:
    """One input file: its source, absolute path, path relative to the source root, size and mtime."""

    source: str
    path: str
    relpath: str
    size: int
    mtime_ns: int

    @property
    def task_key(self) -> str:
        """A stable, readable, file-name-safe name: `source.relpath-slug.hash`."""
        slug = re.sub(r"[^A-Za-z0-9._-]+", "_", self.relpath)[-60:].strip("._") or "file"
        digest = hashlib.sha256(self.relpath.encode("utf-8")).hexdigest()[:8]
        return f"{self.source}.{slug}.{digest}"


def shard_name(task_key: str, part: int) -> str:
    """The name of a read task's `part`-th shard (`books_en.books-00000.parquet.7e11a5ff.p00000`): the name every
    later stage keeps for it (`map_phase.shard_path`)."""
    return f"{task_key}.p{part:05d}"


def list_source_files(config) -> list[SourceFile]:
    """Every input file of every source, in config order then path order. An object (a URI) is listed by its URI,
    its key below the source's root, and the size and mtime its store's listing gives (`uris.list_objects`).

    The files are those validation listed and checked (`RunConfig.validated_listing`): each pattern is listed once
    per run; a config that validation did not pass is listed here."""
    validated = config.validated_listing()
    out = []
    for source in config.sources:
        # One listing of each object-store pattern gives both its objects and their sizes and times (a request per
        # thousand objects, no HEAD per object).
        listed = {p: validated[p] if p in validated else uris.list_objects(p) for p in source.paths if uris.is_remote(p)}
        stamps = {uri: stamp for objects in listed.values() for uri, stamp in objects.items()}
        root, files = source_files(config, source, {**validated, **listed})
        for f in files:
            if isinstance(f, str):  # an object in a store
                if not isinstance(root, str):
                    raise ConfigError(f"sources: {f} is an object but {source.name!r} has the local root {root}; "
                                      f"set its root to a folder URI above it")
                size, mtime_ns = stamps[f]
                out.append(SourceFile(source.name, f, uris.relative_to(f, root), size, mtime_ns))
                continue
            if isinstance(root, str):
                raise ConfigError(f"sources: {f} is a local file but {source.name!r} has the root {root}; set its "
                                  f"root to a local folder above it, or make it two sources")
            st = f.stat()
            out.append(SourceFile(source.name, str(f), os.path.relpath(f, root).replace(os.sep, "/"), st.st_size, st.st_mtime_ns))
    return out


def pack_files(files: list[SourceFile], budget: int) -> list[list[int]]:
    """The files' indexes grouped into ingest tasks: consecutive files of one source until their sizes reach
    `budget`. A file of `budget` bytes or more is alone, and so is every file of a source with fewer than
    PACK_MIN_FILES files under `budget`: such runs keep their tasks of one file. Depends only on the listing."""
    small: dict[str, int] = {}
    for f in files:
        small[f.source] = small.get(f.source, 0) + (f.size < budget)
    groups: list[list[int]] = []
    open_group: list[int] | None = None  # the group the next small file of its source may join
    group_bytes = 0
    for i, f in enumerate(files):
        packs = small[f.source] >= PACK_MIN_FILES and f.size < budget
        if packs and open_group is not None and files[open_group[0]].source == f.source and group_bytes < budget:
            open_group.append(i)
            group_bytes += f.size
        else:
            groups.append([i])
            open_group, group_bytes = (groups[-1], f.size) if packs else (None, 0)
    return groups


def group_key(members: list[SourceFile]) -> str:
    """A task's key: its file's key alone, as before packing; for several files, the first one's key, how many, and
    a hash of every member's relative path (`web.part-0001.jsonl.1a2b3c4d.2000files.5e6f7a8b`)."""
    if len(members) == 1:
        return members[0].task_key
    digest = hashlib.sha256("\n".join(f.relpath for f in members).encode("utf-8")).hexdigest()[:8]
    return f"{members[0].task_key}.{len(members)}files.{digest}"


def records_table(source: str, records: list[tuple[SourceFile, Record]]) -> tuple[pa.Table, pa.Array]:
    """Documents of one part (records with the file each came from) as a table in the base schema, with the
    reader's drop reasons."""
    # One comprehension per column: cheaper than one loop of five appends per record.
    ids = [r.id if r.id is not None else f"{source}/{file.relpath}/{r.index}" for file, r in records]
    texts = [r.text for _, r in records]
    subsets = [r.subset for _, r in records]
    metas = [canonical_json(_meta(r)) for _, r in records]
    reasons = [r.drop for _, r in records]
    table = pa.table(
        [ids, texts, [source] * len(ids), subsets, metas],
        schema=BASE_SCHEMA,
    )
    return table, pa.array(reasons, pa.string())


def _meta(r: Record) -> Any:
    """What a record's `meta` column holds: the reader's meta, or for a drop the error wrapped around it."""
    # A dict is encoded as it is (canonical_json only reads it); anything else is made a dict first, as always.
    meta = r.meta if type(r.meta) is dict else dict(r.meta or {})
    if r.drop is not None:
        return {"error": r.message, "record_index": r.index, **({"record": meta} if meta else {})}
    return meta


class ReadSources(Phase):
    """One task per input file, or per run of a source's small files (`pack_files`); a compressed stream cannot be
    split, so a large file becomes several parts of one task."""

    name = "read"
    writes_shards = True

    def plan(self, stage: "IngestStage", ctx: PlanContext) -> list[Task]:
        stamps = stage.file_stamps()
        tasks = []
        for group in stage.groups():
            members = [stage.files[i] for i in group]
            tasks.append(Task(key=group_key(members), inputs=tuple(f.path for f in members),
                              params={"files": members, "stamps": [stamps[i] for i in group]}))
        return tasks

    def run(self, stage: "IngestStage", task: Task, ctx: TaskContext) -> ShardsResult:
        files: list[SourceFile] = task.params["files"]
        name = files[0].source
        source = stage.run.sources[name]
        reader = READERS[source.format].read

        def records() -> Iterator[tuple[SourceFile, Record]]:
            for file in files:
                for record in reader(file.path, source, f"{file.source}:{file.relpath}"):
                    yield file, record

        entries = []
        with _fewer_collections():
            for part, pairs in enumerate(_parts(records(), stage.config.docs_per_shard, stage.config.max_shard_bytes,
                                                text=lambda pair: pair[1].text)):
                table, reasons = records_table(name, pairs)
                entry = split_and_write(stage, ctx, shard_name(task.key, part), name, table, reasons)
                read = list(dict.fromkeys(f.relpath for f, _ in pairs)) or [files[0].relpath]  # in listing order
                entry["input"] = read[0] if len(read) == 1 else f"{read[0]} .. {read[-1]} ({len(read)} files)"
                errors = [r.message for _, r in pairs if r.drop is not None]
                entry["errors"] = errors[:MAX_ERRORS_LISTED]
                entries.append(entry)
        # Each file must still be the one the run listed (its size is in the manifest, its stamp in the resume key):
        # appended to or rewritten while it was read, the task fails naming it rather than committing a mix.
        for file, stamp in zip(files, task.params["stamps"], strict=True):
            check_unchanged(file.path, f"{file.source}:{file.relpath}", stamp)
        return ShardsResult(entries)


GC_YOUNG_THRESHOLD = 50_000
"""Allocations between two passes of the cyclic collector over young objects while a read task runs (Python's
default is 700). A part holds up to `docs_per_shard` records of dicts and strings, none of them garbage, and at 700
the collector walked them again and again: 9% of the task's CPU on the scale corpus. Records hold no cycles, so
what waits longer for a pass is little."""
_gc_lock = threading.Lock()
_gc_users = 0
_gc_saved: tuple[int, ...] | None = None


@contextlib.contextmanager
def _fewer_collections() -> Iterator[None]:
    """The collector's young threshold raised to GC_YOUNG_THRESHOLD while inside, restored when the last task in
    this process that raised it is done (tasks may share a process)."""
    global _gc_users, _gc_saved
    with _gc_lock:
        if _gc_users == 0:
            _gc_saved = gc.get_threshold()
            gc.set_threshold(max(_gc_saved[0], GC_YOUNG_THRESHOLD), *_gc_saved[1:])
        _gc_users += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_users -= 1
            if _gc_users == 0 and _gc_saved is not None:
                gc.set_threshold(*_gc_saved)
                _gc_saved = None


def _parts(records: Iterator[Any], size: int, max_bytes: int, text=lambda r: r.text) -> Iterator[list[Any]]:
    """Group records into parts of `size` records or `max_bytes` of text (`text(record)`), whichever comes first;
    an empty task still yields one (empty) part, so it shows in the manifest."""
    part: list[Any] = []
    part_bytes = 0
    emitted = False
    for record in records:
        part.append(record)
        t = text(record)
        # An ASCII string's length is its UTF-8 size, and isascii() reads a flag: no copy of the text to count it.
        part_bytes += (len(t) if t.isascii() else len(t.encode("utf-8"))) if t else 0
        if len(part) == size or part_bytes >= max_bytes:
            yield part
            emitted, part, part_bytes = True, [], 0
    if part or not emitted:
        yield part


class IngestStage(SourceStage):
    """Read every source file into Parquet shards of documents in the base schema."""

    name = "ingest"
    order = 0
    config_class = IngestConfig
    adds = tuple(BASE_SCHEMA)
    drop_reasons = reader_drop_reasons()

    config: IngestConfig

    def __init__(self, config: IngestConfig, run: RunContext, files: list[SourceFile]):
        super().__init__(config, run)
        self.files = files
        self._stamps: list[dict[str, Any]] | None = None
        self._groups: list[list[int]] | None = None

    @classmethod
    def build(cls, config, run: RunContext) -> "IngestStage":
        return cls(config.ingest, run, list_source_files(config))

    @classmethod
    def first_shard(cls, source: str, relpath: str) -> str:
        return shard_name(SourceFile(source, relpath, relpath, 0, 0).task_key, 0)

    def groups(self) -> list[list[int]]:
        """The files' indexes, one list per read task (`pack_files`)."""
        if self._groups is None:
            budget = self.config.pack_bytes if self.config.pack_bytes is not None else PACK_BYTES
            self._groups = pack_files(self.files, budget)
        return self._groups

    def identity(self) -> dict[str, Any]:
        # What reading depends on; `fraction` is the sample stage's, so changing it never re-reads.
        # `stamp` only decides how a change is noticed; the stamps themselves are in the resume key (input_stamp).
        readers = {name: s.model_dump(mode="json", exclude={"fraction", "stamp"})
                   for name, s in sorted(self.run.sources.items())}
        # An upgraded HTML extractor yields other text from the same files: that must recompute too.
        libraries = {s.format: READERS[s.format].library_versions() for s in self.run.sources.values()
                     if READERS[s.format].libraries}
        return {"config": self.config.model_dump(mode="json"), "sources": readers,
                **({"libraries": dict(sorted(libraries.items()))} if libraries else {})}

    def input_listing(self) -> list[dict[str, Any]]:
        return [{"source": f.source, "path": f.relpath, "bytes": f.size} for f in self.files]

    def file_stamps(self) -> list[dict[str, Any]]:
        """Each file's stamp as its source's `stamp` says (size and mtime, or size and sha256), once per run: the
        content hashes read every byte of a source, on the driver."""
        if self._stamps is None:
            self._stamps = [
                {"bytes": f.size, "mtime_ns": f.mtime_ns} if self.run.sources[f.source].stamp == "mtime"
                else file_stamp(f.path, "content", f.size)
                for f in self.files
            ]
        return self._stamps

    def input_stamp(self) -> list[Any]:
        """Modification times (or content hashes for `stamp: content`): part of the resume key (a touched or
        rewritten file is re-read), not of the manifest content."""
        stamps: list[Any] = [[f.source, f.relpath, s["mtime_ns"] if "mtime_ns" in s else f"sha256:{s['sha256']}"]
                             for f, s in zip(self.files, self.file_stamps())]
        # Which files share a task, once any do: a run killed before packing existed and resumed after must not
        # mix its tasks of one file with packed ones under one key (runs that pack nothing keep their key).
        packed = [group_key([self.files[i] for i in g]) for g in self.groups() if len(g) > 1]
        if packed:
            stamps.append(["packed", hashlib.sha256("\n".join(packed).encode("utf-8")).hexdigest()])
        return stamps

    def phases(self) -> list[Phase]:
        return [ReadSources()]
