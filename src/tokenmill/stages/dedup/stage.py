"""The dedup stage in eleven phases, each a set of tasks with bounded memory; no task holds the corpus.

(a) `signatures`, per shard: normalized-text hash, shingles, MinHash, band keys; band keys and exact hashes are
    written partitioned by key, and per document its length; no text, no shingles. (b) `buckets`, per partition:
    equal keys make candidate pairs (exact pairs apart); a bucket over the cap goes whole to (c). (c)
    `group_components`, in rounds as (e), and `groups`, per partition, over the members of over-cap buckets only:
    buckets that share a document, in any band, make one group, so that a cluster found in every band is
    verified once, not once per band; each group routed to one verify task. (d) `verify`, per partition: exact
    Jaccard of the shingle sets, recomputed from the text of only the documents its pairs and groups name, read
    back from the input shards (each once, only those rows' row groups); leader clustering inside each group.
    (e) `components`, per partition, in rounds until stable (`tokenmill.dedup.distributed_components`): each
    document's component, labelled by its smallest document. (f) `by_component`, per partition: the edges routed to
    the task of their component. (g) `clusters`, per partition of whole components, over edges only: the keep/drop
    choice by `keep_rule` (greedy, or one per component: local to the task) and each kept document's cluster size
    (ids and sources from the input shards, lengths from (a)). (h) `cluster_table`, one task: `clusters.parquet`
    merged from (g)'s files. (i) `filter`, per shard: drop what (g) decided, add `cluster_size`. The reduced counts
    of (b), (d) and (g) reach `DedupStage.report` directly. (j) `index`, per partition: the band keys of the kept
    documents, for later runs. With `against`, the earlier runs are checked first, and `earlier_pairs` and
    `earlier_verify` remove the new documents they hold after (a) (`tokenmill.stages.dedup.incremental`).
"""
from __future__ import annotations

import contextlib
import logging
import math
from collections import Counter
from dataclasses import replace
from typing import Any, Iterator, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tokenmill.dedup.bands import band_tables, bucket_pairs
from tokenmill.dedup.clusters import ranked
from tokenmill.dedup.components import EDGES_PER_BATCH, component_edges, component_index, read_scattered, scatter_edges
from tokenmill.dedup.decisions import CLUSTERS_SCHEMA, Decisions, decide, merge_runs, merge_summaries, rank
from tokenmill.dedup.distributed_components import MAX_ROUNDS, ROWS_PER_TASK, SplitWriter, adjacency, contract, \
    iter_parts, labels, lookup, owner, parts_for, split_bytes, star_round
from tokenmill.dedup.leaders import cluster_groups
from tokenmill.dedup.lsh import choose_bands, minhash_band_keys
from tokenmill.dedup.minhash import MinHasher
from tokenmill.dedup.refs import doc_ref, route, rows_by_shard
from tokenmill.dedup.shingles import shingle_hashes_many, shingles_and_exact_hashes
from tokenmill.dedup.verify import unique_edges, unique_pairs, verify
from tokenmill.pipeline import storage
from tokenmill.pipeline.columns import with_fallbacks
from tokenmill.documents import NO_DICTIONARY, ZSTD_LEVEL, parquet_bytes, read_rows
from tokenmill.pipeline.contract import Phase, PlanContext, Stage, Task, TaskContext
from tokenmill.pipeline.map_phase import ShardMap, ShardOutput, shard_name, shard_tasks
from tokenmill.stages.dedup.band_files import shard_names, band_bytes, band_path, read_partition
from tokenmill.stages.dedup.partition_count import PartitionCount, partition_count
from tokenmill.stages.dedup.config import DedupConfig
from tokenmill.stages.dedup.incremental import (EARLIER_REASONS, Against, EarlierPairs, EarlierVerify, Index,
                                                against_identity, against_problems, earlier_removed)

log = logging.getLogger(__name__)


def _read_all(ctx: TaskContext, folder: str, columns=None) -> pa.Table | None:
    files = storage.list_files(ctx.fs, storage.join(ctx.stage_dir, folder), ".parquet")
    tables = [pq.read_table(f, filesystem=ctx.fs, columns=columns) for f in files]
    return pa.concat_tables(tables) if tables else None


def _langs(stage: "DedupStage", table: pa.Table) -> list:
    """Each row's language for shingling: the `lang` column, else its source's `language` (the runner's fallback,
    `with_fallbacks`, as in every phase)."""
    return with_fallbacks(table, stage).column("lang").to_pylist()


def _read_columns(ctx: TaskContext, path: str, columns: list[str]) -> pa.Table:
    """One Parquet file's `columns` (those it has), all rows."""
    with ctx.fs.open_input_file(path) as f:
        pf = pq.ParquetFile(f)
        names = set(pf.schema_arrow.names)
        return pf.read(columns=[c for c in columns if c in names]).replace_schema_metadata(None)


class Signatures(Phase):
    """Per shard: band keys and exact hashes, partitioned by key; per document only its length (`_work/docs`).

    Shingles are not kept: `verify` recomputes them from the input shard for the few documents it needs."""

    name = "signatures"

    def plan(self, stage: "DedupStage", ctx: PlanContext) -> list[Task]:
        return [Task(key=shard_name(s["path"]), inputs=(s["path"],), params={"index": i})
                for i, s in enumerate(ctx.input_shards)]

    def run(self, stage: "DedupStage", task: Task, ctx: TaskContext) -> Any:
        table = _read_columns(ctx, storage.join(ctx.input_dir, task.inputs[0]), ["text", "source", "lang"])
        cfg: DedupConfig = stage.config
        texts = table.column("text").to_pylist()
        docs = doc_ref(task.params["index"], np.arange(len(texts)))
        # The exact hashes come from the words the shingling finds; the keys from only the permutations bands use.
        shingles, hashes = shingles_and_exact_hashes(texts, _langs(stage, table), word_ngram=cfg.word_ngram,
                                                     char_ngram=cfg.char_ngram)
        del texts
        keys = minhash_band_keys(stage.hasher, shingles, stage.bands, stage.rows)
        del shingles
        # Row i of this file is row i of the input shard (document reference index << 32 | i); id and source are
        # read back from the input shard where needed, the length (characters) would need the whole text.
        ctx.write(f"_work/docs/{task.key}.parquet", parquet_bytes(pa.table({
            "length": pc.utf8_length(table.column("text")).cast(pa.int64()),
        })))
        ctx.write(band_path(task.key), band_bytes(band_tables(keys, docs, hashes, stage.bands, partition_count(ctx))))
        return {"docs": len(docs)}


def _sum_counts(results: Mapping[str, Any]) -> dict[str, int]:
    """Sum the tasks' count dicts key by key (task keys sorted, so the order never depends on scheduling)."""
    total: Counter = Counter()
    for key in sorted(results):
        total.update(results[key])
    return {k: int(total[k]) for k in sorted(total)}


class Buckets(Phase):
    """Per partition: all pairs of the buckets within the cap; the members of buckets over it, for `verify`."""

    name = "buckets"

    def plan(self, stage: "DedupStage", ctx: PlanContext) -> list[Task]:
        names = shard_names(ctx)  # the signatures tasks, whose band files it reads
        return [Task(key=f"p{p:04d}", params={"names": names}) for p in range(partition_count(ctx))]

    def reduce(self, stage: "DedupStage", results: Mapping[str, Any], ctx: PlanContext) -> Any:
        return _sum_counts(results)

    def run(self, stage: "DedupStage", task: Task, ctx: TaskContext) -> Any:
        rows = read_partition(ctx, int(task.key[1:]), task.params["names"])  # the key is p####
        if stage.config.against and rows is not None:  # documents an earlier run's removed are not this run's
            rows = rows.filter(pa.array(~np.isin(rows.column("doc").to_numpy(), earlier_removed(ctx))))
        found = bucket_pairs(rows, stage.config.max_pairs_per_bucket, partition_count(ctx))
        # One file per task, a row group per verify task (not a file per pair of tasks: P^2 files, each a commit
        # and, on an object store, a PUT).
        dest = np.repeat(np.arange(len(found.pairs)), [t.num_rows for t in found.pairs])
        ctx.write(f"_work/pairs/{task.key}.parquet", split_bytes(pa.concat_tables(found.pairs), dest))
        ctx.write(f"_work/over_cap/{task.key}.parquet", parquet_bytes(found.over_cap))
        return found.counts


class Verify(Phase):
    """Per partition: exact Jaccard of the candidate pairs; leader clustering inside each group of over-cap buckets."""

    name = "verify"

    def plan(self, stage: "DedupStage", ctx: PlanContext) -> list[Task]:
        return [Task(key=f"p{p:04d}", params={"paths": [s["path"] for s in ctx.input_shards]})
                for p in range(partition_count(ctx))]

    @staticmethod
    def _read_back(stage: "DedupStage", ctx: TaskContext, paths: list[str], needed: np.ndarray
                   ) -> tuple[dict[int, np.ndarray], pa.Table]:
        """Shingle sets and (id, length) of the `needed` documents (sorted, unique; the table in their order): their
        text read back from the input shards (each shard once, only its needed rows) and shingled exactly as
        `signatures` did."""
        cfg: DedupConfig = stage.config
        shingles: dict[int, np.ndarray] = {}
        parts = [pa.table({"id": pa.array([], pa.string()), "length": pa.array([], pa.int64())})]
        for index, docs, rows in rows_by_shard(needed):
            table = read_rows(storage.join(ctx.input_dir, paths[index]), rows, ["id", "text", "source", "lang"], ctx.fs)
            sets = shingle_hashes_many(table.column("text").to_pylist(), _langs(stage, table),
                                       word_ngram=cfg.word_ngram, char_ngram=cfg.char_ngram)
            shingles.update(zip(docs.tolist(), sets))
            parts.append(pa.table({"id": table.column("id").cast(pa.string()),
                                   "length": pc.utf8_length(table.column("text")).cast(pa.int64())}))
        return shingles, pa.concat_tables(parts)

    def reduce(self, stage: "DedupStage", results: Mapping[str, Any], ctx: PlanContext) -> Any:
        return _sum_counts(results)

    def run(self, stage: "DedupStage", task: Task, ctx: TaskContext) -> Any:
        a, b, exact = _routed_pairs(ctx, _key_part(task), partition_count(ctx))
        edges, sims, counts = self._verified(stage, task, ctx, a, b, exact)  # the shingles are gone on return
        if counts["pairs_not_verified"]:
            log.warning("dedup verify %s: %d pairs of buckets over the cap were not verified "
                        "(max_comparisons_per_document = %d)", task.key, counts["pairs_not_verified"],
                        stage.config.max_comparisons_per_document)
        ctx.write(f"_work/edges/{task.key}.parquet", _edges_bytes(a, b, exact, edges, sims, partition_count(ctx)))
        return counts

    def _verified(self, stage: "DedupStage", task: Task, ctx: TaskContext, a: np.ndarray, b: np.ndarray,
                  exact: np.ndarray) -> tuple[list[np.ndarray], list[np.ndarray], dict[str, int]]:
        """The near pairs above the threshold and the groups' edges (lists of pair arrays and of their Jaccard),
        and the counts."""
        cfg: DedupConfig = stage.config
        near = np.stack([a[~exact], b[~exact]], axis=1) if len(a) else np.zeros((0, 2), np.uint64)
        over_bucket, over_doc = _routed_groups(ctx, _key_part(task), ctx.shared["groups"]["parts"])
        needed = np.unique(np.r_[near.ravel(), over_doc])
        shingles, members = self._read_back(stage, ctx, task.params["paths"], needed)
        jaccard, keep = verify(near, shingles, cfg.threshold) if len(near) else (np.zeros(0), np.zeros(0, bool))
        counts = {"pairs_verified": int(len(near)), "pairs_above_threshold": int(keep.sum()),
                  "pairs_rejected": int(len(near) - keep.sum()), "pairs_compared_in_buckets_over_cap": 0,
                  "buckets_over_cap_second_pass": 0, "pairs_not_verified": 0}
        edges, sims = [near[keep]], [jaccard[keep]]
        if over_doc.size:
            # Members in the clusters phase's visit order (the `keep` rules, then id, then reference).
            visit = ranked(needed, rank(cfg.keep, members, needed))
            for found in cluster_groups(over_bucket, over_doc, visit, shingles, cfg.threshold,
                                        cfg.max_comparisons_per_document):
                edges.append(found.pairs)
                sims.append(found.jaccard)
                counts["pairs_verified"] += found.compared
                counts["pairs_compared_in_buckets_over_cap"] += found.compared
                counts["pairs_above_threshold"] += found.passed
                counts["pairs_rejected"] += found.rejected
                counts["buckets_over_cap_second_pass"] += int(found.second_pass)
                counts["pairs_not_verified"] += found.not_verified
        return edges, sims, counts


def _drained(parts: list[np.ndarray]) -> np.ndarray:
    """The arrays of `parts` joined, the list emptied: the joined copy is then the only one held."""
    joined = np.concatenate(parts)
    parts.clear()
    return joined


def _edges_bytes(a: np.ndarray, b: np.ndarray, exact: np.ndarray, edges: list[np.ndarray], sims: list[np.ndarray],
                 partitions: int) -> bytes:
    """A verify task's edge file: its exact pairs, then its near edges each once, sorted; a row group per components
    task, the one that owns the edge's first end (round 0 and `by_component`). Each copy is dropped once the next
    is made: a task holding a group of 10,000 copies writes about 7 million edges, 170 MB an array set (the 5 GB
    web-like run, 2026-11-28), and held them three times over at its peak."""
    near_edges, near_sims = unique_edges(_drained(edges), _drained(sims))
    n_exact = int(exact.sum())
    table = pa.table({
        "a": pa.array(np.r_[a[exact], near_edges[:, 0]].astype(np.uint64), pa.uint64()),
        "b": pa.array(np.r_[b[exact], near_edges[:, 1]], pa.uint64()),
        "jaccard": pa.array(np.r_[np.ones(n_exact), near_sims], pa.float64()),
        "exact": pa.array(np.r_[np.ones(n_exact, bool), np.zeros(len(near_edges), bool)]),
    })
    del near_edges, near_sims
    return split_bytes(table, owner(table.column("a").to_numpy(), partitions))

def _routed_pairs(ctx: TaskContext, part: int, partitions: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The pairs every buckets task routed to verify task `part` (its row group of each buckets task's file), as
    (a, b, exact) arrays, each pair once, sorted."""
    files = [storage.join(ctx.stage_dir, f"_work/pairs/p{p:04d}.parquet") for p in range(partitions)]
    tables = list(iter_parts(files, part, ["a", "b", "exact"], ctx.fs))
    table = pa.concat_tables(tables) if tables else None
    if table is None or not table.num_rows:
        return np.zeros(0, np.uint64), np.zeros(0, np.uint64), np.zeros(0, bool)
    return unique_pairs(table.column("a").to_numpy(), table.column("b").to_numpy(),
                        table.column("exact").to_numpy(zero_copy_only=False))


def _key_part(task: Task) -> int:
    """The partition a task's key (p####) names."""
    return int(task.key[1:])


def _routed_groups(ctx: TaskContext, part: int, parts: int) -> tuple[np.ndarray, np.ndarray]:
    """The groups routed to verify task `part` (its row group of each of the `parts` groups tasks' files) as
    (dense group index, document) sorted by (group, document): the arrays the one groups task wrote before."""
    files = [storage.join(ctx.stage_dir, f"_work/groups/p{t:04d}.parquet") for t in range(parts)]
    tables = list(iter_parts(files, part, ["group", "doc"], ctx.fs))
    if not tables:
        return np.zeros(0, np.int64), np.zeros(0, np.uint64)
    group = np.concatenate([t.column("group").to_numpy() for t in tables])
    doc = np.concatenate([t.column("doc").to_numpy() for t in tables])
    order = np.lexsort((doc, group))
    group, doc = group[order], doc[order]
    return (np.cumsum(np.r_[True, group[1:] != group[:-1]]) - 1).astype(np.int64), doc


def _edge_files(ctx: TaskContext) -> list[str]:
    return storage.list_files(ctx.fs, storage.join(ctx.stage_dir, "_work/edges"), ".parquet")


def _read_edges(ctx: TaskContext, files: list[str], columns: list[str] | None = None) -> Iterator[pa.Table]:
    """The verify tasks' edge files, one at a time."""
    for path in files:
        yield pq.read_table(path, columns=columns, filesystem=ctx.fs)


# The batch engine moved to `tokenmill.dedup.components`; these names stay for the tests that reach them here.
_scatter_edges, _read_scattered = scatter_edges, read_scattered


def _partition(task: Task) -> int:
    return int(task.params["part"])


def _round_files(ctx: TaskContext, r: int, folder: str) -> list[str]:
    return storage.list_files(ctx.fs, storage.join(ctx.stage_dir, f"{folder}/r{r:03d}"), ".parquet")


def _rows(tables: Iterator[pa.Table]) -> tuple[np.ndarray, np.ndarray]:
    """(src, dst) of a round's rows for one task."""
    parts = list(tables)
    if not parts:
        return np.zeros(0, np.uint64), np.zeros(0, np.uint64)
    return (np.concatenate([t.column("src").to_numpy() for t in parts]),
            np.concatenate([t.column("dst").to_numpy() for t in parts]))


class Components(Phase):
    """Connected components of the verified edges in rounds (`tokenmill.dedup.distributed_components`): round 0,
    one task per partition, contracts each partition of the edges to the stars of its local components; then
    large-star and small-star alternate until a round finds its input a star forest, each round over as few tasks
    (a divisor of the partitions) as hold about `ROWS_PER_TASK` rows each. Each round writes
    `_work/cc/r###/p####.parquet` (rows node, neighbour; a row group per owning task of the next round)."""

    name = "components"
    folder = "_work/cc"
    """Where the rounds' files go (`r###/p####.parquet`)."""

    def plan(self, stage: "DedupStage", ctx: PlanContext) -> list[Task]:
        before = ctx.shared.get(self.name)
        if before is None:
            r, parts, came_from = 0, partition_count(ctx), None
        else:
            r, came_from = before["round"] + 1, before["parts"]
            parts = parts_for(before["rows"], ROWS_PER_TASK, came_from)
        return [Task(key=f"r{r:03d}-p{t:04d}", params={"round": r, "part": t, "parts": parts, "from": came_from})
                for t in range(parts)]

    def run(self, stage: "DedupStage", task: Task, ctx: TaskContext) -> Any:
        r, t, parts = int(task.params["round"]), _partition(task), int(task.params["parts"])
        result: dict[str, int] = {}
        if r == 0:
            a, b = self.contracted(ctx, t, result)
        else:
            # The previous round split its rows `from` ways; this round's task t owns every part d with d % parts
            # == t (`parts` divides `from`).
            found = star_round(*_rows(iter_parts(_round_files(ctx, r - 1, self.folder), t, ["src", "dst"], ctx.fs,
                                                 parts)), large=r % 2 == 1)
            a, b = found.a, found.b
            result.update(nodes=found.nodes, violations=found.violations)
        src, dst = adjacency(a, b)
        ctx.write(f"{self.folder}/r{r:03d}/p{t:04d}.parquet",
                  split_bytes(pa.table({"src": pa.array(src, pa.uint64()), "dst": pa.array(dst, pa.uint64())}),
                              owner(src, parts)))
        return {"rows": int(src.size), **{k: int(v) for k, v in result.items()}}

    def contracted(self, ctx: TaskContext, t: int, result: dict[str, int]) -> tuple[np.ndarray, np.ndarray]:
        """Round 0 of partition `t`: its verified edges (those whose first end it owns) contracted to the stars of
        their local components; their rows counted in `result["edges"]`."""
        result["edges"] = 0

        def counted() -> Iterator[pa.Table]:  # streamed into the contraction, the rows counted on the way
            for table in iter_parts(_edge_files(ctx), t, ["a", "b"], ctx.fs):
                result["edges"] += table.num_rows
                yield table

        return contract(counted())

    def reduce(self, stage: "DedupStage", results: Mapping[str, Any], ctx: PlanContext) -> Any:
        before = ctx.shared.get(self.name)
        now = _sum_counts(results)
        if before is not None:
            now["edges"] = before["edges"]  # the verified edge rows, counted by round 0, for `by_component`
        return {"round": 0 if before is None else before["round"] + 1, "parts": len(results),
                "violations": 0, **now}

    def again(self, stage: "DedupStage", ctx: PlanContext) -> bool:
        now = ctx.shared[self.name]
        if now["round"] == 0:
            return now["rows"] > 0  # no edge, no component
        if not now["violations"]:
            return False
        if now["round"] >= MAX_ROUNDS:
            raise RuntimeError(f"dedup {self.name}: {now['violations']} nodes still not in a star after "
                               f"{MAX_ROUNDS} rounds; this is a bug (the algorithm converges in O(log^2 n) rounds)")
        return True


def _label_tasks(ctx: PlanContext, last: Mapping[str, Any], rows: int, budget: int) -> list[Task]:
    """The tasks of a phase that reads the labels of a components phase's last round (`last`, its reduced result):
    as few as hold about `budget` of `rows` each, a divisor of the partitions."""
    parts = parts_for(rows, budget, partition_count(ctx))
    return [Task(key=f"p{t:04d}", params={"part": t, "parts": parts, "round": last["round"],
                                           "label_parts": last["parts"]}) for t in range(parts)]


def _task_labels(ctx: TaskContext, task: Task, folder: str) -> tuple[np.ndarray, np.ndarray]:
    """(node, component) of the last round (in `folder`) for the nodes task `task` owns, and more: the last round
    split its nodes `label_parts` ways; those this task owns (owner(x, parts) == t) lie in its parts d with d = t
    modulo the greatest common divisor (both divide the partitions), a superset."""
    t, parts = _partition(task), int(task.params["parts"])
    common = math.gcd(parts, int(task.params["label_parts"]))
    return labels(*_rows(iter_parts(_round_files(ctx, int(task.params["round"]), folder), t % common,
                                    ["src", "dst"], ctx.fs, common)))


BUCKET_NODE = np.uint64(1 << 63)
"""Set in a bucket's node in the groups' graph, so that each component's smallest node is a document (documents are
below 2**63), as `over_cap_groups` names a group."""


def bucket_nodes(partition: int, bucket: np.ndarray) -> np.ndarray:
    """The node of each over-cap bucket of `partition` (dense indices within it): (partition << 32 | index) with
    `BUCKET_NODE` set, unique across partitions and bands."""
    return (np.uint64(partition) << np.uint64(32)) | np.asarray(bucket).astype(np.uint64) | BUCKET_NODE


class GroupComponents(Components):
    """The groups of over-cap buckets in rounds: the connected components of the bipartite graph (document,
    bucket node) that `over_cap_groups` finds in one process, found as `components` finds those of the verified
    edges, so that no task holds every over-cap row of the corpus. Round 0 contracts each partition's
    `_work/over_cap` file; the rounds' files go to `_work/gcc/r###/`."""

    name = "group_components"
    folder = "_work/gcc"

    def contracted(self, ctx: TaskContext, t: int, result: dict[str, int]) -> tuple[np.ndarray, np.ndarray]:
        """Round 0 of partition `t`: its over-cap rows as edges (document, bucket node), contracted; the rows
        counted in `result["edges"]`."""
        over = pq.read_table(storage.join(ctx.stage_dir, f"_work/over_cap/p{t:04d}.parquet"), filesystem=ctx.fs)
        result["edges"] = over.num_rows
        return contract([pa.table({"a": over.column("doc").to_numpy().astype(np.uint64, copy=False),
                                   "b": bucket_nodes(t, over.column("bucket").to_numpy())})])


class Groups(Phase):
    """Per group of partitions (a divisor of the partitions, as few tasks as hold about `ROWS_PER_TASK` rows of
    the last round each): each owned document's group from the last round of `group_components` (its smallest
    document), written as `_work/groups/p####.parquet` (columns group, doc) with a row group per verify task, the
    one a hash of the group picks (`route`, as for pairs)."""

    name = "groups"

    def plan(self, stage: "DedupStage", ctx: PlanContext) -> list[Task]:
        last = ctx.shared[GroupComponents.name]
        return _label_tasks(ctx, last, last["rows"], ROWS_PER_TASK)

    def reduce(self, stage: "DedupStage", results: Mapping[str, Any], ctx: PlanContext) -> Any:
        return {"parts": len(results), **_sum_counts(results)}

    def run(self, stage: "DedupStage", task: Task, ctx: TaskContext) -> Any:
        t, parts = _partition(task), int(task.params["parts"])
        # Only the documents this task owns (the labels read are a superset), so that each is written by one task.
        nodes, comp = _task_labels(ctx, task, GroupComponents.folder)
        mine = (nodes < BUCKET_NODE) & (owner(nodes, parts) == t)
        group, doc = comp[mine], nodes[mine]
        ctx.write(f"_work/groups/{task.key}.parquet",
                  split_bytes(pa.table({"group": pa.array(group, pa.uint64()), "doc": pa.array(doc, pa.uint64())}),
                              route(group, partition_count(ctx))))
        return {"groups": int((group == doc).sum()), "docs": int(doc.size)}


class ByComponent(Phase):
    """Per group of partitions (as few tasks as hold about EDGES_PER_BATCH edge rows each, a divisor of the
    partitions): each owned node's component from the last round's stars, and the verified edges whose first end
    the task owns routed to the clusters task of their component (`_work/cc/edges/p####.parquet`, a row group per
    clusters task, one clusters task per task of this phase)."""

    name = "by_component"

    def plan(self, stage: "DedupStage", ctx: PlanContext) -> list[Task]:
        last = ctx.shared["components"]
        return _label_tasks(ctx, last, last["edges"], EDGES_PER_BATCH)

    def reduce(self, stage: "DedupStage", results: Mapping[str, Any], ctx: PlanContext) -> Any:
        return {"parts": len(results), **_sum_counts(results)}

    def run(self, stage: "DedupStage", task: Task, ctx: TaskContext) -> Any:
        t, parts = _partition(task), int(task.params["parts"])
        nodes, comp = _task_labels(ctx, task, Components.folder)  # a superset of this task's nodes, looked up
        # A verify task's rows at a time, at most about EDGES_PER_BATCH rows held before they are written out.
        out, rows = SplitWriter(EDGES_PER_BATCH), 0
        for edges in iter_parts(_edge_files(ctx), t, None, ctx.fs, parts):
            out.add(edges, owner(lookup(nodes, comp, edges.column("a").to_numpy()), parts))
            rows += edges.num_rows
        ctx.write(f"_work/cc/edges/{task.key}.parquet", out.finish())
        return {"edges": rows}


class Clusters(Phase):
    """Per partition of whole components (those whose smallest document this task owns): exact duplicates first
    (one kept per hash), then near-duplicates among what is left. Writes the decisions (a row group per input
    shard, for `filter`) and its members of `clusters.parquet` (for `cluster_table`)."""

    name = "clusters"

    def reduce(self, stage: "DedupStage", results: Mapping[str, Any], ctx: PlanContext) -> Any:
        """The summary of every component; and for `filter`, the decision files holding each shard's documents."""
        files: dict[int, list[str]] = {}
        for key in sorted(results):
            for shard in results[key]["decided_shards"]:
                files.setdefault(shard, []).append(key)
        removals = _sum_counts({k: results[k]["removals"] for k in results})
        return {**merge_summaries(results[k]["summary"] for k in sorted(results)),
                "removed_by_rule": {"greedy": removals.get("greedy", 0), "component": removals.get("component", 0)},
                "decision_files": files}

    def plan(self, stage: "DedupStage", ctx: PlanContext) -> list[Task]:
        shards = [shard_name(s["path"]) for s in ctx.input_shards]
        paths = [s["path"] for s in ctx.input_shards]
        return [Task(key=f"p{t:04d}", params={"part": t, "shards": shards, "paths": paths})
                for t in range(ctx.shared["by_component"]["parts"])]

    def run(self, stage: "DedupStage", task: Task, ctx: TaskContext) -> Any:
        # Components first, streamed over this task's edges (nodes only); then the keep/drop choice one batch of
        # components at a time, each batch's edges read again. Components are independent, so this decides
        # exactly what one pass over every edge would, holding about EDGES_PER_BATCH edges. Every per-document
        # value is an array aligned with the sorted nodes.
        t = _partition(task)
        files = storage.list_files(ctx.fs, storage.join(ctx.stage_dir, "_work/cc/edges"), ".parquet")

        def read(columns: list[str] | None = None) -> Iterator[pa.Table]:
            return iter_parts(files, t, columns, ctx.fs)

        nodes, comp, count = component_index(read(["a", "b"]))
        shards = task.params["shards"]
        members = self._members(ctx, shards, task.params["paths"], nodes)
        ids, sources = members.column("id").combine_chunks(), members.column("source").combine_chunks()
        ranks = rank(stage.config.keep, members, nodes)
        visit = ranked(nodes, ranks)
        decided = Decisions.of(nodes, comp, [decide(edges, visit) for edges in component_edges(read, nodes, comp, count)
                                             if edges is not None and edges.num_rows],
                               ranks if stage.config.keep_rule == "component" else None)
        everything = np.arange(nodes.size)
        ctx.write(f"_work/decisions/{task.key}.parquet", split_bytes(decided.shard_table(ids, everything),
                                                                      (nodes >> np.uint64(32)).astype(np.int64)))
        table = decided.clusters_table(ids, sources)
        ctx.write(f"_work/clusters/{task.key}.parquet",
                  parquet_bytes(table.append_column("comp", pa.array(comp[decided.order], pa.uint64()))))
        return {"summary": decided.summary(sources), "removals": decided.removals,
                "decided_shards": [index for index, _ in decided.by_shard()]}

    @staticmethod
    def _members(ctx: TaskContext, shards: list[str], paths: list[str], nodes: np.ndarray) -> pa.Table:
        """(id, length, source) of the documents in edges, only those, one row per node in the order of `nodes`:
        id and source from the input shards (only those columns and row groups), the length from the signatures
        phase's `_work/docs`; each shard once."""
        parts = []
        for index, _, rows in rows_by_shard(nodes):
            table = read_rows(storage.join(ctx.input_dir, paths[index]), rows, ["id", "source"], ctx.fs)
            lengths = read_rows(storage.join(ctx.stage_dir, f"_work/docs/{shards[index]}.parquet"), rows,
                                ["length"], ctx.fs).column("length")
            parts.append(pa.table({"id": table.column("id").cast(pa.string()), "length": lengths.cast(pa.int64()),
                                   "source": table.column("source").cast(pa.string())}))
        schema = pa.schema({"id": pa.string(), "length": pa.int64(), "source": pa.string()})
        return pa.concat_tables(parts) if parts else schema.empty_table()


CLUSTERS_ROW_GROUP = 1 << 20
"""Rows per row group of `clusters.parquet` (pyarrow's default, so a table written whole gives the same file)."""


class ClusterTable(Phase):
    """One task: the clusters tasks' members merged into `clusters.parquet`, by (cluster, document) as one task
    over every edge wrote it: each file read a record batch at a time, the file written a row group at a time (the
    task holds the compressed file, one row group and `MERGE_ROWS` rows over all the files, never the members)."""

    name = "cluster_table"

    def plan(self, stage: "DedupStage", ctx: PlanContext) -> list[Task]:
        return [Task(key="all")]

    def run(self, stage: "DedupStage", task: Task, ctx: TaskContext) -> Any:
        files = storage.list_files(ctx.fs, storage.join(ctx.stage_dir, "_work/clusters"), ".parquet")
        with contextlib.ExitStack() as stack:
            opened = [stack.enter_context(ctx.fs.open_input_file(f)) for f in files]
            ctx.write("clusters.parquet", merged_clusters_bytes(opened, merge_batch_rows(len(files))))
        return None


MERGE_ROWS = 1 << 19
"""Rows the cluster_table merge holds over all its runs at once: a batch per clusters task's file, each this over
their count. A batch of 65,536 rows per file held every member at 10 GB web-like (64 files smaller than a batch:
1,051 MB for the task alone, 651 MB at 5 GB); split so, the task's memory stays flat as the corpus and the count of
clusters tasks grow. Batch sizes do not reach the output: `_clusters_bytes` cuts the same row groups."""


def merge_batch_rows(runs: int) -> int:
    """Rows per batch read from each of `runs` files by the cluster_table merge (at least 1,024)."""
    return max(1 << 10, MERGE_ROWS // max(1, runs))


def merged_clusters_bytes(sources: list, batch: int) -> bytes:
    """`clusters.parquet` from the clusters tasks' files (open files or paths, each sorted by `comp`), merged by
    component and read `batch` rows per file at a time."""
    runs = [(pa.Table.from_batches([b]) for b in pq.ParquetFile(source).iter_batches(batch)) for source in sources]
    return _clusters_bytes(t.drop_columns(["comp"]) for t in merge_runs(runs, "comp"))


def _clusters_bytes(tables: Iterator[pa.Table]) -> bytes:
    """`clusters.parquet` from its rows in order, a table at a time: the same bytes as `parquet_bytes` of the
    whole table (row groups of pyarrow's default size), holding one row group of rows at a time."""
    sink = pa.BufferOutputStream()
    writer = None
    pending: list[pa.Table] = []
    held = 0

    def flush(rows: int) -> None:
        nonlocal writer, pending, held
        table = pa.concat_tables(pending).combine_chunks()
        head, rest = table.slice(0, rows), table.slice(rows)
        if writer is None:
            writer = pq.ParquetWriter(sink, CLUSTERS_SCHEMA, compression="zstd", compression_level=ZSTD_LEVEL,
                                      use_dictionary=[c for c in CLUSTERS_SCHEMA.names if c not in NO_DICTIONARY])
        writer.write_table(head, row_group_size=CLUSTERS_ROW_GROUP)
        pending, held = ([rest] if rest.num_rows else []), rest.num_rows

    for table in tables:
        pending.append(table.cast(CLUSTERS_SCHEMA))
        held += table.num_rows
        while held >= CLUSTERS_ROW_GROUP:
            flush(CLUSTERS_ROW_GROUP)
    if held:
        flush(held)
    if writer is None:
        return parquet_bytes(CLUSTERS_SCHEMA.empty_table())
    writer.close()
    return sink.getvalue().to_pybytes()


CLUSTER_SIZE = pa.field("cluster_size", pa.int64())
"""The column `filter` adds: per kept document the documents it stands for (itself and those removed on its account,
`tokenmill.dedup.keep_rules`; 1 in no cluster), null for a removed one; it sums to the stage's input documents. An
input that has the column already (a second dedup) gets it replaced: each run counts its own input."""


class FilterShards(ShardMap):
    """Per shard: drop the documents the clusters tasks removed (each task's row group for this shard); count
    cluster members per source; add `cluster_size` (`CLUSTER_SIZE`)."""

    name = "filter"

    def plan(self, stage: "DedupStage", ctx: PlanContext) -> list[Task]:
        files = ctx.shared["clusters"]["decision_files"]
        earlier = (ctx.shared.get("earlier_verify") or {}).get("decision_files", {})
        return [replace(t, params={**t.params, "index": i, "decisions": files.get(i, []) + earlier.get(i, [])})
                for i, t in enumerate(shard_tasks(ctx))]

    def map_shard(self, stage: "DedupStage", task: Task, ctx: TaskContext, table: pa.Table) -> ShardOutput:
        reasons = [None] * table.num_rows
        sizes = np.ones(table.num_rows, np.int64)
        stats: dict[str, Any] = {}
        files = [storage.join(ctx.stage_dir, f"_work/decisions/{key}.parquet") for key in task.params["decisions"]]
        found = [t.select(["doc", "reason"]).append_column("cluster_size", t.column("cluster_size").cast(pa.int64())
                                                           if "cluster_size" in t.column_names else
                                                           pa.nulls(t.num_rows, pa.int64()))
                 for t in iter_parts(files, int(task.params["index"]), None, ctx.fs)]
        if found:
            decided = pa.concat_tables(found)
            sizes[decided.column("doc").to_numpy() & np.uint64(0xFFFFFFFF)] = \
                decided.column("cluster_size").fill_null(1).to_numpy()
            decided = decided.take(pc.sort_indices(decided, sort_keys=[("doc", "ascending")]))
            source = task.params["source"]
            for doc, reason in zip(decided.column("doc").to_pylist(), decided.column("reason").to_pylist()):
                row = doc & 0xFFFFFFFF
                reasons[row] = reason
                key = reason or "kept_in_cluster"
                stats.setdefault("cluster_members", {}).setdefault(source, {}).setdefault(key, 0)
                stats["cluster_members"][source][key] += 1
        dropped = pa.array(reasons, pa.string())
        # A removed document stands for none (it is counted in the size of the one kept for it): null.
        column = pa.array(sizes, pa.int64(), mask=dropped.is_valid().to_numpy(zero_copy_only=False))
        at = table.schema.get_field_index(CLUSTER_SIZE.name)
        table = table.set_column(at, CLUSTER_SIZE, column) if at >= 0 else table.append_column(CLUSTER_SIZE, column)
        return ShardOutput(table, dropped, stats or None)


class DedupStage(Stage):
    """Exact, then MinHash-LSH near-duplicate removal above a Jaccard threshold (docs/dedup.md)."""

    name = "dedup"
    order = 30
    config_class = DedupConfig
    needs = frozenset({"id", "text", "source"})
    uses = frozenset({"lang"})
    adds = (CLUSTER_SIZE,)
    drop_reasons = ("exact_duplicate", "near_duplicate", "component_duplicate")

    config: DedupConfig

    def __init__(self, config: DedupConfig, run):
        super().__init__(config, run)
        if config.bands is not None:
            self.bands, self.rows = config.bands, config.rows
        else:
            self.bands, self.rows = choose_bands(config.threshold, config.num_perm, config.min_recall)
        self._hasher = None
        if config.against:
            self.drop_reasons = (*type(self).drop_reasons, *EARLIER_REASONS)

    @property
    def hasher(self) -> MinHasher:
        if self._hasher is None:
            self._hasher = MinHasher(self.config.num_perm, self.config.minhash_seed)
        return self._hasher

    def identity(self) -> dict[str, Any]:
        identity = {**super().identity(), "bands": self.bands, "rows": self.rows}
        if not self.config.against:  # a run without it keeps the identity (and resume key) it had before the field
            identity["config"].pop("against", None)
        else:
            identity["against_runs"] = against_identity(self)
        return identity

    @classmethod
    def config_problems(cls, config: DedupConfig, resolve_path: Any) -> list[str]:
        return against_problems(config, resolve_path)

    def phases(self) -> list[Phase]:
        # With `against`: the earlier runs checked before any task, their matches removed before this run's buckets.
        first, earlier = ([Against()], [EarlierPairs(), EarlierVerify()]) if self.config.against else ([], [])
        return [PartitionCount(), *first, Signatures(), *earlier, Buckets(), GroupComponents(), Groups(), Verify(),
                Components(), ByComponent(), Clusters(), ClusterTable(), FilterShards(), Index()]

    def report(self, stats: Mapping[str, Any], reduced: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Clusters per source with their size histogram, members kept or dropped per source, what each keep rule
        removes (`removed_by_rule`, whichever applies), and the candidate counts: pairs proposed, buckets over the
        cap, pairs verified, above the threshold, rejected, not verified."""
        reduced = reduced or {}
        clusters = {k: v for k, v in (reduced.get("clusters") or {}).items() if k != "decision_files"}
        cand = {**(reduced.get("buckets") or {}), **(reduced.get("verify") or {})}
        summary = [f"{clusters.get('clusters', 0):,} duplicate clusters: {clusters.get('exact_duplicates', 0):,} exact and "
                   f"{clusters.get('near_duplicates', 0):,} near duplicates removed (bands x rows = "
                   f"{self.bands} x {self.rows})",
                   f"{cand.get('candidate_pairs', 0):,} candidate pairs and {cand.get('buckets_over_cap', 0):,} buckets "
                   f"over the cap ({cand.get('pairs_in_buckets_over_cap', 0):,} pairs); "
                   f"{cand.get('pairs_verified', 0):,} verified: {cand.get('pairs_above_threshold', 0):,} above the "
                   f"threshold, {cand.get('pairs_rejected', 0):,} rejected; "
                   f"{cand.get('buckets_over_cap_second_pass', 0):,} buckets needed the second pass; "
                   f"{cand.get('pairs_not_verified', 0):,} pairs not verified"]
        rules = clusters.get("removed_by_rule", {})
        summary.append(f"keep_rule {self.config.keep_rule}: the greedy rule removes {rules.get('greedy', 0):,} "
                       f"documents, one kept per component {rules.get('component', 0):,}")
        sized = reduced.get("partitions") or {}
        if sized:
            summary.append(f"{sized['count']:,} band-key partitions ({'sized from ' if sized['setting'] == 'auto' else 'set for '}"
                           f"{sized['docs']:,} documents, {sized['text_bytes']:,} bytes of text)")
        report = {"clusters": clusters, "candidates": cand, "cluster_members": stats.get("cluster_members", {}),
                  "partitions": sized.get("count"), "summary": summary}
        if "earlier_verify" in reduced:  # `against`: what the earlier runs' documents removed, per run
            earlier = {k: v for k, v in reduced["earlier_verify"].items() if k != "decision_files"}
            report["earlier_runs"] = {**earlier, **(reduced.get("earlier_pairs") or {})}
            summary.append(f"{earlier.get('earlier_exact_duplicates', 0):,} exact and "
                           f"{earlier.get('earlier_near_duplicates', 0):,} near duplicates of earlier runs' documents "
                           f"removed ({earlier.get('earlier_pairs_verified', 0):,} pairs verified, "
                           f"{earlier.get('earlier_pairs_not_verified', 0):,} not verified)")
        return report
