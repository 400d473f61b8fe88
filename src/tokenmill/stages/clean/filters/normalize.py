"""The normalization filter: Unicode and whitespace normalization (code's own whitespace kept; a document judged code
keeps its characters)."""

from __future__ import annotations

from typing import Any, Mapping

from tokenmill.stages.clean.filter import Batch, Filter, Setting
from tokenmill.text.normalize import NormalizeConfig, normalize_documents


class NormalizeFilter(Filter):
    """Unicode and whitespace normalization (code's own whitespace kept; a document judged code keeps its
    characters)."""

    name = "normalize"
    order = 20
    settings = Setting("normalize", NormalizeConfig, NormalizeConfig(), dumped=("stage", "override"), doc=(
        "Unicode and whitespace normalization steps, and where whitespace is code's own (kept). In an override, the "
        "whole block (keys left out take their defaults), e.g. `{code: document}` for a subset of source files such "
        "as the Pile's Github."))
    edits = True
    sections = {"normalize": {}}

    def process(self, batch: Batch, rows: list[int], settings: NormalizeConfig) -> None:
        if rows:
            batch.stats.section("normalize")
        done_all = normalize_documents([batch.texts[i] for i in rows], settings, batch.text_column(rows))
        for i, done in zip(rows, done_all):
            if done is None:  # nothing changed, nothing to count
                continue
            batch.texts[i] = done.text
            batch.steps[i] += done.changed
            batch.stats.count("normalize", done.counted())

    def report(self, stats: Mapping[str, Any]) -> dict[str, Any]:
        return {"normalize": stats.get("normalize", {})}
