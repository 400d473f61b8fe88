"""The pure core of incremental dedup: the index rows a run keeps, the join of new band rows with them, the partitions
to read, the per-document decision, and the settings check."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from tokenmill.dedup.bands import EXACT_BAND
from tokenmill.dedup.incremental import (cap_per_doc, compatible_parts, earlier_decisions, index_bytes, index_meta,
                                         index_table, match, setting_differences, settings_of)
from tokenmill.dedup.refs import doc_ref


def _rows(band, key, doc, exact=None) -> pa.Table:
    n = len(band)
    exact = exact if exact is not None else [None] * n
    return pa.table({"band": pa.array(band, pa.uint16()), "key": pa.array(key, pa.uint64()),
                     "doc": pa.array(doc, pa.uint64()), "exact": pa.array(exact, pa.uint64())})


def test_index_keeps_kept_documents_renamed_to_their_output_rows():
    # Shard 0 rows 0..3 (rows 1 and 2 removed), shard 1 rows 0..1 (row 0 removed).
    d = [int(doc_ref(0, np.array([r]))[0]) for r in range(4)] + [int(doc_ref(1, np.array([r]))[0]) for r in range(2)]
    rows = _rows([0, 0, 1, 1, 0, EXACT_BAND], [5, 6, 7, 8, 9, 10], d, [None] * 5 + [77])
    removed = np.array([d[1], d[2], d[4]], np.uint64)
    table = index_table(rows, removed, ["s0", "s1"])
    got = sorted(zip(table.column("shard").to_pylist(), table.column("row").to_pylist(), table.column("key").to_pylist()))
    # Shard 0 row 3 is the second kept row there (output row 1); shard 1 row 1 the first (output row 0).
    assert got == [("s0", 0, 5), ("s0", 1, 8), ("s1", 0, 10)]
    assert table.column("exact").to_pylist()[table.column("key").to_pylist().index(10)] == 77
    meta = index_meta({"num_perm": 8}, {"web": "en"})
    assert index_bytes(table, meta) == index_bytes(index_table(rows, removed[::-1].copy(), ["s0", "s1"]), meta)


def test_match_joins_equal_band_keys_and_exact_hashes_once_per_pair():
    own = _rows([0, 1, 0, EXACT_BAND, EXACT_BAND], [1, 2, 3, 4, 4], [10, 10, 11, 12, 13], [None, None, None, 9, 8])
    index = pa.table({"band": pa.array([0, 1, 1, EXACT_BAND], pa.uint16()), "key": pa.array([1, 2, 3, 4], pa.uint64()),
                      "exact": pa.array([None, None, None, 9], pa.uint64())})
    doc, at, exact = match(own, index)
    # doc 10 meets index row 0 (band 0) and row 1 (band 1): two pairs; doc 11's key 3 is in band 1 there, not 0;
    # doc 12 has the exact hash (both halves), doc 13 only its first half.
    assert list(zip(doc.tolist(), at.tolist(), exact.tolist())) == [(10, 0, False), (10, 1, False), (12, 3, True)]


@pytest.mark.parametrize("mine,theirs", [(4, 4), (2, 4), (4, 2), (3, 4), (6, 4)])
def test_compatible_parts_cover_every_key_and_no_more_than_needed(mine, theirs):
    keys = np.arange(10_000)
    for part in range(mine):
        needed = set((keys[keys % mine == part] % theirs).tolist())
        assert set(compatible_parts(part, mine, theirs)) == needed


def test_a_document_is_decided_by_its_first_passing_pair():
    # Pairs as a document tries them (exact first); doc 2's first pair is below the threshold, its second decides.
    doc = np.array([1, 1, 1, 2, 2, 3], np.uint64)
    exact = np.array([True, False, False, False, False, False])
    jac = np.array([0.0, 0.99, 0.97, 0.90, 0.96, 0.5])
    removed, chosen, by_exact = earlier_decisions(doc, exact, jac, 0.95)
    assert removed.tolist() == [1, 2] and chosen.tolist() == [0, 4] and by_exact.tolist() == [True, False]


def test_cap_per_doc_keeps_the_first_pairs_of_each_document():
    assert cap_per_doc(np.array([1, 1, 1, 2, 3, 3], np.uint64), 2).tolist() == [True, True, False, True, True, True]


def test_settings_name_what_differs():
    identity = {"config": {"num_perm": 320, "word_ngram": 5, "char_ngram": 5, "minhash_seed": 1, "threshold": 0.9},
                "bands": 16, "rows": 20}
    mine = {**settings_of(identity), "minhash_seed": 2}
    assert setting_differences(settings_of(identity), mine) == ["minhash_seed: earlier 1, this run 2"]
    assert "threshold" not in settings_of(identity)  # the threshold may differ: it decides, it does not hash
