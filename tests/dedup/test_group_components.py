"""The groups of over-cap buckets in rounds (`group_components`, then `groups` per task, then each verify task's
read): the (group, document) arrays each verify task gets equal, array for array, those the one task over every
over-cap row made with `over_cap_groups` (HEAD's `Groups`), on random bipartite graphs of several shapes and on the
over-cap files of the 5 GB web-like run, at 1, 2 and 8 partitions and with later rounds split over several tasks."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.fs
import pyarrow.parquet as pq
import pytest

from tokenmill.dedup.clusters import over_cap_groups
from tokenmill.dedup.refs import route
from tokenmill.documents import parquet_bytes
from tokenmill.pipeline.contract import PlanContext, TaskContext
from tokenmill.stages.dedup import stage as dedup_stage
from tokenmill.stages.dedup.stage import GroupComponents, Groups, _routed_groups, bucket_nodes

WEB_OVER_CAP = Path("/tmp/web/dedup-web-5gb-s0/out/dedup/_work/over_cap")


class DirectWriter:
    """A task writer that writes straight under the stage folder (no attempt folder, no commit)."""

    def __init__(self, stage_dir: Path):
        self.fs = pyarrow.fs.LocalFileSystem()
        self.stage_dir = stage_dir

    def write(self, relpath: str, data: bytes) -> None:
        path = self.stage_dir / relpath
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def run_phases(stage_dir: Path, partitions: int, budgets: tuple[int, int] | None = None) -> tuple[dict, dict]:
    """`group_components` (every round) then `groups` over `stage_dir/_work/over_cap`, as the driver runs them,
    each planned under its budget of rows per task (`budgets`: `ROWS_PER_TASK` for both by default); returns
    (shared, {phase: {task key: result}} of the last round of each)."""
    shared: dict = {"partitions": {"count": partitions}}
    ctx = PlanContext(str(stage_dir), None, [], shared, pyarrow.fs.LocalFileSystem())
    results = {}
    default = dedup_stage.ROWS_PER_TASK
    for phase, budget in zip((GroupComponents(), Groups()), budgets or (default, default)):
        dedup_stage.ROWS_PER_TASK = budget
        try:
            planned = phase.plan(None, ctx)
        finally:
            dedup_stage.ROWS_PER_TASK = default
        while True:
            done = {t.key: phase.run(None, t, TaskContext(str(stage_dir), None, shared, DirectWriter(stage_dir)))
                    for t in planned}
            shared[phase.name] = phase.reduce(None, done, ctx)
            results[phase.name] = done
            if not phase.again(None, ctx):
                break
            dedup_stage.ROWS_PER_TASK = budget
            try:
                planned = phase.plan(None, ctx)
            finally:
                dedup_stage.ROWS_PER_TASK = default
    return shared, results


def head_groups(buckets: list[np.ndarray], docs: list[np.ndarray], partitions: int) -> list[tuple]:
    """Per verify task, the (dense group, document) arrays of HEAD's one `groups` task, and its counts."""
    bucket = np.concatenate([(np.uint64(p) << np.uint64(32)) | b.astype(np.uint64) for p, b in enumerate(buckets)])
    group, doc = over_cap_groups(bucket, np.concatenate(docs))
    target = route(group, partitions)
    out = []
    for p in range(partitions):
        mine = target == p
        g = group[mine]
        dense = np.cumsum(np.r_[True, g[1:] != g[:-1]]) - 1 if g.size else np.zeros(0, np.int64)
        # Through the file HEAD wrote and verify read, so the dtypes are the ones verify saw.
        table = pq.read_table(pa.BufferReader(parquet_bytes(pa.table({"bucket": pa.array(dense, pa.int64()),
                                                                       "doc": pa.array(doc[mine], pa.uint64())}))))
        out.append((table.column("bucket").to_numpy(), table.column("doc").to_numpy()))
    return out, {"groups": int(np.unique(group).size), "docs": int(doc.size)}


def check(tmp: Path, buckets: list[np.ndarray], docs: list[np.ndarray], partitions: int,
          budgets: tuple[int, int] | None = None) -> dict:
    """Write the over-cap files, run the new phases, and compare every verify task's arrays with HEAD's."""
    over = tmp / "_work" / "over_cap"
    over.mkdir(parents=True)
    for p in range(partitions):
        (over / f"p{p:04d}.parquet").write_bytes(parquet_bytes(pa.table({
            "bucket": pa.array(buckets[p], pa.int64()), "doc": pa.array(docs[p], pa.uint64())})))
    shared, results = run_phases(tmp, partitions, budgets)
    want, counts = head_groups(buckets, docs, partitions)
    ctx = TaskContext(str(tmp), None, shared, DirectWriter(tmp))
    for p in range(partitions):
        got_group, got_doc = _routed_groups(ctx, p, shared["groups"]["parts"])
        want_group, want_doc = want[p]
        assert got_group.dtype == want_group.dtype and got_doc.dtype == want_doc.dtype
        np.testing.assert_array_equal(got_group, want_group)
        np.testing.assert_array_equal(got_doc, want_doc)
    assert {k: shared["groups"][k] for k in counts} == counts
    return shared


def refs(rng: np.random.Generator, n: int) -> np.ndarray:
    """n distinct document references (shard << 32 | row) in random order."""
    shard = rng.integers(0, 40, n * 2).astype(np.uint64)
    row = rng.integers(0, 1 << 20, n * 2).astype(np.uint64)
    out = np.unique((shard << np.uint64(32)) | row)[:n]
    return out[rng.permutation(out.size)]


def shaped(rng: np.random.Generator, shape: str, partitions: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Membership rows (bucket index dense within its partition, document) per partition, of one shape."""
    docs = refs(rng, 4000)
    members: list[np.ndarray] = []
    if shape == "chain":  # bucket i holds documents i and i + 1 (and a few of its own): one long path of buckets
        order = docs[:600]
        for i in range(order.size - 1):
            members.append(np.r_[order[i:i + 2], docs[600 + 3 * i:603 + 3 * i]])
    elif shape == "giant":  # every bucket shares a document with a random earlier one: one group
        for i in range(300):
            own = docs[10 * i:10 * i + 10]
            members.append(own if not i else np.r_[own, members[int(rng.integers(0, i))][0]])
    elif shape == "small":  # many groups of 1 to 3 buckets over their own documents
        at = 0
        while at < docs.size - 30:
            k = int(rng.integers(3, 10))
            own = docs[at:at + k]
            at += k
            for _ in range(int(rng.integers(1, 4))):
                members.append(rng.choice(own, size=int(rng.integers(2, own.size + 1)), replace=False))
    elif shape == "many_bands":  # few documents, each in many buckets (a cluster found in every band)
        pool = docs[:200]
        for _ in range(800):
            members.append(rng.choice(pool, size=int(rng.integers(2, 30)), replace=False))
    else:
        raise ValueError(shape)
    per = [[] for _ in range(partitions)]
    for m in members:
        per[int(rng.integers(0, partitions))].append(m)
    buckets = [np.concatenate([np.full(m.size, i, np.int64) for i, m in enumerate(ms)] or [np.zeros(0, np.int64)])
               for ms in per]
    docs_out = [np.concatenate(ms or [np.zeros(0, np.uint64)]).astype(np.uint64) for ms in per]
    # Rows in random order within a file, as a partition's buckets come.
    order = [rng.permutation(b.size) for b in buckets]
    return [b[o] for b, o in zip(buckets, order)], [d[o] for d, o in zip(docs_out, order)]


BIG, SMALL = 1 << 22, 500
"""Rows per task: one task for each round after the first and for `groups`; or several."""


@pytest.mark.parametrize("partitions", [1, 2, 8])
@pytest.mark.parametrize("shape", ["chain", "giant", "small", "many_bands"])
@pytest.mark.parametrize("budgets", [(BIG, BIG), (SMALL, SMALL), (BIG, SMALL), (SMALL, BIG)])
def test_groups_in_rounds_equal_over_cap_groups(tmp_path, shape, partitions, budgets):
    rng = np.random.default_rng([["chain", "giant", "small", "many_bands"].index(shape), partitions])
    buckets, docs = shaped(rng, shape, partitions)
    shared = check(tmp_path, buckets, docs, partitions, budgets)
    if shape == "chain" and partitions == 8:  # one partition's contraction alone finds the groups
        assert shared["group_components"]["round"] >= 3
    if partitions == 8:
        # (BIG, SMALL): more groups tasks than the last round's, so each reads a superset of its documents' rows.
        assert (shared["group_components"]["parts"] > 1) == (budgets[0] == SMALL)
        assert (shared["groups"]["parts"] > 1) == (budgets[1] == SMALL)


@pytest.mark.parametrize("partitions", [1, 2, 8])
def test_no_over_cap_rows(tmp_path, partitions):
    empty = [np.zeros(0, np.int64)] * partitions
    shared = check(tmp_path, empty, [np.zeros(0, np.uint64)] * partitions, partitions)
    assert shared["group_components"]["round"] == 0
    assert shared["groups"] == {"parts": 1, "docs": 0, "groups": 0}


def test_bucket_nodes_are_above_every_document():
    nodes = bucket_nodes(7, np.array([0, 5, (1 << 32) - 1]))
    assert (nodes >= np.uint64(1 << 63)).all()
    np.testing.assert_array_equal(nodes & np.uint64((1 << 63) - 1), (np.uint64(7) << np.uint64(32)) |
                                  np.array([0, 5, (1 << 32) - 1], np.uint64))


@pytest.mark.slow
@pytest.mark.parametrize("partitions", [1, 2, 8])
def test_the_web_runs_over_cap_files(tmp_path, partitions):
    if not WEB_OVER_CAP.is_dir():
        print(f"skipped: {WEB_OVER_CAP} is absent (made by benchmarks/dedup_web.py at 5 GB)")
        pytest.skip(f"{WEB_OVER_CAP} is absent")
    files = sorted(WEB_OVER_CAP.glob("p*.parquet"))
    # The run's partitions folded into `partitions` files, each bucket renumbered densely within its new file.
    buckets: list[list[np.ndarray]] = [[] for _ in range(partitions)]
    docs: list[list[np.ndarray]] = [[] for _ in range(partitions)]
    used = [0] * partitions  # buckets numbered so far in each new file
    for i, f in enumerate(files):
        table = pq.read_table(f)
        q = i % partitions
        bucket = table.column("bucket").to_numpy()
        buckets[q].append(bucket + used[q])
        used[q] += int(bucket.max()) + 1 if bucket.size else 0
        docs[q].append(table.column("doc").to_numpy())
    assert sum(b.size for parts in buckets for b in parts) > 1_000_000
    check(tmp_path, [np.concatenate(b) for b in buckets], [np.concatenate(d) for d in docs], partitions)
