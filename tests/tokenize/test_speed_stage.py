"""The keyed hash of every id from the Arrow column's bytes (`id_keys`) gives what the per-id Python forms it replaced
give: the valid split and the training sample's candidates, on real and hostile ids."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
import xxhash

from tests.tokenize.conftest import web_texts
from tests.tokenize.test_speed_encode import chinese_texts
from tokenmill.tokenize.sample import _key_seed, id_key, id_keys, sample_candidates

ODD_IDS = ["", "0", "id with spaces", "中文标识", "e\u0301", "nul\x00inside", "\r\n", "\U0001f600", "x" * 10_000,
           "<|endoftext|>", "\x1f"]


def real_ids(shared_data) -> list[str]:
    """Ids as ingest writes them (`<source>/<file>/<n>`-like) and the texts themselves as ids: every length and script."""
    texts = web_texts(shared_data)[:500] + chinese_texts(shared_data)[:200]
    return [f"web_en/part-{i // 100:05d}.jsonl.zst/{i}" for i in range(2000)] + texts + ODD_IDS


def old_valid(ids: list[str], seed: int, fraction: float) -> np.ndarray:
    """The valid split as `Encode.map_shard` computed it, an `id_key` call per id."""
    threshold = int(fraction * 2**64)
    return np.fromiter((id_key(seed, i) < threshold for i in ids), dtype=bool, count=len(ids))


def old_sample_candidates(ids: pa.ChunkedArray | pa.Array, seed: int, below: int) -> dict[str, list]:
    """`sample_candidates` as it was: the ids as Python strings, each encoded and hashed."""
    ids = ids.to_pylist()
    seed64 = _key_seed(seed)
    keys = np.fromiter((xxhash.xxh3_64_intdigest(i.encode("utf-8"), seed=seed64) for i in ids), dtype=np.uint64,
                       count=len(ids))
    rows = np.flatnonzero(keys < np.uint64(below)) if below < 2**64 else np.arange(len(ids))
    return {"rows": rows.tolist(), "keys": keys[rows].tolist(), "ids": [ids[r] for r in rows]}


def arrow_forms(values: list[str]) -> list[pa.Array | pa.ChunkedArray]:
    """The column as a shard may hold it: one array, chunks (a slice among them), large offsets."""
    third = len(values) // 3
    return [pa.array(values, pa.string()), pa.array(values, pa.large_string()),
            pa.chunked_array([pa.array(values[:third]), pa.array(["pad"] + values[third:]).slice(1)]),
            pa.chunked_array([], pa.string()) if not values else pa.chunked_array([values], pa.string())]


@pytest.mark.parametrize("seed", [0, 1234, 2**63 + 5])
def test_id_keys_are_id_key_of_every_id(shared_data, seed):
    ids = real_ids(shared_data)
    expected = [id_key(seed, i) for i in ids]
    for column in arrow_forms(ids):
        keys = id_keys(column, seed)
        assert keys.dtype == np.uint64 and keys.tolist() == expected
    assert id_keys(pa.array([], pa.string()), seed).tolist() == []


@pytest.mark.parametrize("fraction", [0.0, 0.001, 0.01, 0.5, 0.999999])
def test_the_valid_split_is_the_one_id_key_gave(shared_data, fraction):
    ids = real_ids(shared_data)
    new = id_keys(pa.array(ids), 1234) < np.uint64(int(fraction * 2**64))
    assert new.dtype == bool and np.array_equal(new, old_valid(ids, 1234, fraction))
    if fraction == 0.5:
        assert 0 < new.sum() < len(ids)  # both sides are compared, not one empty split


@pytest.mark.parametrize("below", [0, 2**60, 2**63, 2**64 - 1, 2**64])
def test_sample_candidates_are_what_they_were(shared_data, below):
    ids = real_ids(shared_data)
    for column in arrow_forms(ids):
        assert sample_candidates(column, 99, below) == old_sample_candidates(column, 99, below)
