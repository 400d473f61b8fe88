"""Connected components in rounds over partitions (`dedup.distributed_components`): the same nodes and the same
labels (each component's smallest node) as one union-find over every edge, whatever the number of partitions; each
round keeps the nodes and the components; the split files, the merge of the clusters tasks' runs and of their
summaries give what one task over every edge gave."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tokenmill.dedup.clusters import components
from tokenmill.dedup.decisions import Decisions, merge_runs, merge_summaries
from tokenmill.dedup.distributed_components import (SplitWriter, adjacency, components_in_rounds, contract, labels,
                                                    lookup, owner, parts_for, read_part, split_bytes, star_round)
from tokenmill.dedup.keep_rules import stands_for


def refs(rng: np.random.Generator, n: int) -> np.ndarray:
    """n distinct document references (shard << 32 | row) in random order."""
    shard = rng.integers(0, 50, n).astype(np.uint64)
    row = rng.permutation(n).astype(np.uint64)
    return np.unique((shard << np.uint64(32)) | row)[rng.permutation(n)]


def known_graph(rng: np.random.Generator, scale: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Chains, stars, one giant component (a long chain with random chords), isolated pairs and small random
    cliques, over shuffled references; with each edge's direction random and a tenth of the edges given twice.
    Returns (a, b, the number of components built)."""
    docs = refs(rng, 40 * scale)
    a, b, at, built = [], [], 0, 0

    def take(k: int) -> np.ndarray:
        nonlocal at
        out = docs[at:at + k]
        at += k
        return out

    for _ in range(scale // 10):  # chains: the worst case for label propagation
        c = take(int(rng.integers(2, 60)))
        a.append(c[:-1]), b.append(c[1:])
        built += 1
    for _ in range(scale // 10):  # stars
        s = take(int(rng.integers(2, 80)))
        a.append(np.full(s.size - 1, s[0])), b.append(s[1:])
        built += 1
    giant = take(8 * scale)  # one giant component: a chain with chords
    chords = rng.integers(0, giant.size, (giant.size // 4, 2))
    a += [giant[:-1], giant[chords[:, 0]]]
    b += [giant[1:], giant[chords[:, 1]]]
    built += 1
    pairs = take(2 * (scale // 2))  # isolated pairs
    a.append(pairs[0::2]), b.append(pairs[1::2])
    built += pairs.size // 2
    for _ in range(scale // 10):  # cliques
        c = take(int(rng.integers(2, 12)))
        i, j = np.triu_indices(c.size, 1)
        a.append(c[i]), b.append(c[j])
        built += 1
    a, b = np.concatenate(a), np.concatenate(b)
    flip = rng.random(a.size) < 0.5
    a, b = np.where(flip, b, a), np.where(flip, a, b)
    again = rng.choice(a.size, a.size // 10)
    return np.r_[a, a[again]], np.r_[b, b[again]], built


@pytest.mark.parametrize("partitions", [1, 2, 8])
def test_rounds_over_partitions_give_the_single_task_components(partitions):
    rng = np.random.default_rng(partitions)
    a, b, built = known_graph(rng, 200)
    want_nodes, want_comp = components(np.stack([a, b], axis=1))
    assert np.unique(want_comp).size == built  # the graph has the components it was built with
    # Later rounds over as many tasks as hold 1,000 rows each (a divisor of the partitions), or over one.
    for budget in (1_000, 10**9):
        nodes, comp, rounds = components_in_rounds(a, b, partitions, budget)
        assert nodes.tolist() == want_nodes.tolist()
        assert comp.tolist() == want_comp.tolist()
        # One partition: contraction alone finds every component, and the first round sees stars only.
        assert rounds == 1 if partitions == 1 else rounds > 2


def test_later_rounds_run_over_the_fewest_tasks_that_divide_the_partitions():
    assert [parts_for(rows, 10, 64) for rows in (0, 10, 11, 100, 10**9)] == [1, 1, 2, 16, 64]
    assert [parts_for(rows, 10, 12) for rows in (25, 35, 65, 10**9)] == [3, 4, 12, 12]
    # A task of P' reading the parts d % P' == t of a file split P ways holds exactly the nodes it owns.
    nodes = refs(np.random.default_rng(1), 1_000)
    for fewer in (1, 2, 4, 8, 16):
        assert np.array_equal(owner(nodes, 16) % fewer, owner(nodes, fewer))


def test_a_long_chain_over_many_partitions_and_no_edges():
    rng = np.random.default_rng(4)
    chain = refs(rng, 3_000)
    nodes, comp, rounds = components_in_rounds(chain[:-1], chain[1:], 16)
    assert nodes.tolist() == sorted(chain.tolist()) and set(comp.tolist()) == {int(chain.min())}
    assert 2 < rounds < 40  # logarithmic in the chain's length, not linear
    empty = np.zeros(0, np.uint64)
    nodes, comp, rounds = components_in_rounds(empty, empty, 4)
    assert nodes.size == comp.size == 0 and rounds == 1


def test_each_round_keeps_the_nodes_and_the_components_and_a_star_forest_is_final():
    """Large-star and small-star over every task's rows rewrite each edge once: the output graph has the same
    nodes and components; a round reports no violation only when its input is the final star forest, which both
    operations leave unchanged."""
    rng = np.random.default_rng(8)
    a, b, _ = known_graph(rng, 60)
    partitions = 4
    src, dst = adjacency(a, b)
    want = components(np.stack([a, b], axis=1))
    for large in (True, False, True, False):
        dest = owner(src, partitions)
        found = [star_round(src[dest == p], dst[dest == p], large) for p in range(partitions)]
        na, nb = np.concatenate([f.a for f in found]), np.concatenate([f.b for f in found])
        got = components(np.stack([na, nb], axis=1))
        assert got[0].tolist() == want[0].tolist() and got[1].tolist() == want[1].tolist()
        assert sum(f.violations for f in found) > 0
        src, dst = adjacency(na, nb)
    stars = adjacency(want[0][want[0] != want[1]], want[1][want[0] != want[1]])
    for large in (True, False):
        found = star_round(*stars, large)
        assert found.violations == 0
        assert sorted(zip(*adjacency(found.a, found.b))) == sorted(zip(*stars))
    nodes, comp = labels(*stars)
    assert nodes.tolist() == want[0].tolist() and comp.tolist() == want[1].tolist()
    # A node with an edge to itself only is not in the stars: its own component, as the single-task index has it.
    lone = np.uint64(1 << 40)
    assert lookup(nodes, comp, np.r_[nodes[:3], lone]).tolist() == [*comp[:3].tolist(), int(lone)]


def test_contraction_streams_a_partition_into_the_stars_of_its_local_components():
    rng = np.random.default_rng(2)
    a, b, _ = known_graph(rng, 40)
    tables = [pa.table({"a": a[i:i + 97], "b": b[i:i + 97]}) for i in range(0, a.size, 97)]
    leaf, centre = contract(tables)
    nodes, comp = components(np.stack([a, b], axis=1))
    assert leaf.tolist() == nodes[nodes != comp].tolist() and centre.tolist() == comp[nodes != comp].tolist()


def test_split_files_give_each_destination_its_rows_in_order(tmp_path):
    rng = np.random.default_rng(3)
    table = pa.table({"x": pa.array(rng.integers(0, 1000, 500), pa.int64()), "y": pa.array(np.arange(500))})
    dest = rng.integers(0, 7, 500)
    dest[dest == 3] = 4  # a destination with no rows
    path = tmp_path / "split.parquet"
    path.write_bytes(split_bytes(table, dest))
    assert pq.ParquetFile(path).metadata.num_row_groups == 6
    for d in range(8):
        got = read_part(str(path), d)
        if d in (3, 7):
            assert got is None
        else:
            assert got.to_pydict() == table.filter(pa.array(dest == d)).to_pydict()
    # A reader of 1 of 2 (of 4, of 8) tasks: every destination d with d % 2 == 1, in the file's order.
    for modulo in (2, 4, 8):
        got = read_part(str(path), 1, modulo=modulo)
        assert got.to_pydict() == table.take(pa.array(np.argsort(dest, kind="stable"))).filter(
            pa.array(np.sort(dest, kind="stable") % modulo == 1)).to_pydict()
    # Given a table at a time under a budget of 120 rows: several row groups a destination, the same rows in order.
    writer = SplitWriter(120)
    for start in range(0, 500, 50):
        writer.add(table.slice(start, 50), dest[start:start + 50])
    path.write_bytes(writer.finish())
    assert pq.ParquetFile(path).metadata.num_row_groups > 6
    for d in range(8):
        got = read_part(str(path), d)
        assert (got is None) if d in (3, 7) else got.to_pydict() == table.filter(pa.array(dest == d)).to_pydict()
    path.write_bytes(split_bytes(table.slice(0, 0), np.zeros(0, np.int64)))
    assert read_part(str(path), 0) is None
    path.write_bytes(SplitWriter().finish())
    assert read_part(str(path), 0) is None


def _decisions(rng: np.random.Generator) -> tuple[Decisions, pa.Array, pa.Array]:
    a, b, _ = known_graph(rng, 30)
    nodes, comp = components(np.stack([a, b], axis=1))
    code = rng.integers(0, 3, nodes.size).astype(np.int8)
    code[np.searchsorted(nodes, comp)] = 2  # roots kept
    by = np.searchsorted(nodes, comp)
    decided = Decisions(nodes, comp, code, by, rng.random(nodes.size), np.searchsorted(nodes, comp), code != 2,
                        np.lexsort((nodes, comp)), stands_for(code != 2, by), {})
    ids = pa.array([f"d{int(n)}" for n in nodes])
    sources = pa.array([["web", "forum", "books"][int(n) % 3] for n in nodes])
    return decided, ids, sources


def test_clusters_tasks_runs_and_summaries_merge_into_the_single_task_file_and_summary():
    rng = np.random.default_rng(6)
    decided, ids, sources = _decisions(rng)
    whole = decided.clusters_table(ids, sources)
    # Components spread over 5 tasks by their root, each task's run in (component, document) order, read in
    # tables of 7 rows: merged, the single task's table.
    task = owner(decided.comp, 5)
    runs, summaries = [], []
    for t in range(5):
        mine = np.flatnonzero(task == t)
        part = Decisions.of(decided.nodes[mine], decided.comp[mine], [])
        by = np.searchsorted(decided.nodes[mine], decided.nodes[decided.by[mine]])
        part = Decisions(decided.nodes[mine], decided.comp[mine], decided.code[mine], by, decided.jaccard[mine],
                         part.root, decided.dropped[mine], part.order, stands_for(decided.dropped[mine], by), {})
        table = part.clusters_table(ids.take(pa.array(mine)), sources.take(pa.array(mine)))
        table = table.append_column("comp", pa.array(part.comp[part.order], pa.uint64()))
        runs.append(iter(table.to_batches(max_chunksize=7)))
        summaries.append(part.summary(sources.take(pa.array(mine))))
    runs = [(pa.Table.from_batches([batch]) for batch in run) for run in runs]
    merged = pa.concat_tables(list(merge_runs(runs, "comp"))).drop_columns(["comp"])
    assert merged.to_pydict() == whole.to_pydict()
    assert merge_summaries(summaries) == decided.summary(sources)


@pytest.mark.slow
@pytest.mark.parametrize("partitions", [1, 2, 8])
def test_several_million_edges_give_the_single_task_components(partitions):
    """About 3 million edges over 6 million references: chains, stars, a giant component of 1.2 million nodes,
    isolated pairs and cliques (about a minute each)."""
    a, b, built = known_graph(np.random.default_rng(11), 150_000)
    assert a.size > 2_500_000
    want_nodes, want_comp = components(np.stack([a, b], axis=1))
    assert np.unique(want_comp).size == built
    nodes, comp, rounds = components_in_rounds(a, b, partitions)
    assert np.array_equal(nodes, want_nodes) and np.array_equal(comp, want_comp)
    assert rounds < 60
