"""A streaming loader whose cache cannot hold the order's working set: a block shuffle's window that does not fit is
refused before any fetch, naming a window that does (weight-0 streams not counted), and a loader that fetches the
same files again and again says so once, with the ratio."""

from __future__ import annotations

import logging

import pytest

from tests.loader.streaming import KW, URI, dataset, upload
from tokenmill.errors import ConfigError
from tokenmill.loader import TokenLoader


@pytest.fixture
def data(tmp_path, s3_server):
    path, total, largest = dataset(tmp_path / "run" / "tokenize")
    upload(s3_server, tmp_path / "run" / "tokenize")
    sizes = {}
    for p in (tmp_path / "run" / "tokenize").rglob("train/*"):
        if p.suffix in (".bin", ".idx"):
            key = p.with_suffix("").name
            sizes[key] = sizes.get(key, 0) + p.stat().st_size
    return total, sizes


def _largest(sizes: dict[str, int], source: str, n: int) -> int:
    return sum(sorted((v for k, v in sizes.items() if k.startswith(source + ".")), reverse=True)[:n])


def test_a_window_the_cache_cannot_hold_is_refused_naming_one_that_fits(data, tmp_path):
    total, sizes = data
    cache = total // 4  # two streams of 16 files: eight files' room
    with pytest.raises(ConfigError, match=r"shuffle_window 8: a window of every served stream reads up to \d+ bytes"
                                          r".* more than cache_bytes \d+: .*lower shuffle_window to [1-4] \(or less\)"):
        TokenLoader(URI, cache_dir=tmp_path / "c1", cache_bytes=cache, shuffle_block="file", **KW)
    TokenLoader(URI, cache_dir=tmp_path / "c2", cache_bytes=cache, shuffle_block="file", shuffle_window=2,
                **KW).close()


def test_a_stream_of_weight_0_takes_no_room_in_the_window(data, tmp_path):
    total, sizes = data
    alpha = _largest(sizes, "alpha", 8)  # alpha's window of 8 files, exactly
    kw = {**KW, "shuffle_block": "file", "shuffle_window": 8, "cache_dir": tmp_path / "cache", "cache_bytes": alpha}
    TokenLoader(URI, weights={"alpha": 1.0}, **kw).close()  # beta left out: only alpha's window counts
    with pytest.raises(ConfigError, match="shuffle_window 8"):
        TokenLoader(URI, weights={"alpha": 1.0, "beta": 1.0}, **kw)


@pytest.mark.slow  # an epoch of a global shuffle over a quarter cache, through moto: about 27 s; the window tests above
def test_fetching_the_same_files_again_and_again_is_said_once(data, tmp_path, caplog):
    total, _ = data
    with caplog.at_level(logging.WARNING, logger="tokenmill.loader.loader"):
        loader = TokenLoader(URI, cache_dir=tmp_path / "global", cache_bytes=total // 4, **KW)  # a global shuffle
        it = iter(loader)
        for _ in range(1500):
            next(it)
        loader.close()
    said = [r.getMessage() for r in caplog.records]
    assert any("a global shuffle over" in m and "set shuffle_block: file" in m for m in said), said
    thrash = [m for m in said if "bytes per byte of samples used" in m]
    assert len(thrash) == 1 and float(thrash[0].split("fetched ")[1].split(" bytes")[0]) > 1.5, said
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="tokenmill.loader.loader"):
        loader = TokenLoader(URI, cache_dir=tmp_path / "blocks", cache_bytes=total // 4, shuffle_block="file",
                             shuffle_window=2, **KW)
        it = iter(loader)
        for _ in range(1500):
            next(it)
        loader.close()
    assert not [r for r in caplog.records if "bytes per byte" in r.getMessage()]  # a window it holds: no warning
