"""The merge of a source's per-shard token files (tokenmill.tokenize.merge): every document once, in order, byte for
byte, in files of about equal size up to `max_tokens`, a small split in one file."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from tokenmill.tokenize import bundle
from tokenmill.tokenize.indexed import IDX, parse_index
from tokenmill.tokenize.merge import join_parts, plan_files


class _Files:
    """A stage folder in memory: what `SplitFiles` and `write_bundle` write through `write`."""

    def __init__(self):
        self.files: dict[str, bytes] = {}

    def write(self, relpath, data):
        self.files[relpath] = bytes(data)

    def read(self, path):
        return self.files[path]

    def read_range(self, path, offset, size):
        return self.files[path][offset:offset + size]


def _shards(rng, out: _Files, counts: list[int], max_tokens: int = 10**9) -> tuple[list[dict], np.ndarray, list]:
    """Per-shard files of one source and split, as the encode phase writes them (`SplitFiles`); with the tokens and
    ids of all their documents in stream order."""
    parts, tokens, ids = [], [], []
    for s, n in enumerate(counts):
        lengths = rng.integers(1, 900, size=n)
        toks = rng.integers(0, 65536, size=int(lengths.sum()))
        table = pa.table({"id": [f"s{s}d{i}" for i in range(n)], "source": ["web"] * n, "subset": [None] * n})
        split = bundle.SplitFiles("train", f"web.s{s:03d}", np.dtype(np.uint16), max_tokens, table,
                                  {"tiktoken" if s % 2 else "tokenizers"}, out, "_work/parts/")
        split.add(np.arange(n), lengths, toks)
        split.flush()
        parts += [{"prefix": f["prefix"], "tokens": f["tokens"]} for f in split.files]
        tokens.append(toks)
        ids += table.column("id").to_pylist()
    return parts, np.concatenate(tokens), ids


def _merge(out: _Files, parts, max_tokens) -> list[dict]:
    entries = []
    for i, planned in enumerate(plan_files(parts, max_tokens)):
        joined = join_parts(planned["parts"], planned["lo"], planned["hi"], out.read, out.read_range)
        if joined is not None:
            entries.append(bundle.write_bundle(out, f"train/web.{i:05d}", *joined))
    return entries


@pytest.mark.parametrize("max_tokens", [5_000, 37_000, 10**9])
def test_every_document_once_in_order_in_files_of_about_equal_size(max_tokens):
    rng = np.random.default_rng(1)
    out = _Files()
    parts, tokens, ids = _shards(rng, out, [40, 3, 90, 1, 25, 60], max_tokens=20_000)
    total = int(sum(p["tokens"] for p in parts))
    entries = _merge(out, parts, max_tokens)
    n = -(-total // max_tokens)
    assert len(entries) == n  # a small split (the last case) is one file
    joined = np.concatenate([np.frombuffer(out.files[e["prefix"] + bundle.BIN], np.uint16) for e in entries])
    assert np.array_equal(joined, tokens)  # byte for byte, in stream order
    side = pa.concat_tables([bundle.read_docs(out.files[e["prefix"] + bundle.DOCS]) for e in entries])
    assert side.column("id").to_pylist() == ids
    for e in entries:
        index = parse_index(out.files[e["prefix"] + IDX], e["prefix"])
        assert index.sequence_lengths.tolist() == bundle.read_docs(out.files[e["prefix"] + bundle.DOCS]).column(
            "tokens").to_pylist()
        # About total / n tokens each, cut at documents: off by less than one document (< 900 tokens).
        assert abs(e["tokens"] - total / n) < 2 * 900 and e["tokens"] <= max_tokens + 900
    # Each file names every encoder of the parts it joined (the shards alternate between the two).
    assert {x for e in entries for x in e["engine"].split("+")} == {"tiktoken", "tokenizers"}
    assert n > 1 or entries[0]["engine"] == "tiktoken+tokenizers"


def test_the_plan_reads_only_the_parts_that_may_hold_its_documents():
    parts = [{"prefix": f"p{i}", "tokens": t} for i, t in enumerate([100, 100, 100, 100])]
    plan = plan_files(parts, 150)
    assert [(f["lo"], f["hi"]) for f in plan] == [(0, 133), (133, 266), (266, 400)]
    assert [[p["prefix"] for p in f["parts"]] for f in plan] == [["p0", "p1"], ["p1", "p2"], ["p2", "p3"]]
    assert plan_files([], 150) == [] and plan_files(parts, 400)[0]["parts"] == [dict(p, start=100 * i)
                                                                                 for i, p in enumerate(parts)]


def test_a_range_where_no_document_starts_is_no_file():
    """One document longer than a file's share: the file after it has no document to start, and is not written."""
    rng = np.random.default_rng(2)
    out = _Files()
    table = pa.table({"id": ["long", "a", "b"], "source": ["web"] * 3, "subset": [None] * 3})
    split = bundle.SplitFiles("valid", "web.s000", np.dtype(np.uint16), 10**9, table, {"tiktoken"}, out)
    lengths = np.array([3000, 10, 10])
    split.add(np.arange(3), lengths, rng.integers(0, 100, size=int(lengths.sum())))
    split.flush()
    parts = [{"prefix": f["prefix"], "tokens": f["tokens"]} for f in split.files]
    entries = _merge(out, parts, 1000)
    # Four shares of 755 tokens: the first holds "long", the last a and b, the two between them none.
    assert [(e["prefix"], e["documents"]) for e in entries] == [("train/web.00000", 1), ("train/web.00003", 2)]


def test_a_part_that_changed_since_it_was_encoded_is_refused():
    rng = np.random.default_rng(3)
    out = _Files()
    parts, _, _ = _shards(rng, out, [10, 10])
    parts[1]["tokens"] += 1
    planned = plan_files(parts, 10**9)[0]
    with pytest.raises(ValueError, match=r"s001\.0000\.idx: \d+ tokens where the encode phase wrote"):
        join_parts(planned["parts"], planned["lo"], planned["hi"], out.read, out.read_range)
