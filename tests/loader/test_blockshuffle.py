"""The block shuffle: a bijection in O(1) per position, its windows within a few contiguous blocks (of one size, or
one per token file); in the loader, the same samples streamed as read locally, and part of the resume state."""

from __future__ import annotations

import numpy as np
import pytest

from tokenmill.loader.blockshuffle import BlockShuffle, FileBlockShuffle


@pytest.mark.parametrize("n,block,blocks", [(1000, 37, 4), (1000, 10, 100), (999, 1000, 2), (64, 8, 8), (5, 2, 3),
                                            (1, 1, 1), (0, 4, 2), (4096, 64, 1)])
def test_a_permutation_of_every_position(n, block, blocks):
    perm = BlockShuffle(n, block, blocks, ("t", n))
    out = perm(np.arange(n))
    assert sorted(out.tolist()) == list(range(n))
    assert [perm._one(p) for p in range(n)] == out.tolist()  # the scalar path, as a micro-batch uses it


def test_each_window_lies_in_its_blocks_and_the_tail_comes_last():
    n, block, blocks = 10_000, 50, 6
    perm = BlockShuffle(n, block, blocks, ("w",))
    out = perm(np.arange(n))
    window = block * blocks
    full = (n // block) * block
    for start in range(0, full, window):
        ids = np.unique(out[start:start + window] // block)
        assert len(ids) == min(blocks, (full - start) // block)  # whole blocks, and only those
        for b in ids:
            assert (out[start:start + window] // block == b).sum() == block
    assert sorted(out[full:].tolist()) == list(range(full, n))


def test_shuffled_within_and_across_windows_and_keyed():
    n = 5000
    a = BlockShuffle(n, 25, 8, ("k", 1))(np.arange(n))
    b = BlockShuffle(n, 25, 8, ("k", 2))(np.arange(n))
    assert not np.array_equal(a, b)
    assert not np.array_equal(a, np.arange(n))
    first_blocks = np.unique(a[:200] // 25)
    assert first_blocks.tolist() != list(range(8))  # the blocks are shuffled, not taken in order
    steps = np.abs(np.diff(a[:200]))
    assert (steps > 1).mean() > 0.9  # and samples within a window too


def test_the_loader_serves_it_and_keeps_it_in_its_state(tmp_path):
    from tests.loader.tokens import write_dataset
    from tokenmill.errors import ConfigError
    from tokenmill.loader import ResumeError, TokenLoader

    path = write_dataset(tmp_path / "run", {"alpha": [list(range(1, 400))] * 30})
    kwargs = dict(seq_len=16, global_batch_size=4, verify=False)
    plain = TokenLoader(path, **kwargs)
    blocky = TokenLoader(path, shuffle_block=32, shuffle_window=4, **kwargs)
    a = [b["input_ids"] for _, b in zip(range(20), plain)]
    b = [b["input_ids"] for _, b in zip(range(20), blocky)]
    assert not all(x.equal(y) for x, y in zip(a, b))
    state = blocky.state_dict()
    assert state["shuffle_block"] == 32 and state["shuffle_window"] == 4
    assert "shuffle_block" not in plain.state_dict()
    with pytest.raises(ResumeError, match="shuffle_block 32 -> None"):
        TokenLoader(path, **kwargs).load_state_dict(state)
    again = TokenLoader(path, shuffle_block=32, shuffle_window=4, **kwargs)
    again.load_state_dict(state)
    assert next(iter(again))["input_ids"].equal(next(iter(blocky))["input_ids"])
    with pytest.raises(ConfigError, match="shuffle_block must be a positive integer"):
        TokenLoader(path, shuffle_block=0, **kwargs)
    with pytest.raises(ConfigError, match="shuffle_window must be a positive integer, got 0"):
        TokenLoader(path, shuffle_block=32, shuffle_window=0, **kwargs)

    with pytest.raises(ConfigError, match='shuffle_block must be a positive integer or "file", got \'files\''):
        TokenLoader(path, shuffle_block="files", **kwargs)


@pytest.mark.parametrize("edges,blocks", [([0, 5, 5, 12, 13, 30], 2), ([0, 7], 1), ([0, 1, 2, 3], 1), ([0], 1),
                                          ([0, 100, 250, 251, 400, 1000], 3), ([0, 40, 80, 120], 9)])
def test_file_blocks_a_permutation_of_every_position(edges, blocks):
    perm = FileBlockShuffle(edges, blocks, ("t", len(edges)))
    n = edges[-1]
    out = perm(np.arange(n))
    assert sorted(out.tolist()) == list(range(n))
    assert [perm._one(p) for p in range(n)] == out.tolist()


def test_file_blocks_each_window_holds_whole_files_and_is_shuffled():
    rng = np.random.default_rng(3)
    edges = np.concatenate([[0], np.cumsum(rng.integers(20, 90, size=40))])
    n, blocks = int(edges[-1]), 3
    out = FileBlockShuffle(edges, blocks, ("w",))(np.arange(n))
    perm = FileBlockShuffle(edges, blocks, ("w",))
    block_of = np.searchsorted(edges, out, side="right") - 1
    sizes = np.diff(edges)
    seen = []
    for a, b in zip(perm._starts[:-1].tolist(), perm._starts[1:].tolist()):  # each window
        ids, counts = np.unique(block_of[a:b], return_counts=True)
        assert len(ids) <= blocks and (counts == sizes[ids]).all()  # whole files, and only those
        seen += [int(x) for x in dict.fromkeys(block_of[a:b].tolist())]
    assert sorted(seen) == list(range(40)) and seen != list(range(40))  # every file once, in a shuffled order
    assert (np.abs(np.diff(out[:150])) > 1).mean() > 0.8  # and the samples within a window shuffled too
    assert not np.array_equal(out, FileBlockShuffle(edges, blocks, ("other",))(np.arange(n)))


def test_the_loader_serves_file_blocks_a_file_at_a_time(tmp_path):
    from tests.loader.tokens import write_dataset
    from tokenmill.loader import TokenLoader

    path = write_dataset(tmp_path / "run", {"alpha": [list(range(1, 100 + 7 * i)) for i in range(60)]},
                         files_per_source=6)
    loader = TokenLoader(path, seq_len=16, global_batch_size=4, shuffle_block="file", shuffle_window=1, verify=False)
    stream = loader.streams[0]
    where = loader.order.locate(np.arange(stream.samples(16)))
    files = [stream.file_range(s * 16, s * 16 + 1)[0] for s in where.sample.tolist()]
    runs = [f for i, f in enumerate(files) if i == 0 or f != files[i - 1]]
    assert sorted(runs) == list(range(6)) and runs != list(range(6))  # each file's samples together, files shuffled
    assert loader.state_dict()["shuffle_block"] == "file"
