"""Incremental dedup: the index a finished run keeps of its kept documents, and a later run's matches against it.

A finished dedup stage keeps `index/p####.parquet` (its `index` phase, committed output like `clusters.parquet`): per
band-key partition, the band keys and exact hashes of the documents it KEPT, each named by its output shard and row
there, so that a later run reads their text from the finished run's `shards/` (only the rows it names). A later run
with `dedup: {against: [RUN, ...]}` checks each RUN (`tokenmill.stages.dedup.earlier_run`: a finished dedup stage, its committed files intact,
the same signature settings), joins its own band rows of a partition with the index rows of the same keys
(`match`), verifies those pairs by exact Jaccard from both texts, and removes a new document that passes: the
earlier document always wins and never reaches the new run's output. Only the new documents left go on to the usual
within-run dedup, which is what one run over the union with the earlier documents visited first decides.

Taken from datatrove (`MinhashBuildIndex`, `MinhashDedupBuckets(index_folder=...)`): an index of a finished corpus
kept per band bucket, holding only its hashes, read beside the new signatures of the same bucket; a match with
the index always removes the new document (index entries are never output); the new corpus deduplicated against
the index and within itself in one pass. Not taken: datatrove removes on a band match alone and trusts the index
folder; here every candidate pair is verified from text (as tokenmill's own pairs are), the index names its
documents so their text can be read, and the finished run is checked before use (its manifest, its commit records,
its settings; paths recorded in it are used only when they name a shard its manifest lists). NeMo Curator's fuzzy
dedup has no such index: a new dump is deduplicated by rerunning over the union.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tokenmill.dedup.bands import EXACT_BAND
from tokenmill.errors import ConfigError

__all__ = ["INDEX_DIR", "INDEX_META", "SCHEME", "SETTINGS", "EarlierRun", "IncrementalError", "index_file",
           "index_meta", "index_bytes", "index_table", "match", "cap_per_doc", "earlier_decisions",
           "setting_differences", "settings_of", "compatible_parts"]

INDEX_DIR = "index"
INDEX_META = b"tokenmill.dedup.index"
"""The Parquet metadata key of an index file: the settings its keys were made with (JSON)."""
SCHEME = {"index_version": 1, "normalisation": "shingles.words/normalized-xxh3_128", "minhash": "affine32"}
"""What no setting names but the keys depend on: the text normalisation and hash families of this code. A change
to them changes this, and a run made before refuses to serve as an earlier run."""
SETTINGS = ("num_perm", "bands", "rows", "word_ngram", "char_ngram", "minhash_seed")
"""The dedup settings an earlier run must share with the new one for their band keys and shingles to compare."""


class IncrementalError(ConfigError):
    """An `against` run cannot be used: not a finished dedup stage, damaged, or made with other settings."""


def index_file(part: int) -> str:
    """An index partition's path, relative to the dedup stage folder."""
    return f"{INDEX_DIR}/p{part:04d}.parquet"


def settings_of(identity: Mapping[str, Any]) -> dict[str, Any]:
    """The `SETTINGS` of a dedup stage from its identity (`DedupStage.identity()`, the manifest's `config`)."""
    config = identity.get("config") or {}
    return {name: identity.get(name) if name in ("bands", "rows") else config.get(name) for name in SETTINGS}


def setting_differences(theirs: Mapping[str, Any], mine: Mapping[str, Any]) -> list[str]:
    """`name: earlier X, this run Y` for each setting that differs."""
    return [f"{k}: earlier {theirs.get(k)!r}, this run {mine.get(k)!r}" for k in sorted(set(theirs) | set(mine))
            if theirs.get(k) != mine.get(k)]


def index_meta(settings: Mapping[str, Any], languages: Mapping[str, str | None]) -> dict[str, Any]:
    """What an index file states about itself: the scheme, the settings, and each source's configured language
    (the shingling language of its documents when their shard has no `lang` column)."""
    return {**SCHEME, "settings": dict(settings), "languages": dict(sorted(languages.items()))}


def index_table(rows: pa.Table | None, removed: np.ndarray, names: list[str]) -> pa.Table:
    """One partition's index rows from its band rows (band, key, doc, exact; doc = input shard << 32 | row): those of
    kept documents (not in `removed`, sorted), each doc renamed (output shard name, row in that output shard: its
    input row less the removed rows before it), sorted by (band, key, shard, row)."""
    schema = pa.schema({"band": pa.uint16(), "key": pa.uint64(), "exact": pa.uint64(),
                        "shard": pa.dictionary(pa.int32(), pa.string()), "row": pa.uint32()})
    if rows is None or not rows.num_rows:
        return schema.empty_table()
    doc = rows.column("doc").to_numpy().astype(np.uint64, copy=False)
    removed = np.unique(removed.astype(np.uint64, copy=False))
    kept = ~np.isin(doc, removed)
    rows, doc = rows.filter(pa.array(kept)), doc[kept]
    shard = (doc >> np.uint64(32)).astype(np.int64)
    first = shard.astype(np.uint64) << np.uint64(32)
    before = np.searchsorted(removed, doc) - np.searchsorted(removed, first)
    row = (doc & np.uint64(0xFFFFFFFF)).astype(np.int64) - before
    band, key = rows.column("band").to_numpy(), rows.column("key").to_numpy()
    order = np.lexsort((row, shard, key, band))
    exact = rows.column("exact").take(pa.array(order, pa.int64()))
    return pa.table({
        "band": pa.array(band[order], pa.uint16()),
        "key": pa.array(key[order], pa.uint64()),
        "exact": exact.cast(pa.uint64()),
        "shard": pa.DictionaryArray.from_arrays(pa.array(shard[order], pa.int32()), pa.array(names, pa.string())),
        "row": pa.array(row[order], pa.uint32()),
    }, schema=schema)


def index_bytes(table: pa.Table, meta: Mapping[str, Any]) -> bytes:
    """An index file: its rows with `meta` in the Parquet metadata; identical inputs give identical bytes."""
    sink = pa.BufferOutputStream()
    table = table.replace_schema_metadata({INDEX_META: json.dumps(meta, sort_keys=True).encode()})
    pq.write_table(table, sink, compression="zstd", column_encoding={"key": "PLAIN"},
                   use_dictionary=["band", "shard"])
    return sink.getvalue().to_pybytes()


def compatible_parts(part: int, mine: int, theirs: int) -> list[int]:
    """The earlier run's partitions that may hold keys of this run's `part`: k % mine == part and k % theirs == q
    are compatible only when part and q agree modulo gcd(mine, theirs)."""
    common = int(np.gcd(mine, theirs))
    return [q for q in range(theirs) if q % common == part % common]


def match(own: pa.Table, index: pa.Table) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every (own row, index row) of equal (band, key), exact rows also of equal `exact` (the digest's other half):
    (own doc, index row position, exact) per match, sorted by own doc then index position, each once."""
    empty = (np.zeros(0, np.uint64), np.zeros(0, np.int64), np.zeros(0, bool))
    if not own.num_rows or not index.num_rows:
        return empty
    ikey, iband = index.column("key").to_numpy(), index.column("band").to_numpy()
    order = np.lexsort((iband, ikey))
    skey = ikey[order]
    okey, oband = own.column("key").to_numpy(), own.column("band").to_numpy()
    lo, hi = np.searchsorted(skey, okey, "left"), np.searchsorted(skey, okey, "right")
    counts = hi - lo
    mine = np.repeat(np.arange(okey.size), counts)
    at = order[np.repeat(lo, counts) + (np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts))]
    same = oband[mine] == iband[at]
    mine, at = mine[same], at[same]
    exact = oband[mine] == EXACT_BAND
    if exact.any():
        oex = pc.fill_null(own.column("exact"), 0).to_numpy().astype(np.uint64, copy=False)
        iex = pc.fill_null(index.column("exact"), 0).to_numpy().astype(np.uint64, copy=False)
        ok = ~exact | (oex[mine] == iex[at])
        mine, at, exact = mine[ok], at[ok], exact[ok]
    doc = own.column("doc").to_numpy()[mine].astype(np.uint64)
    # A pair matched in several bands once; exact when any of its matches is exact.
    order = np.lexsort((~exact, at, doc))
    doc, at, exact = doc[order], at[order], exact[order]
    first = np.r_[True, (doc[1:] != doc[:-1]) | (at[1:] != at[:-1])] if doc.size else np.zeros(0, bool)
    return doc[first], at[first].astype(np.int64), exact[first]


def cap_per_doc(doc: np.ndarray, cap: int) -> np.ndarray:
    """Mask of the first `cap` entries of each document (`doc` sorted): the pairs one new document verifies."""
    if not doc.size:
        return np.zeros(0, bool)
    starts = np.flatnonzero(np.r_[True, doc[1:] != doc[:-1]])
    rank = np.arange(doc.size) - np.repeat(starts, np.diff(np.r_[starts, doc.size]))
    return rank < cap


def earlier_decisions(doc: np.ndarray, exact: np.ndarray, jaccard: np.ndarray, threshold: float
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per pair (new doc, earlier document; sorted by doc, exact pairs first, then in the order the document tried
    them): which new documents are removed, and by which pair: the first that is exact or above the threshold.
    Returns (removed docs ascending, index of the deciding pair, exact)."""
    passed = np.flatnonzero(exact | (jaccard > threshold))
    if not passed.size:
        return np.zeros(0, np.uint64), np.zeros(0, np.int64), np.zeros(0, bool)
    chosen = passed[np.r_[True, doc[passed][1:] != doc[passed][:-1]]]
    return doc[chosen].astype(np.uint64), chosen, exact[chosen]


@dataclass(frozen=True)
class EarlierRun:
    """An `against` run, checked: where its dedup stage is, its partitions, its output shards by name (each path
    one its manifest lists, inside its `shards/`), its index files and what they state."""

    label: str
    """The run as the config names it (for the report and messages)."""
    location: str
    """Its output folder, a path or URI (opened again in each task)."""
    stage_dir: str
    partitions: int
    shards: dict[str, str] = field(default_factory=dict)
    """Output shard name -> its path relative to the stage folder."""
    content_hash: str = ""
    languages: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"label": self.label, "location": self.location, "stage_dir": self.stage_dir,
                "partitions": self.partitions, "shards": self.shards, "content_hash": self.content_hash,
                "languages": self.languages}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "EarlierRun":
        return cls(**data)
