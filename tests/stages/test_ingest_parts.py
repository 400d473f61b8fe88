"""Ingest parts: a file's records are cut into shards by count and by text bytes, so a worker's memory is bounded."""

from __future__ import annotations

import pytest

from tokenmill.errors import ConfigError
from tokenmill.pipeline.config import parse_config
from tokenmill.sources.reader import Record
from tokenmill.stages.ingest import _parts


def records(*sizes: int, char: str = "a") -> list[Record]:
    return [Record(index=i, text=char * n) for i, n in enumerate(sizes)]


def lengths(parts) -> list[int]:
    return [len(p) for p in parts]


def test_a_part_ends_at_the_record_count():
    assert lengths(_parts(iter(records(*[1] * 7)), 3, 10**9)) == [3, 3, 1]


def test_a_part_ends_once_its_text_reaches_the_byte_cap():
    # 40 + 40 + 40 >= 100 closes the first part at three records; the next starts from zero.
    assert lengths(_parts(iter(records(40, 40, 40, 10, 10, 95, 5)), 1000, 100)) == [3, 3, 1]


def test_bytes_are_utf8_not_characters():
    # 30 CJK characters are 90 bytes: two records reach the cap of 150 where 60 characters would not.
    assert lengths(_parts(iter(records(30, 30, 30, char="中")), 1000, 150)) == [2, 1]


def test_a_record_over_the_cap_is_a_part_of_its_own_and_nothing_is_lost():
    parts = list(_parts(iter(records(5, 500, 5)), 1000, 100))
    assert lengths(parts) == [2, 1]
    assert [r.index for p in parts for r in p] == [0, 1, 2]


def test_an_empty_file_still_yields_one_empty_part():
    assert lengths(_parts(iter([]), 10, 100)) == [0]


def test_dropped_records_count_no_text():
    dropped = [Record(index=i, text="", drop="invalid_json", message="x") for i in range(5)]
    assert lengths(_parts(iter(dropped), 1000, 1)) == [5]


def test_the_cap_has_a_bounded_default_and_is_validated(tmp_path):
    (tmp_path / "a.jsonl").write_text("{}\n")
    source = [{"name": "web", "format": "jsonl", "paths": ["*.jsonl"]}]
    assert parse_config({"output": "out", "sources": source}, tmp_path).ingest.max_shard_bytes == 128 * 2**20
    got = parse_config({"output": "out", "ingest": {"max_shard_bytes": 1000}, "sources": source}, tmp_path)
    assert got.ingest.max_shard_bytes == 1000
    with pytest.raises(ConfigError, match="ingest.max_shard_bytes"):
        parse_config({"output": "out", "ingest": {"max_shard_bytes": 0}, "sources": source}, tmp_path)
