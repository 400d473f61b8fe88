"""`tokens.json` has one owner (tokenmill.tokenize.tokens_json): what it writes reads back, a bad key is named with
the file, a newer layout is refused, and every reader (loader, inspect, trainer config) finds it the same way."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest

from tests.loader.tokens import labelled_docs, write_dataset
from tokenmill.documents import canonical_json
from tokenmill.tokenize import tokens_json
from tokenmill.tokenize.tokens_json import DataError

TOKENIZER = {"file": "tokenizer.json", "sha256": "ab" * 32, "vocab_size": 300, "eos_id": 0, "eos_token": "<|e|>"}


def _entry(prefix: str, documents: int, tokens: int) -> dict:
    return {"prefix": prefix, "documents": documents, "tokens": tokens, "engine": "tokenizers",
            "by_source": {"web": {"documents": documents, "tokens": tokens,
                                  "subsets": {"(none)": {"documents": documents, "tokens": tokens}}}},
            "sha256": {".bin": "00" * 32, ".idx": "11" * 32, ".docs.parquet": "22" * 32}}


def test_build_sorts_files_sums_splits_and_reads_back(tmp_path):
    index = tokens_json.build(TOKENIZER, "uint16", {"train": [_entry("train/b.0000", 2, 30), _entry("train/a.0000", 1, 5)],
                                                   "valid": []})
    assert [f["prefix"] for f in index["splits"]["train"]["files"]] == ["train/a.0000", "train/b.0000"]
    assert index["splits"]["train"]["tokens"] == 35 and index["splits"]["train"]["documents"] == 3
    assert index["version"] == tokens_json.VERSION and index["format"] == "megatron-mmidx"
    # The bytes the stage wrote before this module existed: canonical JSON and a newline.
    assert tokens_json.dumps(index) == (canonical_json(index) + "\n").encode("utf-8")
    (tmp_path / "tokenize").mkdir()
    (tmp_path / "tokenize" / "tokens.json").write_bytes(tokens_json.dumps(index))
    for where in (tmp_path, tmp_path / "tokenize", tmp_path / "tokenize" / "tokens.json"):  # run, folder, file
        read = tokens_json.read(where)
        assert read.data == index and read.path == tmp_path / "tokenize" / "tokens.json"
    assert read.dtype == np.uint16 and read.tokenizer_path == tmp_path / "tokenize" / "tokenizer.json"
    assert read.prefix_path(read.files("train")[0]) == tmp_path / "tokenize" / "train" / "a.0000"
    with pytest.raises(DataError, match=r"no split 'test' \(has \['train', 'valid'\]\)"):
        read.files("test")
    # Read from a store (`loader.remote.read_index`): the same index, its paths URIs joined as text.
    remote = tokens_json.TokensIndex("s3://bucket/run/tokenize/tokens.json", index)
    assert remote.folder == "s3://bucket/run/tokenize"
    assert remote.tokenizer_path == "s3://bucket/run/tokenize/tokenizer.json"
    assert remote.prefix_path(remote.files("train")[0]) == "s3://bucket/run/tokenize/train/a.0000"
    with pytest.raises(DataError, match=r"^s3://bucket/run/tokenize/tokens\.json: no split 'test'"):
        remote.files("test")


def _written(tmp_path, edit) -> str:
    path = write_dataset(tmp_path, {"alpha": labelled_docs(6, np.random.default_rng(0))}, files_per_source=1)
    index = json.loads(path.read_text())
    edit(index)
    path.write_text(json.dumps(index))
    return str(path)


@pytest.mark.parametrize("edit, key", [
    (lambda i: i["splits"]["train"]["files"][0].pop("tokens"), "splits.train.files[0].tokens"),
    (lambda i: i["splits"]["train"]["files"][0].update(documents=-1), "splits.train.files[0].documents"),
    (lambda i: i["splits"]["train"].update(files={}), "splits.train.files"),
    (lambda i: i["tokenizer"].update(eos_id="0"), "tokenizer.eos_id"),
    (lambda i: i.update(dtype="uint17"), "dtype"),
    (lambda i: i.pop("splits"), "splits"),
    (lambda i: i["splits"]["train"]["files"][0]["by_source"]["alpha"].pop("documents"),
     "splits.train.files[0].by_source.alpha.documents"),
    (lambda i: i["splits"]["train"]["files"][0].update(head={"bytes": 0, "sha256": "ab"}),
     "splits.train.files[0].head.bytes"),
    (lambda i: i["splits"]["train"]["files"][0].update(head={"bytes": 64}), "splits.train.files[0].head.sha256"),
    (lambda i: i["splits"]["train"]["files"][0].update(head={"bytes": 63, "sha256": "ab" * 32}),
     "splits.train.files[0].head.bytes"),  # not a whole number of uint16 tokens
    (lambda i: i["splits"]["train"]["files"][0].update(head=[64]), "splits.train.files[0].head"),
    # Hashes name the streaming cache's files and names are joined to folders: neither may lead anywhere else.
    (lambda i: i["splits"]["train"]["files"][0]["sha256"].update({".bin": "../../X"}),
     "splits.train.files[0].sha256..bin"),
    (lambda i: i["splits"]["train"]["files"][0]["sha256"].update({".bin": "AB" * 32}),
     "splits.train.files[0].sha256..bin"),
    (lambda i: i["splits"]["train"]["files"][0]["sha256"].update({".bin": "ab" * 31}),
     "splits.train.files[0].sha256..bin"),
    (lambda i: i["splits"]["train"]["files"][0]["sha256"].update({".exe": "ab" * 32}), "splits.train.files[0].sha256"),
    (lambda i: i["splits"]["train"]["files"][0].update(head={"bytes": 64, "sha256": "ab" * 32 + "\n"}),
     "splits.train.files[0].head.sha256"),
    (lambda i: i["tokenizer"].update(sha256="test"), "tokenizer.sha256"),
    (lambda i: i["tokenizer"].update(file="../tokenizer.json"), "tokenizer.file"),
    (lambda i: i["tokenizer"].update(file="/etc/tokenizer.json"), "tokenizer.file"),
    (lambda i: i["tokenizer"].update(file="."), "tokenizer.file"),
    (lambda i: i["splits"]["train"]["files"][0].update(prefix="train//a.0000"), "splits.train.files[0].prefix"),
    (lambda i: i["splits"]["train"]["files"][0].update(prefix="./train/a.0000"), "splits.train.files[0].prefix"),
    (lambda i: i["splits"]["train"]["files"][0].update(prefix="C:\\train\\a"), "splits.train.files[0].prefix"),
    (lambda i: i["splits"]["train"]["files"][0].update(prefix="train/a\x00.bin"), "splits.train.files[0].prefix"),
    (lambda i: i["splits"]["train"]["files"][0].update(prefix="train/a?x=1#"), "splits.train.files[0].prefix"),
])
def test_a_bad_key_is_named_with_the_file(tmp_path, edit, key):
    path = _written(tmp_path, edit)
    with pytest.raises(DataError) as err:
        tokens_json.read(path)
    assert str(err.value).startswith(f"{path}: {key}: ")


def test_versions(tmp_path):
    old = tokens_json.read(_written(tmp_path / "a", lambda i: i.pop("version")))
    assert old.version == 1  # an index without a version is version 1
    with pytest.raises(DataError, match="version 2 is newer than this tokenmill reads"):
        tokens_json.read(_written(tmp_path / "b", lambda i: i.update(version=2)))
    with pytest.raises(DataError, match="not a tokenmill tokens.json"):
        tokens_json.read(_written(tmp_path / "c", lambda i: i.update(format="other")))
    (tmp_path / "d.json").write_text("{not json")
    with pytest.raises(DataError, match="d.json: not a readable tokens.json"):
        tokens_json.read(tmp_path / "d.json")


def test_every_reader_refuses_the_same_bad_index(tmp_path, monkeypatch):
    """The loader, `tokenmill.inspect` and the trainer's paths all go through tokens_json."""
    from tokenmill.inspect import token_index
    from tokenmill.loader import TokenLoader
    from tokenmill.train.config import TrainConfig

    run = tmp_path / "run"
    path = _written(run / "tokenize", lambda i: i["splits"]["train"]["files"][0].pop("documents"))
    message = r"tokens\.json: splits\.train\.files\[0\]\.documents: expected a count"
    with pytest.raises(DataError, match=message):
        TokenLoader([run], seq_len=4, global_batch_size=2, verify=False)  # a run folder, as the trainer accepts
    with pytest.raises(DataError, match=message):
        token_index(run)
    datasets = SimpleNamespace(data=[SimpleNamespace(path=str(run))])  # only what resolved_paths reads
    assert TrainConfig.resolved_paths(datasets) == [path]


def test_a_symlink_leading_out_of_the_folder_is_refused(tmp_path):
    """Names are relative (above), and a symlink inside the index's folder may not lead out of it either: a folder
    or a file linked elsewhere is refused, naming the key and where it leads; links inside, or the whole folder
    linked, are fine."""
    root = tmp_path / "run" / "tokenize"
    path = write_dataset(root, {"alpha": labelled_docs(6, np.random.default_rng(0))}, files_per_source=2)
    assert tokens_json.read(path).files("train")  # as written
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    # One .bin linked to a file outside the folder.
    bin_path = root / "train" / "alpha.0001.bin"
    (outside / "alpha.0001.bin").write_bytes(bin_path.read_bytes())
    bin_path.unlink()
    bin_path.symlink_to(outside / "alpha.0001.bin")
    with pytest.raises(DataError, match=rf"^{path}: splits\.train\.files\[1\]\.prefix: .*alpha\.0001\.bin resolves to "
                                        rf"{outside}/alpha\.0001\.bin, outside the index's folder"):
        tokens_json.read(path)
    # Linked to a file inside it: fine.
    (root / "store").mkdir()
    (outside / "alpha.0001.bin").rename(root / "store" / "alpha.0001.bin")
    bin_path.unlink()
    bin_path.symlink_to(root / "store" / "alpha.0001.bin")
    assert len(tokens_json.read(path).files("train")) == 2
    # The tokenizer linked out, then the whole train folder moved out and linked back.
    (root / "tokenizer.json").symlink_to(outside / "tokenizer.json")
    with pytest.raises(DataError, match=rf"^{path}: tokenizer\.file: .* outside the index's folder"):
        tokens_json.read(path)
    (root / "tokenizer.json").unlink()
    (root / "train").rename(outside / "train")
    (root / "train").symlink_to(outside / "train")
    with pytest.raises(DataError, match=rf"^{path}: splits\.train\.files\[0\]\.prefix: .* outside the index's folder"):
        tokens_json.read(path)
    # The whole folder linked from elsewhere: its files are inside it.
    (root / "train").unlink()
    (outside / "train").rename(root / "train")
    (tmp_path / "link").symlink_to(root)
    assert len(tokens_json.read(tmp_path / "link").files("train")) == 2
