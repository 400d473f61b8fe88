"""`tokenmill tokens verify RUN` on an index that leaves sha256s out: it names each such file, as the loader does when
it refuses it, instead of skipping it and reporting every file as matching."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

from tokenmill.cli import main
from tokenmill.inspect.tokens import verify_token_files
from tokenmill.loader import DataError, TokenLoader
from tests.loader.tokens import labelled_docs, write_dataset


@pytest.fixture
def run(tmp_path):
    """A run folder holding only tokenize/: two token files whose .idx and .docs.parquet sha256 the index leaves
    out (only the .bin's recorded), and a tokenizer.json with its sha256."""
    run = tmp_path / "run"
    path = write_dataset(run / "tokenize", {"alpha": labelled_docs(30, np.random.default_rng(0))},
                         files_per_source=2, every_sha256=False)
    tokenizer = run / "tokenize" / "tokenizer.json"
    tokenizer.write_text('{"not": "parsed by verify"}', encoding="utf-8")
    index = json.loads(path.read_text())
    index["tokenizer"]["sha256"] = hashlib.sha256(tokenizer.read_bytes()).hexdigest()
    path.write_text(json.dumps(index))
    return run


def test_files_without_a_recorded_sha256_fail_verify_naming_each(run, capsys):
    index = run / "tokenize" / "tokens.json"
    unhashed = [f"train/alpha.000{i}{ext}" for i in (0, 1) for ext in (".docs.parquet", ".idx")]
    assert main(["tokens", "verify", str(run)]) == 2
    out = capsys.readouterr()
    assert "3 of 7 files match tokens.json" in out.out  # the tokenizer and the two .bin
    for name in unhashed:
        assert f"UNHASHED {name}: {index}: {run / 'tokenize' / name}: no sha256 recorded" in out.err
    assert "MISMATCH" not in out.err and "4 files have no sha256 in tokens.json" in out.err
    rows = verify_token_files(run)
    assert sorted(r["file"] for r in rows if not r["recorded"]) == sorted(unhashed)
    assert all(r["ok"] == r["recorded"] for r in rows) and all(r["seconds"] >= 0 for r in rows)
    # The loader refuses the same index, with the same words.
    with pytest.raises(DataError, match=rf"^{index}: .*alpha\.0000\.idx: no sha256 recorded"):
        TokenLoader([index], seq_len=8, global_batch_size=2)


def test_a_tokenizer_without_a_recorded_sha256_is_named_not_called_a_mismatch(run, capsys):
    index = run / "tokenize" / "tokens.json"
    data = json.loads(index.read_text())
    del data["tokenizer"]["sha256"]
    for f in data["splits"]["train"]["files"]:  # every token file hashed: only the tokenizer is left out
        for ext in (".idx", ".docs.parquet"):
            f["sha256"][ext] = hashlib.sha256((run / "tokenize" / f"{f['prefix']}{ext}").read_bytes()).hexdigest()
    index.write_text(json.dumps(data))
    assert main(["tokens", "verify", str(run)]) == 2
    out = capsys.readouterr()
    assert "6 of 7 files match" in out.out
    assert "UNHASHED tokenizer.json" in out.err and "1 files have no sha256" in out.err and "differ" not in out.err
