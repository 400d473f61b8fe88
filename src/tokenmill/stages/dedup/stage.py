"""The dedup stage in six phases, each a set of tasks with bounded memory; no task holds the corpus.

(a) `signatures`, per shard: normalized-text hash, shingles, MinHash, band keys; band keys and exact hashes are
    written partitioned by key, and per document its length; no text, no shingles. (b) `buckets`, per partition:
    equal keys make candidate pairs (exact pairs apart); a bucket over the cap goes whole to (c). (c) `groups`, one
    task over the members of over-cap buckets only: buckets that share a document, in any band, make one group,
    so that a cluster found in every band is verified once, not once per band. (d) `verify`, per partition: exact
    Jaccard of the shingle sets, recomputed from the text of only the documents its pairs and groups name, read
    back from the input shards (each once, only those rows' row groups); leader clustering inside each group.
    (e) `clusters`, one task over edges only: components, then the keep/drop choice (ids and sources from the
    input shards, lengths from (a)). (f) `filter`, per shard: drop what (e) decided. The reduced counts of (b),
    (d) and (e) reach `DedupStage.report` directly.
"""

from __future__ import annotations

import logging
import tempfile
from collections import Counter
from typing import Any, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tokenmill.dedup.candidates import candidate_pairs, exact_pairs
from tokenmill.dedup.clusters import components, greedy_drops, over_cap_groups, ranked
from tokenmill.dedup.leaders import cluster_bucket
from tokenmill.dedup.lsh import band_keys, choose_bands
from tokenmill.dedup.minhash import MinHasher
from tokenmill.dedup.shingles import exact_hash, shingle_hashes_many
from tokenmill.dedup.verify import verify
from tokenmill.pipeline import storage
from tokenmill.pipeline.columns import with_fallbacks
from tokenmill.pipeline.documents import parquet_bytes, read_rows, read_shard
from tokenmill.pipeline.contract import Phase, PlanContext, ShardsResult, Stage, Task, TaskContext
from tokenmill.pipeline.map_phase import shard_name, shard_tasks, split_and_write
from tokenmill.stages.dedup.config import DedupConfig

EXACT_BAND = 0xFFFF  # the band number exact hashes travel under

log = logging.getLogger(__name__)


def _doc_ref(shard_index: int, rows: np.ndarray) -> np.ndarray:
    return (np.uint64(shard_index) << np.uint64(32)) | rows.astype(np.uint64)


def _route(anchor: np.ndarray, partitions: int) -> np.ndarray:
    """The verify task of each anchor document (the smallest document of a bucket or a group): a mixed hash, so
    that references (shard << 32 | row) spread evenly; one function for pairs and groups, so that a cluster split
    into buckets within and over the cap goes to one task."""
    return ((anchor.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(40)) % np.uint64(partitions)


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


def _rows_by_shard(docs: np.ndarray) -> list[tuple[int, np.ndarray, np.ndarray]]:
    """Split sorted unique document references by shard: (shard index, references, rows within the shard)."""
    docs = np.unique(docs.astype(np.uint64, copy=False))
    shard = (docs >> np.uint64(32)).astype(np.int64)
    cuts = np.flatnonzero(np.r_[True, shard[1:] != shard[:-1]]) if docs.size else np.zeros(0, np.int64)
    return [(int(shard[a]), part, (part & np.uint64(0xFFFFFFFF)).astype(np.int64))
            for a, part in zip(cuts.tolist(), np.split(docs, cuts[1:]))]


def _band_bytes(table: pa.Table) -> bytes:
    """A band-key file as Parquet: keys are random 64-bit values, so plain (a dictionary only adds to them); the
    document references ascend within a file, so delta-encoded (under a byte a row instead of about 2.5)."""
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="zstd", use_dictionary=["band"],
                   column_encoding={"key": "PLAIN", "doc": "DELTA_BINARY_PACKED"})
    return sink.getvalue().to_pybytes()


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
        docs = _doc_ref(task.params["index"], np.arange(len(texts)))
        shingles = shingle_hashes_many(texts, _langs(stage, table), word_ngram=cfg.word_ngram,
                                       char_ngram=cfg.char_ngram)
        hashes = [exact_hash(t) for t in texts]
        signatures = stage.hasher.signatures(shingles) if texts else np.zeros((0, cfg.num_perm), np.uint64)
        del shingles
        keys = band_keys(signatures, stage.bands, stage.rows)
        # Row i of this file is row i of the input shard (document reference index << 32 | i); id and source are
        # read back from the input shard where needed, the length (characters) would need the whole text.
        ctx.write(f"_work/docs/{task.key}.parquet", parquet_bytes(pa.table({
            "length": pc.utf8_length(table.column("text")).cast(pa.int64()),
        })))
        band = np.repeat(np.arange(stage.bands, dtype=np.uint16)[None, :], len(texts), axis=0).ravel()
        doc_per_band = np.repeat(docs, stage.bands)
        flat = keys.ravel()
        # The 128-bit exact hash travels as two uint64: its first 8 bytes are the key, the last 8 `exact`.
        halves = np.frombuffer(b"".join(hashes), dtype="<u8").reshape(-1, 2).astype(np.uint64)
        exact_key, exact_rest = halves[:, 0], halves[:, 1]
        for p in range(stage.config.partitions):
            mask = (flat % np.uint64(stage.config.partitions)) == p
            emask = (exact_key % np.uint64(stage.config.partitions)) == p
            ctx.write(f"_work/bands/p{p:04d}/{task.key}.parquet", _band_bytes(pa.table({
                "band": pa.array(np.concatenate([band[mask], np.full(emask.sum(), EXACT_BAND, np.uint16)]), pa.uint16()),
                "key": pa.array(np.concatenate([flat[mask], exact_key[emask]]), pa.uint64()),
                "doc": pa.array(np.concatenate([doc_per_band[mask], docs[emask]]), pa.uint64()),
                "exact": pa.array(np.concatenate([np.zeros(int(mask.sum()), np.uint64), exact_rest[emask]]), pa.uint64(),
                                  mask=np.r_[np.ones(int(mask.sum()), bool), np.zeros(int(emask.sum()), bool)]),
            })))
        return {"docs": len(texts)}


def _sum_counts(results: Mapping[str, Any]) -> dict[str, int]:
    """Sum the tasks' count dicts key by key (task keys sorted, so the order never depends on scheduling)."""
    total: Counter = Counter()
    for key in sorted(results):
        total.update(results[key])
    return {k: int(total[k]) for k in sorted(total)}


def _exact_digests(key: np.ndarray, exact: pa.ChunkedArray) -> np.ndarray:
    """The 16-byte exact hashes (``S16``) of the exact rows of a band file from their key (first 8 bytes) and
    `exact` (last 8). A file written before the hash was split carries the whole digest in `exact` (binary): a run
    begun by that code and resumed by this one reads it as it is."""
    if pa.types.is_fixed_size_binary(exact.type) or pa.types.is_binary(exact.type):
        return np.array(exact.to_pylist(), dtype="S16")
    rest = exact.to_numpy().astype(np.uint64, copy=False)
    return np.stack([key.astype(np.uint64, copy=False), rest], axis=1).astype("<u8").view("S16").ravel()


class Buckets(Phase):
    """Per partition: all pairs of the buckets within the cap; the members of buckets over it, for `verify`."""

    name = "buckets"

    def plan(self, stage: "DedupStage", ctx: PlanContext) -> list[Task]:
        return [Task(key=f"p{p:04d}") for p in range(stage.config.partitions)]

    def reduce(self, stage: "DedupStage", results: Mapping[str, Any], ctx: PlanContext) -> Any:
        return _sum_counts(results)

    def run(self, stage: "DedupStage", task: Task, ctx: TaskContext) -> Any:
        rows = _read_all(ctx, f"_work/bands/{task.key}")
        empty = np.zeros((0, 2), np.uint64)
        near, exact, anchor = empty, empty, np.zeros(0, np.uint64)
        over_bucket, over_doc, over_pairs, over_buckets = np.zeros(0, np.int64), np.zeros(0, np.uint64), 0, 0
        if rows is not None and rows.num_rows:
            band = rows.column("band").to_numpy()
            is_exact = band == EXACT_BAND
            key, doc = rows.column("key").to_numpy(), rows.column("doc").to_numpy()
            found = candidate_pairs(band[~is_exact], key[~is_exact], doc[~is_exact], stage.config.max_pairs_per_bucket)
            near, over_bucket, over_doc, anchor = found.pairs, found.over_cap_bucket, found.over_cap_doc, found.anchor
            over_pairs, over_buckets = found.over_cap_pairs, found.buckets_over_cap
            exact_bytes = _exact_digests(key[is_exact], rows.column("exact").filter(pa.array(is_exact)))
            exact = exact_pairs(exact_bytes, doc[is_exact])
        # Each pair to the verify task of its anchor (exact pairs: their group's smallest document, the first of
        # each pair), so a pair proposed by several bands' buckets is verified once, with its cluster's documents.
        pairs = np.concatenate([exact, near])
        is_exact = np.r_[np.ones(len(exact), bool), np.zeros(len(near), bool)]
        target = _route(np.concatenate([exact[:, 0], anchor]), stage.config.partitions)
        for p in range(stage.config.partitions):
            mine = target == p
            ctx.write(f"_work/pairs/p{p:04d}/{task.key}.parquet", parquet_bytes(pa.table({
                "a": pa.array(pairs[mine, 0], pa.uint64()),
                "b": pa.array(pairs[mine, 1], pa.uint64()),
                "exact": pa.array(is_exact[mine]),
            })))
        ctx.write(f"_work/over_cap/{task.key}.parquet", parquet_bytes(pa.table({
            "bucket": pa.array(over_bucket, pa.int64()),
            "doc": pa.array(over_doc, pa.uint64()),
        })))
        return {"exact_pairs": int(len(exact)), "candidate_pairs": int(len(near)),
                "buckets_over_cap": int(over_buckets), "pairs_in_buckets_over_cap": int(over_pairs)}


class Groups(Phase):
    """One task: the over-cap buckets of every partition and band joined into groups by shared documents; each
    group goes to one verify task (by a hash of its smallest document), written as `_work/groups/p####`."""

    name = "groups"

    def plan(self, stage: "DedupStage", ctx: PlanContext) -> list[Task]:
        return [Task(key="all")]

    def run(self, stage: "DedupStage", task: Task, ctx: TaskContext) -> Any:
        partitions = stage.config.partitions
        buckets, docs = [np.zeros(0, np.uint64)], [np.zeros(0, np.uint64)]
        for p in range(partitions):
            over = pq.read_table(storage.join(ctx.stage_dir, f"_work/over_cap/p{p:04d}.parquet"), filesystem=ctx.fs)
            # A bucket index is dense within its partition: (partition, index) names it across partitions.
            buckets.append((np.uint64(p) << np.uint64(32)) | over.column("bucket").to_numpy().astype(np.uint64))
            docs.append(over.column("doc").to_numpy().astype(np.uint64, copy=False))
        group, doc = over_cap_groups(np.concatenate(buckets), np.concatenate(docs))
        # Spread groups over the verify tasks by a mixed hash of the group's smallest document (refs are shard, row).
        target = _route(group, partitions)
        for p in range(partitions):
            mine = target == p
            g = group[mine]
            dense = np.cumsum(np.r_[True, g[1:] != g[:-1]]) - 1 if g.size else np.zeros(0, np.int64)
            ctx.write(f"_work/groups/p{p:04d}.parquet", parquet_bytes(pa.table({
                "bucket": pa.array(dense, pa.int64()),
                "doc": pa.array(doc[mine], pa.uint64()),
            })))
        return {"groups": int(np.unique(group).size), "docs": int(doc.size)}


class Verify(Phase):
    """Per partition: exact Jaccard of the candidate pairs; leader clustering inside each group of over-cap buckets."""

    name = "verify"

    def plan(self, stage: "DedupStage", ctx: PlanContext) -> list[Task]:
        return [Task(key=f"p{p:04d}", params={"paths": [s["path"] for s in ctx.input_shards]})
                for p in range(stage.config.partitions)]

    @staticmethod
    def _read_back(stage: "DedupStage", ctx: TaskContext, paths: list[str], needed: np.ndarray
                   ) -> tuple[dict[int, np.ndarray], pa.Table]:
        """Shingle sets and (id, length) of the `needed` documents (sorted, unique; the table in their order): their
        text read back from the input shards (each shard once, only its needed rows) and shingled exactly as
        `signatures` did."""
        cfg: DedupConfig = stage.config
        shingles: dict[int, np.ndarray] = {}
        parts = [pa.table({"id": pa.array([], pa.string()), "length": pa.array([], pa.int64())})]
        for index, docs, rows in _rows_by_shard(needed):
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
        cfg: DedupConfig = stage.config
        pairs = _routed_pairs(ctx, task.key)
        over = pq.read_table(storage.join(ctx.stage_dir, f"_work/groups/{task.key}.parquet"), filesystem=ctx.fs)
        a, b = pairs.column("a").to_numpy(), pairs.column("b").to_numpy()
        exact = pairs.column("exact").to_numpy(zero_copy_only=False)
        near = np.stack([a[~exact], b[~exact]], axis=1) if len(a) else np.zeros((0, 2), np.uint64)
        over_bucket, over_doc = over.column("bucket").to_numpy(), over.column("doc").to_numpy()
        needed = np.unique(np.r_[near.ravel(), over_doc])
        shingles, members = self._read_back(stage, ctx, task.params["paths"], needed)
        jaccard, keep = verify(near, shingles, cfg.threshold) if len(near) else (np.zeros(0), np.zeros(0, bool))
        counts = {"pairs_verified": int(len(near)), "pairs_above_threshold": int(keep.sum()),
                  "pairs_rejected": int(len(near) - keep.sum()), "pairs_compared_in_buckets_over_cap": 0,
                  "buckets_over_cap_second_pass": 0, "pairs_not_verified": 0}
        edges, sims = [near[keep]], [jaccard[keep]]
        if over_doc.size:
            # Members in the clusters phase's visit order (the `keep` rules, then id, then reference).
            visit = ranked(needed, Clusters._rank(cfg.keep, members, needed))
            starts = np.flatnonzero(np.r_[True, over_bucket[1:] != over_bucket[:-1]])
            for group in np.split(over_doc, starts[1:]):
                docs = group[visit(group)].tolist()
                found = cluster_bucket(docs, shingles, cfg.threshold, cfg.max_comparisons_per_document)
                edges.append(found.pairs)
                sims.append(found.jaccard)
                counts["pairs_verified"] += found.compared
                counts["pairs_compared_in_buckets_over_cap"] += found.compared
                counts["pairs_above_threshold"] += found.passed
                counts["pairs_rejected"] += found.rejected
                counts["buckets_over_cap_second_pass"] += int(found.second_pass)
                counts["pairs_not_verified"] += found.not_verified
        if counts["pairs_not_verified"]:
            log.warning("dedup verify %s: %d pairs of buckets over the cap were not verified "
                        "(max_comparisons_per_document = %d)", task.key, counts["pairs_not_verified"],
                        cfg.max_comparisons_per_document)
        near_edges, near_sims = _unique_edges(np.concatenate(edges), np.concatenate(sims))
        ctx.write(f"_work/edges/{task.key}.parquet", parquet_bytes(pa.table({
            "a": pa.array(np.r_[a[exact], near_edges[:, 0]], pa.uint64()),
            "b": pa.array(np.r_[b[exact], near_edges[:, 1]], pa.uint64()),
            "jaccard": pa.array(np.r_[np.ones(int(exact.sum())), near_sims], pa.float64()),
            "exact": pa.array(np.r_[np.ones(int(exact.sum()), bool), np.zeros(len(near_edges), bool)]),
        })))
        return counts


def _routed_pairs(ctx: TaskContext, key: str) -> pa.Table:
    """The pairs every buckets task routed to this verify task, each (a, b, exact) once, sorted."""
    files = storage.list_files(ctx.fs, storage.join(ctx.stage_dir, f"_work/pairs/{key}"), ".parquet")
    table = pa.concat_tables([pq.read_table(f, filesystem=ctx.fs) for f in files]) if files else None
    if table is None or not table.num_rows:
        return pa.table({"a": pa.array([], pa.uint64()), "b": pa.array([], pa.uint64()), "exact": pa.array([], pa.bool_())})
    a, b = table.column("a").to_numpy(), table.column("b").to_numpy()
    exact = table.column("exact").to_numpy(zero_copy_only=False)
    order = np.lexsort((b, a, ~exact))
    a, b, exact = a[order], b[order], exact[order]
    first = np.r_[True, (a[1:] != a[:-1]) | (b[1:] != b[:-1]) | (exact[1:] != exact[:-1])]
    return pa.table({"a": pa.array(a[first], pa.uint64()), "b": pa.array(b[first], pa.uint64()),
                     "exact": pa.array(exact[first])})


def _unique_edges(pairs: np.ndarray, sims: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted, duplicate-free edges (a pair found in several buckets once; its Jaccard is the same each time)."""
    pairs = pairs.reshape(-1, 2).astype(np.uint64, copy=False)
    if not len(pairs):
        return pairs, sims
    order = np.lexsort((pairs[:, 1], pairs[:, 0]))
    pairs, sims = pairs[order], sims[order]
    first = np.r_[True, (pairs[1:] != pairs[:-1]).any(axis=1)]
    return pairs[first], sims[first]


_EDGES_PER_BATCH = 1 << 22  # edge rows the clusters task holds at a time (about 100 MB as arrays)


def _edge_files(ctx: TaskContext) -> list[str]:
    return storage.list_files(ctx.fs, storage.join(ctx.stage_dir, "_work/edges"), ".parquet")


# Edge rows merged into the component index at a time: each merge sorts its rows with every node so far, so fewer,
# larger merges are faster but hold more. On the 10 GB web-like run's edges (169 million rows in 64 files, 2.5
# million nodes) the index alone peaked at 1,082 MB a file at a time, 1,171 MB at 4M rows (0.6x the time), 1,432 MB
# at 8M and 2,044 MB at 16M.
_INDEX_ROWS = 1 << 22


def _component_index(ctx: TaskContext, files: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every node of the edges with its component (its smallest node) and the edge rows whose first end it is
    (copies included): merged a group of files at a time, about _INDEX_ROWS edge rows, so that only the nodes and
    one group's edges are held; the components so far enter each merge as (node, root) edges."""
    nodes = comp = np.zeros(0, np.uint64)
    count = np.zeros(0, np.int64)
    pending: list[np.ndarray] = []

    def merge() -> None:
        nonlocal nodes, comp, count, pending
        found = np.concatenate(pending)
        pending = []
        merged, comp = components(np.concatenate([found, np.stack([nodes, comp], axis=1)]))
        moved = np.zeros(merged.size, np.int64)
        moved[np.searchsorted(merged, nodes)] = count
        count = moved + np.bincount(np.searchsorted(merged, found[:, 0]), minlength=merged.size)
        nodes = merged

    held = 0
    for path in files:
        table = pq.read_table(path, columns=["a", "b"], filesystem=ctx.fs)
        if not table.num_rows:
            continue
        pending.append(np.stack([table.column("a").to_numpy(), table.column("b").to_numpy()], axis=1))
        held += table.num_rows
        if held >= _INDEX_ROWS:
            merge()
            held = 0
    if pending:
        merge()
    return nodes, comp, count


def _batches(nodes: np.ndarray, comp: np.ndarray, count: np.ndarray) -> np.ndarray:
    """Each node's batch: whole components packed in order of their root into batches of about _EDGES_PER_BATCH
    edge rows (``count``: each node's rows from :func:`_component_index`, copies included); a component larger
    than that gets a batch of its own, so one crawl-wide boilerplate cluster never shares its batch (and the peak
    memory) with others."""
    root = np.searchsorted(nodes, comp)
    rows = np.bincount(root, weights=count, minlength=nodes.size).astype(np.int64)
    roots = np.flatnonzero(rows)
    batch_of_root = np.zeros(nodes.size, np.int64)
    batch, fill = 0, 0
    for r, size in zip(roots.tolist(), rows[roots].tolist()):
        if fill and fill + size > _EDGES_PER_BATCH:
            batch, fill = batch + 1, 0
        batch_of_root[r] = batch
        fill += size
    return batch_of_root[root]


def _unique_edge_rows(tables) -> pa.Table | None:
    """The edges of ``tables``, each (a, b, exact) once: a pair in the buckets of several bands is verified, and
    written, by the verify task of each band's partition; merged table by table (deduplicated whenever what is read
    since outgrows what is kept), so the task holds about the distinct edges, not every copy (up to one per band)."""
    kept: pa.Table | None = None
    pending: list[pa.Table] = []

    def merge() -> pa.Table:
        table = pa.concat_tables(([kept] if kept is not None else []) + pending)
        a, b = table.column("a").to_numpy(), table.column("b").to_numpy()
        exact = table.column("exact").to_numpy(zero_copy_only=False)
        order = np.lexsort((exact, b, a))
        a, b, exact = a[order], b[order], exact[order]
        first = np.r_[True, (a[1:] != a[:-1]) | (b[1:] != b[:-1]) | (exact[1:] != exact[:-1])] if a.size else []
        return table.take(pa.array(order[first], pa.int64())).combine_chunks()

    for table in tables:
        pending.append(table)
        if sum(t.num_rows for t in pending) >= max(kept.num_rows if kept else 0, 1 << 20):
            kept, pending = merge(), []
    if pending:
        kept = merge()
    return kept


def _batch_edges(ctx: TaskContext, files: list[str], nodes: np.ndarray, batch_of: np.ndarray, batch: int):
    """Each edge file's rows whose component falls in ``batch`` (``batch_of``: each node's batch), one file at a
    time."""
    last = int(batch_of.max()) if batch_of.size else 0
    for path in files:
        table = pq.read_table(path, filesystem=ctx.fs)
        if last:
            a = table.column("a").to_numpy()
            table = table.filter(pa.array(batch_of[np.searchsorted(nodes, a)] == batch))
        yield table


def _scatter_edges(ctx: TaskContext, files: list[str], nodes: np.ndarray, batch_of: np.ndarray, folder: str
                   ) -> list[str]:
    """Every edge file's rows written once to the file of their component's batch (Arrow IPC in the local `folder`),
    so that each batch then reads its own rows only: reading every edge file again per batch grew with the square
    of the run (612 s for 40 batches of 64 files at 10 GB of a web-like crawl)."""
    batches = int(batch_of.max()) + 1 if batch_of.size else 0
    paths = [f"{folder}/batch-{b:05d}.arrow" for b in range(batches)]
    writers: list = [None] * batches
    try:
        for path in files:
            table = pq.read_table(path, filesystem=ctx.fs)
            if not table.num_rows:
                continue
            batch = batch_of[np.searchsorted(nodes, table.column("a").to_numpy())]
            order = np.argsort(batch, kind="stable")
            table, batch = table.take(pa.array(order, pa.int64())), batch[order]
            cuts = np.flatnonzero(np.r_[True, batch[1:] != batch[:-1]])
            for start, stop in zip(cuts.tolist(), [*cuts[1:].tolist(), batch.size]):
                b = int(batch[start])
                if writers[b] is None:
                    writers[b] = pa.ipc.new_file(paths[b], table.schema)
                writers[b].write_table(table.slice(start, stop - start))
    finally:
        for writer in writers:
            if writer is not None:
                writer.close()
    return [path for path, writer in zip(paths, writers) if writer is not None]


def _read_scattered(path: str):
    """One batch's edges from `_scatter_edges`, a record batch at a time."""
    with pa.OSFile(path) as source:  # read into memory, not mapped: the tables outlive the file
        reader = pa.ipc.open_file(source)
        for i in range(reader.num_record_batches):
            yield pa.Table.from_batches([reader.get_batch(i)])


_REASONS = pa.array(["exact_duplicate", "near_duplicate", None], pa.string())
"""Decision codes: 0 and 1 index these reasons, 2 (kept) a null."""


def _decide(edges: pa.Table, visit) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The removed documents over whole components' edges, as arrays (removed, reason code, kept document,
    Jaccard): exact duplicates first (one kept per hash), then the near-duplicate choice among the documents that
    are left."""
    a, b = edges.column("a").to_numpy(), edges.column("b").to_numpy()
    jac, exact = edges.column("jaccard").to_numpy(), edges.column("exact").to_numpy(zero_copy_only=False)
    pairs = np.stack([a, b], axis=1)
    gone, by, sims = greedy_drops(pairs[exact], jac[exact], visit)
    near = ~exact & ~np.isin(a, gone) & ~np.isin(b, gone)
    n_gone, n_by, n_sims = greedy_drops(pairs[near], jac[near], visit)
    return (np.concatenate([gone, n_gone]), np.r_[np.zeros(gone.size, np.int8), np.ones(n_gone.size, np.int8)],
            np.concatenate([by, n_by]), np.concatenate([sims, n_sims]))


class Clusters(Phase):
    """Over edges only: exact duplicates first (one kept per hash), then near-duplicates among what is left."""

    name = "clusters"

    def reduce(self, stage: "DedupStage", results: Mapping[str, Any], ctx: PlanContext) -> Any:
        return results["all"]

    def plan(self, stage: "DedupStage", ctx: PlanContext) -> list[Task]:
        return [Task(key="all", params={"shards": [shard_name(s["path"]) for s in ctx.input_shards],
                                        "paths": [s["path"] for s in ctx.input_shards]})]

    def run(self, stage: "DedupStage", task: Task, ctx: TaskContext) -> Any:
        # Components first, streamed over the edge files (nodes only); then the keep/drop choice one batch of
        # components at a time, each batch's edges read again from the files. Components are independent, so
        # this decides exactly what one pass over every edge would, holding about _EDGES_PER_BATCH edges. Every
        # per-document value is an array aligned with the sorted nodes (Python objects per document were most of
        # the task's memory at millions of cluster members).
        files = _edge_files(ctx)
        nodes, comp, count = _component_index(ctx, files)
        shards = task.params["shards"]
        members = self._members(ctx, shards, task.params["paths"], nodes)
        ids, sources = members.column("id").combine_chunks(), members.column("source").combine_chunks()
        visit = ranked(nodes, self._rank(stage.config.keep, members, nodes))
        found = []
        if count.sum() > _EDGES_PER_BATCH:
            batch_of = _batches(nodes, comp, count)
            with tempfile.TemporaryDirectory(prefix="tokenmill-dedup-edges-") as folder:
                for path in _scatter_edges(ctx, files, nodes, batch_of, folder):
                    edges = _unique_edge_rows(_read_scattered(path))
                    if edges is not None and edges.num_rows:
                        found.append(_decide(edges, visit))
        elif nodes.size:
            edges = _unique_edge_rows(_batch_edges(ctx, files, nodes, np.zeros(nodes.size, np.int64), 0))
            if edges is not None and edges.num_rows:
                found.append(_decide(edges, visit))
        # Per node: its decision code (2 = kept), the index of the document that removed it, and the Jaccard.
        code = np.full(nodes.size, 2, np.int8)
        by = np.zeros(nodes.size, np.int64)
        jaccard = np.zeros(nodes.size, np.float64)
        for gone, reason, kept_by, sims in found:
            at = np.searchsorted(nodes, gone)
            code[at], by[at], jaccard[at] = reason, np.searchsorted(nodes, kept_by), sims
        dropped = code != 2
        root = np.searchsorted(nodes, comp)

        def columns(rows: np.ndarray) -> dict[str, pa.Array]:
            drop = dropped[rows]
            return {
                "reason": _REASONS.take(pa.array(code[rows], pa.int8())),
                "kept_by": ids.take(pa.array(by[rows], pa.int64(), mask=~drop)),
                "jaccard": pa.array(jaccard[rows], pa.float64(), mask=~drop),
                "cluster": ids.take(pa.array(root[rows], pa.int64())),
            }

        shard_of = (nodes >> np.uint64(32)).astype(np.int64)
        cuts = np.flatnonzero(np.r_[True, shard_of[1:] != shard_of[:-1]]) if nodes.size else np.zeros(0, np.int64)
        for start, stop in zip(cuts.tolist(), [*cuts[1:].tolist(), nodes.size]):
            rows = np.arange(start, stop)
            ctx.write(f"_work/decisions/{shards[shard_of[start]]}.parquet", parquet_bytes(pa.table({
                "doc": pa.array(nodes[rows], pa.uint64()), **columns(rows)})))
        # clusters.parquet: members by (cluster, document).
        order = np.lexsort((nodes, comp))
        cols = columns(order)
        ctx.write("clusters.parquet", parquet_bytes(pa.table({
            "cluster": cols["cluster"],
            "id": ids.take(pa.array(order, pa.int64())),
            "source": sources.take(pa.array(order, pa.int64())),
            "kept": pa.array(~dropped[order]),
            "reason": cols["reason"],
            "removed_by": cols["kept_by"],
            "jaccard": cols["jaccard"],
        })))
        return {
            "clusters": int(np.unique(comp).size),
            "by_source": self._by_source(comp[order], order, dropped[order], root[order], sources),
            "exact_duplicates": int((code == 0).sum()),
            "near_duplicates": int((code == 1).sum()),
        }

    @staticmethod
    def _by_source(comp: np.ndarray, rows: np.ndarray, dropped: np.ndarray, root: np.ndarray, sources: pa.Array
                   ) -> dict[str, dict]:
        """Per source of the document each cluster keeps (its smallest kept member, else its root): how many
        clusters, and how large. The arguments are members sorted by (cluster, document)."""
        if not comp.size:
            return {}
        starts = np.flatnonzero(np.r_[True, comp[1:] != comp[:-1]])
        sizes = np.diff(np.r_[starts, comp.size])
        keeper = root[starts]  # the root, where no member is kept
        kept_at = np.flatnonzero(~dropped)
        first_kept = np.unique(comp[kept_at], return_index=True)
        keeper[np.searchsorted(comp[starts], first_kept[0])] = rows[kept_at[first_kept[1]]]
        counts = pa.table({"source": sources.take(pa.array(keeper, pa.int64())), "size": sizes}).group_by(
            ["source", "size"]).aggregate([([], "count_all")]).to_pydict()
        per_source: dict[str, dict[int, int]] = {}
        for source, size, count in zip(counts["source"], counts["size"], counts["count_all"]):
            per_source.setdefault(source, {})[size] = count
        return {s: {"clusters": sum(c.values()), "size_histogram": {str(k): v for k, v in sorted(c.items())}}
                for s, c in sorted(per_source.items())}

    @staticmethod
    def _members(ctx: TaskContext, shards: list[str], paths: list[str], nodes: np.ndarray) -> pa.Table:
        """(id, length, source) of the documents in edges, only those, one row per node in the order of `nodes`:
        id and source from the input shards (only those columns and row groups), the length from the signatures
        phase's `_work/docs`; each shard once."""
        parts = []
        for index, _, rows in _rows_by_shard(nodes):
            table = read_rows(storage.join(ctx.input_dir, paths[index]), rows, ["id", "source"], ctx.fs)
            lengths = read_rows(storage.join(ctx.stage_dir, f"_work/docs/{shards[index]}.parquet"), rows,
                                ["length"], ctx.fs).column("length")
            parts.append(pa.table({"id": table.column("id").cast(pa.string()), "length": lengths.cast(pa.int64()),
                                   "source": table.column("source").cast(pa.string())}))
        schema = pa.schema({"id": pa.string(), "length": pa.int64(), "source": pa.string()})
        return pa.concat_tables(parts) if parts else schema.empty_table()

    @staticmethod
    def _rank(keep: list[str], members: pa.Table, nodes: np.ndarray) -> np.ndarray:
        """Each node's place in the visit order from the `keep` rules (smaller first), ties broken by id, then
        reference: one Arrow sort (strings compare as UTF-8 bytes, the same order as Python's code points). Verify
        orders the members of over-cap groups by it too, so leader clustering starts where the clusters phase would."""
        length = members.column("length").to_numpy()
        keys = {}
        for i, rule in enumerate(keep):
            keys[f"k{i}"] = (pa.array(-length) if rule == "longest" else pa.array(length) if rule == "shortest"
                             else members.column("id"))
        table = pa.table({**keys, "id": members.column("id"), "node": pa.array(nodes, pa.uint64())})
        order = pc.sort_indices(table, sort_keys=[(name, "ascending") for name in table.column_names]).to_numpy()
        rank = np.empty(nodes.size, np.int64)
        rank[order] = np.arange(nodes.size)
        return rank


class FilterShards(Phase):
    """Per shard: drop the documents the cluster phase removed; count cluster members per source."""

    name = "filter"
    writes_shards = True

    def plan(self, stage: "DedupStage", ctx: PlanContext) -> list[Task]:
        return shard_tasks(ctx)

    def run(self, stage: "DedupStage", task: Task, ctx: TaskContext) -> ShardsResult:
        table = read_shard(storage.join(ctx.input_dir, task.inputs[0]), ctx.fs)
        reasons = [None] * table.num_rows
        stats: dict[str, Any] = {}
        path = storage.join(ctx.stage_dir, f"_work/decisions/{task.key}.parquet")
        if storage.exists(ctx.fs, path):
            decided = pq.read_table(path, filesystem=ctx.fs)
            source = task.params["source"]
            for doc, reason in zip(decided.column("doc").to_pylist(), decided.column("reason").to_pylist()):
                row = doc & 0xFFFFFFFF
                reasons[row] = reason
                key = reason or "kept_in_cluster"
                stats.setdefault("cluster_members", {}).setdefault(source, {}).setdefault(key, 0)
                stats["cluster_members"][source][key] += 1
        entry = split_and_write(stage, ctx, task.key, task.params["source"], table, pa.array(reasons, pa.string()),
                                stats or None)
        entry["input"] = task.inputs[0]
        return ShardsResult([entry])


class DedupStage(Stage):
    """Exact, then MinHash-LSH near-duplicate removal above a Jaccard threshold (docs/dedup.md)."""

    name = "dedup"
    order = 30
    config_class = DedupConfig
    needs = frozenset({"id", "text", "source"})
    uses = frozenset({"lang"})
    drop_reasons = ("exact_duplicate", "near_duplicate")

    config: DedupConfig

    def __init__(self, config: DedupConfig, run):
        super().__init__(config, run)
        if config.bands is not None:
            self.bands, self.rows = config.bands, config.rows
        else:
            self.bands, self.rows = choose_bands(config.threshold, config.num_perm, config.min_recall)
        self._hasher = None

    @property
    def hasher(self) -> MinHasher:
        if self._hasher is None:
            self._hasher = MinHasher(self.config.num_perm, self.config.minhash_seed)
        return self._hasher

    def identity(self) -> dict[str, Any]:
        return {**super().identity(), "bands": self.bands, "rows": self.rows}

    def phases(self) -> list[Phase]:
        return [Signatures(), Buckets(), Groups(), Verify(), Clusters(), FilterShards()]

    def report(self, stats: Mapping[str, Any], reduced: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Clusters per source with their size histogram, members kept or dropped per source, and the candidate
        counts: pairs proposed, buckets over the cap, pairs verified, above the threshold, rejected, not verified."""
        reduced = reduced or {}
        clusters = reduced.get("clusters") or {}
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
        return {"clusters": clusters, "candidates": cand, "cluster_members": stats.get("cluster_members", {}),
                "summary": summary}
