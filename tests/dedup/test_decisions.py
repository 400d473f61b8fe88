"""The visit order the keep/drop choice follows, over arrays, is Python's sort by the `keep` rules."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from tokenmill.dedup.clusters import ranked
from tokenmill.dedup.decisions import rank


def test_rank_over_arrays_is_the_order_of_the_keep_rules():
    """The array rank that verify and the clusters task visit documents in equals Python's sort by the `keep` rules
    (longest: -length, shortest: length, lowest_id: id), then id, then reference, for every rule set, ids beyond
    ASCII included (Arrow compares UTF-8 bytes, Python code points: the same order)."""
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
        got = ranked(nodes, rank(keep, members, nodes))(nodes)
        assert got.tolist() == want, keep


def test_decisions_over_a_small_graph_name_what_was_removed_by_whom_per_shard():
    """Exact duplicates first, then near ones among the documents left; each decision file holds its shard's
    nodes, clusters.parquet every member by (cluster, document), and the summary counts per keeping source."""
    from tokenmill.dedup.clusters import components
    from tokenmill.dedup.decisions import Decisions, decide

    a, b, c, d, e = (0 << 32) | 1, (0 << 32) | 2, (1 << 32) | 0, (1 << 32) | 5, (1 << 32) | 7
    edges = pa.table({"a": pa.array([a, b, d], pa.uint64()), "b": pa.array([b, c, e], pa.uint64()),
                      "jaccard": [1.0, 0.97, 0.96], "exact": [True, False, False]})
    nodes, comp = components(np.stack([edges.column("a").to_numpy(), edges.column("b").to_numpy()], 1))
    visit = ranked(nodes, np.arange(nodes.size))  # smaller reference first
    decided = Decisions.of(nodes, comp, [decide(edges, visit)])
    ids = pa.array(["a", "b", "c", "d", "e"])
    sources = pa.array(["web", "web", "books", "books", "books"])
    shards = {shard: decided.shard_table(ids, rows).to_pylist() for shard, rows in decided.by_shard()}
    assert sorted(shards) == [0, 1]
    assert [(r["doc"], r["reason"], r["kept_by"], r["cluster"]) for r in shards[0]] == [
        (a, None, None, "a"), (b, "exact_duplicate", "a", "a")]
    # b, gone as an exact duplicate, removes nothing: c stays although b~c passed.
    assert [(r["doc"], r["reason"], r["kept_by"], r["jaccard"]) for r in shards[1]] == [
        (c, None, None, None), (d, None, None, None), (e, "near_duplicate", "d", 0.96)]
    table = decided.clusters_table(ids, sources).to_pydict()
    assert table["cluster"] == ["a", "a", "a", "d", "d"] and table["kept"] == [True, False, True, True, False]
    assert decided.summary(sources) == {
        "clusters": 2, "exact_duplicates": 1, "near_duplicates": 1,
        "by_source": {"books": {"clusters": 1, "size_histogram": {"2": 1}},
                      "web": {"clusters": 1, "size_histogram": {"3": 1}}}}
