"""The clean filter contract: a `Filter` reads and annotates a `Batch`, declares its settings, drop reasons, columns
and an input case per reason.

datatrove's `BaseFilter` is the model: a filter implements only its decision (`process`, over the rows still kept
and the settings that apply to them); the base class (`Filter.run`) picks those rows, resolves each row's settings
through the per-source and per-subset overrides, checks every reason against the declared set, keeps the FIRST
reason a document gets, and counts drops per reason. Filters work on whole batches of rows (numpy and Arrow
friendly), not one document at a time. A filter class that sets `order` registers itself (as a stage does): the
chain, the clean config and its overrides are built from the registered filters (`chain.py`, `config.py`).
"""

from __future__ import annotations

import itertools
import operator
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Mapping, Sequence

import numpy as np
import pyarrow as pa

from tokenmill.documents import replace_rows
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
    column: pa.StringArray | None = None
    """The shard's `text` column as it came (`from_table`), for Arrow kernels over the batch (`text_column`)."""

    def __post_init__(self):
        self.reasons = [None] * len(self.texts)
        self.steps = [[] for _ in self.texts]
        self._came = list(self.texts)  # the text objects `column` holds: a row whose text is not one was edited
        self._keys: set[tuple[str, str | None]] | None = None

    @classmethod
    def from_table(cls, table: pa.Table, languages: Mapping[str, str]) -> "Batch":
        """The batch for a shard with columns id, text, source, subset, meta; `languages` maps source -> language."""
        sources = table.column("source").to_pylist()
        text = table.column("text")
        return cls(
            ids=table.column("id").to_pylist(), texts=text.to_pylist(), sources=sources,
            subsets=table.column("subset").to_pylist(), metas=table.column("meta").to_pylist(),
            langs=[languages[s] for s in sources], lang_scores=np.zeros(len(sources), dtype=np.float32),
            column=text.combine_chunks() if text.type == pa.string() else None,
        )

    def __len__(self) -> int:
        return len(self.texts)

    def keys(self) -> set[tuple[str, str | None]]:
        """The (source, subset) pairs of the batch's rows, each once: what a row's settings depend on (found once:
        every filter asks, and no filter changes a row's source or subset)."""
        if self._keys is None:
            self._keys = set(zip(self.sources, self.subsets))
        return self._keys

    def kept(self) -> list[int]:
        """Rows no filter has dropped yet."""
        return list(itertools.compress(range(len(self.reasons)), map(operator.is_, self.reasons,
                                                                        itertools.repeat(None))))

    def text_column(self, rows: Sequence[int] | None = None) -> pa.StringArray | None:
        """The texts of `rows` (None: every row) as Arrow strings: the shard's own column (`column`) where a row's
        text is still the one that came, converted only where a filter replaced it; None where that cannot be done
        (no column, or a replaced text with no UTF-8 form: a lone surrogate), for the caller to convert the texts."""
        if self.column is None:
            return None
        every = rows is None or (len(rows) == len(self.texts) and list(rows) == list(range(len(self.texts))))
        rows = range(len(self.texts)) if rows is None else rows
        texts, came = self.texts, self._came
        edited = [k for k, i in enumerate(rows) if texts[i] is not came[i]]
        column = self.column if every else self.column.take(pa.array(rows, pa.int64()))
        try:
            return replace_rows(column, edited, [texts[rows[k]] for k in edited])
        except (pa.ArrowInvalid, UnicodeEncodeError):
            return None


@dataclass(frozen=True)
class Setting:
    """A filter's settings as the clean config declares them: the field's key, type, default and doc."""

    key: str
    """The field of the stage's config (`stages: {clean: {<key>: ...}}`) and of each override."""
    annotation: Any
    """Its type, e.g. `PiiConfig`, or `Optional[PiiConfig]` when null turns the filter off."""
    default: Any
    doc: str
    """The field's description: what it sets, and an example (the config reference shows it)."""
    per_source: bool = True
    """An override may set it for a source, a subset or both (False: one value for the stage, e.g. a list file)."""
    dumped: tuple[str, ...] = ()
    """The config blocks (`stage`, `override`) that write the field even at its default: the fields runs were made
    with before a field at its default was left out of the dump, so that those runs keep their identity. A new
    filter's setting leaves it empty (a config without the field keeps its identity)."""


@dataclass(frozen=True)
class Case:
    """An input that gives one drop reason, with the filter alone in the chain (after the filters whose columns it
    reads): `tests/stages/test_drop_reasons.py` runs every declared reason's case."""

    text: str
    lang: str = "en"
    """The document's language as the earlier filters left it."""
    settings: Any = None
    """The filter's settings for the document, or a function of a fresh folder that makes them (a model to train)."""
    meta: str = '{"url": "https://spam.example/a"}'
    blocklist: str = "spam.example\n"
    """The stage's blocklist file's content."""

    def settings_in(self, folder: Path) -> Any:
        return self.settings(folder) if callable(self.settings) else self.settings


_FILTERS: dict[str, type["Filter"]] = {}


def registered_filters() -> Mapping[str, type["Filter"]]:
    """The filter classes imported so far, by name (`chain.chain_filters` imports them all, in order)."""
    return _FILTERS


class Filter:
    """One step of the clean chain. Subclasses set the class attributes and implement `process`."""

    name: ClassVar[str]
    """Short name, e.g. `escapes`."""
    order: ClassVar[int]
    """Its place in the chain (lower first); a class that sets it registers itself as a filter of the chain."""
    settings: ClassVar[Setting | None] = None
    """Its settings field in the clean config (and in each override, unless `per_source` is False). An override for
    a source or subset that sets the field replaces it for those documents; a null value turns the filter off.
    Filters that share one settings field (the quality families) declare the same `Setting`. None: no settings."""
    drop_reasons: tuple[str, ...] = ()
    """The closed set of reasons `process` may give, each named for the failure (an instance made by `build` may
    declare its own)."""
    adds: tuple[pa.Field, ...] = ()
    """Annotation columns this filter adds to every row (initialised by `start`, filled by `process`; an instance
    made by `build` may declare its own)."""
    edits: ClassVar[bool] = False
    """True for filters that change the text (their edits are logged in `clean_steps`)."""
    paths: ClassVar[tuple[str, ...]] = ()
    """The config keys (under its settings) that name files, relative to the config file: the stage resolves and
    checks them before any work and gives them to `setup` (e.g. `blocklist`, `classifiers[].model`)."""
    sections: ClassVar[Mapping[str, Any]] = {}
    """The stats sections this filter writes through `batch.stats` (name -> empty value, `{}` or `[]`): every shard's
    stats carry them, summed over shards into what `report` reads."""
    cases: Mapping[str, Case] = {}
    """One input per drop reason (an instance made by `build` may declare its own, as its reasons)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "order" not in cls.__dict__:
            return
        other = _FILTERS.get(cls.name)
        if other is not None and (other.__module__, other.__qualname__) != (cls.__module__, cls.__qualname__):
            raise TypeError(f"clean filter name {cls.name!r} is taken by {other.__module__}.{other.__qualname__}")
        _FILTERS[cls.name] = cls

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
    def check(cls, config: Any) -> str | None:
        """A problem with the stage's config (its overrides included) that its fields alone cannot see, checked when
        the config is validated; None: none."""
        return None

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
        key = self.settings.key if self.settings is not None and self.settings.per_source else None
        if key is None:
            groups[0] = (None, rows)
        elif len(shared := {id(s): s for s in (settings_of(key, *where) for where in batch.keys())}) == 1:
            # One setting for every source and subset of the shard (no override applies): no row-by-row lookup.
            (settings,) = shared.values()
            if settings is not None:
                groups[0] = (settings, rows)
        else:
            for i in rows:
                settings = settings_of(key, batch.sources[i], batch.subsets[i])
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
