"""Token counts, lengths and decoded documents on a small real run."""

from __future__ import annotations

import json

import pytest

from tokenmill.errors import TokenmillError
from tokenmill.inspect import (decoded_samples, document_lengths, length_histogram, length_percentiles, read_docs,
                               token_counts)

pytestmark = pytest.mark.ray


def test_token_counts_and_lengths_agree_with_tokens_json(small_run):
    index = json.loads((small_run / "tokenize" / "tokens.json").read_text())
    rows = token_counts(small_run)
    for split, entry in index["splits"].items():
        assert sum(r["tokens"] for r in rows if r["split"] == split) == entry["tokens"]
        assert sum(r["documents"] for r in rows if r["split"] == split) == entry["documents"]
    lengths = document_lengths(small_run, "train")
    assert {s: int(v.sum()) for s, v in lengths.items()} == \
        {r["source"]: r["tokens"] for r in rows if r["split"] == "train"}
    edges, counts = length_histogram(small_run, "train", bins=10)
    assert all(int(c.sum()) == len(lengths[s]) for s, c in counts.items())
    assert list(edges) == sorted(edges)
    p = length_percentiles(small_run, "train")
    assert all(r["p10"] <= r["p50"] <= r["p90"] <= r["p99"] for r in p)
    with pytest.raises(TokenmillError, match="no split 'nope'"):
        document_lengths(small_run, "nope")



def test_decoded_samples_round_trip_to_the_tokenized_text(small_run):
    docs = decoded_samples(small_run, n=4, seed=3, split=None, max_tokens=None)
    assert len(docs) == 4 and docs == decoded_samples(small_run, n=4, seed=3, split=None, max_tokens=None)
    texts = {r["id"]: r["text"] for r in read_docs(small_run, "decontaminate", columns=["id", "text"]).to_pylist()}
    for d in docs:
        assert d["ends_with_eos"] and d["text"] == texts[d["id"]]
    short = decoded_samples(small_run, n=1, source="reddit", max_tokens=5)
    assert short[0]["source"] == "reddit" and len(short[0]["text"]) < len(texts[short[0]["id"]])
