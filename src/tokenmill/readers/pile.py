"""The Pile: JSON lines `{"text", "meta": {"pile_set_name"}}`, plain, .gz or .zst; the set name becomes `subset`."""

from __future__ import annotations

from typing import Iterator

from tokenmill.readers.jsonl import JSON_DROP_REASONS, read_jsonl
from tokenmill.sources.reader import Reader, Record


def read_pile(path: str, source, display: str) -> Iterator[Record]:
    # The Pile's own layout, unless the source config names other fields.
    if source.subset_field is None:
        source = source.model_copy(update={"subset_field": "meta.pile_set_name"})
    return read_jsonl(path, source, display)


PILE = Reader("pile", read_pile, JSON_DROP_REASONS)
