"""Readers turn source files into document records; `READERS` maps a source's `format` to its reader."""

from tokenmill.readers.jsonl import read_jsonl
from tokenmill.readers.parquet import read_parquet

READERS = {
    "jsonl": read_jsonl,
    "parquet": read_parquet,
}
