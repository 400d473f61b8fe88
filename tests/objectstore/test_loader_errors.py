"""Bad input to the streaming loader: each a clear error naming the URI or the setting, before the first batch."""

from __future__ import annotations

import pytest

from tests.loader.streaming import BUCKET, KW, URI, dataset, upload
from tests.s3server import free_port
from tokenmill.errors import ConfigError
from tokenmill.loader import DataError, TokenLoader


@pytest.fixture
def data(tmp_path, s3_server):
    root = tmp_path / "run" / "tokenize"
    path, total, largest = dataset(root, files_per_source=4)
    upload(s3_server, root)
    return total, largest


def test_an_unreachable_endpoint_names_the_uri(data, tmp_path, monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{free_port()}")  # nothing listens there
    with pytest.raises(DataError, match=rf"{URI}: read failed \d+ times over 1 s \(fetch_timeout\)"):
        TokenLoader(URI, cache_dir=tmp_path / "cache", fetch_timeout=1, **KW)


def test_a_missing_index_names_the_uri(data, tmp_path):
    with pytest.raises(DataError, match=f"s3://{BUCKET}/elsewhere/tokens.json: no such object"):
        TokenLoader(f"s3://{BUCKET}/elsewhere/tokens.json", cache_dir=tmp_path / "cache", **KW)


def test_a_missing_bucket_names_the_uri(data, tmp_path):
    with pytest.raises(DataError, match="s3://no-such-bucket/run/tokenize/tokens.json"):
        TokenLoader("s3://no-such-bucket/run/tokenize/tokens.json", cache_dir=tmp_path / "cache", fetch_timeout=5,
                    **KW)


def test_a_run_folder_uri_finds_its_index(data, tmp_path):
    loader = TokenLoader(f"s3://{BUCKET}/run", cache_dir=tmp_path / "cache", **KW)
    assert next(iter(loader))["input_ids"].shape == (1, 16)
    loader.close()


def test_a_missing_split_names_the_uri_and_the_splits_there(data, tmp_path):
    # The same message as for a local tokens.json: both go through tokens_json.TokensIndex.files.
    with pytest.raises(DataError, match=rf"{URI}: no split 'test' \(has \['train'\]\)"):
        TokenLoader(URI, cache_dir=tmp_path / "cache", split="test", **KW)
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").iterdir())  # nothing fetched


def test_a_missing_token_file_is_named_before_the_first_batch(data, tmp_path, s3_server):
    s3_server.client().delete_object(Bucket=BUCKET, Key="run/tokenize/train/beta.0002.bin")
    with pytest.raises(DataError, match=f"s3://{BUCKET}/run/tokenize/train/beta.0002.bin: no such object"):
        TokenLoader(URI, cache_dir=tmp_path / "cache", **KW)


def test_a_truncated_token_file_is_named_before_the_first_batch(data, tmp_path, s3_server):
    s3_server.client().put_object(Bucket=BUCKET, Key="run/tokenize/train/alpha.0001.bin", Body=b"\x01\x00" * 3)
    with pytest.raises(DataError, match=f"s3://{BUCKET}/run/tokenize/train/alpha.0001.bin: the object has 6 bytes "
                                        "but tokens.json implies"):
        TokenLoader(URI, cache_dir=tmp_path / "cache", **KW)


def test_a_cache_smaller_than_one_token_file_names_cache_bytes(data, tmp_path):
    total, largest = data
    with pytest.raises(ConfigError, match=rf"cache_bytes {largest - 1} is smaller than one token file: "
                                          rf"s3://{BUCKET}/run/tokenize/train/\S+\.bin and its .idx take {largest}"):
        TokenLoader(URI, cache_dir=tmp_path / "cache", cache_bytes=largest - 1, **KW)
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").iterdir())  # nothing fetched
    loader = TokenLoader(URI, cache_dir=tmp_path / "cache", cache_bytes=4 * largest, **KW)  # enough: it runs
    it = iter(loader)
    for _ in range(20):
        next(it)
    loader.close()


def test_a_cache_too_small_for_the_workers_pins_names_num_workers(data, tmp_path):
    """Each worker pins the files of the sample it reads (a sample may span two files here): two workers need room
    for four of the largest files; a cache of two is refused before anything is fetched."""
    total, largest = data
    with pytest.raises(ConfigError, match=rf"cache_bytes {2 * largest} cannot hold the files that 2 process\(es\) "
                                          rf"building micro-batches may read at once \(up to {4 * largest} bytes.*"
                                          "lower num_workers"):
        TokenLoader(URI, cache_dir=tmp_path / "cache", cache_bytes=2 * largest, num_workers=2, **KW)
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").iterdir())  # nothing fetched


@pytest.mark.parametrize("key, value", [("cache_bytes", 0), ("cache_bytes", -5), ("cache_bytes", 1.5),
                                        ("fetch_timeout", 0), ("prefetch_threads", -1)])
def test_bad_settings_name_the_key(data, tmp_path, key, value):
    with pytest.raises(ConfigError, match=key):
        TokenLoader(URI, cache_dir=tmp_path / "cache", **{key: value}, **KW)
