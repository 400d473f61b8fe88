"""Which documents two runs keep differently, from the `id` and `text_hash` columns of their kept shards alone: polars
lazy scans, group-bys and one join, so two runs of ten million documents compare in seconds and well under 2 GB.

`scan_kept` gives a stage's kept shards as one lazy frame (`id`, `text_hash`, `at`: the row's place across the shards
in the order given); `differences(a, b)` compares two such frames. Text is never read here; `diff.py` reads the texts
of the few examples from the shards `Kept.shard_of` names.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from tokenmill.errors import ManifestError
from tokenmill.pipeline import storage
from tokenmill.documents import TEXT_HASH, text_hashes

log = logging.getLogger(__name__)

ID = "id"
AT = "at"
"""A row's place across the scanned shards (shards in the order given, rows in file order): first means least `at`."""
SCHEMA = {ID: pl.String, TEXT_HASH: pl.UInt64}
PASS_BYTES = 128 << 20
"""Ids (bytes in memory) compared per pass; see `differences`."""
PART_SEED = 0


@dataclass(frozen=True)
class Kept:
    """Some kept shards of one source in one run: their rows as a lazy frame, and which shard each `at` lies in."""

    frame: pl.LazyFrame
    """`id`, `text_hash` (UInt64) and `at` (UInt64) of every row."""
    entries: tuple[dict[str, Any], ...]
    starts: np.ndarray
    """The `at` of each shard's first row."""
    id_bytes: int
    """The ids' size in memory, about (from the Parquet footers): what sets the memory a comparison needs."""

    def shard_of(self, at: int) -> dict[str, Any]:
        """The manifest entry of the shard holding row `at`."""
        return self.entries[int(np.searchsorted(self.starts, at, side="right")) - 1]


def scan_kept(fs, stage_dir: str, entries: list[dict[str, Any]]) -> Kept:
    """The `id` and `text_hash` of these kept shards (manifest entries), in their order, as one lazy frame.

    Local shards are scanned by polars (consecutive ones as one multi-file scan); a shard on another filesystem is read
    by pyarrow, two columns only. A shard written before schema version 2 has no `text_hash`: its texts are read and
    hashed the same way (`documents.text_hashes`), and a warning says so. Only footers are read here; the scan runs
    when the frame is collected.
    """
    frames: list[pl.LazyFrame] = []
    scanned: list[str] = []
    starts: list[int] = []
    rows = rehashed = id_bytes = 0

    def flush() -> None:
        if scanned:
            frames.append(pl.scan_parquet(list(scanned)).select(ID, TEXT_HASH))
            scanned.clear()

    for entry in entries:
        path = storage.join(stage_dir, entry["path"])
        try:
            meta = pq.read_metadata(path, filesystem=fs)
            hashed = TEXT_HASH in meta.schema.names
            if hashed and isinstance(fs, pafs.LocalFileSystem):
                scanned.append(path)
            else:
                flush()
                table = pq.read_table(path, columns=[ID, TEXT_HASH if hashed else "text"], filesystem=fs)
                hashes = table.column(TEXT_HASH) if hashed else text_hashes(table.column("text"))
                rehashed += not hashed
                frames.append(pl.from_arrow(pa.table({ID: table.column(ID), TEXT_HASH: hashes})).lazy())
            id_bytes += _id_bytes(meta)
        except (OSError, pa.ArrowInvalid, ValueError) as err:
            raise ManifestError(f"{path}: the manifest names this shard but it cannot be read: {err}") from None
        starts.append(rows)
        rows += meta.num_rows
    flush()
    if rehashed:
        log.warning("%s: %d shard(s) have no %s column (written before schema version 2); hashed their texts "
                    "to compare them", stage_dir, rehashed, TEXT_HASH)
    frame = pl.concat([f.select(pl.col(ID).cast(pl.String), pl.col(TEXT_HASH).cast(pl.UInt64)) for f in frames]) \
        if frames else pl.LazyFrame(schema=SCHEMA)
    return Kept(frame.with_row_index(AT).with_columns(pl.col(AT).cast(pl.UInt64)), tuple(entries),
                np.array(starts, np.int64), id_bytes)


def _id_bytes(meta: pq.FileMetaData) -> int:
    """Uncompressed bytes of a shard's `id` column, plus a string view's 16 bytes per row."""
    at = meta.schema.names.index(ID)
    return sum(meta.row_group(g).column(at).total_uncompressed_size for g in range(meta.num_row_groups)) \
        + 16 * meta.num_rows


@dataclass(frozen=True)
class Differences:
    """Documents of one source kept in A only (removed), in B only (added), or in both under another text (changed)."""

    removed: int
    """Rows of A whose id B does not keep (an id kept twice counts twice)."""
    added: int
    changed: int
    """Ids kept in both runs with a (id, text hash) pair that one run lacks; each id once."""
    removed_first: list[tuple[str, int]]
    """(id, at in A) of the first removed rows, in A's order."""
    added_first: list[tuple[str, int]]
    changed_first: list[tuple[str, int, int]]
    """(id, at of its first row in A, in B) of the first changed ids, in A's order."""


def differences(a: Kept, b: Kept, examples: int = 3, pass_bytes: int = PASS_BYTES) -> Differences:
    """Compare two runs' kept shards of one source: counts of removed, added and changed documents and the first of
    each.

    Each run's rows are first reduced to its distinct (id, text hash) pairs, with the first `at` and the rows of
    each; one full join of the two pair sets and a group-by on id then give, per id, where it first occurs in each
    run, its rows in each, and whether some pair is one-sided. Only the ids that differ are collected. An id kept
    several times with the same texts in both runs, in any order, is not changed.

    Group-by state is several times the size of the ids it holds, so the ids are split by hash into passes of about
    `pass_bytes` each (a pass scans the shards again, keeping only its ids): memory stays flat as runs grow.
    """
    passes = max(1, -(-max(a.id_bytes, b.id_bytes) // pass_bytes))
    try:
        differ = pl.concat([_one_sided(a.frame, b.frame, p, passes).collect(engine="streaming") for p in range(passes)])
    except pl.exceptions.PolarsError as err:
        raise ManifestError(f"a kept shard cannot be read: {err}") from None
    removed = differ.filter(pl.col("at_b").is_null())
    added = differ.filter(pl.col("at_a").is_null())
    changed = differ.filter(pl.col("at_a").is_not_null() & pl.col("at_b").is_not_null()).sort("at_a")
    return Differences(
        removed=int(removed["rows_a"].sum()), added=int(added["rows_b"].sum()), changed=changed.height,
        removed_first=_first_rows(a.frame, removed, "a", examples),
        added_first=_first_rows(b.frame, added, "b", examples),
        changed_first=list(changed.head(examples).select(ID, "at_a", "at_b").iter_rows()))


def _one_sided(a: pl.LazyFrame, b: pl.LazyFrame, part: int, parts: int) -> pl.LazyFrame:
    """Per id of this part (by hash) that differs between the runs: its first `at` and its rows in each run
    (`at_a` null: kept in B only; `at_b` null: in A only; neither: a text that changed)."""
    def pairs(frame: pl.LazyFrame, side: str) -> pl.LazyFrame:
        if parts > 1:
            frame = frame.filter(pl.col(ID).hash(PART_SEED) % parts == part)
        return frame.group_by(ID, TEXT_HASH).agg(pl.col(AT).min().alias(f"at_{side}"), pl.len().alias(f"rows_{side}"))

    joined = pairs(a, "a").join(pairs(b, "b"), on=[ID, TEXT_HASH], how="full", coalesce=True, nulls_equal=True)
    per_id = joined.group_by(ID).agg(
        pl.col("at_a").min(), pl.col("at_b").min(), pl.col("rows_a").sum(), pl.col("rows_b").sum(),
        (pl.col("at_a").is_null() | pl.col("at_b").is_null()).any().alias("one_sided"))
    return per_id.filter(pl.col("one_sided")).drop("one_sided")


def _first_rows(frame: pl.LazyFrame, ids: pl.DataFrame, side: str, examples: int) -> list[tuple[str, int]]:
    """(id, at) of the first `examples` rows of `frame` whose id is in `ids` (which holds each id's first `at` and
    its rows): from `ids` alone unless an id among the first is kept more than once, then from a second scan."""
    first = ids.sort(f"at_{side}").head(examples)
    if first.is_empty() or first[f"rows_{side}"].max() == 1:
        return list(first.select(ID, f"at_{side}").iter_rows())
    rows = frame.join(ids.lazy().select(ID), on=ID, how="semi", nulls_equal=True).sort(AT).head(examples)
    return list(rows.select(ID, AT).collect(engine="streaming").iter_rows())
