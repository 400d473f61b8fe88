"""The clusters phase decides one batch of components at a time: the same components, clusters and removals as
one pass over every edge, for edges spread over many files with copies across them."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pyarrow.fs
import pyarrow.parquet as pq

from tokenmill.dedup.clusters import components
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


def test_batches_of_components_decide_what_one_pass_over_every_edge_decides(tmp_path):
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

    nodes, comp, rows = _component_index(ctx, files)
    want_nodes, want_comp = components(np.stack([edges.column("a").to_numpy(), edges.column("b").to_numpy()], 1))
    assert rows == copies.num_rows
    assert nodes.tolist() == want_nodes.tolist() and comp.tolist() == want_comp.tolist()
    assert len(set(comp.tolist())) > 100

    key = {int(d): (int(rng.integers(0, 3)), int(d)) for d in nodes}  # ties on the first rule: broken by doc
    whole = _unique_edge_rows(_batch_edges(ctx, files, nodes, comp, 1, 0))
    assert whole.num_rows < copies.num_rows
    want = _decide(whole, key)
    assert sum(r == "exact_duplicate" for r, _, _ in want.values()) > 50
    assert sum(r == "near_duplicate" for r, _, _ in want.values()) > 50
    for batches in (2, 7):
        got, seen = {}, []
        for batch in range(batches):
            part_edges = _unique_edge_rows(_batch_edges(ctx, files, nodes, comp, batches, batch))
            got.update(_decide(part_edges, key))
            ends = np.r_[part_edges.column("a").to_numpy(), part_edges.column("b").to_numpy()]
            seen.append(set(comp[np.searchsorted(nodes, ends)].tolist()))
            assert 0 < part_edges.num_rows < whole.num_rows
        # Every component whole in exactly one batch, every distinct edge once, the same decisions.
        assert sum(len(s) for s in seen) == len(set().union(*seen)) == len(set(comp.tolist()))
        assert got == want
