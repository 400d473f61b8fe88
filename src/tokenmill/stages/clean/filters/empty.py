"""The empty filter: documents with nothing but whitespace left after the filters that edit the text."""

from __future__ import annotations

from tokenmill.stages.clean.filter import Batch, Case, Filter


class EmptyFilter(Filter):
    """Documents with nothing but whitespace left (e.g. only zero-width or control characters, which normalization
    removes)."""

    name = "empty"
    order = 50
    drop_reasons = ("empty_after_cleaning",)
    cases = {"empty_after_cleaning": Case(" \n\t ")}

    def process(self, batch: Batch, rows: list[int], settings: None) -> list[str | None]:
        return [None if batch.texts[i].strip() else "empty_after_cleaning" for i in rows]
