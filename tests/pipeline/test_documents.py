"""`text_hash`: the xxh3-64 of each text, computed by the shard writer whatever the stage handed it."""

from __future__ import annotations

import pyarrow as pa
import pytest
import xxhash

from tokenmill.config_base import StageConfig
from tokenmill.documents import TEXT_HASH, read_shard, text_hashes, with_text_hash
from tokenmill.pipeline.map_phase import split_and_write
from tokenmill.pipeline.contract import RunContext, Stage

TEXTS = ["", "a", "é and 中文", "x" * 10_000, "line\r\nbreak"]


def xxh3(texts):
    return [xxhash.xxh3_64_intdigest(t.encode("utf-8")) for t in texts]


def test_text_hashes_are_xxh3_of_the_utf8_bytes_however_the_column_is_laid_out():
    assert text_hashes(pa.array(TEXTS)).to_pylist() == xxh3(TEXTS)
    assert text_hashes(pa.array(TEXTS).slice(2)).to_pylist() == xxh3(TEXTS[2:])
    assert text_hashes(pa.chunked_array([TEXTS[:2], TEXTS[2:]])).to_pylist() == xxh3(TEXTS)
    assert text_hashes(pa.array(TEXTS, pa.large_string())).to_pylist() == xxh3(TEXTS)
    assert text_hashes(pa.chunked_array([], pa.string())).to_pylist() == []
    assert text_hashes(pa.array(TEXTS)).type == pa.uint64()


def test_a_stale_hash_is_replaced_in_place_and_a_missing_one_appended():
    table = pa.table({"id": ["1", "2"], "text": ["new one", "new two"], TEXT_HASH: pa.array([1, 2], pa.uint64()),
                      "lang": ["en", "en"]})
    fixed = with_text_hash(table)
    assert fixed.column_names == ["id", "text", TEXT_HASH, "lang"]
    assert fixed.column(TEXT_HASH).to_pylist() == xxh3(["new one", "new two"])
    appended = with_text_hash(table.drop_columns([TEXT_HASH]))
    assert appended.column_names == ["id", "text", "lang", TEXT_HASH]
    assert appended.column(TEXT_HASH).to_pylist() == xxh3(["new one", "new two"])


def test_a_null_text_is_an_error():
    with pytest.raises(ValueError, match="1 null text"):
        text_hashes(pa.array(["a", None]))


class Keeps(Stage):
    name = "keeps"
    drop_reasons = ("odd",)


class Folder:
    def __init__(self, root):
        self.root = root

    def write(self, relpath, data):
        (self.root / relpath).parent.mkdir(parents=True, exist_ok=True)
        (self.root / relpath).write_bytes(data)


def table_of(texts, chunks=1):
    n = len(texts)
    step = -(-n // chunks)
    table = pa.table({"id": [str(i) for i in range(n)], "text": texts, "source": ["s"] * n,
                      "subset": pa.nulls(n, pa.string()), "meta": ["{}"] * n,
                      TEXT_HASH: pa.array(range(n), pa.uint64())})  # stale: what an upstream stage wrote
    return pa.concat_tables([table.slice(i, step) for i in range(0, n, step)]) if chunks > 1 else table


def test_the_shard_writer_hashes_kept_and_dropped_rows_with_the_same_bytes_however_chunked(tmp_path):
    stage = Keeps(StageConfig(), RunContext(seed=0, sources={}))
    reasons = pa.array([None if i % 2 == 0 else "odd" for i in range(len(TEXTS))], pa.string())
    for name, chunks in (("one", 1), ("three", 3)):
        split_and_write(stage, Folder(tmp_path / name), "s.0", "s", table_of(TEXTS, chunks), reasons)
    for folder in ("shards", "dropped"):
        one = (tmp_path / "one" / folder / "s.0.parquet").read_bytes()
        assert one == (tmp_path / "three" / folder / "s.0.parquet").read_bytes()
        table = read_shard(str(tmp_path / "one" / folder / "s.0.parquet"))
        assert table.column(TEXT_HASH).to_pylist() == xxh3(table.column("text").to_pylist())
    assert read_shard(str(tmp_path / "one" / "dropped" / "s.0.parquet")).column_names[-2:] == [TEXT_HASH, "drop_reason"]

    with pytest.raises(RuntimeError, match=r"stage 'keeps', shard s.1: 1 null text"):
        split_and_write(stage, Folder(tmp_path / "null"), "s.1", "s", table_of(["a", None]),
                        pa.nulls(2, pa.string()))
