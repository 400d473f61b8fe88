"""The held-out documents: fixed by a keyed hash of their id before any filter, kept out of every variant's training."""

from __future__ import annotations

import hashlib
import logging
import re
from pathlib import Path
from typing import Iterable

import pyarrow.parquet as pq

from tokenmill.errors import TokenmillError
from tokenmill.pipeline import storage
from tokenmill.pipeline.manifest import read_manifest
from tokenmill.tokenize.sample import id_key

log = logging.getLogger(__name__)


def threshold(valid_fraction: float) -> int:
    """The keyed-hash bound of the tokenize stage's valid split (`stages/tokenize/stage.py`, `Encode.map_shard`)."""
    return int(valid_fraction * 2**64)


def _stage_rows(run_dir: Path, stage: str, columns: list[str]) -> Iterable[dict]:
    """The rows of a completed stage's kept shards, in manifest order."""
    fs, root = storage.filesystem_for(str(run_dir))
    stage_dir = storage.join(root, stage)
    manifest = read_manifest(fs, stage_dir, required=True)
    for shard in manifest["content"]["shards"]:
        table = pq.read_table(storage.join(stage_dir, shard["path"]), columns=columns, filesystem=fs)
        yield from table.to_pylist()


def _normal(text: str) -> str:
    """What an exact duplicate shares: the text lowercased, its whitespace runs one space."""
    return re.sub(r"\s+", " ", text).strip().lower()


def _text_hash(text: str) -> bytes:
    return hashlib.blake2b(_normal(text).encode("utf-8"), digest_size=16).digest()


def choose(base_run: Path, seed: int, valid_fraction: float, per_source: int) -> dict[str, list[tuple[str, str]]]:
    """{source: [(id, text)]}: from the base run's ingest output (before any filter or sample), the documents in the
    valid split of every variant (keyed hash of the id under the run seed below `valid_fraction`), at most
    `per_source` of each source, those of the smallest hash, sorted by it."""
    bound = threshold(valid_fraction)
    found: dict[str, list[tuple[int, str, str]]] = {}
    for row in _stage_rows(base_run, "ingest", ["id", "text", "source"]):
        key = id_key(seed, row["id"])
        if key < bound and row["text"].strip():
            found.setdefault(row["source"], []).append((key, row["id"], row["text"]))
    return {source: [(i, t) for _, i, t in sorted(docs)[:per_source]] for source, docs in sorted(found.items())}


def training_input_stage(run_dir: Path) -> str:
    """The stage whose output the tokenize stage read: what the variant trains on (before the valid split)."""
    fs, root = storage.filesystem_for(str(run_dir))
    manifest = read_manifest(fs, storage.join(root, "tokenize"), required=True)
    stage = manifest["content"]["input"].get("stage")
    if not isinstance(stage, str):
        raise TokenmillError(f"{run_dir}/tokenize: its manifest names no input stage")
    return stage


def decontaminate(docs: dict[str, list[tuple[str, str]]], runs: Iterable[Path], seed: int,
                  valid_fraction: float) -> tuple[dict[str, list[tuple[str, str]]], int]:
    """`docs` less those whose text (lowercased, whitespace folded) is also the text of a document some variant trains
    on (a copy under another id, which the id split cannot see), and how many went."""
    wanted = {_text_hash(t) for items in docs.values() for _, t in items}
    bound = threshold(valid_fraction)
    seen: set[bytes] = set()
    for run in runs:
        for row in _stage_rows(run, training_input_stage(run), ["id", "text"]):
            if id_key(seed, row["id"]) >= bound:
                h = _text_hash(row["text"])
                if h in wanted:
                    seen.add(h)
    kept = {s: [(i, t) for i, t in items if _text_hash(t) not in seen] for s, items in docs.items()}
    removed = sum(len(v) for v in docs.values()) - sum(len(v) for v in kept.values())
    if removed:
        log.info("held-out set: %d document(s) also trained on under another id, left out", removed)
    return {s: v for s, v in kept.items() if v}, removed
