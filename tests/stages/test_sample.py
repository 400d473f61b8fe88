"""Sample choices depend only on (seed, source, id): stable under resharding, order and worker count."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from tokenmill.sources.config import SourceConfig
from tokenmill.pipeline.contract import RunContext
from tokenmill.sampling import keep_mask
from tokenmill.stages.sample import SampleConfig, SampleStage

IDS = [f"doc-{i}" for i in range(20_000)]


def test_choice_is_stable_under_resharding_and_order():
    whole = dict(zip(IDS, keep_mask(7, "web", IDS, 0.3)))
    rng = np.random.default_rng(0)
    shuffled = list(rng.permutation(IDS))
    for chunk in np.array_split(np.array(shuffled), 13):
        ids = chunk.tolist()
        assert dict(zip(ids, keep_mask(7, "web", ids, 0.3))) == {i: whole[i] for i in ids}


def test_fraction_is_met_and_seed_and_source_matter():
    kept = keep_mask(7, "web", IDS, 0.3)
    assert abs(kept.mean() - 0.3) < 0.015
    assert (kept != keep_mask(8, "web", IDS, 0.3)).any()
    assert (kept != keep_mask(7, "books", IDS, 0.3)).any()
    assert keep_mask(7, "web", IDS, 1.0).all()


def test_larger_fraction_keeps_a_superset():
    small, large = keep_mask(7, "web", IDS, 0.2), keep_mask(7, "web", IDS, 0.5)
    assert not (small & ~large).any()


def test_process_marks_sampled_out():
    run = RunContext(seed=3, sources={"web": SourceConfig(name="web", format="jsonl", paths=["x"], fraction=0.5)})
    table = pa.table({"id": IDS[:1000], "text": ["t"] * 1000, "source": ["web"] * 1000})
    out = SampleStage(SampleConfig(), run).process(table, {})
    reasons = out.drop_reason.to_pylist()
    assert set(reasons) == {None, "sampled_out"}
    assert [r is None for r in reasons] == keep_mask(3, "web", IDS[:1000], 0.5).tolist()
