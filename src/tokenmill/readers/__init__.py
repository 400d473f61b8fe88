"""Readers turn source files into document records; `READERS` maps a source's `format` to its Reader."""

from tokenmill.readers.base import COMMON_DROP_REASONS, Reader
from tokenmill.readers.delimited import CSV, TSV
from tokenmill.readers.json_array import JSON
from tokenmill.readers.jsonl import JSONL
from tokenmill.readers.parquet import PARQUET
from tokenmill.readers.pile import PILE
from tokenmill.readers.plaintext import TEXT
from tokenmill.readers.reddit import REDDIT
from tokenmill.readers.warc import CC_WARC, CC_WET

READERS: dict[str, Reader] = {
    "jsonl": JSONL,
    "json": JSON,
    "csv": CSV,
    "tsv": TSV,
    "text": TEXT,
    "parquet": PARQUET,
    "pile": PILE,
    "reddit": REDDIT,
    "cc_wet": CC_WET,
    "cc_warc": CC_WARC,
}


def reader_drop_reasons() -> tuple[str, ...]:
    """Every reason any reader may drop a record for: ingest's closed set."""
    reasons = list(COMMON_DROP_REASONS)
    for reader in READERS.values():
        reasons += [r for r in reader.drop_reasons if r not in reasons]
    return tuple(reasons)
