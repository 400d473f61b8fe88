"""The clean stage: the clean chain (escape checks, normalization, PII, blocklist, language, quality, classifiers)."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Mapping

import pyarrow as pa

from tokenmill.digest import file_sha256
from tokenmill.pipeline.contract import DriverPhase, Phase, Processed
from tokenmill.pipeline.map_phase import MapShards, MapStage
from tokenmill.stages.clean import top_fraction
from tokenmill.stages.clean.chain import Chain, chain_adds, chain_drop_reasons, chain_filters
from tokenmill.stages.clean.config import CleanConfig
from tokenmill.stages.clean.filter import Batch
from tokenmill.stages.clean.filters import classifiers


class CleanStage(MapStage):
    """Escape-leak checks, normalization, PII, blocklist, language, quality and classifier filters (docs/clean.md)."""

    name = "clean"
    order = 20
    config_class = CleanConfig
    filters = chain_filters()
    """The clean chain's filters, in order (`stages/clean/filters/`, one module each)."""
    paths = tuple(key for f in filters for key in f.paths)
    needs = frozenset({"id", "text", "source", "subset", "meta"})
    adds = chain_adds(filters)
    drop_reasons = chain_drop_reasons(filters)
    """The class declares what every config gives; an instance declares its config's own (`__init__`): a classifier
    adds its score column and its `low_<name>_score` reason."""

    config: CleanConfig

    def __init__(self, config: CleanConfig, run):
        super().__init__(config, run)
        self.blocklist_path = self.resolve(config.blocklist) if config.blocklist is not None else None
        self.chain = Chain(self.filters, config, config.overrides)
        self.adds, self.drop_reasons = self.chain.adds, self.chain.drop_reasons
        self.model_files = classifiers.model_files(config, self.resolve)
        """Each classifier model's config key (`classifiers[0].model`) -> its file."""
        self._digests: dict[str, str] = {}
        self.ranked = [key for key, _ in classifiers.ranked_rules(config)]
        """The config keys of the classifiers that keep a `top_fraction` (each needs a global cut first)."""

    @classmethod
    def config_problems(cls, config: CleanConfig, resolve_path) -> list[str]:
        """A classifier's model that fastText cannot load, whose sidecar describes another model, or that has no
        such label (each model loaded once, on the driver, before any work)."""
        return classifiers.problems(config, resolve_path)

    def identity(self) -> dict[str, Any]:
        identity = super().identity()
        identity["languages"] = {name: s.language for name, s in sorted(self.run.sources.items())}
        if self.blocklist_path is not None:
            # The list's content, not where it lies: the same list elsewhere gives the same output.
            identity["config"]["blocklist"] = "sha256:" + hashlib.sha256(Path(self.blocklist_path).read_bytes()).hexdigest()
        for key, path in self.model_files.items():
            # The model's content and the preparation its sidecar gives, not where it lies (as the blocklist).
            entry = _at(identity["config"], key.removesuffix(".model"))
            if path not in self._digests:
                self._digests[path] = file_sha256(path)
            entry["model"] = "sha256:" + self._digests[path]
            entry["prepare"] = classifiers.load_preparation(path).model_dump(mode="json")
        return identity

    def phases(self) -> list[Phase | DriverPhase]:
        """The map; a `score` phase before it when a classifier keeps a `top_fraction` (`top_fraction.py`), so that a
        config without one keeps its phases, its records and its output."""
        return [top_fraction.ScoreShards(), MapShards()] if self.ranked else [MapShards()]

    def setup(self, shared: Mapping[str, Any]) -> None:
        # Each model's sha256 as `identity` recorded it on the driver: a worker scores with those bytes or stops.
        digests = {f"{key}.sha256": self._digests.get(path) for key, path in self.model_files.items()}
        self.chain.setup({"blocklist": self.blocklist_path, **self.model_files, **digests})

    def setting(self, name: str, source: str, subset: str | None):
        """A filter's settings (a `CleanConfig` field such as `escapes` or `quality`) for a document: the most specific
        override that sets it (source and subset, then subset, then source), else the stage's own."""
        return self.chain.settings(name, source, subset)

    def process(self, table: pa.Table, shared: Mapping[str, Any]) -> Processed:
        cuts = top_fraction.thresholds(shared)
        if self.ranked and cuts is None:
            raise RuntimeError(f"clean: {', '.join(self.ranked)} keep a top_fraction, whose cut the stage's score "
                               f"phase computes: run the stage through its phases, or pass the cuts in shared")
        batch = self._run_chain(table, shared, cuts)
        text = batch.text_column()  # the shard's own column where no filter edited the text
        text = pa.array(batch.texts, pa.string()) if text is None else text
        out = table.set_column(table.schema.get_field_index("text"), "text", text)
        for name, column in self.chain.columns(batch).items():
            if name in out.column_names:  # an earlier run of a stage that also annotates (re-cleaning)
                out = out.set_column(out.schema.get_field_index(name), name, column)
            else:
                out = out.append_column(name, column)
        return Processed(out, pa.array(batch.reasons, pa.string()), batch.stats.to_json())

    def rank(self, table: pa.Table) -> dict[str, Any]:
        """The `score` phase's look at one shard: the chain run as the map runs it, each `top_fraction` rule's pool
        scores (float32, by the rule's config key), nothing dropped by those rules."""
        return self._run_chain(table, {}, None).ranked

    def _run_chain(self, table: pa.Table, shared: Mapping[str, Any], cuts: Mapping[str, float] | None) -> Batch:
        if not self.chain.ready:
            self.setup(shared)
        languages = {name: s.language for name, s in self.run.sources.items()}
        batch = Batch.from_table(table, languages)
        batch.cuts = cuts
        return self.chain.run(batch)

    def report(self, stats: Mapping[str, Any], reduced: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Each filter's sections: the leak report (per source and subset, documents and characters per escape kind,
        the worst ids), the edits of normalization and PII, the languages found, the classifiers' scores and the cuts
        of their `top_fraction` rules, and a summary."""
        return top_fraction.report_cuts(self.chain.report(stats), reduced)


def _at(node: Any, key: str) -> Any:
    """The item a config key with list indexes (`overrides[1].classifiers[0]`) names in a dumped config."""
    for part in key.replace("]", "").replace("[", ".").split("."):
        node = node[int(part)] if part.isdigit() else node[part]
    return node
