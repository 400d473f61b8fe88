"""Ingest, the implicit first stage: read every source file into Parquet shards of documents."""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from typing import Any, Iterator

import pyarrow as pa

from tokenmill.pipeline.documents import BASE_SCHEMA, canonical_json
from tokenmill.pipeline.map_phase import split_and_write
from tokenmill.pipeline.stage import Phase, Stage, Task
from tokenmill.pipeline.tasks import PlanContext, TaskContext
from tokenmill.readers import READERS, reader_drop_reasons
from tokenmill.readers.base import Record, check_unchanged, file_stamp

MAX_ERRORS_LISTED = 20
"""Bad records named per shard in the manifest (all are counted, and all are in `dropped/`)."""


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


def list_source_files(config) -> list[SourceFile]:
    """Every input file of every source, in config order then path order."""
    from tokenmill.pipeline.config import source_files

    out = []
    for source in config.sources:
        root, files = source_files(config, source)
        for f in files:
            st = f.stat()
            out.append(SourceFile(source.name, str(f), os.path.relpath(f, root).replace(os.sep, "/"), st.st_size, st.st_mtime_ns))
    return out


def records_table(source: str, file: SourceFile, records: list[Record]) -> tuple[pa.Table, pa.Array]:
    """Documents of one part as a table in the base schema, with the reader's drop reasons."""
    ids, texts, subsets, metas, reasons = [], [], [], [], []
    for r in records:
        ids.append(r.id if r.id is not None else f"{source}/{file.relpath}/{r.index}")
        texts.append(r.text)
        subsets.append(r.subset)
        meta = dict(r.meta or {})
        if r.drop is not None:
            meta = {"error": r.message, "record_index": r.index, **({"record": meta} if meta else {})}
        metas.append(canonical_json(meta))
        reasons.append(r.drop)
    table = pa.table(
        [ids, texts, [source] * len(ids), subsets, metas],
        schema=BASE_SCHEMA,
    )
    return table, pa.array(reasons, pa.string())


class ReadSources(Phase):
    """One task per input file (a compressed stream cannot be split); a large file becomes several parts."""

    name = "read"

    def plan(self, stage: "IngestStage", ctx: PlanContext) -> list[Task]:
        return [Task(key=f.task_key, inputs=(f.path,), params={"file": f, "stamp": stamp})
                for f, stamp in zip(stage.files, stage.file_stamps())]

    def run(self, stage: "IngestStage", task: Task, ctx: TaskContext) -> dict[str, Any]:
        file: SourceFile = task.params["file"]
        source = stage.run.sources[file.source]
        reader = READERS[source.format].read
        display = f"{file.source}:{file.relpath}"
        entries = []
        for part, records in enumerate(_parts(reader(file.path, source, display),
                                              stage.config.docs_per_shard, stage.config.max_shard_bytes)):
            table, reasons = records_table(file.source, file, records)
            entry = split_and_write(stage, ctx, f"{task.key}.p{part:05d}", file.source, table, reasons)
            entry["input"] = file.relpath
            errors = [r.message for r in records if r.drop is not None]
            entry["errors"] = errors[:MAX_ERRORS_LISTED]
            entries.append(entry)
        # The file must still be the one the run listed (its size is in the manifest, its stamp in the resume key):
        # appended to or rewritten while it was read, the task fails naming it rather than committing a mix.
        check_unchanged(file.path, display, task.params.get("stamp") or file_stamp(file.path, "mtime", file.size))
        return {"shards": entries}


def _parts(records: Iterator[Record], size: int, max_bytes: int) -> Iterator[list[Record]]:
    """Group records into parts of `size` records or `max_bytes` of text, whichever comes first; an empty file still
    yields one (empty) part, so it shows in the manifest."""
    part: list[Record] = []
    part_bytes = 0
    emitted = False
    for record in records:
        part.append(record)
        part_bytes += len(record.text.encode("utf-8")) if record.text else 0
        if len(part) == size or part_bytes >= max_bytes:
            yield part
            emitted, part, part_bytes = True, [], 0
    if part or not emitted:
        yield part


class IngestStage(Stage):
    name = "ingest"
    needs = frozenset()
    adds = tuple(BASE_SCHEMA)
    drop_reasons = reader_drop_reasons()

    def __init__(self, config, run, files: list[SourceFile]):
        super().__init__(config, run)
        self.files = files
        self._stamps: list[dict[str, Any]] | None = None

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
        return [[f.source, f.relpath, s["mtime_ns"] if "mtime_ns" in s else f"sha256:{s['sha256']}"]
                for f, s in zip(self.files, self.file_stamps())]

    def phases(self) -> list[Phase]:
        return [ReadSources()]
