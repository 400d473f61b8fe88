"""The keep/drop decisions over duplicate components, as arrays aligned with the sorted nodes: the visit order
from the `keep` rules, the choice over a batch of edges (greedy; the component rule and cluster sizes from
`keep_rules`), and the columns of the decision files, of ``clusters.parquet`` and of the per-source cluster sizes.
Pure functions over Arrow tables and numpy arrays."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tokenmill.dedup.clusters import greedy_drops
from tokenmill.dedup.keep_rules import one_per_component, removal_counts, stands_for

__all__ = ["CLUSTERS_SCHEMA", "REASONS", "Decisions", "decide", "merge_runs", "merge_summaries", "rank"]

REASONS = pa.array(["exact_duplicate", "near_duplicate", "component_duplicate", None], pa.string())
"""Decision codes: 0, 1 and 2 index these reasons, 3 (kept) a null. 2 only under the component rule."""
COMPONENT = 2
KEPT = 3
GREEDY_CODES = (0, 1)
"""The codes of what the greedy rule removes."""
CLUSTERS_SCHEMA = pa.schema({"cluster": pa.string(), "id": pa.string(), "source": pa.string(), "kept": pa.bool_(),
                             "reason": pa.string(), "removed_by": pa.string(), "jaccard": pa.float64(),
                             "cluster_size": pa.int64()})
"""``clusters.parquet``'s columns (`cluster_size`: the documents a kept member stands for, null for a removed
one; `tokenmill.dedup.keep_rules`)."""


def rank(keep: list[str], members: pa.Table, nodes: np.ndarray) -> np.ndarray:
    """Each node's place in the visit order from the `keep` rules (smaller first), ties broken by id, then
    reference: one Arrow sort (strings compare as UTF-8 bytes, the same order as Python's code points). `members`
    holds (id, length) per node, in the order of `nodes`. Verify orders the members of over-cap groups by it too, so
    leader clustering starts where the clusters phase would."""
    length = members.column("length").to_numpy()
    keys = {}
    for i, rule in enumerate(keep):
        keys[f"k{i}"] = (pa.array(-length) if rule == "longest" else pa.array(length) if rule == "shortest"
                         else members.column("id"))
    table = pa.table({**keys, "id": members.column("id"), "node": pa.array(nodes, pa.uint64())})
    order = pc.sort_indices(table, sort_keys=[(name, "ascending") for name in table.column_names]).to_numpy()
    ranks = np.empty(nodes.size, np.int64)
    ranks[order] = np.arange(nodes.size)
    return ranks


def decide(edges: pa.Table, visit: Callable[[np.ndarray], np.ndarray]
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
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


@dataclass(frozen=True)
class Decisions:
    """Per node (sorted references): its component (smallest node), its decision code (`REASONS`; 2 = kept), the
    index of the document that removed it and their Jaccard; each node's root and whether it was dropped, computed
    once; `order`, the nodes by (component, node)."""

    nodes: np.ndarray
    comp: np.ndarray
    code: np.ndarray
    by: np.ndarray
    jaccard: np.ndarray
    root: np.ndarray
    """Each node's component root as an index into `nodes`."""
    dropped: np.ndarray
    order: np.ndarray
    size: np.ndarray
    """Each node's cluster size: the documents it stands for when kept, 0 when removed (`keep_rules.stands_for`)."""
    removals: dict
    """Documents the greedy and the component rule remove from these components (`keep_rules.removal_counts`)."""

    @classmethod
    def of(cls, nodes: np.ndarray, comp: np.ndarray, found: Iterable[tuple[np.ndarray, ...]],
           component_rank: np.ndarray | None = None) -> "Decisions":
        """The decisions of every batch (`decide`'s results) over the nodes and components of `component_index`;
        with `component_rank` (each node's visit rank), the component rule on top (`keep_rules`)."""
        code = np.full(nodes.size, KEPT, np.int8)
        by = np.zeros(nodes.size, np.int64)
        jaccard = np.zeros(nodes.size, np.float64)
        for gone, reason, kept_by, sims in found:
            at = np.searchsorted(nodes, gone)
            code[at], by[at], jaccard[at] = reason, np.searchsorted(nodes, kept_by), sims
        root = np.searchsorted(nodes, comp)
        removals = removal_counts(code, root, GREEDY_CODES)
        if component_rank is not None:
            code, by, _ = one_per_component(code, by, root, component_rank, KEPT, COMPONENT)
        dropped = code != KEPT
        return cls(nodes, comp, code, by, jaccard, root, dropped, np.lexsort((nodes, comp)), stands_for(dropped, by),
                   removals)

    def columns(self, ids: pa.Array, rows: np.ndarray) -> dict[str, pa.Array]:
        """reason, kept_by, jaccard and cluster (ids: the document id of each node) of the nodes at `rows`."""
        drop = self.dropped[rows]
        # A component duplicate has no verified edge to the document that removed it: no Jaccard.
        return {
            "reason": REASONS.take(pa.array(self.code[rows], pa.int8())),
            "kept_by": ids.take(pa.array(self.by[rows], pa.int64(), mask=~drop)),
            "jaccard": pa.array(self.jaccard[rows], pa.float64(), mask=~drop | (self.code[rows] == COMPONENT)),
            "cluster": ids.take(pa.array(self.root[rows], pa.int64())),
            "cluster_size": pa.array(self.size[rows], pa.int64(), mask=drop),
        }

    def by_shard(self) -> Iterator[tuple[int, np.ndarray]]:
        """(input shard index, the rows of its nodes), shards ascending."""
        shard_of = (self.nodes >> np.uint64(32)).astype(np.int64)
        size = self.nodes.size
        cuts = np.flatnonzero(np.r_[True, shard_of[1:] != shard_of[:-1]]) if size else np.zeros(0, np.int64)
        for start, stop in zip(cuts.tolist(), [*cuts[1:].tolist(), size]):
            yield int(shard_of[start]), np.arange(start, stop)

    def shard_table(self, ids: pa.Array, rows: np.ndarray) -> pa.Table:
        """One input shard's decision file: (doc, reason, kept_by, jaccard, cluster, cluster_size) of its nodes at
        `rows`."""
        return pa.table({"doc": pa.array(self.nodes[rows], pa.uint64()), **self.columns(ids, rows)})

    def clusters_table(self, ids: pa.Array, sources: pa.Array) -> pa.Table:
        """``clusters.parquet``: members by (cluster, document)."""
        order = self.order
        cols = self.columns(ids, order)
        return pa.table({
            "cluster": cols["cluster"],
            "id": ids.take(pa.array(order, pa.int64())),
            "source": sources.take(pa.array(order, pa.int64())),
            "kept": pa.array(~self.dropped[order]),
            "reason": cols["reason"],
            "removed_by": cols["kept_by"],
            "jaccard": cols["jaccard"],
            "cluster_size": cols["cluster_size"],
        })

    def summary(self, sources: pa.Array) -> dict:
        """Clusters, their sizes per source of the document each keeps, exact and near duplicates removed."""
        order = self.order
        return {
            "clusters": int(np.unique(self.comp).size),
            "by_source": _by_source(self.comp[order], order, self.dropped[order], self.root[order], sources),
            "exact_duplicates": int((self.code == 0).sum()),
            "near_duplicates": int((self.code == 1).sum()),
        }


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


def merge_summaries(parts: Iterable[dict]) -> dict:
    """:meth:`Decisions.summary` of every component from the summaries of disjoint sets of whole components (the
    clusters tasks'): counts summed, size histograms summed per source, in the same order of keys."""
    clusters = exact = near = 0
    per_source: dict[str, dict[int, int]] = {}
    for part in parts:
        clusters += part["clusters"]
        exact += part["exact_duplicates"]
        near += part["near_duplicates"]
        for source, found in part["by_source"].items():
            histogram = per_source.setdefault(source, {})
            for size, n in found["size_histogram"].items():
                histogram[int(size)] = histogram.get(int(size), 0) + n
    by_source = {s: {"clusters": sum(c.values()), "size_histogram": {str(k): v for k, v in sorted(c.items())}}
                 for s, c in sorted(per_source.items())}
    return {"clusters": clusters, "by_source": by_source, "exact_duplicates": exact, "near_duplicates": near}


def merge_runs(runs: list[Iterator[pa.Table]], key: str) -> Iterator[pa.Table]:
    """The rows of several runs, each sorted by `key` (an unsigned integer column) and given a table at a time,
    merged into one order by `key` (ties kept in run order, then row order), a table at a time: holding about one
    table per run, not the runs. A key held by one run only (a component, in the clusters tasks' files) may span
    several of its tables."""
    buffers: list[pa.Table | None] = [None] * len(runs)
    live = [True] * len(runs)

    def refill(i: int) -> None:
        table = next(runs[i], None)
        while table is not None and not table.num_rows:
            table = next(runs[i], None)
        if table is None:
            live[i] = False
        else:
            buffers[i] = table if buffers[i] is None else pa.concat_tables([buffers[i], table])

    for i in range(len(runs)):
        refill(i)
    while any(live):
        # Rows below the smallest last key of the runs still being read are complete in every run.
        lasts = {i: buffers[i].column(key)[-1].as_py() for i in range(len(runs)) if live[i]}
        frontier = min(lasts.values())
        ready = []
        for i, table in enumerate(buffers):
            if table is None or not table.num_rows:
                continue
            cut = int(np.searchsorted(table.column(key).to_numpy(), np.uint64(frontier), side="left"))
            if cut:
                ready.append(table.slice(0, cut))
                buffers[i] = table.slice(cut)
        if ready:
            yield _sorted_by(pa.concat_tables(ready), key)
        refill(min(i for i, last in lasts.items() if last == frontier))
    rest = [t for t in buffers if t is not None and t.num_rows]
    if rest:
        yield _sorted_by(pa.concat_tables(rest), key)


def _sorted_by(table: pa.Table, key: str) -> pa.Table:
    order = np.argsort(table.column(key).to_numpy(), kind="stable")
    return table.take(pa.array(order, pa.int64())).combine_chunks()
