"""The metadata filter stage: drop documents by predicates on what ingest kept of their record (Reddit `score`,
a URL's domain, an id) or on their length, per source and subset, before any costlier stage reads them.

What a rule can see: the columns `id`, `source`, `subset`; `text_chars`, the text's length in characters; and any
key of the `meta` column, the fields a reader kept beside the text (`score`, `url`, `domain`, `over_18`, `author`
... for Reddit; whatever the record held besides its text and id for JSON sources; see docs/readers.md). A rule
names one field and one or more predicates; the first rule a document fails names its drop reason, and the report
counts every rule's drops per source.
"""

from __future__ import annotations

import json
from typing import Any, Literal, Mapping, Optional, Union
from urllib.parse import urlsplit

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import Field, StrictBool, StrictFloat, StrictInt, model_validator

from tokenmill.config_base import StageConfig, StrictModel
from tokenmill.pipeline.contract import Processed
from tokenmill.pipeline.map_phase import MapStage

COLUMNS = ("id", "source", "subset")
TEXT_CHARS = "text_chars"
Value = Union[StrictBool, StrictInt, StrictFloat, str]


class MetadataRule(StrictModel):
    """One predicate on one field; documents of other sources or subsets pass it untouched."""

    field: str
    """`id`, `source`, `subset`, `text_chars` (the text's length in characters), or a key of the document's `meta`
    (a dotted path reaches into nested objects: `post.author`)."""
    source: Optional[str] = None
    """Only documents of this source (default: every source)."""
    subset: Optional[str] = None
    """Only documents of this subset (a subreddit, a genre)."""
    min: Optional[float] = None
    """Drop a value below this (`below_min`); a value that is not a number is dropped as `not_a_number`."""
    max: Optional[float] = None
    """Drop a value above this (`above_max`)."""
    allowed: Optional[list[Value]] = None
    """Drop a value not in this list (`value_not_allowed`)."""
    blocked: Optional[list[Value]] = None
    """Drop a value in this list (`value_blocked`)."""
    domain: bool = False
    """Compare the host of the value (a URL, or a bare host such as Reddit's `domain`) with `allowed` and
    `blocked`, a listed domain matching its subdomains too: `blocked: [imgur.com]` drops `https://i.imgur.com/x`."""
    missing: Literal["keep", "drop"] = "keep"
    """A document without the field (or with null): kept, or dropped as `field_missing`."""

    @model_validator(mode="after")
    def _one_predicate(self) -> "MetadataRule":
        if self.min is None and self.max is None and self.allowed is None and self.blocked is None \
                and self.missing == "keep":
            raise ValueError(f"rule on {self.field!r} has no predicate: set min, max, allowed, blocked or "
                             "missing: drop")
        if self.domain and self.allowed is None and self.blocked is None:
            raise ValueError(f"rule on {self.field!r}: domain applies to allowed and blocked; set one of them")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"rule on {self.field!r}: min ({self.min}) is above max ({self.max})")
        return self

    def describe(self) -> str:
        """A short readable name for the report: `reddit: score >= 2`."""
        parts = []
        if self.min is not None:
            parts.append(f"{self.field} >= {self.min:g}")
        if self.max is not None:
            parts.append(f"{self.field} <= {self.max:g}")
        what = f"{self.field} domain" if self.domain else self.field
        if self.allowed is not None:
            parts.append(f"{what} in {self.allowed}")
        if self.blocked is not None:
            parts.append(f"{what} not in {self.blocked}")
        if self.missing == "drop":
            parts.append(f"{self.field} present")
        scope = "/".join(s for s in (self.source, self.subset) if s is not None)
        return f"{scope or 'all'}: {', '.join(parts)}"


class MetadataFilterConfig(StageConfig):
    """Rules over document metadata and length; a document failing any rule is dropped (the first one names it)."""

    rules: list[MetadataRule] = Field(min_length=1)
    """The rules, in order: `{field, source, subset, min, max, allowed, blocked, domain, missing}`."""


def _lookup(meta: Any, path: str) -> Any:
    for key in path.split("."):
        if not isinstance(meta, dict) or key not in meta:
            return None
        meta = meta[key]
    return meta


def host(value: Any) -> str | None:
    """The lower-case host of a URL or bare host (`self.AskReddit` stays as it is); None when there is none."""
    if not isinstance(value, str) or not value.strip():
        return None
    text = value.strip()
    netloc = urlsplit(text if "//" in text else f"//{text}").hostname
    return netloc.rstrip(".").lower() if netloc else None


def _in_domains(name: str | None, domains: list[Value]) -> bool:
    if name is None:
        return False
    return any(name == str(d).lower() or name.endswith("." + str(d).lower()) for d in domains)


def _same(a: Any, b: Any) -> bool:
    """JSON equality: `1` is `1.0`, but not `true` (Python's `True == 1`), and never `"1"`."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    return a == b


def verdict(rule: MetadataRule, value: Any) -> str | None:
    """Why `rule` drops a document whose field holds `value` (None: it passes)."""
    if value is None:
        return "field_missing" if rule.missing == "drop" else None
    if rule.min is not None or rule.max is not None:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return "not_a_number"
        if rule.min is not None and value < rule.min:
            return "below_min"
        if rule.max is not None and value > rule.max:
            return "above_max"
    if rule.domain:
        name = host(value)
        if rule.allowed is not None and not _in_domains(name, rule.allowed):
            return "value_not_allowed"
        if rule.blocked is not None and _in_domains(name, rule.blocked):
            return "value_blocked"
        return None
    if rule.allowed is not None and not any(_same(value, a) for a in rule.allowed):
        return "value_not_allowed"
    if rule.blocked is not None and any(_same(value, b) for b in rule.blocked):
        return "value_blocked"
    return None


def field_values(table: pa.Table, field: str, metas: list[Any] | None) -> list[Any]:
    """The field's value in every row: a column, the text length, or a key of the parsed `meta`."""
    if field in COLUMNS:
        return table.column(field).to_pylist()
    if field == TEXT_CHARS:
        return pc.utf8_length(table.column("text")).to_pylist()
    return [_lookup(m, field) for m in metas or []]


def in_scope(table: pa.Table, rule: MetadataRule) -> np.ndarray:
    """The rows of the rule's source and subset (every row when it names neither), ascending."""
    mask = None
    for column, value in (("source", rule.source), ("subset", rule.subset)):
        if value is not None:
            equal = pc.fill_null(pc.equal(table.column(column), pa.scalar(value, pa.string())), False)
            mask = equal if mask is None else pc.and_(mask, equal)
    if mask is None:
        return np.arange(table.num_rows)
    return np.flatnonzero(mask.to_numpy(zero_copy_only=False))


_scan = json.JSONDecoder().scan_once


def parse_meta(text: str) -> Any:
    """`json.loads(text)`: a value spanning the whole text read by the decoder's own scanner at once (`loads` would
    add two whitespace matches and two calls per row); anything else (whitespace around it, an error) by `loads`,
    so the values and the errors are the same."""
    try:
        value, end = _scan(text, 0)
    except StopIteration:
        return json.loads(text)
    return value if end == len(text) else json.loads(text)


def apply_rules(table: pa.Table, rules: list[MetadataRule]) -> tuple[pa.Array, dict[str, dict[str, int]]]:
    """Each row's drop reason (null = kept) from the first rule it fails, and drops per rule (by its index in
    `rules`, as a string: stats keys are JSON keys) and source."""
    n = table.num_rows
    sources = table.column("source").to_pylist()
    reasons: list[str | None] = [None] * n
    dropped: dict[str, dict[str, int]] = {}
    columns: dict[str, list[Any]] = {}
    # Each row's parsed `meta`, parsed only for rows a meta rule looks at (a shard holds one source, and most rules
    # name one): parsing every row's JSON was most of the stage's time.
    metas: dict[int, Any] = {}
    for index, rule in enumerate(rules):
        rows = [i for i in in_scope(table, rule).tolist() if reasons[i] is None]
        if rule.field in COLUMNS or rule.field == TEXT_CHARS:
            if rule.field not in columns:
                columns[rule.field] = field_values(table, rule.field, None)
            values = [columns[rule.field][i] for i in rows]
        else:
            new = [i for i in rows if i not in metas]
            if new:
                texts = table.column("meta").take(pa.array(new, pa.int64())).to_pylist()
                metas.update(zip(new, map(parse_meta, texts)))
            values = [_lookup(metas[i], rule.field) for i in rows]
        for i, value in zip(rows, values):
            reason = verdict(rule, value)
            if reason is not None:
                reasons[i] = reason
                per_source = dropped.setdefault(str(index), {})
                per_source[sources[i]] = per_source.get(sources[i], 0) + 1
    return pa.array(reasons, pa.string()), dropped


class MetadataFilterStage(MapStage):
    """Drop documents by predicates on their metadata and length, per source (docs/metadata_filter.md)."""

    name = "metadata_filter"
    order = 15
    """After sample, before clean: the cheapest drops first, so later stages read less."""
    config_class = MetadataFilterConfig
    needs = frozenset({"id", "text", "source", "subset", "meta"})
    drop_reasons = ("below_min", "above_max", "not_a_number", "value_not_allowed", "value_blocked", "field_missing")

    config: MetadataFilterConfig

    def process(self, table: pa.Table, shared: Mapping[str, Any]) -> Processed:
        reasons, dropped = apply_rules(table, self.config.rules)
        return Processed(table, reasons, {"dropped_by_rule": dropped})

    def report(self, stats: Mapping[str, Any], reduced: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Every rule in order with the documents it dropped per source (a document counts for its first rule)."""
        dropped = stats.get("dropped_by_rule", {})
        rules = [{"rule": r.describe(), "dropped": dict(sorted(dropped.get(str(i), {}).items()))}
                 for i, r in enumerate(self.config.rules)]
        return {"rules": rules,
                "summary": [f"{r['rule']}: {sum(r['dropped'].values()):,} dropped" for r in rules]}
