"""`auto` partitions: 16 for small inputs, doubled as documents or text grow, a power of two, bounded."""

from __future__ import annotations

import pytest

from tokenmill.dedup.sizing import (DOCS_PER_PARTITION, MAX_PARTITIONS, MIN_PARTITIONS, TEXT_BYTES_PER_PARTITION,
                                    auto_partitions)


def test_small_inputs_keep_the_count_every_run_had_before():
    assert auto_partitions(0, 0) == MIN_PARTITIONS == 16
    assert auto_partitions(16 * DOCS_PER_PARTITION, 16 * TEXT_BYTES_PER_PARTITION) == 16


@pytest.mark.parametrize("docs, text_bytes, expected", [
    (16 * DOCS_PER_PARTITION + 1, 0, 32),
    (0, 16 * TEXT_BYTES_PER_PARTITION + 1, 32),
    (8_333_333, 10_178_000_000, 128),   # the 10 GB web-like corpus: 65,104 documents a partition
    (4_166_666, 5_089_000_000, 64),     # half of it: the same documents a partition
    (7_992_823, 7_942_000_000, 128),    # the 10 GB scale corpus at dedup
    (3_248, 7_478_612, 16),             # the demo
    (1_000, 10 ** 12, 8192 // 2),       # a terabyte of long documents: the bound
])
def test_the_count_follows_the_larger_of_documents_and_text(docs, text_bytes, expected):
    count = auto_partitions(docs, text_bytes)
    assert count == expected
    assert count & (count - 1) == 0
    if count < MAX_PARTITIONS:
        assert docs <= count * DOCS_PER_PARTITION and text_bytes <= count * TEXT_BYTES_PER_PARTITION
        assert count == 16 or docs > count // 2 * DOCS_PER_PARTITION or text_bytes > count // 2 * TEXT_BYTES_PER_PARTITION


def test_doubling_the_input_doubles_the_count_so_a_partition_stays_the_same_size():
    for docs in (2_000_000, 5_000_000, 40_000_000):
        assert auto_partitions(2 * docs, 0) == 2 * auto_partitions(docs, 0)


def test_a_negative_size_is_refused():
    with pytest.raises(ValueError, match="negative"):
        auto_partitions(-1, 0)


def test_the_config_takes_auto_or_a_count_and_refuses_anything_else():
    from pydantic import ValidationError

    from tokenmill.stages.dedup.config import DedupConfig

    assert DedupConfig().partitions == "auto" and DedupConfig(partitions=64).partitions == 64
    for bad in ("many", 0, 4097, -1):
        with pytest.raises(ValidationError):
            DedupConfig(partitions=bad)
