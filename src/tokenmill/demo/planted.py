"""Deliberately broken records planted in the demo corpus, and the registry of planters that make them."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from typing import Callable

# To add a planted kind: write one small function below decorated with
# @planter(...). It receives a freshly generated, valid record of its source
# (which it may modify or replace) and returns what to write instead. The
# corpus writer picks the file and position, records the 1-based line (or
# row) in ground_truth.json, and counts the record as valid or not.


@dataclass(frozen=True)
class PlantContext:
    rnd: random.Random  # for planters that need randomness; seeded per source
    text_path: tuple[str, ...]  # where the text lives in a record, e.g. ("post", "body")
    id_path: tuple[str, ...]


@dataclass
class Planted:
    raw: bytes | None = None  # a raw line, written verbatim (JSON lines sources only)
    record: dict | None = None  # or a record, written like every other record
    valid: bool = False  # True when ingest should keep it (e.g. a planted near-duplicate)
    info: dict = field(default_factory=dict)  # extra fields for the ground-truth entry


@dataclass(frozen=True)
class Planter:
    kind: str
    source: str
    stage: str  # pipeline stage expected to catch it
    expect_drop_reason: str | None  # None for planted records that should be kept
    make: Callable[[dict, PlantContext], Planted]


PLANTERS: list[Planter] = []


def planter(kind: str, *, source: str, stage: str = "ingest", drop_reason: str | None = "same as kind"):
    """Register a planter function; the registration order is the planting order (part of determinism)."""

    def register(make: Callable[[dict, PlantContext], Planted]):
        reason = kind if drop_reason == "same as kind" else drop_reason
        PLANTERS.append(Planter(kind, source, stage, reason, make))
        return make

    return register


def get_path(record: dict, path: tuple[str, ...]):
    for key in path:
        record = record[key]
    return record


def set_path(record: dict, path: tuple[str, ...], value) -> None:
    get_path(record, path[:-1])[path[-1]] = value


def dumps(record) -> str:
    """The one JSON encoding used for every JSON lines record (UTF-8 text, not \\u escapes)."""
    return json.dumps(record, ensure_ascii=False)


@planter("bad_json", source="forum_en")
def bad_json(record: dict, ctx: PlantContext) -> Planted:
    # A writer killed mid-line: cutting a JSON object in half always leaves it unbalanced.
    line = dumps(record)
    return Planted(raw=line[: len(line) // 2].encode("utf-8"))


@planter("decode_error", source="forum_en")
def decode_error(record: dict, ctx: PlantContext) -> Planted:
    # A Latin-1 "é" (byte 0xE9) inside otherwise valid JSON: only strict UTF-8 decoding catches it.
    set_path(record, ctx.text_path, get_path(record, ctx.text_path) + " We met at the café afterwards.")
    line = dumps(record).encode("utf-8").replace("café".encode("utf-8"), "café".encode("latin-1"))
    return Planted(raw=line)


@planter("empty_text", source="forum_en")
def empty_text(record: dict, ctx: PlantContext) -> Planted:
    set_path(record, ctx.text_path, " \n\t  ")  # whitespace only, so a plain `if not text` check misses it
    return Planted(record=record)


@planter("missing_text", source="forum_en")
def missing_text(record: dict, ctx: PlantContext) -> Planted:
    del get_path(record, ctx.text_path[:-1])[ctx.text_path[-1]]
    return Planted(record=record)


@planter("not_an_object", source="forum_en")
def not_an_object(record: dict, ctx: PlantContext) -> Planted:
    return Planted(raw=dumps([get_path(record, ctx.id_path), get_path(record, ctx.text_path)]).encode("utf-8"))
