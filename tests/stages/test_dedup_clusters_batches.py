"""The clusters phase decides one batch of components at a time: the same components, clusters and removals as
one pass over every edge, for edges spread over many files with copies across them."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pyarrow.fs
import pyarrow.parquet as pq

from tokenmill.dedup.clusters import components, greedy_keep, ranked
from tokenmill.stages.dedup import stage as dedup_stage
from tokenmill.stages.dedup.stage import _batch_edges, _component_index, _decide, _edge_files, _unique_edge_rows


def _web_like_edges(rng: np.random.Generator) -> pa.Table:
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


def test_batches_of_components_decide_what_one_pass_over_every_edge_decides(tmp_path, monkeypatch):
    rng = np.random.default_rng(19)
    edges = _web_like_edges(rng)
    # Spread over 12 files, a third of the rows again in a second file (a pair verified in several partitions).
    stage_dir = tmp_path / "dedup"
    (stage_dir / "_work" / "edges").mkdir(parents=True)
    copies = pa.concat_tables([edges, edges.take(pa.array(rng.choice(edges.num_rows, edges.num_rows // 3)))])
    part = rng.integers(0, 12, copies.num_rows)
    for p in range(12):
        pq.write_table(copies.filter(pa.array(part == p)), stage_dir / "_work" / "edges" / f"p{p:04d}.parquet")
    ctx = SimpleNamespace(fs=pyarrow.fs.LocalFileSystem(), stage_dir=str(stage_dir))
    files = _edge_files(ctx)
    assert len(files) == 12

    nodes, comp, count = _component_index(ctx, files)
    want_nodes, want_comp = components(np.stack([edges.column("a").to_numpy(), edges.column("b").to_numpy()], 1))
    a = copies.column("a").to_numpy()
    want_count = np.bincount(np.searchsorted(want_nodes, a), minlength=want_nodes.size)
    assert count.sum() == copies.num_rows
    assert nodes.tolist() == want_nodes.tolist() and comp.tolist() == want_comp.tolist()
    assert count.tolist() == want_count.tolist()
    # Merged a few files at a time (each merge carries the components so far): the same index and counts.
    for group_rows in (1, copies.num_rows // 5):
        monkeypatch.setattr(dedup_stage, "_INDEX_ROWS", group_rows)
        got = _component_index(ctx, files)
        assert [x.tolist() for x in got] == [nodes.tolist(), comp.tolist(), count.tolist()]
    assert len(set(comp.tolist())) > 100

    key = {int(d): (int(rng.integers(0, 3)), int(d)) for d in nodes}  # ties on the first rule: broken by doc
    rank = np.empty(nodes.size, np.int64)
    rank[sorted(range(nodes.size), key=lambda i: (key[int(nodes[i])], int(nodes[i])))] = np.arange(nodes.size)
    visit = ranked(nodes, rank)

    def decisions(edges: pa.Table) -> dict:
        gone, reason, by, sims = _decide(edges, visit)
        return {d: ("exact_duplicate" if r == 0 else "near_duplicate", k, j)
                for d, r, k, j in zip(gone.tolist(), reason.tolist(), by.tolist(), sims.tolist())}

    whole = _unique_edge_rows(_batch_edges(ctx, files, nodes, np.zeros(nodes.size, np.int64), 0))
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
        monkeypatch.setattr(dedup_stage, "_EDGES_PER_BATCH", budget)
        batch_of = dedup_stage._batches(nodes, comp, count)
        batches = int(batch_of.max()) + 1
        assert batches >= 2
        got, seen = {}, []
        for batch in range(batches):
            part_edges = _unique_edge_rows(_batch_edges(ctx, files, nodes, batch_of, batch))
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


def test_rank_over_arrays_is_the_order_of_the_keep_rules():
    """The array rank that verify and the clusters task visit documents in equals Python's sort by the `keep` rules
    (longest: -length, shortest: length, lowest_id: id), then id, then reference, for every rule set, ids beyond
    ASCII included (Arrow compares UTF-8 bytes, Python code points: the same order)."""
    from tokenmill.stages.dedup.stage import Clusters

    rng = np.random.default_rng(7)
    alphabet = ["a", "z", "é", "\uffff", "𝔸", "中", "0"]
    n = 400
    nodes = np.sort(rng.choice(1 << 40, n, replace=False)).astype(np.uint64)
    ids = ["".join(rng.choice(alphabet, int(rng.integers(1, 4)))) for _ in range(n)]  # many equal ids
    lengths = rng.integers(0, 5, n)  # many equal lengths
    members = pa.table({"id": pa.array(ids, pa.string()), "length": pa.array(lengths, pa.int64()),
                        "source": pa.array(["s"] * n, pa.string())})
    for keep in (["longest", "lowest_id"], ["shortest"], ["lowest_id"], ["longest"]):
        def key(i: int, keep=keep) -> tuple:
            rules = [-int(lengths[i]) if r == "longest" else int(lengths[i]) if r == "shortest" else ids[i] for r in keep]
            return (*rules, ids[i], int(nodes[i]))

        want = sorted(range(n), key=key)
        got = ranked(nodes, Clusters._rank(keep, members, nodes))(nodes)
        assert got.tolist() == want, keep


def test_edges_scattered_once_per_batch_are_the_rows_each_batch_reads(tmp_path, monkeypatch):
    """The clusters task writes every edge row once to its batch's file and reads one file per batch: the same rows
    (as multisets, copies included) as filtering every edge file for that batch."""
    rng = np.random.default_rng(5)
    edges = _web_like_edges(rng)
    stage_dir = tmp_path / "dedup"
    (stage_dir / "_work" / "edges").mkdir(parents=True)
    part = rng.integers(0, 5, edges.num_rows)
    for p in range(5):
        pq.write_table(edges.filter(pa.array(part == p)), stage_dir / "_work" / "edges" / f"p{p:04d}.parquet")
    ctx = SimpleNamespace(fs=pyarrow.fs.LocalFileSystem(), stage_dir=str(stage_dir))
    files = _edge_files(ctx)
    nodes, comp, count = _component_index(ctx, files)
    monkeypatch.setattr(dedup_stage, "_EDGES_PER_BATCH", edges.num_rows // 6)
    batch_of = dedup_stage._batches(nodes, comp, count)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    paths = dedup_stage._scatter_edges(ctx, files, nodes, batch_of, str(scratch))
    assert len(paths) == int(batch_of.max()) + 1 >= 4

    def rows(tables) -> list:
        table = pa.concat_tables(list(tables)) if tables else None
        return sorted(zip(*[table.column(c).to_pylist() for c in ("a", "b", "jaccard", "exact")])) if table else []

    total = 0
    for batch, path in enumerate(paths):
        got = rows(list(dedup_stage._read_scattered(path)))
        assert got == rows(list(_batch_edges(ctx, files, nodes, batch_of, batch)))
        total += len(got)
    assert total == edges.num_rows
