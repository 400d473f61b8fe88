"""The dedup stage's phases for incremental runs (`dedup: {against: [RUN, ...]}`) and the index every run keeps.

`against` (driver): each earlier run checked (`tokenmill.stages.dedup.earlier_run.open_run`). `earlier_pairs`, per
partition: this run's band rows of the partition joined with the earlier runs' index rows of the same keys, each
pair routed to the `earlier_verify` task of its new document. `earlier_verify`, per partition: exact Jaccard of
each pair from both texts (the new document's from the input shard, the earlier one's from the earlier run's output
shard, only the rows named, each row group once per task: the texts first, shingled when a round needs them); a new
document that passes is removed, the earlier one always wins; the decisions go to
`_work/decisions/earlier-p####.parquet` for `filter`, and `buckets` leaves these documents out of the run's own
dedup. `index`, per group of 8 partitions, in every run: the band keys of the documents the run kept
(`index/p####.parquet`, a file per partition; the removed set read once per task).
"""

from __future__ import annotations

import os
from typing import Any, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tokenmill.dedup.distributed_components import iter_parts, parts_for, split_bytes
from tokenmill.dedup.incremental import (EarlierRun, IncrementalError, compatible_parts, earlier_decisions,
                                         index_bytes, index_file, index_meta, index_table, match,
                                         cap_per_doc, settings_of)
from tokenmill.stages.dedup.band_files import shard_names, read_partition
from tokenmill.stages.dedup.earlier_run import open_run
from tokenmill.stages.dedup.partition_count import partition_count
from tokenmill.dedup.lsh import choose_bands
from tokenmill.dedup.refs import route, rows_by_shard
from tokenmill.dedup.shingles import shingle_hashes_many
from tokenmill.dedup.verify import verify
from tokenmill.documents import read_rows
from tokenmill.errors import TokenmillError
from tokenmill.pipeline import storage
from tokenmill.pipeline.columns import with_fallbacks
from tokenmill.pipeline.contract import DriverPhase, Phase, PlanContext, Task, TaskContext

__all__ = ["EARLIER_REASONS", "Against", "EarlierPairs", "EarlierVerify", "Index", "against_identity",
           "against_problems", "earlier_removed", "location_of"]

EARLIER_REASONS = ("exact_duplicate_of_earlier_run", "near_duplicate_of_earlier_run")
"""The drop reasons of a new document removed for a document of an earlier run (exact, near)."""
PAIR_COLUMNS = ["band", "key", "doc", "exact"]
EARLIER_PAIRS_PER_TASK = 1 << 20
"""Candidate rows (one per band matched) an `earlier_verify` task takes at most, about: it holds the shingles of
their documents, new and earlier."""


def location_of(stage, label: str) -> str:
    """An `against` entry as a location: a URI as it is, a path against the config file's folder."""
    return label if "://" in label else stage.resolve(label)


def _settings(config) -> dict[str, Any]:
    """This config's `SETTINGS` (bands and rows as the stage chooses them)."""
    bands, rows = ((config.bands, config.rows) if config.bands is not None
                   else choose_bands(config.threshold, config.num_perm, config.min_recall))
    return settings_of({"config": config.model_dump(mode="json"), "bands": bands, "rows": rows})


def stage_settings(stage) -> dict[str, Any]:
    """A stage's `SETTINGS`, with the bands and rows it chose (no I/O, unlike its identity with `against`)."""
    return settings_of({"config": stage.config.model_dump(mode="json"), "bands": stage.bands, "rows": stage.rows})


def against_problems(config, resolve_path) -> list[str]:
    """`validate`'s check of `against`, before any work: each run exists, holds a finished dedup stage with its
    committed files and index intact, made with this config's settings; no run named twice."""
    problems = []
    seen: dict[str, str] = {}
    for label in config.against:
        location = label if "://" in label else str(resolve_path(label))
        if location in seen:
            problems.append(f"stages.dedup.against: {label!r} names the same run as {seen[location]!r}")
            continue
        seen[location] = label
        try:
            open_run(label, location, _settings(config), filesystem_for=storage.filesystem_for)
        except IncrementalError as err:
            problems.append(str(err))
    return problems


def against_identity(stage) -> list[str]:
    """What the earlier runs add to the stage's resume key: each one's dedup manifest content hash (or `missing`),
    so that a rerun earlier run makes this one recompute instead of passing as up to date."""
    from tokenmill.pipeline.manifest import content_hash, read_manifest

    found = []
    for label in stage.config.against:
        try:
            fs, root = storage.filesystem_for(location_of(stage, label))
            manifest = read_manifest(fs, storage.join(root, "dedup"))
            found.append(content_hash(manifest["content"]) if manifest else "missing")
        except (TokenmillError, OSError, ValueError):  # checked, with a message, by the `against` phase
            found.append("missing")
    return found


class Against(DriverPhase):
    """On the driver, before any task: each earlier run checked and described for the phases after it."""

    name = "against"

    def build(self, stage, ctx: PlanContext) -> Any:
        runs: list[EarlierRun] = []
        here = os.path.realpath(ctx.stage_dir.rsplit("/", 1)[0])
        for label in stage.config.against:
            location = location_of(stage, label)
            if any(r.location == location for r in runs):
                raise IncrementalError(f"stages.dedup.against: {label!r} is named twice")
            if "://" not in location and os.path.realpath(location) == here:
                raise IncrementalError(f"stages.dedup.against: {label!r} is this run's own folder")
            runs.append(open_run(label, location, stage_settings(stage), filesystem_for=storage.filesystem_for))
        return {"runs": [r.to_json() for r in runs]}


def _read_folder(fs, folder: str, columns: list[str] | None = None) -> pa.Table | None:
    files = storage.list_files(fs, folder, ".parquet")
    tables = [pq.read_table(f, filesystem=fs, columns=columns) for f in files]
    return pa.concat_tables(tables) if tables else None


def _runs(ctx: TaskContext) -> list[EarlierRun]:
    return [EarlierRun.from_json(r) for r in ctx.shared["against"]["runs"]]


class EarlierPairs(Phase):
    """Per partition: (new document, earlier document) pairs of equal band keys or exact hashes, each pair routed
    to the `earlier_verify` task of its new document (`_work/earlier/pairs/p####.parquet`, a row group each)."""

    name = "earlier_pairs"

    def plan(self, stage, ctx: PlanContext) -> list[Task]:
        names = shard_names(ctx)  # the signatures tasks, whose band files it reads
        return [Task(key=f"p{p:04d}", params={"part": p, "names": names}) for p in range(partition_count(ctx))]

    def reduce(self, stage, results: Mapping[str, Any], ctx: PlanContext) -> Any:
        return {"earlier_candidate_pairs": sum(int(r["pairs"]) for r in results.values())}

    def run(self, stage, task: Task, ctx: TaskContext) -> Any:
        part, partitions = int(task.params["part"]), partition_count(ctx)
        own = read_partition(ctx, int(task.key[1:]), task.params["names"], PAIR_COLUMNS)  # the key is p####
        found = []
        for r, run in enumerate(_runs(ctx)):
            if own is None or not own.num_rows:
                break
            fs, _ = storage.filesystem_for(run.location)
            tables = [pq.read_table(storage.join(run.stage_dir, index_file(q)), filesystem=fs,
                                    columns=["band", "key", "exact", "shard", "row"])
                      for q in compatible_parts(part, partitions, run.partitions)]
            index = pa.concat_tables(tables, promote_options="permissive") if tables else None
            if index is None or not index.num_rows:
                continue
            if run.partitions != partitions:
                keys = index.column("key").to_numpy()
                index = index.filter(pa.array((keys % np.uint64(partitions)) == part))
            doc, at, exact = match(own, index)
            names = sorted(run.shards)
            named = pc.cast(index.column("shard").take(pa.array(at, pa.int64())), pa.string()).to_pylist()
            unknown = set(named) - set(run.shards)
            if unknown:
                raise IncrementalError(f"stages.dedup.against: {run.label!r}: its index names shard(s) its manifest "
                                       f"does not list ({sorted(unknown)[:3]}); refusing to read them")
            position = {name: i for i, name in enumerate(names)}
            shard = np.array([position[name] for name in named], np.int64)
            found.append(pa.table({
                "doc": pa.array(doc, pa.uint64()),
                "run": pa.array(np.full(doc.size, r), pa.int32()),
                "shard": pa.array(shard, pa.int32()),
                "row": pa.array(index.column("row").to_numpy()[at], pa.uint32()),
                "exact": pa.array(exact),
            }))
        schema = pa.schema({"doc": pa.uint64(), "run": pa.int32(), "shard": pa.int32(), "row": pa.uint32(),
                            "exact": pa.bool_()})
        table = pa.concat_tables(found) if found else schema.empty_table()
        doc = table.column("doc").to_numpy()
        ctx.write(f"_work/earlier/pairs/{task.key}.parquet",
                  split_bytes(table, route(doc, partitions).astype(np.int64)))
        return {"pairs": table.num_rows}


def _unique_pairs(table: pa.Table) -> tuple[np.ndarray, ...]:
    """(doc, run, shard, row, exact) each pair once (exact when any band said so), in the order a new document tries
    them: by doc; exact first, then most bands shared (the pair's rows before this), then (run, shard, row)."""
    doc, run = table.column("doc").to_numpy(), table.column("run").to_numpy()
    shard, row = table.column("shard").to_numpy(), table.column("row").to_numpy()
    exact = table.column("exact").to_numpy(zero_copy_only=False)
    order = np.lexsort((~exact, row, shard, run, doc))
    doc, run, shard, row, exact = doc[order], run[order], shard[order], row[order], exact[order]
    first = np.r_[True, (doc[1:] != doc[:-1]) | (run[1:] != run[:-1]) | (shard[1:] != shard[:-1])
                  | (row[1:] != row[:-1])] if doc.size else np.zeros(0, bool)
    shared = np.diff(np.r_[np.flatnonzero(first), doc.size])
    doc, run, shard, row, exact = doc[first], run[first], shard[first], row[first], exact[first]
    order = np.lexsort((row, shard, run, -shared, ~exact, doc))
    return doc[order], run[order], shard[order], row[order], exact[order]


def _unique_rows(run: np.ndarray, shard: np.ndarray, row: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct earlier documents (rows run, shard, row, int64; sorted) and each pair's index among them: what
    `np.unique(axis=0, return_inverse=True)` gives, by one lexsort (several times faster on millions of rows)."""
    order = np.lexsort((row, shard, run))
    earlier = np.stack([run[order], shard[order], row[order]], axis=1).astype(np.int64)
    first = np.r_[True, (earlier[1:] != earlier[:-1]).any(axis=1)] if order.size else np.zeros(0, bool)
    which = np.empty(order.size, np.int64)
    which[order] = np.cumsum(first) - 1
    return earlier[first], which


def _first_of_doc(doc: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Mask of the first entry of each document among those in `mask` (`doc` sorted)."""
    at = np.flatnonzero(mask)
    first = at[np.r_[True, doc[at][1:] != doc[at][:-1]]] if at.size else at
    out = np.zeros(doc.size, bool)
    out[first] = True
    return out


class EarlierVerify(Phase):
    """Per partition: the pairs routed here verified by exact Jaccard from text (exact pairs need none), at most
    `max_comparisons_per_document` per new document; a new document above the threshold (or exact) is removed,
    decided by its exact match, else its most similar earlier document."""

    name = "earlier_verify"

    def plan(self, stage, ctx: PlanContext) -> list[Task]:
        # Few tasks: each reads the earlier output shards' row groups its pairs name, once, and a 10% dump's pairs
        # name most row groups of the base, so every task more decompresses the base's text once more (0.5 s of CPU
        # per 400 MB). Measured at 400 MB: 4 tasks of 1M rows (300 MB each) or 2 of 1.5M (440 MB) cost the same.
        parts = parts_for(ctx.shared["earlier_pairs"]["earlier_candidate_pairs"], EARLIER_PAIRS_PER_TASK,
                          partition_count(ctx))
        return [Task(key=f"p{p:04d}", params={"part": p, "parts": parts,
                                              "paths": [s["path"] for s in ctx.input_shards]})
                for p in range(parts)]

    def reduce(self, stage, results: Mapping[str, Any], ctx: PlanContext) -> Any:
        files: dict[int, list[str]] = {}
        counts: dict[str, int] = {}
        by_run: dict[str, dict[str, int]] = {}
        for key in sorted(results):
            for shard in results[key]["decided_shards"]:
                files.setdefault(int(shard), []).append(f"earlier-{key}")
            for name, n in results[key]["counts"].items():
                counts[name] = counts.get(name, 0) + int(n)
            for label, found in results[key]["by_run"].items():
                for name, n in found.items():
                    by_run.setdefault(label, {}).setdefault(name, 0)
                    by_run[label][name] += int(n)
        labels = [r["label"] for r in ctx.shared["against"]["runs"]]
        return {**{k: counts[k] for k in sorted(counts)}, "by_run": {k: by_run.get(k, {}) for k in labels},
                "decision_files": files}

    def run(self, stage, task: Task, ctx: TaskContext) -> Any:
        cfg = stage.config
        runs = _runs(ctx)
        files = storage.list_files(ctx.fs, storage.join(ctx.stage_dir, "_work/earlier/pairs"), ".parquet")
        parts = list(iter_parts(files, int(task.params["part"]), None, ctx.fs, int(task.params["parts"])))
        empty = pa.schema({"doc": pa.uint64(), "run": pa.int32(), "shard": pa.int32(), "row": pa.uint32(),
                           "exact": pa.bool_()}).empty_table()
        doc, run, shard, row, exact = _unique_pairs(pa.concat_tables(parts) if parts else empty)
        within = cap_per_doc(doc, cfg.max_comparisons_per_document) | exact
        # A document with an exact match is decided by it: its near pairs need no text.
        settled = np.isin(doc, doc[exact])
        counts = {"earlier_pairs_not_verified": int((~within & ~settled).sum())}
        doc, run, shard, row, exact = (x[within] for x in (doc, run, shard, row, exact))
        near = ~exact & ~np.isin(doc, doc[exact])
        uniq, which = _unique_rows(run, shard, row)
        # Two rounds: each new document's likeliest pair first (most bands shared), then the rest of the documents
        # that pair did not decide; one passing pair removes a document, so most never read a second earlier text.
        # The texts either round may need are read first, each row group once (a 10% dump's pairs touch most row
        # groups of the base: reading them per round cost twice the decompression); shingled only when verified.
        new_texts = self._new_texts(stage, ctx, task.params["paths"], np.unique(doc[near]))
        earlier_texts = self._earlier_texts(runs, uniq, np.unique(which[near | exact]))  # exact: for `kept_by`
        shingles: dict[int, np.ndarray] = {}
        jaccard, tried = np.zeros(doc.size), np.zeros(doc.size, bool)
        for first_round in (True, False):
            todo = near & ~np.isin(doc, doc[tried & (jaccard > cfg.threshold)])
            todo &= _first_of_doc(doc, todo) if first_round else ~tried
            if not todo.any():
                continue
            _shingle(stage, new_texts, np.unique(doc[todo]).astype(np.int64), 0, shingles)
            _shingle(stage, earlier_texts, np.unique(which[todo]).astype(np.int64), -1, shingles)
            pairs = np.stack([doc[todo].astype(np.int64), -1 - which[todo]], axis=1)
            jaccard[todo] = verify(pairs, shingles, cfg.threshold)[0]
            tried |= todo
        del shingles, new_texts
        removed, chosen, by_exact = earlier_decisions(doc, exact, jaccard, cfg.threshold)
        counts.update(earlier_pairs_verified=int(tried.sum()), earlier_pairs_not_needed=int((near & ~tried).sum()),
                      earlier_pairs_above_threshold=int((jaccard[tried] > cfg.threshold).sum()),
                      earlier_exact_duplicates=int(by_exact.sum()), earlier_near_duplicates=int((~by_exact).sum()))
        by_run: dict[str, dict[str, int]] = {}
        for r, ex in zip(run[chosen].tolist(), by_exact.tolist()):
            name = "exact_duplicates" if ex else "near_duplicates"
            by_run.setdefault(runs[r].label, {}).setdefault(name, 0)
            by_run[runs[r].label][name] += 1
        at = np.searchsorted(earlier_texts.column("key").to_numpy(), which[chosen].astype(np.int64))
        table = pa.table({
            "doc": pa.array(removed, pa.uint64()),
            "reason": pa.array([EARLIER_REASONS[0 if e else 1] for e in by_exact.tolist()], pa.string()),
            "kept_by": earlier_texts.column("id").take(pa.array(at, pa.int64())).combine_chunks(),
            "jaccard": pa.array(np.where(by_exact, 1.0, jaccard[chosen]), pa.float64()),
            "run": pa.array([runs[r].label for r in run[chosen].tolist()], pa.string()),
        })
        shards_of = (removed >> np.uint64(32)).astype(np.int64)
        ctx.write(f"_work/decisions/earlier-{task.key}.parquet", split_bytes(table, shards_of))
        return {"counts": counts, "by_run": by_run, "decided_shards": sorted(set(shards_of.tolist()))}

    @staticmethod
    def _new_texts(stage, ctx: TaskContext, paths: list[str], needed: np.ndarray) -> pa.Table:
        """(key: reference, text, lang) of the new documents `needed` (sorted references), read back from the input
        shards (each once, only the row groups holding them), in the order of `needed`."""
        parts = [_TEXTS.empty_table()]
        for index, docs, rows in rows_by_shard(needed):
            table = read_rows(storage.join(ctx.input_dir, paths[index]), rows, ["text", "source", "lang"], ctx.fs)
            parts.append(pa.table({"key": pa.array(docs.astype(np.int64), pa.int64()), "id": pa.nulls(len(docs),
                                                                                                         pa.string()),
                                   "text": table.column("text").cast(pa.large_string()),
                                   "lang": with_fallbacks(table, stage).column("lang").cast(pa.string())},
                                  schema=_TEXTS))
        return pa.concat_tables(parts)

    @staticmethod
    def _earlier_texts(runs: list[EarlierRun], uniq: np.ndarray, at: np.ndarray) -> pa.Table:
        """(key: index into `uniq`, id, text, lang) of the earlier documents `uniq[at]` (rows run, shard, row; `at`
        ascending), read from their runs' output shards, each shard once, only the row groups holding these rows;
        the language from the `lang` column, else the source's as the earlier run recorded it."""
        parts = [_TEXTS.empty_table()]
        if not at.size:
            return parts[0]
        keys = uniq[at, 0] * (1 << 32) + uniq[at, 1]
        cuts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
        for start, stop in zip(cuts.tolist(), [*cuts[1:].tolist(), at.size]):
            mine = at[start:stop]
            run = runs[int(uniq[mine[0], 0])]
            name = sorted(run.shards)[int(uniq[mine[0], 1])]
            fs, _ = storage.filesystem_for(run.location)
            rows = uniq[mine, 2]
            table = read_rows(storage.join(run.stage_dir, run.shards[name]), rows, ["id", "text", "source", "lang"], fs)
            if table.num_rows != rows.size:
                raise IncrementalError(f"stages.dedup.against: {run.label!r}: {run.shards[name]} lacks rows its "
                                       f"index names; the run was changed after it finished")
            langs = (table.column("lang").cast(pa.string()) if "lang" in table.column_names else
                     pa.array([run.languages.get(s) for s in table.column("source").to_pylist()], pa.string()))
            parts.append(pa.table({"key": pa.array(mine.astype(np.int64), pa.int64()),
                                   "id": table.column("id").cast(pa.string()),
                                   "text": table.column("text").cast(pa.large_string()), "lang": langs}, schema=_TEXTS))
        return pa.concat_tables(parts)


_TEXTS = pa.schema({"key": pa.int64(), "id": pa.string(), "text": pa.large_string(), "lang": pa.string()})
"""Documents read back for `earlier_verify`: a key (a new document's reference, an earlier one's index), id, text,
shingling language; sorted by key."""


def _shingle(stage, texts: pa.Table, keys: np.ndarray, sign: int, shingles: dict) -> None:
    """Add the shingle sets of the documents `keys` (sorted, all in `texts`) not yet in `shingles`, under their key
    (`sign` 0), or -1 - key (`sign` -1: earlier documents), shingled exactly as `signatures` did."""
    cfg = stage.config
    names = keys if sign == 0 else -1 - keys
    keys = keys[np.array([int(n) not in shingles for n in names.tolist()], bool)] if keys.size else keys
    if not keys.size:
        return
    at = pa.array(np.searchsorted(texts.column("key").to_numpy(), keys), pa.int64())
    sets = shingle_hashes_many(texts.column("text").take(at).to_pylist(), texts.column("lang").take(at).to_pylist(),
                               word_ngram=cfg.word_ngram, char_ngram=cfg.char_ngram)
    shingles.update(zip((keys if sign == 0 else -1 - keys).tolist(), sets))


def earlier_removed(ctx: TaskContext) -> np.ndarray:
    """The new documents removed for earlier runs' documents (sorted references): what `buckets` leaves out."""
    files = [f for f in storage.list_files(ctx.fs, storage.join(ctx.stage_dir, "_work/decisions"), ".parquet")
             if f.rsplit("/", 1)[-1].startswith("earlier-")]
    docs = [pq.read_table(f, filesystem=ctx.fs, columns=["doc"]).column("doc").to_numpy() for f in files]
    return np.unique(np.concatenate(docs)).astype(np.uint64) if docs else np.zeros(0, np.uint64)


INDEX_PARTS_PER_TASK = 8
"""Index partitions one `index` task writes (one file each): the removed set, read from every decision file, is
read once per task, not once per partition; the phase runs at the end of every dedup run."""


class Index(Phase):
    """Per group of `INDEX_PARTS_PER_TASK` partitions, in every run: the band keys and exact hashes of the documents
    this run kept, named by output shard and row (`index/p####.parquet`, one file per partition): what a later run
    with `against` reads."""

    name = "index"

    def plan(self, stage, ctx: PlanContext) -> list[Task]:
        names = shard_names(ctx)
        partitions = partition_count(ctx)
        return [Task(key=f"p{first:04d}-p{min(first + INDEX_PARTS_PER_TASK, partitions) - 1:04d}",
                     params={"parts": list(range(first, min(first + INDEX_PARTS_PER_TASK, partitions))),
                             "names": names})
                for first in range(0, partitions, INDEX_PARTS_PER_TASK)]

    def run(self, stage, task: Task, ctx: TaskContext) -> Any:
        decided = _read_folder(ctx.fs, storage.join(ctx.stage_dir, "_work/decisions"), ["doc", "reason"])
        removed = (decided.filter(pc.is_valid(decided.column("reason"))).column("doc").to_numpy()
                   if decided is not None else np.zeros(0, np.uint64))
        removed = np.unique(removed.astype(np.uint64, copy=False))
        del decided
        languages = {name: source.language for name, source in stage.run.sources.items()}
        meta = index_meta(stage_settings(stage), languages)
        rows_written = 0
        for part in task.params["parts"]:
            rows = read_partition(ctx, int(part), task.params["names"], PAIR_COLUMNS)
            table = index_table(rows, removed, list(task.params["names"]))
            ctx.write(index_file(int(part)), index_bytes(table, meta))
            rows_written += table.num_rows
        return {"rows": rows_written}
