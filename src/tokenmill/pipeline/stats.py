"""Document counts that add with `+`: per shard, per source and subset, summed into a stage manifest."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from tokenmill.documents import NO_SUBSET


@dataclass
class Tally:
    """Documents and text bytes in, out (kept), and dropped per reason."""

    docs_in: int = 0
    docs_out: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    drops: Counter = field(default_factory=Counter)

    def __add__(self, other: "Tally") -> "Tally":
        return Tally(
            self.docs_in + other.docs_in,
            self.docs_out + other.docs_out,
            self.bytes_in + other.bytes_in,
            self.bytes_out + other.bytes_out,
            self.drops + other.drops,
        )

    @property
    def dropped(self) -> int:
        return sum(self.drops.values())

    def conserved(self) -> bool:
        return self.docs_in == self.docs_out + self.dropped

    def to_json(self) -> dict[str, Any]:
        return {
            "docs_in": self.docs_in,
            "docs_out": self.docs_out,
            "bytes_in": self.bytes_in,
            "bytes_out": self.bytes_out,
            "drops": dict(sorted(self.drops.items())),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Tally":
        return cls(data["docs_in"], data["docs_out"], data["bytes_in"], data["bytes_out"], Counter(data["drops"]))


@dataclass
class SourceTally:
    """A tally for one source, with one per subset."""

    total: Tally = field(default_factory=Tally)
    subsets: dict[str, Tally] = field(default_factory=dict)

    def __add__(self, other: "SourceTally") -> "SourceTally":
        subsets = dict(self.subsets)
        for name, tally in other.subsets.items():
            subsets[name] = subsets.get(name, Tally()) + tally
        return SourceTally(self.total + other.total, subsets)

    def to_json(self) -> dict[str, Any]:
        return {**self.total.to_json(), "subsets": {k: v.to_json() for k, v in sorted(self.subsets.items())}}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "SourceTally":
        return cls(Tally.from_json(data), {k: Tally.from_json(v) for k, v in data.get("subsets", {}).items()})


def tally_table(table: pa.Table, reasons: pa.Array, bytes_in: pa.Array | None = None) -> SourceTally:
    """Count a processed shard: `reasons` is null for kept rows, the drop reason otherwise.

    `bytes_in` is each row's UTF-8 size as the stage received it; a stage that rewrites text (clean, excision) must
    pass it, or the bytes it removed would vanish from the lineage (`bytes_in` would equal the rewritten size). Left
    out, the text written is also the text received.
    """
    import pyarrow.compute as pc

    bytes_out = pc.binary_length(table.column("text")).cast(pa.int64())
    grouped = pa.table({
        "subset": pc.fill_null(table.column("subset"), NO_SUBSET),
        "reason": pc.fill_null(reasons, ""),
        "bytes_in": bytes_out if bytes_in is None else bytes_in.cast(pa.int64()),
        "bytes_out": bytes_out,
    }).group_by(["subset", "reason"]).aggregate([("bytes_in", "sum"), ("bytes_out", "sum"), ("bytes_in", "count")])
    result = SourceTally()
    for row in grouped.to_pylist():
        docs, size_in, size_out = row["bytes_in_count"], row["bytes_in_sum"] or 0, row["bytes_out_sum"] or 0
        if row["reason"]:
            tally = Tally(docs, 0, size_in, 0, Counter({row["reason"]: docs}))
        else:
            tally = Tally(docs, docs, size_in, size_out)
        result = result + SourceTally(tally, {row["subset"]: tally})
    return result


def text_bytes(table: pa.Table) -> pa.Array:
    """Each row's UTF-8 text size: what `tally_table` takes as `bytes_in` when a stage rewrites text."""
    import pyarrow.compute as pc

    return pc.binary_length(table.column("text")).cast(pa.int64()).combine_chunks()


def merge_stats(a: Any, b: Any) -> Any:
    """Add two stage-stats values: numbers add, dicts merge key by key, lists concatenate."""
    if a is None:
        return b
    if b is None:
        return a
    if isinstance(a, dict) and isinstance(b, dict):
        return {k: merge_stats(a.get(k), b.get(k)) for k in sorted(set(a) | set(b))}
    if isinstance(a, list) and isinstance(b, list):
        return a + b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a + b
    raise TypeError(f"cannot merge stage stats {type(a).__name__} and {type(b).__name__}")


def drop_table(by_source: dict[str, Any]) -> dict[str, dict[str, dict[str, float]]]:
    """Reason x source: documents dropped and their percent of the source's input."""
    table: dict[str, dict[str, dict[str, float]]] = {}
    for source, tally in sorted(by_source.items()):
        for reason, count in sorted(tally["drops"].items()):
            percent = 100.0 * count / tally["docs_in"] if tally["docs_in"] else 0.0
            table.setdefault(reason, {})[source] = {"docs": count, "percent": round(percent, 3)}
    return table
