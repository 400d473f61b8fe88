"""Duplicate clusters of the dedup stage (``dedup/clusters.parquet``, docs/dedup.md): how big they are, and the
largest ones side by side, each member with whether it was kept, why it went, who removed it, and its Jaccard
similarity to that document (1.0 for exact duplicates).
"""

from __future__ import annotations

from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq

from tokenmill.errors import TokenmillError
from tokenmill.inspect.runs import scan_docs, stage_dir


def clusters(run=None) -> pa.Table:
    """``clusters.parquet``: cluster (its smallest member's id), id, source, kept, reason, removed_by, jaccard."""
    path = stage_dir(run, "dedup") / "clusters.parquet"
    if not path.is_file():
        raise TokenmillError(f"{path} does not exist: the dedup stage has not completed")
    return pq.read_table(path)


def cluster_sizes(run=None) -> dict[int, int]:
    """Number of clusters per cluster size (members, the kept one included), by size."""
    counts = Counter(Counter(clusters(run)["cluster"].to_pylist()).values())
    return dict(sorted(counts.items()))


def cluster_summary(run=None) -> list[dict]:
    """Per source of the kept document: clusters, and duplicates removed by reason. A cluster is counted once, under
    the source of its first kept member: under the greedy rule a chain can keep more than one."""
    rows = clusters(run).to_pylist()
    kept_source: dict = {}
    for r in rows:
        if r["kept"]:
            kept_source.setdefault(r["cluster"], r["source"])
    out: dict[str, dict] = {}
    counted: set = set()
    for r in rows:
        entry = out.setdefault(kept_source.get(r["cluster"], r["source"]),
                               {"clusters": 0, "exact_duplicate": 0, "near_duplicate": 0, "component_duplicate": 0})
        if r["kept"]:
            if r["cluster"] not in counted:
                counted.add(r["cluster"])
                entry["clusters"] += 1
        elif r["reason"] in entry:
            entry[r["reason"]] += 1
    return [{"source": s, **e} for s, e in sorted(out.items())]


def _texts(run, ids: set[str]) -> dict[str, str]:
    """Texts of ``ids`` from the dedup stage's output: kept shards and dropped files (one filtered scan of each; the
    text column is read only in row groups that hold one of the ids)."""
    import polars as pl

    found: dict[str, str] = {}
    for dropped in (False, True):
        hits = scan_docs(run, "dedup", dropped).filter(pl.col("id").is_in(list(ids))).select("id", "text").collect()
        found.update(zip(hits["id"].to_list(), hits["text"].to_list()))
    return found


def largest_clusters(run=None, k: int = 3, chars: int | None = 400) -> list[dict]:
    """The ``k`` largest clusters (ties by cluster id), members kept-first then by id, each with its text.

    Each cluster: ``{"cluster", "size", "members": [{id, source, kept, reason, removed_by, jaccard, text}]}``;
    texts cut to ``chars`` characters (None: whole).
    """
    rows = clusters(run).to_pylist()
    sizes = Counter(r["cluster"] for r in rows)
    top = sorted(sizes, key=lambda c: (-sizes[c], c))[:k]
    texts = _texts(run, {r["id"] for r in rows if r["cluster"] in top})
    out = []
    for c in top:
        members = sorted((r for r in rows if r["cluster"] == c), key=lambda r: (not r["kept"], r["id"]))
        out.append({"cluster": c, "size": sizes[c], "members": [
            {**{key: m[key] for key in ("id", "source", "kept", "reason", "removed_by", "jaccard")},
             "text": (texts.get(m["id"]) or "")[:chars] if chars else texts.get(m["id"])} for m in members]})
    return out
