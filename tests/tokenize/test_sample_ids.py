"""The training sample chosen from per-shard candidates (the `sample_ids` phase) is the one-pass sample, exactly."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tokenmill.tokenize.sample import choose_sample, id_key, sample_bound, sample_candidates, training_sample


def _shards(tmp_path, rng, ids_of):
    paths, tables = [], []
    for s in range(5):
        ids = ids_of(s)
        table = pa.table({"id": ids, "text": [f"text {s}-{j}" for j in range(len(ids))]})
        path = str(tmp_path / f"s{s}.parquet")
        pq.write_table(table, path, row_group_size=64)
        paths.append(path)
        tables.append(table)
    return paths, tables


def _via_candidates(paths, tables, seed, n, below=None):
    """What the phases do: candidates per shard under the bound, chosen on the driver, texts read by row."""
    below = sample_bound(sum(t.num_rows for t in tables), n) if below is None else below
    found = [(p, sample_candidates(t.column("id"), seed, below)) for p, t in zip(paths, tables)]
    chosen = choose_sample(found, n, below)
    if chosen is None:
        return None, found
    by_path = dict(zip(paths, tables))
    return [by_path[p].column("text")[r].as_py() for p, r in chosen], found


@pytest.mark.parametrize("n", [1, 7, 100, 999, 5000])
def test_candidates_give_the_one_pass_sample_and_only_about_n_of_them(tmp_path, n):
    rng = np.random.default_rng(n)
    paths, tables = _shards(tmp_path, rng, lambda s: [f"{s}/doc-{int(i)}" for i in rng.permutation(600)])
    sample, found = _via_candidates(paths, tables, 11, n)
    assert sample == training_sample(paths, None, 11, n)
    candidates = sum(len(c["rows"]) for _, c in found)
    assert min(n, 3000) <= candidates <= min(3000, 1.5 * n + 8 * n**0.5 + 100)  # about n of the 3,000 ids
    for (_, c), table in zip(found, tables):  # each candidate's key is the stage's key of its id
        assert c["keys"] == [id_key(11, table.column("id")[r].as_py()) for r in c["rows"]]


def test_equal_ids_among_the_chosen_fall_back_to_the_exact_pass(tmp_path):
    rng = np.random.default_rng(3)
    # Every id five times, once per shard: equal keys, and the text (and the heap's history) decides.
    paths, tables = _shards(tmp_path, rng, lambda s: [f"doc-{i}" for i in range(200)])
    sample, _ = _via_candidates(paths, tables, 5, 20)
    assert sample is None  # choose_sample cannot decide; the stage runs training_sample instead


def test_too_few_under_the_bound_fall_back(tmp_path):
    rng = np.random.default_rng(4)
    paths, tables = _shards(tmp_path, rng, lambda s: [f"{s}/doc-{i}" for i in range(300)])
    low = sorted(id_key(9, f"0/doc-{i}") for i in range(300))[3]  # a bound that lets only a few through
    assert _via_candidates(paths, tables, 9, 50, below=low)[0] is None
    # With no bound (every id sent) fewer documents than asked are all taken, as the one pass takes them.
    sample, _ = _via_candidates(paths, tables, 9, 10_000, below=2**64)
    assert sample == training_sample(paths, None, 9, 10_000) and len(sample) == 1500


def test_bound_scales_with_the_sample_not_the_input():
    assert sample_bound(100, 200) == 2**64
    small, large = sample_bound(10**6, 2000), sample_bound(10**8, 2000)
    assert small * 10**6 / 2**64 == pytest.approx(2000 * 1.1 + 8 * 2000**0.5 + 64, rel=1e-6)
    assert large < small / 50
