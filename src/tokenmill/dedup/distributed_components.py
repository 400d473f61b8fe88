"""Connected components over edges split into P partitions, in rounds of P tasks, no task holding more than its
partition: what the dedup stage's `components` phase runs, then the routing of every edge to the task of its
component (`by_component`), so that the keep/drop choice runs per partition of whole components.

The algorithm is the alternating one of Kiveris, Lattanzi, Mirrokni, Rastogi and Vassilvitskii, "Connected
Components in MapReduce and Beyond" (SoCC 2014), after one round of local contraction:

0. **Contract.** Each task takes its partition of the verified edges (split by the owner of their first end) and
   replaces it by the stars of its local components (every node to the smallest node of its component within the
   partition: :func:`tokenmill.dedup.components.component_index`, streamed). Replacing any subset of the edges by a
   spanning forest of it keeps the components, and the near-duplicate cliques of a web crawl (169 million edge
   rows over 2.5 million documents at 10 GB) shrink to about one row per document.
1. **Large-star / small-star, alternating.** Every node belongs to one task, ``owner(node)`` (a mixed hash mod P),
   which receives every edge at that node (each edge is written once per end). *Large-star* at node ``u``: each
   neighbour ``v > u`` is linked to ``m(u)``, the smallest of ``u`` and its neighbours. *Small-star* at ``u``:
   ``u`` and each neighbour ``v < u`` are linked to the smallest neighbour. Each edge is rewritten by one of its
   ends (the smaller in large-star, the larger in small-star), so the node set and the components never change,
   and the paper proves that the graph becomes a forest of stars, each centred on its component's smallest node,
   in O(log^2 n) rounds (O(log n) in its experiments).
2. **Stop** at the first round whose input is already such a forest: every node has either no smaller neighbour
   (a centre) or exactly one neighbour, smaller (a leaf). Each task checks its own nodes (:func:`star_round`
   counts the others as ``violations``); both operations leave a star forest unchanged, so that round's output is
   the final one and each node's component is the smaller of itself and its neighbours (:func:`labels`): its
   smallest node, as :func:`tokenmill.dedup.clusters.components` labels it, so the keep/drop choice downstream
   sees the same components as the one task that held every edge did.

Why this one. The reference libraries do it as follows: datatrove's `MinhashDedupCluster` runs union-find over every
edge in one task (its #298: more tasks made that stage slower at 8 TB); NeMo Curator hands the whole edge list to
cuGraph's weakly connected components on GPUs (#471, #723: out of memory at 8 TB); Data-Juicer spreads one
union-find over Ray actors that call each other per edge; Spark GraphFrames runs this same large-star/small-star
algorithm. It fits tokenmill's contract as it is: each round is a map over partitions with a file shuffle between
rounds, deterministic, each task committed on its own (a worker killed mid-round reruns that task alone, from the
previous round's committed files), memory bounded by a partition's nodes, not by the corpus. Plain hash-to-min
label propagation needs as many rounds as the longest path between a node and its component's minimum (a chain of
edited copies is a long path); union-find over actors needs shared mutable state, which a rerun cannot replay.

The one skew left is inherent: a component's centre holds every member as a neighbour in the last rounds, so the
task of the largest component holds that component (10,000 documents, 160 KB, in the web-like benchmark).

Files: every round writes one Parquet file per task with a row group per destination task (`part`, a constant
int32 column, found by its statistics), so a round is P files, not P^2 (see :func:`split_bytes`).
"""

from __future__ import annotations

from typing import Any, Iterable, Iterator, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from tokenmill.dedup.components import component_index
from tokenmill.dedup.refs import route

__all__ = ["MAX_ROUNDS", "ROWS_PER_TASK", "RoundResult", "SplitWriter", "adjacency", "contract", "labels", "lookup", "owner", "parts_for", "read_part",
           "split_bytes", "star_round"]

MAX_ROUNDS = 200
"""A guard, never expected to be reached. Rounds grow with the logarithm of the longest path: a single chain (the
worst shape) of 1,000, 10,000 and 100,000 documents in random order took 16, 22 and 26 rounds over 64 partitions;
graphs of random edges and the web-like benchmark's clusters take a handful."""

PART = "part"
"""The column naming a row's destination (task or shard) in a split file: one value per row group."""


ROWS_PER_TASK = 1 << 22
"""Rows (node, neighbour) a components task of rounds 1 on holds at most, about (`parts_for`): 16 bytes a row, a few
times that while sorting. Past round 0 a round holds about two rows per document in a duplicate cluster (2.5
million documents at 10 GB of a web-like crawl), so it runs as a few tasks, not one per partition, each reading
fewer files."""


def parts_for(rows: int, budget: int, most: int) -> int:
    """The fewest tasks, a divisor of `most` (so that each reads whole destinations of a file split `most` ways),
    that hold at most about `budget` rows each."""
    need = max(1, -(-int(rows) // budget))
    return next(d for d in range(1, most + 1) if most % d == 0 and d >= min(need, most))


def owner(nodes: np.ndarray, partitions: int) -> np.ndarray:
    """The task each node belongs to: a mixed hash of the reference mod `partitions` (int64)."""
    return route(np.asarray(nodes, np.uint64), partitions).astype(np.int64)


def split_bytes(table: pa.Table, dest: np.ndarray, **options: Any) -> bytes:
    """`table` as Parquet bytes with one row group per destination (ascending; rows keep their order within one)
    and the destination as a `part` column, so that a reader of destination d reads only its row group.
    `options`: `pq.ParquetWriter`'s (encodings), beside zstd compression."""
    writer = SplitWriter(**options)
    writer.add(table, dest)
    return writer.finish()


class SplitWriter:
    """:func:`split_bytes` over tables given one at a time, holding at most about `budget` rows: below it, one row
    group per destination; each time the rows held reach it, they are written out as one row group per destination
    (a destination's rows then span several row groups, in the order given)."""

    def __init__(self, budget: int | None = None, **options: Any):
        self.budget = budget
        self.options = options
        self.pending: list[tuple[pa.Table, np.ndarray]] = []
        self.held = 0
        self.sink = pa.BufferOutputStream()
        self.writer: pq.ParquetWriter | None = None
        self.schema: pa.Schema | None = None

    def add(self, table: pa.Table, dest: np.ndarray) -> None:
        self.schema = self.schema or table.schema
        self.pending.append((table, np.asarray(dest, np.int64)))
        self.held += table.num_rows
        if self.budget is not None and self.held >= self.budget:
            self._flush()

    def _flush(self) -> None:
        if not self.pending:
            return
        table = pa.concat_tables([t for t, _ in self.pending])
        dest = np.concatenate([d for _, d in self.pending])
        self.pending, self.held = [], 0
        order = np.argsort(dest, kind="stable")
        dest = dest[order]
        if self.writer is None:
            self.writer = pq.ParquetWriter(self.sink, table.schema.append(pa.field(PART, pa.int32())),
                                           compression="zstd", **self.options)
        cuts = np.flatnonzero(np.r_[True, dest[1:] != dest[:-1]]) if dest.size else np.zeros(0, np.int64)
        for start, stop in zip(cuts.tolist(), [*cuts[1:].tolist(), dest.size]):
            # One destination's rows taken at a time, not the table reordered whole: a second copy of every row
            # was the largest allocation of a verify task writing millions of edges.
            rows = table.take(pa.array(order[start:stop], pa.int64()))
            self.writer.write_table(rows.append_column(PART, pa.array(dest[start:stop].astype(np.int32))),
                                    row_group_size=stop - start)

    def finish(self) -> bytes:
        """The file's bytes (a file with no row group when nothing was added)."""
        self._flush()
        if self.writer is None:
            schema = (self.schema or pa.schema([])).append(pa.field(PART, pa.int32()))
            self.writer = pq.ParquetWriter(self.sink, schema, compression="zstd", **self.options)
        self.writer.close()
        return self.sink.getvalue().to_pybytes()


def read_part(path: str, part: int, columns: list[str] | None = None, filesystem=None, modulo: int | None = None
              ) -> pa.Table | None:
    """The rows of `split_bytes`'s file at `path` for destination `part` (its row groups, found by the statistics
    of the `part` column), without that column; None when it has none. With `modulo`, the rows of every
    destination d with ``d % modulo == part``: a file split over P destinations read by one of P' tasks, P' a divisor
    of P, since ``owner(x, P) % P' == owner(x, P')``."""
    with (filesystem.open_input_file(path) if filesystem is not None else open(path, "rb")) as f:
        pf = pq.ParquetFile(f)
        meta = pf.metadata
        at = pf.schema_arrow.get_field_index(PART)

        def wanted(d: int) -> bool:
            return d == part if modulo is None else d % modulo == part

        groups = [i for i in range(meta.num_row_groups)
                  if meta.row_group(i).num_rows and wanted(meta.row_group(i).column(at).statistics.min)]
        if not groups:
            return None
        names = [n for n in pf.schema_arrow.names if n != PART] if columns is None else columns
        return pf.read_row_groups(groups, columns=names).replace_schema_metadata(None)


def contract(tables: Iterable[pa.Table]) -> tuple[np.ndarray, np.ndarray]:
    """Round 0 over one partition's edge tables (columns ``a``, ``b``), streamed: the stars of its local
    components as (node, its component's smallest node), every node but the centres once."""
    nodes, comp, _ = component_index(tables)
    leaf = nodes != comp
    return nodes[leaf], comp[leaf]


def adjacency(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Undirected edges as rows (node, neighbour) in both directions, self-loops left out: the row (x, y) goes to
    ``owner(x)``."""
    a, b = np.asarray(a, np.uint64), np.asarray(b, np.uint64)
    keep = a != b
    a, b = a[keep], b[keep]
    return np.concatenate([a, b]), np.concatenate([b, a])


def _neighbourhoods(src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows (node, neighbour) each once, sorted by node then neighbour, and the start of each node's run."""
    src, dst = np.asarray(src, np.uint64), np.asarray(dst, np.uint64)
    order = np.lexsort((dst, src))
    src, dst = src[order], dst[order]
    if src.size:
        first = np.r_[True, (src[1:] != src[:-1]) | (dst[1:] != dst[:-1])] & (src != dst)
        src, dst = src[first], dst[first]
    starts = np.flatnonzero(np.r_[True, src[1:] != src[:-1]]) if src.size else np.zeros(0, np.int64)
    return src, dst, starts


class RoundResult(NamedTuple):
    """One task's round: the edges it writes (undirected, as two arrays) and what it saw."""

    a: np.ndarray
    b: np.ndarray
    nodes: int
    """Nodes this task owns in the round's input."""
    violations: int
    """Of those, nodes that are neither a centre (no smaller neighbour) nor a leaf (one neighbour, smaller): zero
    in every task means the input was the final star forest."""


def star_round(src: np.ndarray, dst: np.ndarray, large: bool) -> RoundResult:
    """Large-star (`large`) or small-star over the rows (node, neighbour) of the nodes one task owns (every
    neighbour of each; copies and self-loops harmless). Returns the edges to write: each input edge is rewritten
    by one of its ends (the smaller end in large-star, the larger in small-star), so over all tasks the output holds
    the same nodes and components."""
    src, dst, starts = _neighbourhoods(src, dst)
    if not src.size:
        empty = np.zeros(0, np.uint64)
        return RoundResult(empty, empty, 0, 0)
    count = np.diff(np.r_[starts, src.size])
    node, lowest = src[starts], dst[starts]  # the smallest neighbour comes first
    smaller = dst < src
    n_smaller = np.add.reduceat(smaller.astype(np.int64), starts)
    violations = int(((n_smaller >= 1) & ((count > n_smaller) | (n_smaller >= 2))).sum())
    group = np.repeat(np.arange(starts.size), count)
    if large:
        # Each neighbour v > u to m(u) = min(u, its neighbours).
        m = np.minimum(node, lowest)
        up = ~smaller
        return RoundResult(dst[up], m[group[up]], int(starts.size), violations)
    # u and each neighbour v < u to u's smallest neighbour (when it has a smaller one).
    has = n_smaller >= 1
    down = smaller & (dst != lowest[group])
    a = np.concatenate([dst[down], node[has]])
    b = np.concatenate([lowest[group[down]], lowest[has]])
    return RoundResult(a, b, int(starts.size), violations)


def labels(src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """In the final star forest, the nodes one task owns (sorted) and each one's component: the smaller of itself
    and its neighbours (a leaf's one neighbour is its centre)."""
    src, dst, starts = _neighbourhoods(src, dst)
    if not src.size:
        return np.zeros(0, np.uint64), np.zeros(0, np.uint64)
    node = src[starts]
    return node, np.minimum(node, dst[starts])


def lookup(nodes: np.ndarray, comp: np.ndarray, of: np.ndarray) -> np.ndarray:
    """The component of each node in `of` from :func:`labels` (sorted `nodes`); a node not there (an edge to
    itself only) is its own component, as the single-task index makes it."""
    of = np.asarray(of, np.uint64)
    if not nodes.size:
        return of.copy()
    at = np.minimum(np.searchsorted(nodes, of), nodes.size - 1)
    return np.where(nodes[at] == of, comp[at], of)


def components_in_rounds(a: np.ndarray, b: np.ndarray, partitions: int, budget: int = ROWS_PER_TASK
                         ) -> tuple[np.ndarray, np.ndarray, int]:
    """The whole algorithm in one process, over arrays: what the stage's phases do with files between rounds
    (round 0 over `partitions`, later rounds over `parts_for` their rows and `budget`), for tests and benchmarks.
    Returns (sorted nodes, component = smallest node, rounds after contraction)."""
    a, b = np.asarray(a, np.uint64), np.asarray(b, np.uint64)
    parts = partitions
    rows = [[] for _ in range(parts)]  # per task: (src, dst) arrays routed to it
    first = owner(a, partitions)
    for p in range(partitions):
        mine = first == p
        u, v = contract([pa.table({"a": a[mine], "b": b[mine]})])
        _route(rows, u, v, parts)
    rounds = 0
    while True:
        if rounds >= MAX_ROUNDS:
            raise RuntimeError(f"connected components did not converge in {MAX_ROUNDS} rounds")
        rounds += 1
        held = sum(s.size for part in rows for s, _ in part)
        now = parts_for(held, budget, parts)
        nxt: list[list] = [[] for _ in range(now)]
        violations = 0
        for t in range(now):
            src, dst = _gather([x for q in range(parts) if q % now == t for x in rows[q]])
            found = star_round(src, dst, large=rounds % 2 == 1)
            violations += found.violations
            _route(nxt, found.a, found.b, now)
        rows, parts = nxt, now
        if not violations:
            break
    found = [labels(*_gather(rows[p])) for p in range(parts)]
    nodes = np.concatenate([n for n, _ in found] or [np.zeros(0, np.uint64)])
    comp = np.concatenate([c for _, c in found] or [np.zeros(0, np.uint64)])
    order = np.argsort(nodes, kind="stable")
    return nodes[order], comp[order], rounds


def _route(rows: list[list], a: np.ndarray, b: np.ndarray, partitions: int) -> None:
    src, dst = adjacency(a, b)
    dest = owner(src, partitions)
    for p in range(partitions):
        mine = dest == p
        if mine.any():
            rows[p].append((src[mine], dst[mine]))


def _gather(parts: list) -> tuple[np.ndarray, np.ndarray]:
    if not parts:
        return np.zeros(0, np.uint64), np.zeros(0, np.uint64)
    return np.concatenate([s for s, _ in parts]), np.concatenate([d for _, d in parts])


def iter_parts(paths: Iterable[str], part: int, columns: list[str] | None = None, filesystem=None,
               modulo: int | None = None) -> Iterator[pa.Table]:
    """:func:`read_part` of each file, one at a time, skipping files with nothing for `part`."""
    for path in paths:
        table = read_part(path, part, columns, filesystem, modulo)
        if table is not None and table.num_rows:
            yield table
