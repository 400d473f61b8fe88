"""The clean stage: the clean chain (escape checks, normalization, PII, blocklist, language, quality) over a shard."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Mapping

import pyarrow as pa

from tokenmill.pipeline.contract import Processed
from tokenmill.pipeline.map_phase import MapStage
from tokenmill.stages.clean.chain import Chain, chain_adds, chain_drop_reasons
from tokenmill.stages.clean.config import CleanConfig
from tokenmill.stages.clean.filter import Batch
from tokenmill.stages.clean.filters import FILTERS


class CleanStage(MapStage):
    """Escape-leak checks, normalization, PII, blocklist, language and quality filters (docs/clean.md)."""

    name = "clean"
    order = 20
    config_class = CleanConfig
    paths = ("blocklist",)
    needs = frozenset({"id", "text", "source", "subset", "meta"})
    filters = FILTERS
    """The clean chain's filters, in order (`stages/clean/filters.py`)."""
    adds = chain_adds(FILTERS)
    drop_reasons = chain_drop_reasons(FILTERS)

    config: CleanConfig

    def __init__(self, config: CleanConfig, run):
        super().__init__(config, run)
        self.blocklist_path = self.resolve(config.blocklist) if config.blocklist is not None else None
        self.chain = Chain(self.filters, config, config.overrides)

    def identity(self) -> dict[str, Any]:
        identity = super().identity()
        identity["languages"] = {name: s.language for name, s in sorted(self.run.sources.items())}
        if self.blocklist_path is not None:
            # The list's content, not where it lies: the same list elsewhere gives the same output.
            identity["config"]["blocklist"] = "sha256:" + hashlib.sha256(Path(self.blocklist_path).read_bytes()).hexdigest()
        return identity

    def setup(self, shared: Mapping[str, Any]) -> None:
        self.chain.setup({"blocklist": self.blocklist_path})

    def setting(self, name: str, source: str, subset: str | None):
        """A filter's settings (a `CleanConfig` field such as `escapes` or `quality`) for a document: the most specific
        override that sets it (source and subset, then subset, then source), else the stage's own."""
        return self.chain.settings(name, source, subset)

    def process(self, table: pa.Table, shared: Mapping[str, Any]) -> Processed:
        if not self.chain.ready:
            self.setup(shared)
        languages = {name: s.language for name, s in self.run.sources.items()}
        batch = self.chain.run(Batch.from_table(table, languages))
        out = table.set_column(table.schema.get_field_index("text"), "text", pa.array(batch.texts, pa.string()))
        for name, column in self.chain.columns(batch).items():
            if name in out.column_names:  # an earlier run of a stage that also annotates (re-cleaning)
                out = out.set_column(out.schema.get_field_index(name), name, column)
            else:
                out = out.append_column(name, column)
        return Processed(out, pa.array(batch.reasons, pa.string()), batch.stats.to_json())

    def report(self, stats: Mapping[str, Any], reduced: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Each filter's sections: the leak report (per source and subset, documents and characters per escape kind,
        the worst ids), the edits of normalization and PII, the languages found, and a summary."""
        return self.chain.report(stats)
