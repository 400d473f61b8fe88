"""The clean filter contract: a `Filter` reads and annotates a `Batch`, declares its drop reasons and columns.

datatrove's `BaseFilter` is the model: a filter implements only its decision (`process`, over the rows still kept
and the settings that apply to them); the base class (`Filter.run`) picks those rows, resolves each row's settings
through the per-source and per-subset overrides, checks every reason against the declared set, keeps the FIRST
reason a document gets, and counts drops per reason. Filters work on whole batches of rows (numpy and Arrow
friendly), not one document at a time.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, ClassVar, Mapping, Sequence

import numpy as np
import pyarrow as pa

from tokenmill.stages.clean.stats import CleanStats


@dataclass
class Batch:
    """A shard's documents as they pass the chain: the text as cleaned so far, the language, reasons, annotations."""

    ids: list[str]
    texts: list[str]
    """Each document's text, as the filters so far left it (escape repair, normalization, PII edit it)."""
    sources: list[str]
    subsets: list[str | None]
    metas: list[str]
    """Each document's `meta` column (JSON text)."""
    langs: list[str]
    """Each document's language: its source's declared one until language identification replaces it."""
    lang_scores: np.ndarray
    """The identification's confidence (float32), 0 where it did not run."""
    reasons: list[str | None] = field(init=False)
    """The first drop reason each document got (None: still kept)."""
    steps: list[list[str]] = field(init=False)
    """The edits made to each document's text, in order (the `clean_steps` column)."""
    columns: dict[str, Any] = field(default_factory=dict)
    """Annotation columns the filters add: name -> one value per document (a numpy array or a list)."""
    stats: CleanStats = field(default_factory=CleanStats)
    cuts: Mapping[str, float] | None = None
    """Each `top_fraction` rule's cut (by config key, `classifiers[0]`), as the map applies it; None in the `score`
    phase, where those rules only rank (`top_fraction.py`)."""
    ranked: dict[str, np.ndarray] = field(default_factory=dict)
    """What the `score` phase gathers: each `top_fraction` rule's scores of its pool in this batch."""

    def __post_init__(self):
        self.reasons = [None] * len(self.texts)
        self.steps = [[] for _ in self.texts]

    @classmethod
    def from_table(cls, table: pa.Table, languages: Mapping[str, str]) -> "Batch":
        """The batch for a shard with columns id, text, source, subset, meta; `languages` maps source -> language."""
        sources = table.column("source").to_pylist()
        return cls(
            ids=table.column("id").to_pylist(), texts=table.column("text").to_pylist(), sources=sources,
            subsets=table.column("subset").to_pylist(), metas=table.column("meta").to_pylist(),
            langs=[languages[s] for s in sources], lang_scores=np.zeros(len(sources), dtype=np.float32),
        )

    def __len__(self) -> int:
        return len(self.texts)

    def keys(self) -> set[tuple[str, str | None]]:
        """The (source, subset) pairs of the batch's rows, each once: what a row's settings depend on."""
        return set(zip(self.sources, self.subsets))

    def kept(self) -> list[int]:
        """Rows no filter has dropped yet."""
        return [i for i, r in enumerate(self.reasons) if r is None]


class Filter:
    """One step of the clean chain. Subclasses set the class attributes and implement `process`."""

    name: ClassVar[str]
    """Short name, e.g. `escapes`."""
    setting: ClassVar[str | None] = None
    """The `CleanConfig` field that holds this filter's settings. An override for a source or subset that sets the
    same field replaces it for those documents; a null setting turns the filter off. None: no settings."""
    drop_reasons: tuple[str, ...] = ()
    """The closed set of reasons `process` may give, each named for the failure (an instance made by `build` may
    declare its own)."""
    adds: tuple[pa.Field, ...] = ()
    """Annotation columns this filter adds to every row (initialised by `start`, filled by `process`; an instance
    made by `build` may declare its own)."""
    edits: ClassVar[bool] = False
    """True for filters that change the text (their edits are logged in `clean_steps`)."""

    def __init__(self) -> None:
        self.dropped: Counter[str] = Counter()
        """Documents this filter dropped, per reason (this worker's, across batches)."""

    def setup(self, paths: Mapping[str, str | None]) -> None:
        """Load lists or models once per worker, before the first batch; `paths` holds the stage's resolved file
        paths by config key (e.g. `blocklist`)."""

    def start(self, batch: Batch) -> None:
        """Give every row of `batch` this filter's columns, with the value of a row the filter does not reach."""

    def process(self, batch: Batch, rows: list[int], settings: Any) -> Sequence[str | None] | None:
        """Decide and annotate `rows` of `batch` (all still kept, all with the same `settings`): a drop reason or
        None per row, in the order of `rows`; None for a filter that never drops (it only edits or annotates)."""
        raise NotImplementedError(f"filter {self.name!r} has no process")

    def report(self, stats: Mapping[str, Any]) -> dict[str, Any]:
        """This filter's sections of the manifest's report, from the stats summed over shards."""
        return {}

    @classmethod
    def build(cls, config: Any, overrides: Sequence[Any]) -> "Filter":
        """The filter for a stage's config: a filter whose drop reasons or columns depend on the config (one per
        configured classifier) sets its own `drop_reasons` and `adds` on the instance here. Default: `cls()`."""
        return cls()

    def run(self, batch: Batch, settings_of) -> None:
        """Apply this filter to the rows of `batch` still kept: `settings_of(name, source, subset)` resolves a row's
        settings (see `resolve`); rows are processed in groups sharing settings, in row order within a group."""
        for settings, rows in self.groups(batch, settings_of, batch.kept()):
            verdicts = self.process(batch, rows, settings)
            if verdicts is not None:
                self.decide(batch, rows, verdicts)

    def groups(self, batch: Batch, settings_of, rows: list[int]) -> list[tuple[Any, list[int]]]:
        """`rows` grouped by their settings (in row order within a group); rows whose setting is null are left out."""
        groups: dict[int, tuple[Any, list[int]]] = {}
        if self.setting is None:
            groups[0] = (None, rows)
        elif len(shared := {id(s): s for s in (settings_of(self.setting, *key) for key in batch.keys())}) == 1:
            # One setting for every source and subset of the shard (no override applies): no row-by-row lookup.
            (settings,) = shared.values()
            if settings is not None:
                groups[0] = (settings, rows)
        else:
            for i in rows:
                settings = settings_of(self.setting, batch.sources[i], batch.subsets[i])
                if settings is None:
                    continue  # turned off for this document
                groups.setdefault(id(settings), (settings, []))[1].append(i)
        return [(settings, group) for settings, group in groups.values() if group]

    def decide(self, batch: Batch, rows: list[int], verdicts: Sequence[str | None]) -> None:
        """Record a reason or None per row of `rows`: undeclared reasons refused, the first reason kept, drops counted."""
        for i, reason in zip(rows, verdicts, strict=True):
            if reason is None:
                continue
            if reason not in self.drop_reasons:
                raise RuntimeError(f"clean filter {self.name!r} gave undeclared drop reason {reason!r}")
            if batch.reasons[i] is None:  # the first reason a document gets is the one it keeps
                batch.reasons[i] = reason
                self.dropped[reason] += 1


def resolve(config: Any, overrides: Sequence[Any], name: str, source: str, subset: str | None) -> Any:
    """The settings `name` (a field of `config`) for a document of `source` and `subset`: the most specific override
    that sets it (source and subset, then subset, then source), else `config`'s own."""
    best, rank = getattr(config, name), -1
    for o in overrides:
        if getattr(o, name, None) is None:
            continue
        if (o.source is not None and o.source != source) or (o.subset is not None and o.subset != subset):
            continue
        r = (o.subset is not None) * 2 + (o.source is not None)
        if r > rank:
            best, rank = getattr(o, name), r
    return best
