"""Duplicate components over edge tables that arrive a file at a time, and the edges of each batch of whole
components, so that the clusters task decides one batch at a time and never holds every edge.

Edge tables have columns ``a``, ``b`` (document references, ``uint64``), ``jaccard`` and ``exact``; a pair may come
several times (verified in several partitions). Pure functions over Arrow tables and numpy arrays: the dedup stage
reads and writes the files.
"""

from __future__ import annotations

import tempfile
from typing import Callable, Iterable, Iterator

import numpy as np
import pyarrow as pa

from tokenmill.dedup.clusters import components

__all__ = ["EDGES_PER_BATCH", "INDEX_ROWS", "component_batches", "component_edges", "component_index", "in_batch",
           "read_scattered", "scatter_edges", "split_by_batch", "unique_edge_rows"]

EDGES_PER_BATCH = 1 << 22  # edge rows the clusters task holds at a time (about 100 MB as arrays)

# Edge rows merged into the component index at a time: each merge sorts its rows with every node so far, so fewer,
# larger merges are faster but hold more. On the 10 GB web-like run's edges (169 million rows in 64 files, 2.5
# million nodes) the index alone peaked at 1,082 MB a file at a time, 1,171 MB at 4M rows (0.6x the time), 1,432 MB
# at 8M and 2,044 MB at 16M.
INDEX_ROWS = 1 << 22


def component_index(tables: Iterable[pa.Table], rows_per_merge: int = INDEX_ROWS
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every node of the edges with its component (its smallest node) and the edge rows whose first end it is
    (copies included): merged a group of tables at a time, about `rows_per_merge` edge rows, so that only the
    nodes and one group's edges are held; the components so far enter each merge as (node, root) edges."""
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
    for table in tables:
        if not table.num_rows:
            continue
        pending.append(np.stack([table.column("a").to_numpy(), table.column("b").to_numpy()], axis=1))
        held += table.num_rows
        if held >= rows_per_merge:
            merge()
            held = 0
    if pending:
        merge()
    return nodes, comp, count


def component_batches(nodes: np.ndarray, comp: np.ndarray, count: np.ndarray, budget: int = EDGES_PER_BATCH
                      ) -> np.ndarray:
    """Each node's batch: whole components packed in order of their root into batches of about `budget` edge rows
    (``count``: each node's rows from :func:`component_index`, copies included); a component larger than that gets
    a batch of its own, so one crawl-wide boilerplate cluster never shares its batch (and the peak memory) with
    others."""
    root = np.searchsorted(nodes, comp)
    rows = np.bincount(root, weights=count, minlength=nodes.size).astype(np.int64)
    roots = np.flatnonzero(rows)
    batch_of_root = np.zeros(nodes.size, np.int64)
    batch, fill = 0, 0
    for r, size in zip(roots.tolist(), rows[roots].tolist()):
        if fill and fill + size > budget:
            batch, fill = batch + 1, 0
        batch_of_root[r] = batch
        fill += size
    return batch_of_root[root]


def unique_edge_rows(tables: Iterable[pa.Table]) -> pa.Table | None:
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


def in_batch(tables: Iterable[pa.Table], nodes: np.ndarray, batch_of: np.ndarray, batch: int) -> Iterator[pa.Table]:
    """Each table's rows whose component falls in ``batch`` (``batch_of``: each node's batch), one table at a
    time."""
    last = int(batch_of.max()) if batch_of.size else 0
    for table in tables:
        if last:
            a = table.column("a").to_numpy()
            table = table.filter(pa.array(batch_of[np.searchsorted(nodes, a)] == batch))
        yield table


def split_by_batch(table: pa.Table, nodes: np.ndarray, batch_of: np.ndarray) -> Iterator[tuple[int, pa.Table]]:
    """One table's rows cut by their component's batch: (batch, its rows), batches ascending, rows in their order
    within each; nothing for an empty table."""
    if not table.num_rows:
        return
    batch = batch_of[np.searchsorted(nodes, table.column("a").to_numpy())]
    order = np.argsort(batch, kind="stable")
    table, batch = table.take(pa.array(order, pa.int64())), batch[order]
    cuts = np.flatnonzero(np.r_[True, batch[1:] != batch[:-1]])
    for start, stop in zip(cuts.tolist(), [*cuts[1:].tolist(), batch.size]):
        yield int(batch[start]), table.slice(start, stop - start)


def component_edges(read: Callable[[list[str] | None], Iterator[pa.Table]], nodes: np.ndarray, comp: np.ndarray,
                    count: np.ndarray, budget: int = EDGES_PER_BATCH) -> Iterator[pa.Table]:
    """The distinct edges of each batch of whole components (:func:`component_batches`), a batch at a time.

    ``read(columns)`` gives the edge tables again on each call (the files a clusters task reads); ``nodes``,
    ``comp`` and ``count`` are :func:`component_index`'s over them. Every edge row is spilled once to the local
    file of its batch (Arrow IPC in a temporary folder), so that each batch then reads its own rows only (reading
    every edge file again per batch grew with the square of the run: 612 s for 40 batches of 64 files at 10 GB of
    a web-like crawl). Within the budget, one batch read directly."""
    if count.sum() > budget:
        batch_of = component_batches(nodes, comp, count, budget)
        with tempfile.TemporaryDirectory(prefix="tokenmill-dedup-edges-") as folder:
            for path in scatter_edges(read(None), nodes, batch_of, folder):
                yield unique_edge_rows(read_scattered(path))
    elif nodes.size:
        yield unique_edge_rows(in_batch(read(None), nodes, np.zeros(nodes.size, np.int64), 0))


def scatter_edges(tables: Iterator[pa.Table], nodes: np.ndarray, batch_of: np.ndarray, folder: str) -> list[str]:
    """Every edge row written once to the file of its component's batch (Arrow IPC in the local `folder`); the
    files written, by batch."""
    batches = int(batch_of.max()) + 1 if batch_of.size else 0
    paths = [f"{folder}/batch-{b:05d}.arrow" for b in range(batches)]
    writers: list = [None] * batches
    try:
        for table in tables:
            for b, rows in split_by_batch(table, nodes, batch_of):
                if writers[b] is None:
                    writers[b] = pa.ipc.new_file(paths[b], rows.schema)
                writers[b].write_table(rows)
    finally:
        for writer in writers:
            if writer is not None:
                writer.close()
    return [path for path, writer in zip(paths, writers) if writer is not None]


def read_scattered(path: str) -> Iterator[pa.Table]:
    """One batch's edges from :func:`scatter_edges`, a record batch at a time."""
    with pa.OSFile(path) as source:  # read into memory, not mapped: the tables outlive the file
        reader = pa.ipc.open_file(source)
        for i in range(reader.num_record_batches):
            yield pa.Table.from_batches([reader.get_batch(i)])
