"""Dedup clusters on a small real run: sizes, and the largest clusters side by side with Jaccard."""

from __future__ import annotations

import pytest

from tokenmill.inspect import cluster_sizes, cluster_summary, clusters, largest_clusters, manifest

pytestmark = pytest.mark.ray


def test_cluster_sizes_count_every_member(small_run):
    table = clusters(small_run)
    sizes = cluster_sizes(small_run)
    assert sizes and sum(size * count for size, count in sizes.items()) == table.num_rows
    summary = cluster_summary(small_run)
    assert sum(r["clusters"] for r in summary) == sum(sizes.values())
    removed = sum(r["exact_duplicate"] + r["near_duplicate"] for r in summary)
    assert removed == manifest(small_run, "dedup")["totals"]["docs_in"] - manifest(small_run, "dedup")["totals"]["docs_out"]



def test_largest_clusters_side_by_side_with_jaccard(small_run):
    top = largest_clusters(small_run, k=2, chars=None)
    assert len(top) == min(2, sum(cluster_sizes(small_run).values()))
    assert [c["size"] for c in top] == sorted((c["size"] for c in top), reverse=True)
    for c in top:
        first, *rest = c["members"]
        assert first["kept"] and first["jaccard"] is None and len(c["members"]) == c["size"]
        ids = {m["id"] for m in c["members"]}
        for m in rest:
            assert not m["kept"] and m["removed_by"] in ids
            assert m["jaccard"] == 1.0 if m["reason"] == "exact_duplicate" else m["jaccard"] > 0.95
        assert all(m["text"] for m in c["members"])
    short = largest_clusters(small_run, k=1, chars=20)
    assert all(len(m["text"]) <= 20 for m in short[0]["members"])


def test_a_greedy_chain_that_keeps_two_is_one_cluster(monkeypatch):
    """A~B~C without A~C: the greedy rule keeps A and C; the summary counts one cluster, not two, and counts the
    component rule's removals under their own reason."""
    import importlib

    import pyarrow as pa

    module = importlib.import_module("tokenmill.inspect.clusters")  # the package exports a function of that name

    table = pa.table({"cluster": ["a", "a", "a", "d", "d"], "id": ["a", "b", "c", "d", "e"],
                      "source": ["web"] * 5, "kept": [True, False, True, True, False],
                      "reason": [None, "near_duplicate", None, None, "component_duplicate"]})
    monkeypatch.setattr(module, "clusters", lambda run=None: table)
    assert module.cluster_summary("unused") == [{"source": "web", "clusters": 2, "exact_duplicate": 0,
                                                 "near_duplicate": 1, "component_duplicate": 1}]
