"""The clean chain: the registered filters run in order over a shard's batch; what the stage declares derives from
them."""

from __future__ import annotations

import functools
from typing import Any, Iterable, Mapping, Sequence

import pyarrow as pa

from tokenmill.discovery import import_every_module
from tokenmill.stages.clean.filter import Batch, Filter, registered_filters, resolve
from tokenmill.stages.clean.stats import CleanStats

FILTERS_PACKAGE = "tokenmill.stages.clean.filters"

LANGUAGE_COLUMNS = (pa.field("lang", pa.string()), pa.field("lang_score", pa.float32()))
"""The document's language (the source's declared one until `langid` identifies it) and the identification's
confidence: every filter after `langid` reads the language, so the chain, not one filter, owns these columns."""
STEPS_COLUMN = pa.field("clean_steps", pa.string())
"""The edits made to the text, in order, comma-separated (logged by the filters that edit)."""


@functools.cache
def chain_filters() -> tuple[type[Filter], ...]:
    """Every filter of the clean chain, in order (`Filter.order`): each module of `stages/clean/filters/` imported
    once, so each filter registers itself. Escape checks see the raw text; a document keeps the first reason it gets."""
    import_every_module(FILTERS_PACKAGE)
    return tuple(sorted(registered_filters().values(), key=lambda f: (f.order, f.name)))


def chain_sections(filters: Iterable[type[Filter] | Filter]) -> dict[str, Any]:
    """The stats sections the filters write (name -> empty value), in chain order."""
    return {name: empty for f in filters for name, empty in f.sections.items()}


def chain_drop_reasons(filters: Iterable[type[Filter] | Filter]) -> tuple[str, ...]:
    """Every reason the chain may give, in chain order, each once (of the classes: what every config declares; of
    the instances `Filter.build` made: what this config declares)."""
    return tuple(dict.fromkeys(r for f in filters for r in f.drop_reasons))


def chain_adds(filters: Sequence[type[Filter] | Filter]) -> tuple[pa.Field, ...]:
    """The chain's columns: the language, then the columns of the filters that edit the text, the edit log, and
    the columns of the filters that only decide (in chain order within each)."""
    return (*LANGUAGE_COLUMNS, *(c for f in filters if f.edits for c in f.adds), STEPS_COLUMN,
            *(c for f in filters if not f.edits for c in f.adds))


class Chain:
    """Instances of the chain's filters, set up once per worker and run over one batch at a time."""

    def __init__(self, filters: Sequence[type[Filter]], config: Any, overrides: Sequence[Any]):
        self.filters = [f.build(config, overrides) for f in filters]
        self.adds = chain_adds(self.filters)
        self.drop_reasons = chain_drop_reasons(self.filters)
        self.sections = chain_sections(self.filters)
        self._config, self._overrides = config, overrides
        self._settings: dict[tuple[str, str, str | None], Any] = {}
        self.ready = False

    def setup(self, paths: Mapping[str, str | None]) -> None:
        for f in self.filters:
            f.setup(paths)
        self.ready = True

    def settings(self, name: str, source: str, subset: str | None) -> Any:
        """A filter's settings for a document (see `resolve`), looked up once per source and subset: every filter asks
        for every document."""
        key = (name, source, subset)
        if key not in self._settings:
            self._settings[key] = resolve(self._config, self._overrides, name, source, subset)
        return self._settings[key]

    def run(self, batch: Batch) -> Batch:
        batch.stats = CleanStats(self.sections)  # every shard's stats carry every section, empty or not
        batch.stats.docs(batch.sources, batch.subsets)
        for f in self.filters:
            f.start(batch)
        for f in self.filters:
            f.run(batch, self.settings)
        return batch

    def columns(self, batch: Batch) -> dict[str, pa.Array]:
        """The chain's annotation columns for `batch`, in `adds` order."""
        values = {"lang": batch.langs, "lang_score": batch.lang_scores,
                  "clean_steps": [",".join(s) for s in batch.steps], **batch.columns}
        return {f.name: pa.array(values[f.name], f.type) for f in self.adds}

    def report(self, stats: Mapping[str, Any]) -> dict[str, Any]:
        """The filters' report sections, merged; their `summary` lines are concatenated in chain order."""
        out: dict[str, Any] = {}
        summary: list[str] = []
        for f in self.filters:
            sections = f.report(stats)
            summary += sections.pop("summary", [])
            out.update(sections)
        return {**out, "summary": summary}
