"""The clusters phase's engine decides one batch of components at a time: the same components, clusters and
removals as one pass over every edge, for edges spread over many files with copies across them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from tokenmill.dedup.clusters import components, greedy_keep, ranked
from tokenmill.dedup.components import component_batches, component_index, in_batch, unique_edge_rows
from tokenmill.dedup.decisions import decide


def web_like_edges(rng: np.random.Generator) -> pa.Table:
    """Clusters of power-law sizes, each a few exact edges and many near ones (stars, chains and cliques)."""
    a, b, exact = [], [], []
    next_doc = 0
    for _ in range(300):
        k = int(min(1 + rng.zipf(2.0), 200))
        docs = (np.arange(next_doc, next_doc + k, dtype=np.uint64) + (rng.integers(0, 8) << 32)).astype(np.uint64)
        next_doc += k
        m = int(rng.integers(k - 1, 3 * k)) if k > 1 else 0
        i, j = rng.integers(0, k, m), rng.integers(0, k, m)
        a.append(docs[np.minimum(i, j)]), b.append(docs[np.maximum(i, j)])
        exact.append(rng.random(m) < 0.3)
    a, b, exact = np.concatenate(a), np.concatenate(b), np.concatenate(exact)
    jaccard = np.where(exact, 1.0, np.round(rng.uniform(0.951, 0.999, a.size), 3))
    return pa.table({"a": pa.array(a, pa.uint64()), "b": pa.array(b, pa.uint64()),
                     "jaccard": pa.array(jaccard, pa.float64()), "exact": pa.array(exact)})


def edge_files(folder: Path, edges: pa.Table, part: np.ndarray, files: int) -> list[Path]:
    """`edges` spread over `files` Parquet files by `part`, as the verify tasks write them."""
    folder.mkdir(parents=True)
    for p in range(files):
        pq.write_table(edges.filter(pa.array(part == p)), folder / f"p{p:04d}.parquet")
    return sorted(folder.glob("*.parquet"))


def read(files: list[Path], columns: list[str] | None = None):
    """The edge files' tables, one at a time (as the stage reads them)."""
    return (pq.read_table(f, columns=columns) for f in files)


def test_batches_of_components_decide_what_one_pass_over_every_edge_decides(tmp_path):
    rng = np.random.default_rng(19)
    edges = web_like_edges(rng)
    # Spread over 12 files, a third of the rows again in a second file (a pair verified in several partitions).
    copies = pa.concat_tables([edges, edges.take(pa.array(rng.choice(edges.num_rows, edges.num_rows // 3)))])
    files = edge_files(tmp_path / "dedup" / "_work" / "edges", copies, rng.integers(0, 12, copies.num_rows), 12)
    assert len(files) == 12

    nodes, comp, count = component_index(read(files, ["a", "b"]))
    want_nodes, want_comp = components(np.stack([edges.column("a").to_numpy(), edges.column("b").to_numpy()], 1))
    a = copies.column("a").to_numpy()
    want_count = np.bincount(np.searchsorted(want_nodes, a), minlength=want_nodes.size)
    assert count.sum() == copies.num_rows
    assert nodes.tolist() == want_nodes.tolist() and comp.tolist() == want_comp.tolist()
    assert count.tolist() == want_count.tolist()
    # Merged a few files at a time (each merge carries the components so far): the same index and counts.
    for group_rows in (1, copies.num_rows // 5):
        got = component_index(read(files, ["a", "b"]), rows_per_merge=group_rows)
        assert [x.tolist() for x in got] == [nodes.tolist(), comp.tolist(), count.tolist()]
    assert len(set(comp.tolist())) > 100

    key = {int(d): (int(rng.integers(0, 3)), int(d)) for d in nodes}  # ties on the first rule: broken by doc
    rank = np.empty(nodes.size, np.int64)
    rank[sorted(range(nodes.size), key=lambda i: (key[int(nodes[i])], int(nodes[i])))] = np.arange(nodes.size)
    visit = ranked(nodes, rank)

    def decisions(edges: pa.Table) -> dict:
        gone, reason, by, sims = decide(edges, visit)
        return {d: ("exact_duplicate" if r == 0 else "near_duplicate", k, j)
                for d, r, k, j in zip(gone.tolist(), reason.tolist(), by.tolist(), sims.tolist())}

    whole = unique_edge_rows(in_batch(read(files), nodes, np.zeros(nodes.size, np.int64), 0))
    assert whole.num_rows < copies.num_rows
    want = decisions(whole)
    assert sum(r == "exact_duplicate" for r, _, _ in want.values()) > 50
    assert sum(r == "near_duplicate" for r, _, _ in want.values()) > 50
    # The array path decides what greedy_keep over the same sort keys decides, on the exact edges.
    exact = whole.filter(whole.column("exact"))
    pairs = np.stack([exact.column("a").to_numpy(), exact.column("b").to_numpy()], 1)
    assert {d: (k, j) for d, (r, k, j) in want.items() if r == "exact_duplicate"} == greedy_keep(
        pairs, exact.column("jaccard").to_numpy(), key)
    sizes = np.bincount(np.searchsorted(nodes, comp))
    for budget in (whole.num_rows // 2, whole.num_rows // 7, int(sizes.max()) - 1):
        batch_of = component_batches(nodes, comp, count, budget=budget)
        batches = int(batch_of.max()) + 1
        assert batches >= 2
        got, seen = {}, []
        for batch in range(batches):
            part_edges = unique_edge_rows(in_batch(read(files), nodes, batch_of, batch))
            got.update(decisions(part_edges))
            ends = np.r_[part_edges.column("a").to_numpy(), part_edges.column("b").to_numpy()]
            seen.append(set(comp[np.searchsorted(nodes, ends)].tolist()))
            assert 0 < part_edges.num_rows < whole.num_rows
        # Every component whole in exactly one batch, every distinct edge once, the same decisions.
        assert sum(len(s) for s in seen) == len(set().union(*seen)) == len(set(comp.tolist()))
        assert got == want
        # A component with more edge rows than the budget shares its batch with no other component.
        big = comp[np.argmax(sizes)]
        alone = [s for s in seen if big in s][0]
        assert alone == {big} or budget >= int(sizes.max())
