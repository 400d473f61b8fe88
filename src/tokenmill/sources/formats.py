"""The registered source formats: found by importing every module of `tokenmill.readers` once, then by name."""

from __future__ import annotations

from typing import Iterator, Mapping

from tokenmill.discovery import import_every_module
from tokenmill.sources.reader import COMMON_DROP_REASONS, Reader, registered

READERS_PACKAGE = "tokenmill.readers"


def discover() -> None:
    """Import every module under `tokenmill.readers`, so each Reader they declare registers itself (a source config
    imports no reader until a format is looked up)."""
    import_every_module(READERS_PACKAGE)


class _Readers(Mapping[str, Reader]):
    """Every registered Reader by format name, in name order; the first look discovers them (`discover`)."""

    def __getitem__(self, name: str) -> Reader:
        discover()
        return registered()[name]

    def __iter__(self) -> Iterator[str]:
        discover()
        return iter(sorted(registered()))

    def __len__(self) -> int:
        discover()
        return len(registered())

    def __repr__(self) -> str:
        return f"READERS({', '.join(self)})"


READERS: Mapping[str, Reader] = _Readers()
"""A source's `format` -> its Reader, built from the registry (a reader module declares its Readers)."""


def reader_drop_reasons() -> tuple[str, ...]:
    """Every reason any reader may drop a record for: ingest's closed set."""
    reasons = list(COMMON_DROP_REASONS)
    for reader in READERS.values():
        reasons += [r for r in reader.drop_reasons if r not in reasons]
    return tuple(reasons)
