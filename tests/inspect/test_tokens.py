"""Token counts, lengths and decoded documents on a small real run."""

from __future__ import annotations

import json

import pytest

from tokenmill.errors import TokenmillError
from tokenmill.inspect import (decoded_samples, document_lengths, length_histogram, length_percentiles, read_docs,
                               token_counts)

@pytest.mark.ray
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


@pytest.mark.ray
def test_decoded_samples_round_trip_to_the_tokenized_text(small_run):
    docs = decoded_samples(small_run, n=4, seed=3, split=None, max_tokens=None)
    assert len(docs) == 4 and docs == decoded_samples(small_run, n=4, seed=3, split=None, max_tokens=None)
    texts = {r["id"]: r["text"] for r in read_docs(small_run, "decontaminate", columns=["id", "text"]).to_pylist()}
    for d in docs:
        assert d["ends_with_eos"] and d["text"] == texts[d["id"]]
    short = decoded_samples(small_run, n=1, source="reddit", max_tokens=5)
    assert short[0]["source"] == "reddit" and len(short[0]["text"]) < len(texts[short[0]["id"]])


@pytest.fixture
def tokens_run(tmp_path, monkeypatch):
    """A run folder holding only tokenize/: token files (tests/loader/tokens.py) and a small trained tokenizer.json,
    with their sha256 in tokens.json as the stage records them. No Ray."""
    import hashlib

    import numpy as np

    from tokenmill.tokenize.tokenizer import train_bpe
    from tests.loader.tokens import labelled_docs, write_dataset

    monkeypatch.setenv("TOKENMILL_VERIFIED_CACHE", str(tmp_path / "verified"))  # tokenmill.loader.verify
    run = tmp_path / "run"
    path = write_dataset(run / "tokenize", {"alpha": labelled_docs(30, np.random.default_rng(0))}, files_per_source=2)
    tok = train_bpe(["the quick brown fox jumps over the lazy dog"] * 20, 300)
    (run / "tokenize" / "tokenizer.json").write_text(tok.tokenizer.to_str(), encoding="utf-8")
    index = json.loads(path.read_text())
    index["tokenizer"].update(sha256=tok.sha256, eos_token="<|endoftext|>")
    for f in index["splits"]["train"]["files"]:
        for ext in (".idx", ".docs.parquet"):
            f["sha256"][ext] = hashlib.sha256((run / "tokenize" / (f["prefix"] + ext)).read_bytes()).hexdigest()
    path.write_text(json.dumps(index))
    return run


def test_tokens_verify_names_a_flipped_bin(tokens_run, capsys):
    from tokenmill.cli import main

    assert main(["tokens", "verify", str(tokens_run)]) == 0
    assert "7 of 7 files match tokens.json" in capsys.readouterr().out  # the tokenizer, 2 x (.bin, .idx, .docs)
    # It left markers on this node: a loader then starts without hashing anything.
    from tokenmill.loader import TokenLoader

    loader = TokenLoader([tokens_run / "tokenize" / "tokens.json"], seq_len=8, global_batch_size=2)
    loader.verifier.wait()
    assert loader.verifier.hashed == 0 and loader.verifier.done
    bad = tokens_run / "tokenize" / "train" / "alpha.0001.bin"
    raw = bytearray(bad.read_bytes())
    raw[4] ^= 1
    raw[-3] ^= 8
    bad.write_bytes(bytes(raw))  # same size
    assert main(["tokens", "verify", str(tokens_run)]) == 2
    out = capsys.readouterr()
    assert "6 of 7 files match" in out.out
    assert "MISMATCH train/alpha.0001.bin" in out.err and "1 files differ" in out.err


def test_tokens_stats_refuses_a_tokenizer_other_than_the_recorded_one(tokens_run, capsys):
    from tokenmill.cli import main

    assert main(["tokens", "stats", str(tokens_run), "--decode", "1"]) == 0
    # The table's row is inspect's view of the sidecars: 30 documents of alpha, their tokens and percentiles.
    (row,) = length_percentiles(tokens_run, "train")
    assert row["documents"] == 30 and row["tokens"] == token_counts(tokens_run)[0]["tokens"]
    cells = [f"{row[k]:,}" for k in ("documents", "tokens", "p10", "p50", "p90", "p99")]
    assert any(line.split()[:8] == ["train", "alpha", *cells] for line in
               capsys.readouterr().out.replace("│", " ").splitlines())
    path = tokens_run / "tokenize" / "tokenizer.json"
    path.write_text(path.read_text().replace('"<|endoftext|>"', '"<|endoftext|> "', 1))  # another, valid tokenizer
    assert main(["tokens", "stats", str(tokens_run)]) == 2
    err = "".join(capsys.readouterr().err.split())  # rich wraps the message
    assert "tokenize/tokenizer.json:sha256" in err and "recordedintokens.json" in err


def test_an_index_already_read_gives_the_same_views_as_the_run(tokens_run):
    """`tokens stats` reads tokens.json once and hands the index to each view; each must see what the run gives."""
    from tokenmill.inspect.tokens import tokenizer
    from tokenmill.tokenize import tokens_json

    index = tokens_json.read(tokens_run / "tokenize" / tokens_json.FILE)
    assert length_percentiles(index, "train") == length_percentiles(tokens_run, "train")
    assert tokenizer(index).sha256 == tokenizer(tokens_run).sha256
    docs = decoded_samples(index, n=3, seed=1, max_tokens=None)
    assert docs == decoded_samples(tokens_run, n=3, seed=1, max_tokens=None)
    assert len(docs) == 3 and all(d["ends_with_eos"] and d["source"] == "alpha" for d in docs)
